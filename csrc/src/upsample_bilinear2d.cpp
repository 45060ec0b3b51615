#include "spatialgrad/upsample_bilinear2d.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/checks.h"
#include "detail/convert.h"
#include "detail/entry.h"
#include "detail/narrow_rows.h"
#include "detail/parallel_for.h"
#include "detail/rows.h"
#include "detail/simd.h"
#include "detail/strategy.h"
#include "detail/upsample_bilinear2d_axis.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "upsample_bilinear2d";
constexpr const char* kBackward = "upsample_bilinear2d_backward";
// Outputs at least this large are written with non-temporal stores (where used): far beyond the
// per-core caches, so the lines would be evicted before anyone reads them.
constexpr int64_t kStreamingBytes = 4 << 20;
// The NHWC backward's H pass runs in pieces of this many values, each after prefetching its part of
// the next input row's new grad_output rows.
constexpr int64_t kPrefetchPiece = 256;

// The lanes stream rows that fill whole cache lines (or are long): a row that starts or ends inside a line
// shares it between non-temporal and normal stores (measured: (8,256,25,25) -> 50^2, rows of 200 bytes,
// 27 ms streamed vs 5 ms not; (8,64,64,64) -> 128^2, rows of 512 bytes, 6.5 vs 8.0 ms).
constexpr int64_t kStreamingRowValues = 2048;

bool streams_rows(const TensorView& output, int64_t row_values) {
  const int64_t row_bytes = row_values * dtype_size(output.dtype());
  return row_values >= kStreamingRowValues || row_bytes % detail::kCacheLine == 0;
}

bool worth_streaming(const TensorView& output) {
  return output.numel() * dtype_size(output.dtype()) >= kStreamingBytes;
}

// Positions of the N, C, H, W dimensions in a 4-D tensor or size list of the layout.
struct Dims {
  int n, c, h, w;
};

Dims dims_of(Layout layout) { return layout == Layout::kNCHW ? Dims{0, 1, 2, 3} : Dims{0, 3, 1, 2}; }

const char* order_of(Layout layout) { return layout == Layout::kNCHW ? "(N, C, H, W)" : "(N, H, W, C)"; }

// The 4-D shape with the given sizes, in the layout's dimension order.
std::vector<int64_t> shape_in(Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout == Layout::kNCHW ? std::vector<int64_t>{n, c, h, w} : std::vector<int64_t>{n, h, w, c};
}

void check_output_size(const char* op, const std::vector<int64_t>& output_size) {
  SG_CHECK(output_size.size() == 2, op, "(): expected output_size to have 2 entries (H, W), but got ",
           output_size.size(), " (", format_list(output_size, "[", "]"), ")");
  SG_CHECK(output_size[0] >= 1 && output_size[1] >= 1, op, "(): expected output_size entries >= 1, but got ",
           format_list(output_size, "[", "]"));
}

// N and C may be 0 (an empty batch gives an empty result); the interpolated dimensions may not.
void check_input_spatial(const char* op, const char* name, const std::vector<int64_t>& shape, Layout layout) {
  const Dims d = dims_of(layout);
  SG_CHECK(shape[d.n] >= 0 && shape[d.c] >= 0 && shape[d.h] >= 1 && shape[d.w] >= 1, op, "(): expected ", name, " ",
           order_of(layout), " with N, C >= 0 and H, W >= 1, but got ", format_list(shape, "[", "]"));
}

// Strides of a 4-D view by role.
struct Strides {
  int64_t n, c, h, w;
};

Strides strides_of(const TensorView& t, Layout layout) {
  const Dims d = dims_of(layout);
  return Strides{t.stride(d.n), t.stride(d.c), t.stride(d.h), t.stride(d.w)};
}

template <class Acc>
struct Tables {
  detail::LinearAxis<Acc> h, w;
};

template <class Acc>
Tables<Acc> make_tables(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, bool align_corners, double scales_h,
                        double scales_w) {
  return Tables<Acc>{detail::make_linear_axis<Acc>(in_h, out_h, align_corners, scales_h),
                     detail::make_linear_axis<Acc>(in_w, out_w, align_corners, scales_w)};
}

// Two cached rows of width-interpolated input (the rows a forward output row blends), so that
// each input row is interpolated once per task when consecutive output rows share it.
template <class Acc>
class RowPairCache {
 public:
  explicit RowPairCache(int64_t len) : data_(static_cast<size_t>(2 * len)), len_(len) {}

  // Rows r0 and r1 of `plane`; fill(row, buffer) computes a row that is not cached.
  template <class Fill>
  SPATIALGRAD_INLINE std::pair<const Acc*, const Acc*> get(int64_t plane, int64_t r0, int64_t r1, const Fill& fill) {
    int s0 = find(plane, r0);
    if (s0 < 0) {
      s0 = find(plane, r1) == 0 ? 1 : 0;  // keep r1 if it is cached
      load(s0, plane, r0, fill);
    }
    int s1 = find(plane, r1);
    if (s1 < 0) {
      s1 = 1 - s0;
      load(s1, plane, r1, fill);
    }
    return {slot(s0), slot(s1)};
  }

 private:
  int find(int64_t plane, int64_t row) const {
    for (int s = 0; s < 2; ++s)
      if (plane_[s] == plane && row_[s] == row) return s;
    return -1;
  }
  template <class Fill>
  SPATIALGRAD_INLINE void load(int s, int64_t plane, int64_t row, const Fill& fill) {
    fill(row, slot(s));
    plane_[s] = plane;
    row_[s] = row;
  }
  Acc* slot(int s) { return data_.data() + s * len_; }

  std::vector<Acc> data_;
  int64_t len_;
  int64_t plane_[2] = {-1, -1}, row_[2] = {-1, -1};
};

// Asks for a contiguous row's cache lines, into L2 rather than L1: measured faster in both backward
// kernels, as L1 prefetches evicted lines still in use.
template <class T>
SPATIALGRAD_INLINE void prefetch_row(const T* row, int64_t n) {
  detail::prefetch_bytes<detail::Access::kRead, detail::Locality::kL2>(row, n * static_cast<int64_t>(sizeof(T)));
}

// dst[x * channels + c] = row[x * step + c * c_step] widened, for x < count and c < channels: an NHWC
// row of float16/bfloat16 pixels, converted in one pass when its pixels are contiguous.
template <class T>
void widen_pixels(const T* row, int64_t step, int64_t c_step, int64_t count, int64_t channels, float* dst) {
  if (c_step == 1 && step == channels) {
    detail::widen_row(row, 1, count * channels, dst);
  } else {
    for (int64_t x = 0; x < count; ++x) detail::widen_row(row + x * step, c_step, channels, dst + x * channels);
  }
}

std::vector<int64_t> scaled(const std::vector<int64_t>& index, int64_t stride) {
  std::vector<int64_t> out(index.size());
  for (size_t i = 0; i < index.size(); ++i) out[i] = index[i] * stride;
  return out;
}

// ---- forward ------------------------------------------------------------------------------------------------
// Separable: each needed input row is interpolated along W once into a row buffer, then every output
// row blends two such buffers along H. Tasks own ranges of output rows.

// NHWC: channels innermost; a row buffer holds (ow, c) for all channels; planes are n. The two passes of
// one output row, sharing the strides and tables.
template <class T>
struct NhwcForward {
  using Acc = AccType<T>;
  const Tables<Acc>& tab;
  Strides is, os;
  int64_t channels;
  std::vector<int64_t> col0, col1;  // input column offsets of the two W taps
  bool dense_out;                   // output rows are one contiguous run of (ow, c)
  bool stream;

  NhwcForward(const TensorView& input, const TensorView& output, const Tables<Acc>& t)
      : tab(t),
        is(strides_of(input, Layout::kNHWC)),
        os(strides_of(output, Layout::kNHWC)),
        channels(input.size(3)),
        col0(scaled(t.w.i0, is.w)),
        col1(scaled(t.w.i1, is.w)),
        dense_out(os.c == 1 && os.w == channels),
        stream(worth_streaming(output)) {}

  // buf[ow * C + c] = the W interpolation of input row `row` (float16/bfloat16 rows widened into `wide` first).
  SPATIALGRAD_INLINE void interpolate_row(const T* row, Acc* buf, float* wide) const {
    if constexpr (detail::kIsHalfType<T>) {
      widen_pixels(row, is.w, is.c, tab.w.in, channels, wide);
      for (int64_t ow = 0; ow < tab.w.out; ++ow) {
        blend_pixel(wide + tab.w.i0[ow] * channels, wide + tab.w.i1[ow] * channels, 1, ow, buf + ow * channels);
      }
    } else {
      for (int64_t ow = 0; ow < tab.w.out; ++ow)
        blend_pixel(row + col0[ow], row + col1[ow], is.c, ow, buf + ow * channels);
    }
  }

  template <class S>
  SPATIALGRAD_INLINE void blend_pixel(const S* p0, const S* p1, int64_t c_step, int64_t ow, Acc* b) const {
    const Acc w0 = tab.w.l0[ow], w1 = tab.w.l1[ow];
    if (c_step == 1) {
      for (int64_t c = 0; c < channels; ++c) b[c] = w0 * load_as<Acc>(p0[c]) + w1 * load_as<Acc>(p1[c]);
    } else {
      for (int64_t c = 0; c < channels; ++c)
        b[c] = w0 * load_as<Acc>(p0[c * c_step]) + w1 * load_as<Acc>(p1[c * c_step]);
    }
  }

  // Output row oh from its two interpolated input rows.
  SPATIALGRAD_INLINE void store_row(const Acc* r0, const Acc* r1, int64_t oh, T* dst) const {
    const Acc a0 = tab.h.l0[oh], a1 = tab.h.l1[oh];
    const int64_t row_len = tab.w.out * channels;
    if (dense_out && stream) {
      detail::blend_rows<true>(r0, r1, a0, a1, row_len, dst, 1);
    } else if (dense_out) {
      detail::blend_rows(r0, r1, a0, a1, row_len, dst, 1);
    } else {
      for (int64_t ow = 0; ow < tab.w.out; ++ow)
        detail::blend_rows(r0 + ow * channels, r1 + ow * channels, a0, a1, channels, dst + ow * os.w, os.c);
    }
  }
};

template <class T>
void forward_nhwc(const TensorView& input, const TensorView& output, const Tables<AccType<T>>& tab) {
  using Acc = AccType<T>;
  const NhwcForward<T> pass(input, output, tab);
  const int64_t out_h = tab.h.out, row_len = tab.w.out * pass.channels;
  const T* in = input.data<T>();
  T* out = output.data<T>();
  // A task's output rows, at one level: the per-pixel loops vectorise to the level's width.
  auto task = [&](auto /*isa*/, int64_t lo, int64_t hi) SG_SIMD_INLINE_LAMBDA {
    RowPairCache<Acc> cache(row_len);
    // An input row (iw, c), widened, for float16/bfloat16.
    std::vector<float> wide(detail::kIsHalfType<T> ? static_cast<size_t>(tab.w.in * pass.channels) : 0);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t n = item / out_h, oh = item % out_h;
      const T* src = in + n * pass.is.n;
      const auto rows = cache.get(n, tab.h.i0[oh], tab.h.i1[oh], [&](int64_t ih, Acc* buf) SG_SIMD_INLINE_LAMBDA {
        pass.interpolate_row(src + ih * pass.is.h, buf, wide.data());
      });
      pass.store_row(rows.first, rows.second, oh, out + n * pass.os.n + oh * pass.os.h);
    }
  };
  parallel_for(0, input.size(0) * out_h, grain_for(3 * row_len + 8), [&](int64_t lo, int64_t hi) {
    SG_SIMD_DISPATCH(task(isa, lo, hi));
    detail::store_fence();
  });
}

// ---- lanes of rows ------------------------------------------------------------------------------------------
// The W pass reads its taps at computed positions: on a plane row, one scalar load per tap and value. The
// lane strategies run it on kLanes rows at once instead: the rows are transposed into one lane-interleaved
// row (value j of lane k at j * kLanes + k), every tap is then one vector for all lanes, and a transpose
// brings the lanes back. A lane is any row of the flattened (image, row) order, so a single large plane
// fills the lanes as well as many small ones. Each lane's value is computed with the operations of the
// scalar loops, in the same order: the same bits.
//
// They see a tensor as images of flat rows: NCHW images are the (n, c) planes and a flat row holds W
// values; NHWC images are the batch entries and a flat row holds W pixels of C values, pixel-major. The
// W pass treats value c of pixel x as position x * values + c.
constexpr int64_t kLanes = 8;

template <class Acc>
using LaneVec = detail::Vec<Acc, static_cast<int>(kLanes * sizeof(Acc))>;

// Where the flat rows of a 4-D tensor are: image i's row r starts at offset(i) + r * s.h, and value c of
// pixel x of a row is x * pixel_step + c * value_step after that.
struct FlatRows {
  Strides s;
  int64_t channels;  // C of the tensor
  int64_t values;    // per pixel of a flat row: 1 (NCHW) or C (NHWC)
  int64_t pixel_step, value_step;
  bool planes;  // NCHW: the images are the (n, c) planes

  int64_t offset(int64_t image) const {
    return planes ? (image / channels) * s.n + (image % channels) * s.c : image * s.n;
  }
  // Whether a flat row is one run of values run_step() apart (all but NHWC rows with gaps).
  bool is_run() const { return values == 1 || (value_step == 1 && pixel_step == values); }
  int64_t run_step() const { return values == 1 ? pixel_step : 1; }
};

FlatRows flat_rows(const TensorView& t, Layout layout) {
  const Strides s = strides_of(t, layout);
  const int64_t channels = t.size(dims_of(layout).c);
  if (layout == Layout::kNCHW) return FlatRows{s, channels, 1, s.w, 1, true};
  return FlatRows{s, channels, channels, s.w, s.c, false};
}

int64_t images_of(const TensorView& t, Layout layout) {
  return layout == Layout::kNCHW ? t.size(0) * t.size(1) : t.size(0);
}

// dst[x * values + c] = value c of pixel x of `row` in Acc, for x < pixels.
template <class T, class Acc>
SPATIALGRAD_INLINE void load_pixels(const T* row, const FlatRows& g, int64_t pixels, Acc* dst) {
  if (g.is_run()) return detail::load_row(row, g.run_step(), pixels * g.values, dst);
  for (int64_t x = 0; x < pixels; ++x)
    detail::load_row(row + x * g.pixel_step, g.value_step, g.values, dst + x * g.values);
}

// Value c of pixel x of `row` = src[x * values + c] rounded once to T, for x < pixels (non-temporal stores
// where `stream`: store_fence() before the task ends).
template <class T, class Acc>
SPATIALGRAD_INLINE void store_pixels(const Acc* src, int64_t pixels, const FlatRows& g, T* row, bool stream) {
  if (g.is_run() && stream) return detail::store_row_streaming(src, pixels * g.values, row, g.run_step());
  if (g.is_run()) return detail::store_row(src, pixels * g.values, row, g.run_step());
  for (int64_t x = 0; x < pixels; ++x)
    detail::store_row(src + x * g.values, g.values, row + x * g.pixel_step, g.value_step);
}

// Value c of pixel x of `row` = a0 * r0[x * values + c] + a1 * r1[x * values + c] rounded once to T.
template <class Isa, class T, class Acc>
SG_SIMD_KERNEL void blend_pixels(Isa, const Acc* r0, const Acc* r1, Acc a0, Acc a1, int64_t pixels, const FlatRows& g,
                                 T* row, bool stream) {
  if (g.is_run() && stream) return detail::blend_rows<true>(r0, r1, a0, a1, pixels * g.values, row, g.run_step());
  if (g.is_run()) return detail::blend_rows(r0, r1, a0, a1, pixels * g.values, row, g.run_step());
  for (int64_t x = 0; x < pixels; ++x) {
    const int64_t at = x * g.values;
    detail::blend_rows(r0 + at, r1 + at, a0, a1, g.values, row + x * g.pixel_step, g.value_step);
  }
}

// acc[x * values + c] = sum over k < count (>= 1), in order, of w[k] * value c of pixel x of rows[k]; `moved`
// holds count pointers (for rows with gaps).
template <class Isa, class T, class Acc>
SG_SIMD_KERNEL void sum_pixels(Isa isa, const T* const* rows, const Acc* w, int64_t count, const FlatRows& g,
                               int64_t pixels, const T** moved, Acc* acc) {
  if (g.is_run()) return detail::weighted_row_sum(isa, rows, w, count, g.run_step(), pixels * g.values, acc);
  for (int64_t x = 0; x < pixels; ++x) {
    for (int64_t k = 0; k < count; ++k) moved[k] = rows[k] + x * g.pixel_step;
    detail::weighted_row_sum(isa, moved, w, count, g.value_step, g.values, acc + x * g.values);
  }
}

// A run of input pixels [iw_begin, iw_end) and the output pixels [ow_begin, ow_end) that read them (forward)
// or that they read (backward); an empty output run when there are none.
struct ColumnChunk {
  int64_t iw_begin, iw_end, ow_begin, ow_end;
};

// The length of the runs of an axis of `count` pixels, each reaching at most ceil(other / count) + 1 pixels
// of `per_pixel` values on the other side, whose reach holds about `budget` values (at least 1, at most count).
int64_t run_width(int64_t count, int64_t other, int64_t per_pixel, int64_t budget) {
  const int64_t reach = (other + count - 1) / count + 1;
  return std::clamp<int64_t>(budget / std::max<int64_t>(1, per_pixel * reach), 1, count);
}

// chunk(a, b) for the runs [a, a + width), [a + width, a + 2 width), ... of [0, count), the last one shorter.
template <class Chunk>
std::vector<ColumnChunk> runs_of(int64_t count, int64_t width, const Chunk& chunk) {
  std::vector<ColumnChunk> chunks;
  for (int64_t a = 0; a < count; a += width) chunks.push_back(chunk(a, std::min(a + width, count)));
  return chunks;
}

// Splits the input pixels into runs whose output pixels, `per_pixel` values each, hold about `budget` values:
// the chunks of the backward, whose buffers stay in cache between the H and W passes.
template <class Acc>
std::vector<ColumnChunk> input_chunks(const detail::LinearAxis<Acc>& w_axis, int64_t per_pixel, int64_t budget) {
  const int64_t width = run_width(w_axis.in, w_axis.out, per_pixel, budget);
  return runs_of(w_axis.in, width, [&](int64_t a, int64_t b) {
    ColumnChunk chunk{a, b, 0, 0};
    const int64_t e_begin = w_axis.start[a], e_end = w_axis.start[b];
    if (e_begin < e_end) {
      const auto range = std::minmax_element(w_axis.source.begin() + e_begin, w_axis.source.begin() + e_end);
      chunk.ow_begin = *range.first;
      chunk.ow_end = *range.second + 1;
    }
    return chunk;
  });
}

// Splits the output pixels into runs whose input pixels (from i0 of the first to i1 of the last), `per_pixel`
// values each, hold about `budget` values: the chunks of the forward.
template <class Acc>
std::vector<ColumnChunk> output_chunks(const detail::LinearAxis<Acc>& w_axis, int64_t per_pixel, int64_t budget) {
  const int64_t width = run_width(w_axis.out, w_axis.in, per_pixel, budget);
  return runs_of(w_axis.out, width, [&](int64_t a, int64_t b) {
    return ColumnChunk{w_axis.i0[a], w_axis.i1[b - 1] + 1, a, b};
  });
}

// The most input and output pixels of any chunk.
std::pair<int64_t, int64_t> widest(const std::vector<ColumnChunk>& chunks) {
  int64_t in = 0, out = 0;
  for (const ColumnChunk& c : chunks) {
    in = std::max(in, c.iw_end - c.iw_begin);
    out = std::max(out, c.ow_end - c.ow_begin);
  }
  return {in, out};
}

// The forward's W pass on kLanes rows: out[(o * values + c) * kLanes + k] = l0[ow] * x0 + l1[ow] * x1 for the
// output pixels ow = chunk.ow_begin + o of the chunk, where x0, x1 are value c of lane k at the taps i0[ow],
// i1[ow] in `in` (the chunk's input pixels, lane-interleaved).
template <class Isa, class Acc>
SG_SIMD_KERNEL void interpolate_lanes(Isa, const detail::LinearAxis<Acc>& w, const ColumnChunk& chunk, int64_t values,
                                      const Acc* in, Acc* out) {
  using V = LaneVec<Acc>;
  const int64_t pixel = values * kLanes, first = chunk.iw_begin * pixel;  // in + iw * pixel - first: input pixel iw
  const int64_t *i0 = w.i0.data(), *i1 = w.i1.data();
  const Acc *l0 = w.l0.data(), *l1 = w.l1.data();
  for (int64_t ow = chunk.ow_begin; ow < chunk.ow_end; ++ow) {
    const Acc* p0 = in + (i0[ow] * pixel - first);
    const Acc* p1 = in + (i1[ow] * pixel - first);
    Acc* o = out + (ow - chunk.ow_begin) * pixel;
    for (int64_t j = 0; j < pixel; j += kLanes) {
      V x0, x1;
      detail::store_u(o + j, l0[ow] * detail::load_u(x0, p0 + j) + l1[ow] * detail::load_u(x1, p1 + j));
    }
  }
}

// The backward's W pass on kLanes rows: gathered[(i * values + c) * kLanes + k] = the sum over the sources e
// of input pixel iw = chunk.iw_begin + i, in order, of weight[e] * value c of lane k at output pixel
// source[e] in `columns` (the chunk's output pixels, lane-interleaved); 0 without sources.
template <class Isa, class Acc>
SG_SIMD_KERNEL void gather_lanes(Isa, const detail::LinearAxis<Acc>& w, const ColumnChunk& chunk, int64_t values,
                                 const Acc* columns, Acc* gathered) {
  using V = LaneVec<Acc>;
  const int64_t pixel = values * kLanes;
  const int64_t* start = w.start.data();
  const int64_t* source = w.source.data();
  const Acc* weight = w.weight.data();
  const int64_t first = chunk.ow_begin * pixel;  // columns + ow * pixel - first: output pixel ow
  for (int64_t iw = chunk.iw_begin; iw < chunk.iw_end; ++iw) {
    const int64_t e0 = start[iw], e1 = start[iw + 1];
    Acc* out = gathered + (iw - chunk.iw_begin) * pixel;
    for (int64_t j = 0; j < pixel; j += kLanes) {
      V x, sum{};
      if (e0 < e1) sum = weight[e0] * detail::load_u(x, columns + (source[e0] * pixel - first + j));
      for (int64_t e = e0 + 1; e < e1; ++e) sum += weight[e] * detail::load_u(x, columns + (source[e] * pixel - first + j));
      detail::store_u(out + j, sum);
    }
  }
}

// Chunk budgets (values in one lane-interleaved buffer): ~64 KB of float, measured best among 16-256 KB.
constexpr int64_t kLaneChunkValues = 16 << 10;

// The backward on lanes: a task owns blocks of kLanes grad_input rows (flattened (image, ih) order). Per
// block and column chunk: each lane's H pass into `rows`, a transpose into `columns`, the W pass on all
// lanes, a transpose back into `sums`, and the lanes' stores.
template <class T>
struct BackwardLanes {
  using Acc = AccType<T>;
  const Tables<Acc>& tab;
  const FlatRows &g, &gi;
  const std::vector<int64_t>& read;  // the input rows that some output row reads, in order
  const std::vector<ColumnChunk>& chunks;
  bool stream;  // grad_input written with non-temporal stores
  std::vector<Acc> rows, columns, gathered, sums;
  std::vector<const T*> g_rows, moved;

  BackwardLanes(const Tables<Acc>& t, const FlatRows& g_, const FlatRows& gi_, const std::vector<int64_t>& r,
                const std::vector<ColumnChunk>& c, bool stream_)
      : tab(t),
        g(g_),
        gi(gi_),
        read(r),
        chunks(c),
        stream(stream_),
        g_rows(static_cast<size_t>(t.h.max_sources)),
        moved(g_rows.size()) {
    const auto [in, out] = widest(chunks);
    rows.resize(static_cast<size_t>(kLanes * out * g.values));
    columns.resize(rows.size());
    gathered.resize(static_cast<size_t>(kLanes * in * g.values));
    sums.resize(gathered.size());
  }

  // Lane keys number the read rows of all images: key -> (image, ih).
  std::pair<int64_t, int64_t> row_of(int64_t key) const {
    const int64_t per_image = static_cast<int64_t>(read.size());
    return {key / per_image, read[key % per_image]};
  }

  // dst = the H contraction of grad_input row `key` over the chunk's output pixels.
  template <class Isa>
  SG_SIMD_KERNEL void contract(Isa isa, const T* go, int64_t key, const ColumnChunk& chunk, Acc* dst) {
    const auto [image, ih] = row_of(key);
    const int64_t pixels = chunk.ow_end - chunk.ow_begin;
    const int64_t e_begin = tab.h.start[ih], count = tab.h.start[ih + 1] - e_begin;
    if (count == 0 || pixels == 0) {
      std::fill(dst, dst + pixels * g.values, Acc(0));
      return;
    }
    const T* base = go + g.offset(image) + chunk.ow_begin * g.pixel_step;
    for (int64_t k = 0; k < count; ++k) g_rows[k] = base + tab.h.source[e_begin + k] * g.s.h;
    sum_pixels(isa, g_rows.data(), tab.h.weight.data() + e_begin, count, g, pixels, moved.data(), dst);
  }

  // Requests the grad_output rows that row `key` reads over the chunk (into L2: the hardware prefetcher
  // misses these short runs; measured 20-30% on the NCHW benchmark shape).
  void prefetch(const T* go, int64_t key, const ColumnChunk& chunk) const {
    const auto [image, ih] = row_of(key);
    if (!g.is_run() || g.run_step() != 1 || chunk.ow_end == chunk.ow_begin) return;
    const T* base = go + g.offset(image) + chunk.ow_begin * g.values;
    for (int64_t e = tab.h.start[ih]; e < tab.h.start[ih + 1]; ++e)
      prefetch_row(base + tab.h.source[e] * g.s.h, (chunk.ow_end - chunk.ow_begin) * g.values);
  }

  // grad_input rows [first, first + count), count <= kLanes (lanes beyond count compute stale values, unstored);
  // the rows of the next block, [first + kLanes, next_end), are requested on the way.
  template <class Isa>
  SG_SIMD_KERNEL void run_block(Isa isa, const T* go, T* g_in, int64_t first, int64_t count, int64_t next_end) {
    for (const ColumnChunk& chunk : chunks) {
      const int64_t out_len = (chunk.ow_end - chunk.ow_begin) * g.values;
      const int64_t in_pixels = chunk.iw_end - chunk.iw_begin, in_len = in_pixels * g.values;
      for (int64_t k = 0; k < count; ++k) {
        if (first + kLanes + k < next_end) prefetch(go, first + kLanes + k, chunk);
        contract(isa, go, first + k, chunk, rows.data() + k * out_len);
      }
      detail::transpose(isa, rows.data(), out_len, kLanes, out_len, columns.data(), kLanes);
      gather_lanes(isa, tab.w, chunk, g.values, columns.data(), gathered.data());
      detail::transpose(isa, gathered.data(), kLanes, in_len, kLanes, sums.data(), in_len);
      for (int64_t k = 0; k < count; ++k) {
        const auto [image, ih] = row_of(first + k);
        T* dst = g_in + gi.offset(image) + ih * gi.s.h + chunk.iw_begin * gi.pixel_step;
        store_pixels(sums.data() + k * in_len, in_pixels, gi, dst, stream);
      }
    }
  }

  // Blocks [lo, hi) of the `keys` rows, at one level: one dispatch per task, not one per row and pass.
  template <class Isa>
  SG_SIMD_KERNEL void run(Isa isa, const T* go, T* g_in, int64_t keys, int64_t lo, int64_t hi) {
    const int64_t end = std::min(keys, hi * kLanes);
    for (int64_t b = lo; b < hi; ++b) run_block(isa, go, g_in, b * kLanes, std::min(kLanes, keys - b * kLanes), end);
  }
  void run(const T* go, T* g_in, int64_t keys, int64_t lo, int64_t hi) {
    SG_SIMD_DISPATCH(run(isa, go, g_in, keys, lo, hi));
  }
};

// Rows of grad_input that no output row reads are zero; the lanes take only the others.
template <class T>
void zero_unread_rows(const FlatRows& gi, int64_t images, const std::vector<int64_t>& unread, int64_t pixels, T* g_in) {
  const int64_t count = static_cast<int64_t>(unread.size());
  parallel_for(0, images * count, grain_for(pixels * gi.values), [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item) {
      T* row = g_in + gi.offset(item / count) + unread[item % count] * gi.s.h;
      if (gi.is_run()) {
        detail::zero_row(pixels * gi.values, row, gi.run_step());
      } else {
        for (int64_t x = 0; x < pixels; ++x) detail::zero_row(gi.values, row + x * gi.pixel_step, gi.value_step);
      }
    }
  });
}

template <class T>
void backward_lanes(const TensorView& grad_output, const TensorView& grad_input, const Tables<AccType<T>>& tab,
                    Layout layout) {
  const FlatRows g = flat_rows(grad_output, layout), gi = flat_rows(grad_input, layout);
  std::vector<int64_t> read, unread;
  for (int64_t ih = 0; ih < tab.h.in; ++ih) (tab.h.start[ih + 1] > tab.h.start[ih] ? read : unread).push_back(ih);
  const int64_t images = images_of(grad_input, layout);
  T* g_in = grad_input.data<T>();
  zero_unread_rows(gi, images, unread, tab.w.in, g_in);
  const std::vector<ColumnChunk> chunks = input_chunks(tab.w, kLanes * g.values, kLaneChunkValues);
  const int64_t keys = images * static_cast<int64_t>(read.size()), blocks = (keys + kLanes - 1) / kLanes;
  const T* go = grad_output.data<T>();
  const int64_t work_per_block = kLanes * g.values * ((tab.h.max_sources + 2) * tab.w.out + 3 * tab.w.in);
  const bool stream = worth_streaming(grad_input) && streams_rows(grad_input, tab.w.in * gi.values);
  parallel_for(0, blocks, grain_for(work_per_block), [&](int64_t lo, int64_t hi) {
    BackwardLanes<T> pass(tab, g, gi, read, chunks, stream);
    pass.run(go, g_in, keys, lo, hi);
    detail::store_fence();
  });
}

// The forward on lanes: a task owns a range of output rows (flattened (image, oh) order). Per column chunk it
// walks its rows, W-interpolating the input rows they read in batches of kLanes (the next input rows needed,
// in order), keeping the last two batches, and blends each output row from its two interpolated rows.
template <class T>
struct ForwardLanes {
  using Acc = AccType<T>;
  struct Batch {
    int64_t key[kLanes];
    int64_t count = 0;
    std::vector<Acc> rows;  // kLanes rows of the chunk's output values

    const Acc* find(int64_t k, int64_t len) const {
      for (int64_t i = 0; i < count; ++i)
        if (key[i] == k) return rows.data() + i * len;
      return nullptr;
    }
  };
  const Tables<Acc>& tab;
  const FlatRows &in, &out;
  const std::vector<ColumnChunk>& chunks;
  std::vector<Acc> loaded, lanes, interpolated;
  Batch batch[2];
  int newest = 0;

  ForwardLanes(const Tables<Acc>& t, const FlatRows& in_, const FlatRows& out_, const std::vector<ColumnChunk>& c)
      : tab(t), in(in_), out(out_), chunks(c) {
    const auto [in_pixels, out_pixels] = widest(chunks);
    loaded.resize(static_cast<size_t>(kLanes * in_pixels * in.values));
    lanes.resize(loaded.size());
    interpolated.resize(static_cast<size_t>(kLanes * out_pixels * in.values));
    for (Batch& b : batch) b.rows.resize(interpolated.size());
  }

  int64_t tap(int64_t item, int which) const {
    const int64_t image = item / tab.h.out, oh = item % tab.h.out;
    return image * tab.h.in + (which == 0 ? tab.h.i0[oh] : tab.h.i1[oh]);
  }

  // A new batch: the next kLanes input rows read by rows [item, end), in order, but for those of the batch
  // kept (it has both taps of `item` afterwards), W-interpolated over the chunk.
  template <class Isa>
  SG_SIMD_KERNEL void load_batch(Isa isa, const T* input, int64_t item, int64_t end, const ColumnChunk& chunk) {
    newest ^= 1;
    Batch& b = batch[newest];
    const Batch& kept = batch[newest ^ 1];
    const int64_t in_pixels = chunk.iw_end - chunk.iw_begin, in_len = in_pixels * in.values;
    const int64_t out_len = (chunk.ow_end - chunk.ow_begin) * in.values;
    b.count = 0;
    for (int64_t last = -1; item < end && b.count < kLanes; ++item) {
      for (int which = 0; which < 2 && b.count < kLanes; ++which) {
        const int64_t key = tap(item, which);
        if (key > last && kept.find(key, out_len) == nullptr) b.key[b.count++] = last = key;
      }
    }
    for (int64_t k = 0; k < b.count; ++k) {
      const int64_t image = b.key[k] / tab.h.in, ih = b.key[k] % tab.h.in;
      const T* row = input + in.offset(image) + ih * in.s.h + chunk.iw_begin * in.pixel_step;
      load_pixels(row, in, in_pixels, loaded.data() + k * in_len);
    }
    detail::transpose(isa, loaded.data(), in_len, kLanes, in_len, lanes.data(), kLanes);
    interpolate_lanes(isa, tab.w, chunk, in.values, lanes.data(), interpolated.data());
    detail::transpose(isa, interpolated.data(), kLanes, out_len, kLanes, b.rows.data(), out_len);
  }

  // The task's rows at one level: one dispatch per task, not one per row (the rows may be a few pixels: a
  // dispatch per blended row cost (64,64,14,14) -> 28x28 12% at AVX2, 2.4 ns a row).
  template <class Isa>
  SG_SIMD_KERNEL void run(Isa isa, const T* input, T* output, int64_t lo, int64_t hi) {
    for (const ColumnChunk& chunk : chunks) {
      const int64_t pixels = chunk.ow_end - chunk.ow_begin, len = pixels * in.values;
      batch[0].count = batch[1].count = 0;
      auto find = [&](int64_t key) {
        const Acc* row = batch[newest].find(key, len);
        return row != nullptr ? row : batch[newest ^ 1].find(key, len);
      };
      for (int64_t item = lo; item < hi; ++item) {
        const Acc* r0 = find(tap(item, 0));
        const Acc* r1 = find(tap(item, 1));
        if (r0 == nullptr || r1 == nullptr) {
          load_batch(isa, input, item, hi, chunk);
          r0 = find(tap(item, 0));
          r1 = find(tap(item, 1));
        }
        const int64_t image = item / tab.h.out, oh = item % tab.h.out;
        T* dst = output + out.offset(image) + oh * out.s.h + chunk.ow_begin * out.pixel_step;
        blend_pixels(isa, r0, r1, tab.h.l0[oh], tab.h.l1[oh], pixels, out, dst, stream);
      }
    }
    detail::store_fence();
  }
  void run(const T* input, T* output, int64_t lo, int64_t hi) { SG_SIMD_DISPATCH(run(isa, input, output, lo, hi)); }
  bool stream = false;  // output rows written with non-temporal stores
};

template <class T>
void forward_lanes(const TensorView& input, const TensorView& output, const Tables<AccType<T>>& tab, Layout layout) {
  const FlatRows in = flat_rows(input, layout), out = flat_rows(output, layout);
  const std::vector<ColumnChunk> chunks = output_chunks(tab.w, kLanes * in.values, kLaneChunkValues);
  const int64_t items = images_of(output, layout) * tab.h.out;
  const T* x = input.data<T>();
  T* y = output.data<T>();
  const int64_t work_per_row = in.values * (3 * tab.w.out + 8);
  parallel_for(0, items, grain_for(work_per_row), [&](int64_t lo, int64_t hi) {
    ForwardLanes<T> pass(tab, in, out, chunks);
    pass.stream = worth_streaming(output) && streams_rows(output, tab.w.out * out.values);
    pass.run(x, y, lo, hi);
  });
}

// ---- narrow forward -----------------------------------------------------------------------------------------
// Planes whose rows hold at most detail::kLookupValues (32) floats (FPN and U-Net decoders upsample 7x7 to 25x42
// feature maps): the lanes' transposes and per-row bookkeeping cost more than the arithmetic there (~2 cycles an
// output). Here each output vector reads its taps from the two input rows by permutes of the rows
// (detail::lookup32), W-interpolates both rows and blends them: l0 * x0 + l1 * x1 per row, then a0 * r0 + a1 * r1,
// the separable passes' operations in their order (the same bits). float32 NCHW, rows of unit stride.

// The W axis as the narrow kernel reads it: per output column, its taps (int32) and weights, padded with tap 0
// and weight 0 to at least detail::kNarrowPad columns (a vector wider than the row reads the padding, never stores
// it).
struct NarrowColumns {
  std::vector<int32_t> i0, i1;
  std::vector<float> l0, l1;
  explicit NarrowColumns(const detail::LinearAxis<float>& w) {
    const auto size = static_cast<size_t>(std::max(w.out, detail::kNarrowPad));
    i0.assign(size, 0);
    i1.assign(size, 0);
    l0.assign(size, 0.0f);
    l1.assign(size, 0.0f);
    for (int64_t o = 0; o < w.out; ++o) {
      i0[o] = static_cast<int32_t>(w.i0[o]);
      i1[o] = static_cast<int32_t>(w.i1[o]);
      l0[o] = w.l0[o];
      l1[o] = w.l1[o];
    }
  }
};

// Whether the narrow kernel can take the call: float32 NCHW, input and output rows of unit stride, input rows of
// at most kLookupValues values.
template <class T>
bool narrow_ok(const TensorView& input, const TensorView& output, Layout layout) {
  return std::is_same_v<T, float> && layout == Layout::kNCHW && input.stride(3) == 1 && output.stride(3) == 1 &&
         input.size(3) <= detail::kLookupValues;
}

// Output rows [lo, hi) of the flattened (image, oh) order.
template <class Isa>
SG_SIMD_KERNEL void narrow_rows(Isa isa, const detail::LinearAxis<float>& h, const NarrowColumns& cols, int64_t out_w,
                                const FlatRows& in, const FlatRows& out, const float* x, detail::RowTables& tables,
                                float* y, int64_t lo, int64_t hi) {
  using V = detail::Vec<float, Isa::kVecBytes>;
  using IV = detail::IndexVecOf<V>;
  constexpr int64_t kStep = detail::kLanesOf<V>;
  auto output_vector = [&](const float* t0, const float* t1, float a0, float a1, int64_t at, V& value)
                           SG_SIMD_INLINE_LAMBDA {
    IV j0, j1;
    V w0, w1, x00, x01, x10, x11;
    detail::load_u(j0, cols.i0.data() + at);
    detail::load_u(j1, cols.i1.data() + at);
    detail::load_u(w0, cols.l0.data() + at);
    detail::load_u(w1, cols.l1.data() + at);
    detail::lookup32(isa, t0, j0, x00);
    detail::lookup32(isa, t0, j1, x01);
    detail::lookup32(isa, t1, j0, x10);
    detail::lookup32(isa, t1, j1, x11);
    const V r0 = w0 * x00 + w1 * x01, r1 = w0 * x10 + w1 * x11;
    value = a0 * r0 + a1 * r1;
  };
  // The rows are a few vectors: the image and row advance by counting (a division per row cost ~3 cycles an
  // output on 28-value rows).
  int64_t image = lo / h.out, oh = lo % h.out;
  const float* plane = x + in.offset(image);
  float* out_plane = y + out.offset(image);
  for (int64_t item = lo; item < hi; ++item, ++oh) {
    if (oh == h.out) {
      oh = 0;
      ++image;
      plane = x + in.offset(image);
      out_plane = y + out.offset(image);
    }
    const float* t0 = tables.table(plane + h.i0[oh] * in.s.h, 0);
    const float* t1 = tables.table(plane + h.i1[oh] * in.s.h, 1);
    const float a0 = h.l0[oh], a1 = h.l1[oh];
    float* dst = out_plane + oh * out.s.h;
    V value;
    if (out_w < kStep) {
      output_vector(t0, t1, a0, a1, 0, value);
      detail::store_first_lanes(dst, value, out_w);
      continue;
    }
    detail::for_row_vectors<kStep>(out_w, [&](int64_t at) SG_SIMD_INLINE_LAMBDA {
      output_vector(t0, t1, a0, a1, at, value);
      detail::store_u(dst + at, value);
    });
  }
}

void forward_narrow(const TensorView& input, const TensorView& output, const Tables<float>& tab) {
  const FlatRows in = flat_rows(input, Layout::kNCHW), out = flat_rows(output, Layout::kNCHW);
  const NarrowColumns cols(tab.w);
  const int64_t items = images_of(output, Layout::kNCHW) * tab.h.out;
  const float* x = input.data<float>();
  float* y = output.data<float>();
  parallel_for(0, items, grain_for(6 * tab.w.out + 16), [&](int64_t lo, int64_t hi) {
    detail::RowTables tables(input);
    SG_SIMD_DISPATCH(narrow_rows(isa, tab.h, cols, tab.w.out, in, out, x, tables, y, lo, hi));
  });
}

// The narrow backward: per input row, the H pass sums its grad_output rows (their sources, in order) into a row of
// at most kNarrowColumns values held as a table, and the W pass forms each input value's sum over its sources (in
// order) from lookups of that table, kSources slot by slot: the operations and order of the lanes (the same bits).
// float32 NCHW, rows of unit stride, input rows of at most kLookupValues values, output rows of at most
// kNarrowColumns (two lookups).
constexpr int64_t kNarrowColumns = 2 * detail::kLookupValues;

// The W axis's sources as the narrow backward reads them: slot k of input column ix is its k-th source (output
// column), weight and whether it has one (-1 or 0), for k < slots (the most sources of a column); columns padded
// to detail::kNarrowPad with no sources.
struct NarrowSources {
  int64_t slots = 0;
  std::vector<int32_t> source, has;
  std::vector<float> weight;
  explicit NarrowSources(const detail::LinearAxis<float>& w) {
    const int64_t width = std::max(w.in, detail::kNarrowPad);
    slots = w.max_sources;
    source.assign(static_cast<size_t>(slots * width), 0);
    has.assign(source.size(), 0);
    weight.assign(source.size(), 0.0f);
    for (int64_t ix = 0; ix < w.in; ++ix) {
      for (int64_t e = w.start[ix]; e < w.start[ix + 1]; ++e) {
        const auto at = static_cast<size_t>((e - w.start[ix]) * width + ix);
        source[at] = static_cast<int32_t>(w.source[e]);
        has[at] = -1;
        weight[at] = w.weight[e];
      }
    }
  }
  int64_t width() const { return slots > 0 ? static_cast<int64_t>(source.size()) / slots : 0; }
};

template <class T>
bool narrow_backward_ok(const TensorView& grad_output, const TensorView& grad_input, Layout layout) {
  return std::is_same_v<T, float> && layout == Layout::kNCHW && grad_output.stride(3) == 1 &&
         grad_input.stride(3) == 1 && grad_input.size(3) <= detail::kLookupValues &&
         grad_output.size(3) <= kNarrowColumns;
}

// out = table[index] for a table of kNarrowColumns floats: two lookups, chosen by the index's half.
template <class Isa, class V>
SPATIALGRAD_INLINE void lookup64(Isa isa, const float* table, const detail::IndexVecOf<V>& index, V& out) {
  using IV = detail::IndexVecOf<V>;
  constexpr int32_t kHalf = static_cast<int32_t>(detail::kLookupValues);
  const IV low_index = index & (kHalf - 1);
  V low, high;
  detail::lookup32(isa, table, low_index, low);
  detail::lookup32(isa, table + kHalf, low_index, high);
  out = index < kHalf ? low : high;
}

// Input rows [lo, hi) of the flattened (image, ih) order.
template <class Isa>
SG_SIMD_KERNEL void narrow_backward_rows(Isa isa, const detail::LinearAxis<float>& h, const NarrowSources& src,
                                         int64_t out_w, int64_t in_w, const FlatRows& g, const FlatRows& gi,
                                         const float* go, float* g_in, int64_t lo, int64_t hi) {
  using V = detail::Vec<float, Isa::kVecBytes>;
  using IV = detail::IndexVecOf<V>;
  constexpr int64_t kStep = detail::kLanesOf<V>;
  alignas(64) float column[kNarrowColumns] = {};
  const int64_t width = src.width();
  // The H pass of one vector of output columns at `at`: the first source assigned, the others added.
  auto h_pass = [&](const float* plane, int64_t e0, int64_t e1, int64_t at) SG_SIMD_INLINE_LAMBDA {
    V sum, x;
    sum = h.weight[e0] * detail::load_u(x, plane + h.source[e0] * g.s.h + at);
    for (int64_t e = e0 + 1; e < e1; ++e) sum = sum + h.weight[e] * detail::load_u(x, plane + h.source[e] * g.s.h + at);
    detail::store_u(column + at, sum);
  };
  // The W pass of input columns [at, at + kStep): slot 0 assigned, the others added where the column has them.
  auto w_pass = [&](int64_t at, V& sum) SG_SIMD_INLINE_LAMBDA {
    sum = V{};
    for (int64_t k = 0; k < src.slots; ++k) {
      IV source, has;
      V weight, x;
      detail::load_u(source, src.source.data() + k * width + at);
      detail::load_u(has, src.has.data() + k * width + at);
      detail::load_u(weight, src.weight.data() + k * width + at);
      lookup64(isa, column, source, x);
      const V term = weight * x;
      sum = has != 0 ? (k == 0 ? term : sum + term) : sum;
    }
  };
  int64_t image = lo / h.in, ih = lo % h.in;
  const float* plane = go + g.offset(image);
  float* in_plane = g_in + gi.offset(image);
  for (int64_t item = lo; item < hi; ++item, ++ih) {
    if (ih == h.in) {
      ih = 0;
      ++image;
      plane = go + g.offset(image);
      in_plane = g_in + gi.offset(image);
    }
    float* dst = in_plane + ih * gi.s.h;
    const int64_t e0 = h.start[ih], e1 = h.start[ih + 1];
    if (e0 == e1) {  // no output row reads it
      std::fill(dst, dst + in_w, 0.0f);
      continue;
    }
    if (out_w < kStep) {
      for (int64_t ow = 0; ow < out_w; ++ow) {
        float sum = h.weight[e0] * plane[h.source[e0] * g.s.h + ow];
        for (int64_t e = e0 + 1; e < e1; ++e) sum = sum + h.weight[e] * plane[h.source[e] * g.s.h + ow];
        column[ow] = sum;
      }
    } else {
      detail::for_row_vectors<kStep>(out_w, [&](int64_t at) SG_SIMD_INLINE_LAMBDA { h_pass(plane, e0, e1, at); });
    }
    V sum;
    if (in_w < kStep) {
      w_pass(0, sum);
      detail::store_first_lanes(dst, sum, in_w);
      continue;
    }
    detail::for_row_vectors<kStep>(in_w, [&](int64_t at) SG_SIMD_INLINE_LAMBDA {
      w_pass(at, sum);
      detail::store_u(dst + at, sum);
    });
  }
}

void backward_narrow(const TensorView& grad_output, const TensorView& grad_input, const Tables<float>& tab) {
  const FlatRows g = flat_rows(grad_output, Layout::kNCHW), gi = flat_rows(grad_input, Layout::kNCHW);
  const NarrowSources src(tab.w);
  const int64_t items = images_of(grad_input, Layout::kNCHW) * tab.h.in;
  const float* go = grad_output.data<float>();
  float* g_in = grad_input.data<float>();
  const int64_t work = (tab.h.max_sources + 1) * tab.w.out + tab.w.max_sources * tab.w.in + 16;
  parallel_for(0, items, grain_for(work), [&](int64_t lo, int64_t hi) {
    SG_SIMD_DISPATCH(narrow_backward_rows(isa, tab.h, src, tab.w.out, tab.w.in, g, gi, go, g_in, lo, hi));
  });
}

// ---- direct forward -----------------------------------------------------------------------------------------
// When each input row is read by about one output row (downsampling H), interpolated rows are not reused
// and the lanes' transposes of the input are most of the work. The direct strategy computes each output
// value from its four taps, a0 * (l0 * x00 + l1 * x01) + a1 * (l0 * x10 + l1 * x11) (the same operations as
// the separable passes, the same bits), eight output values at once: the two taps of a row are adjacent
// (i1 = i0 + 1 but at the last input column), so each is one 8-byte load, and the pairs are split into the
// tap vectors by shuffles. float rows of unit stride only.

// The output columns [0, end) whose taps are adjacent (i0 < in - 1; a prefix, as i0 never decreases).
template <class Acc>
int64_t adjacent_taps_end(const detail::LinearAxis<Acc>& w) {
  if (w.in == w.out) return 0;  // the same size: a copy (i1 = i0)
  return std::partition_point(w.i0.begin(), w.i0.end(), [&](int64_t i) { return i < w.in - 1; }) - w.i0.begin();
}

// dst[ow * stride] = the output value at column ow of the rows r0, r1 (weights a0, a1), for ow < w.out.
//
// n0, n1 are the rows of the next output row: requested a few lines ahead as this row is read (measured
// 10-15% on (4,3,600,800) -> 300x400: the hardware prefetcher starts late on each new pair of rows).
template <class Isa>
SG_SIMD_KERNEL void direct_row(Isa, const float* r0, const float* r1, float a0, float a1,
                               const detail::LinearAxis<float>& w, int64_t adjacent_end, float* dst, int64_t stride,
                               const float* n0, const float* n1) {
  using V = detail::Vec<float, 32>;
  using Pairs = detail::Vec<double, 32>;  // four (x[i0], x[i0 + 1]) pairs
  constexpr int64_t kStep = 8;
  const int64_t* i0 = w.i0.data();
  auto pairs = [&](const float* row, int64_t at, Pairs& p) {
    for (int k = 0; k < 4; ++k) std::memcpy(reinterpret_cast<char*>(&p) + 8 * k, row + i0[at + k], 8);
  };
  auto taps = [&](const float* row, int64_t at, V& x0, V& x1) {
    Pairs lo, hi;
    pairs(row, at, lo);
    pairs(row, at + 4, hi);
    V a, b;
    std::memcpy(&a, &lo, sizeof(V));
    std::memcpy(&b, &hi, sizeof(V));
    detail::deinterleave8(a, b, x0, x1);
  };
  int64_t ow = 0;
  for (; ow + kStep <= adjacent_end; ow += kStep) {
    if (ow % 16 == 0) {  // one request per 64-byte line of a row read at stride ~2
      detail::prefetch(n0 + i0[ow] + 32);
      detail::prefetch(n1 + i0[ow] + 32);
    }
    V x00, x01, x10, x11, l0, l1;
    taps(r0, ow, x00, x01);
    taps(r1, ow, x10, x11);
    detail::load_u(l0, w.l0.data() + ow);
    detail::load_u(l1, w.l1.data() + ow);
    const V value = a0 * (l0 * x00 + l1 * x01) + a1 * (l0 * x10 + l1 * x11);
    if (stride == 1) {
      detail::store_u(dst + ow, value);
    } else {
      for (int k = 0; k < kStep; ++k) dst[(ow + k) * stride] = value[k];
    }
  }
  for (; ow < w.out; ++ow) {
    const float top = w.l0[ow] * r0[w.i0[ow]] + w.l1[ow] * r0[w.i1[ow]];
    const float bottom = w.l0[ow] * r1[w.i0[ow]] + w.l1[ow] * r1[w.i1[ow]];
    dst[ow * stride] = a0 * top + a1 * bottom;
  }
}

void forward_direct(const TensorView& input, const TensorView& output, const Tables<float>& tab) {
  const Strides is = strides_of(input, Layout::kNCHW), os = strides_of(output, Layout::kNCHW);
  const int64_t channels = input.size(1), out_h = tab.h.out, adjacent_end = adjacent_taps_end(tab.w);
  const float* in = input.data<float>();
  float* out = output.data<float>();
  // The rows [lo, hi) of a task (flattened (plane, oh)), at one level.
  auto rows = [&](auto isa, int64_t lo, int64_t hi) SG_SIMD_INLINE_LAMBDA {
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t plane = item / out_h, oh = item % out_h;
      const float* src = in + (plane / channels) * is.n + (plane % channels) * is.c;
      float* dst = out + (plane / channels) * os.n + (plane % channels) * os.c + oh * os.h;
      const int64_t next = std::min(oh + 1, out_h - 1);
      direct_row(isa, src + tab.h.i0[oh] * is.h, src + tab.h.i1[oh] * is.h, tab.h.l0[oh], tab.h.l1[oh], tab.w,
                 adjacent_end, dst, os.w, src + tab.h.i0[next] * is.h, src + tab.h.i1[next] * is.h);
    }
  };
  parallel_for(0, input.size(0) * channels * out_h, grain_for(2 * tab.w.out + 8),
               [&](int64_t lo, int64_t hi) { SG_SIMD_DISPATCH(rows(isa, lo, hi)); });
}

// One output row of the direct forward on NHWC rows (float/double): value c of output pixel ow = a0 * (l0 *
// x00 + l1 * x01) + a1 * (l0 * x10 + l1 * x11), x.. the values c of the tap pixels, channels vectorised.
template <class Isa, class Acc>
SG_SIMD_KERNEL void direct_pixels(Isa, const Acc* r0, const Acc* r1, Acc a0, Acc a1, const detail::LinearAxis<Acc>& w,
                                  const FlatRows& in, Acc* dst, const FlatRows& out) {
  using V = detail::Vec<Acc, 32>;
  constexpr int64_t kStep = detail::kVecLanes<Acc, 32>;
  const int64_t values = in.values;
  const bool dense = in.value_step == 1 && out.value_step == 1;
  for (int64_t ow = 0; ow < w.out; ++ow) {
    const int64_t t0 = w.i0[ow] * in.pixel_step, t1 = w.i1[ow] * in.pixel_step;
    const Acc *p00 = r0 + t0, *p01 = r0 + t1, *p10 = r1 + t0, *p11 = r1 + t1;
    const Acc l0 = w.l0[ow], l1 = w.l1[ow];
    Acc* o = dst + ow * out.pixel_step;
    int64_t c = 0;
    if (dense) {
      for (V x00, x01, x10, x11; c + kStep <= values; c += kStep) {
        const V top = l0 * detail::load_u(x00, p00 + c) + l1 * detail::load_u(x01, p01 + c);
        const V bottom = l0 * detail::load_u(x10, p10 + c) + l1 * detail::load_u(x11, p11 + c);
        detail::store_u(o + c, a0 * top + a1 * bottom);
      }
    }
    const int64_t is = in.value_step, os = out.value_step;
    for (; c < values; ++c) {
      const Acc top = l0 * p00[c * is] + l1 * p01[c * is], bottom = l0 * p10[c * is] + l1 * p11[c * is];
      o[c * os] = a0 * top + a1 * bottom;
    }
  }
}

template <class Acc>
void forward_direct_nhwc(const TensorView& input, const TensorView& output, const Tables<Acc>& tab) {
  const FlatRows in = flat_rows(input, Layout::kNHWC), out = flat_rows(output, Layout::kNHWC);
  const int64_t out_h = tab.h.out;
  const Acc* x = input.data<Acc>();
  Acc* y = output.data<Acc>();
  auto rows = [&](auto isa, int64_t lo, int64_t hi) SG_SIMD_INLINE_LAMBDA {  // at one level per task
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t n = item / out_h, oh = item % out_h;
      const Acc* src = x + n * in.s.n;
      direct_pixels(isa, src + tab.h.i0[oh] * in.s.h, src + tab.h.i1[oh] * in.s.h, tab.h.l0[oh], tab.h.l1[oh], tab.w,
                    in, y + n * out.s.n + oh * out.s.h, out);
    }
  };
  parallel_for(0, input.size(0) * out_h, grain_for(in.values * (2 * tab.w.out + 8)),
               [&](int64_t lo, int64_t hi) { SG_SIMD_DISPATCH(rows(isa, lo, hi)); });
}

// ---- backward -----------------------------------------------------------------------------------------------
// Gather form, separable: a task owns whole grad_input rows. For input row ih it sums the weighted
// grad_output rows whose stencil touches ih (contract H, contiguous), then gathers along W from that
// buffer, and writes each grad_input element once. No zero-fill, no atomics.

// The W gather of one NHWC chunk for float/double rows with unit channel stride: grad_input pixel iw
// gets sum over its sources k (in order) of w[k] * rows[(source[k] - ow0) * C + c], the sums of
// weighted_rows, computed two vectors of channels at a time in registers and stored straight to the
// output (streamed when `stream`), in one call per chunk: per-pixel calls and a sum row cost more than
// the arithmetic here.
template <class Isa, class T>
SG_SIMD_KERNEL void gather_columns_dense(Isa, const detail::LinearAxis<T>& w_axis, const ColumnChunk& chunk,
                                         const T* rows, int64_t channels, T* dst, int64_t pixel_stride, bool stream) {
  using Vec = detail::Vec<T, 32>;  // one AVX2 register (two SSE ones at the baseline level)
  constexpr int64_t kLanes = detail::kVecLanes<T, 32>;
  auto load = [](Vec& v, const T* p) { detail::load_u(v, p); };
  for (int64_t iw = chunk.iw_begin; iw < chunk.iw_end; ++iw) {
    const int64_t e0 = w_axis.start[iw], count = w_axis.start[iw + 1] - e0;
    T* __restrict out = dst + iw * pixel_stride;
    if (count == 0) {
      std::fill(out, out + channels, T(0));
      continue;
    }
    const int64_t* source = w_axis.source.data() + e0;
    const T* weight = w_axis.weight.data() + e0;
    int64_t c = 0;
    for (; c + 2 * kLanes <= channels; c += 2 * kLanes) {
      const T* r = rows + (source[0] - chunk.ow_begin) * channels + c;
      Vec x0, x1;
      load(x0, r);
      load(x1, r + kLanes);
      Vec s0 = weight[0] * x0, s1 = weight[0] * x1;
      for (int64_t k = 1; k < count; ++k) {
        r = rows + (source[k] - chunk.ow_begin) * channels + c;
        load(x0, r);
        load(x1, r + kLanes);
        s0 += weight[k] * x0;
        s1 += weight[k] * x1;
      }
      if (stream) {
        T block[2 * kLanes];
        std::memcpy(block, &s0, sizeof(Vec));
        std::memcpy(block + kLanes, &s1, sizeof(Vec));
        detail::store_row_streaming(block, 2 * kLanes, out + c, 1);
      } else {
        // Each vector stored on its own: copied through a 64-byte block, the AVX-512 copy read it back as one
        // register and waited on the two stores (store forwarding fails): 30% of that level's backward.
        detail::store_u(out + c, s0);
        detail::store_u(out + c + kLanes, s1);
      }
    }
    for (; c < channels; ++c) {
      T sum = weight[0] * rows[(source[0] - chunk.ow_begin) * channels + c];
      for (int64_t k = 1; k < count; ++k) sum += weight[k] * rows[(source[k] - chunk.ow_begin) * channels + c];
      out[c] = sum;
    }
  }
}

// The passes of one NHWC backward task, with the task's scratch: per input row, per column chunk, the
// H pass into `rows` then the W gather into grad_input.
template <class T>
struct NhwcBackward {
  using Acc = AccType<T>;
  // float16 source rows with gaps are widened whole first (F16C row functions, ~2x faster here than
  // per-element conversion); bfloat16 widens with a shift, cheaper in registers.
  static constexpr bool kWidenRows = std::is_same_v<T, Half>;
  const Tables<Acc>& tab;
  Strides gs, is;
  int64_t channels;
  bool dense_g, stream;
  std::vector<Acc> rows;  // (ow - ow_begin, c)
  std::vector<Acc> sum;
  std::vector<const T*> g_rows, g_rows_next;
  std::vector<const Acc*> r_rows;
  std::vector<float> wide;
  std::vector<const float*> wide_rows;
  int64_t prefetch_count = 0;  // rows of g_rows_next to request during this input row

  NhwcBackward(const Tables<Acc>& t, const TensorView& grad_output, const TensorView& grad_input, int64_t max_width)
      : tab(t),
        gs(strides_of(grad_output, Layout::kNHWC)),
        is(strides_of(grad_input, Layout::kNHWC)),
        channels(grad_input.size(3)),
        dense_g(gs.c == 1 && gs.w == channels),
        stream(worth_streaming(grad_input)),
        rows(static_cast<size_t>(max_width * channels)),
        sum(static_cast<size_t>(channels)),
        g_rows(static_cast<size_t>(t.h.max_sources)),
        g_rows_next(g_rows.size()),
        r_rows(static_cast<size_t>(t.w.max_sources)),
        wide(kWidenRows ? static_cast<size_t>(t.h.max_sources * max_width * channels) : 0),
        wide_rows(kWidenRows ? static_cast<size_t>(t.h.max_sources) : 0) {}

  // The next input row's new grad_output rows are requested during this row (their loads then overlap its
  // arithmetic), a piece of a chunk's columns at a time (contract_h): one burst per row overflows the miss
  // queue and stalls.
  void plan_prefetch(const T* g_image, int64_t ih) {
    prefetch_count = 0;
    if (ih + 1 >= tab.h.in || !dense_g) return;
    const int64_t last_read = tab.h.source[tab.h.start[ih + 1] - 1];
    for (int64_t e = tab.h.start[ih + 1]; e < tab.h.start[ih + 2]; ++e) {
      const int64_t oh = tab.h.source[e];
      if (oh > last_read) g_rows_next[prefetch_count++] = g_image + oh * gs.h;  // not read by ih
    }
  }

  // rows = the H contraction for input row ih of the output columns the chunk reads.
  template <class Isa>
  SG_SIMD_KERNEL void contract_h(Isa isa, const T* g_image, int64_t ih, const ColumnChunk& chunk) {
    const int64_t e_begin = tab.h.start[ih], h_count = tab.h.start[ih + 1] - e_begin;
    const Acc* h_weight = tab.h.weight.data() + e_begin;
    const int64_t ow0 = chunk.ow_begin, width = chunk.ow_end - chunk.ow_begin, len = width * channels;
    auto source_row = [&](int64_t k, int64_t ow) { return g_image + tab.h.source[e_begin + k] * gs.h + ow * gs.w; };
    if (dense_g) {
      // In pieces, each after requesting its part of the next rows: the requests of a whole chunk at
      // once overflow the miss queues, and the prefetches then wait (~15% of the time).
      for (int64_t at = 0; at < len; at += kPrefetchPiece) {
        const int64_t n = std::min(kPrefetchPiece, len - at);
        for (int64_t k = 0; k < prefetch_count; ++k) prefetch_row(g_rows_next[k] + ow0 * channels + at, n);
        for (int64_t k = 0; k < h_count; ++k) g_rows[k] = source_row(k, ow0) + at;
        detail::weighted_row_sum(isa, g_rows.data(), h_weight, h_count, 1, n, rows.data() + at);
      }
    } else if constexpr (kWidenRows) {
      for (int64_t k = 0; k < h_count; ++k) {
        wide_rows[k] = wide.data() + k * len;
        widen_pixels(source_row(k, ow0), gs.w, gs.c, width, channels, wide.data() + k * len);
      }
      if (width > 0) detail::weighted_row_sum(isa, wide_rows.data(), h_weight, h_count, 1, len, rows.data());
    } else {
      for (int64_t ow = 0; ow < width; ++ow) {
        for (int64_t k = 0; k < h_count; ++k) g_rows[k] = source_row(k, ow0 + ow);
        detail::weighted_row_sum(isa, g_rows.data(), h_weight, h_count, gs.c, channels, rows.data() + ow * channels);
      }
    }
  }

  // grad_input pixels of the chunk's columns of one row (dst: the row's first pixel) from `rows`.
  template <class Isa>
  SG_SIMD_KERNEL void gather_w(Isa isa, const ColumnChunk& chunk, T* dst) {
    if constexpr (std::is_same_v<T, Acc>) {
      if (is.c == 1) return gather_columns_dense(isa, tab.w, chunk, rows.data(), channels, dst, is.w, stream);
    }
    for (int64_t iw = chunk.iw_begin; iw < chunk.iw_end; ++iw) {
      const int64_t e0 = tab.w.start[iw], w_count = tab.w.start[iw + 1] - e0;
      T* out_px = dst + iw * is.w;
      if (w_count == 0) {
        detail::zero_row(channels, out_px, is.c);
        continue;
      }
      for (int64_t k = 0; k < w_count; ++k)
        r_rows[k] = rows.data() + (tab.w.source[e0 + k] - chunk.ow_begin) * channels;
      detail::weighted_row_sum(isa, r_rows.data(), tab.w.weight.data() + e0, w_count, 1, channels, sum.data());
      if (stream) {
        detail::store_row_streaming(sum.data(), channels, out_px, is.c);
      } else {
        detail::store_row(sum.data(), channels, out_px, is.c);
      }
    }
  }
};

// NHWC: channels innermost, so both passes vectorise over (ow, c) / c. Input columns are processed
// in chunks (column_chunks) to keep the H-contracted buffer in L1.
template <class T>
void backward_nhwc(const TensorView& grad_output, const TensorView& grad_input, const Tables<AccType<T>>& tab) {
  const int64_t channels = grad_input.size(3), in_h = tab.h.in, in_w = tab.w.in, out_w = tab.w.out;
  const std::vector<ColumnChunk> chunks = input_chunks(tab.w, channels, 4096);
  int64_t max_width = 0;
  for (const ColumnChunk& chunk : chunks) max_width = std::max(max_width, chunk.ow_end - chunk.ow_begin);
  const T* go = grad_output.data<T>();
  T* gi = grad_input.data<T>();
  const int64_t work_per_row = ((tab.h.max_sources + 1) * out_w + 2 * out_w + in_w) * channels;
  // A task's grad_input rows, at one level (one dispatch per task: the passes run per row and pixel).
  auto task = [&](auto isa, int64_t lo, int64_t hi) SG_SIMD_INLINE_LAMBDA {
    NhwcBackward<T> pass(tab, grad_output, grad_input, max_width);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t n = item / in_h, ih = item % in_h;
      T* dst = gi + n * pass.is.n + ih * pass.is.h;
      if (tab.h.start[ih] == tab.h.start[ih + 1]) {
        for (int64_t iw = 0; iw < in_w; ++iw) detail::zero_row(channels, dst + iw * pass.is.w, pass.is.c);
        continue;
      }
      const T* g_image = go + n * pass.gs.n;
      pass.plan_prefetch(g_image, ih);
      for (const ColumnChunk& chunk : chunks) {
        pass.contract_h(isa, g_image, ih, chunk);
        pass.gather_w(isa, chunk, dst);
      }
    }
  };
  parallel_for(0, grad_input.size(0) * in_h, grain_for(work_per_row), [&](int64_t lo, int64_t hi) {
    SG_SIMD_DISPATCH(task(isa, lo, hi));
    detail::store_fence();
  });
}

// ---- choosing a strategy ------------------------------------------------------------------------------------
// Measured on this project's 2-core machine (docs/design.md has the tables).
// The strategies (detail/strategy.h): lanes (separable passes, 8 planes or channels as lanes), direct (each
// output from its four inputs) and rows (NHWC rows as channel vectors).
using detail::UpsampleBilinear2dStrategy;

// The direct forward wins once input rows are read by fewer than ~1.5 output rows each (the lanes' W pass
// is then done for almost every output row): at >= 2/3 input rows read per output row. Measured crossover:
// 224 -> 299 (0.75 rows per output row) direct 2.9 ms vs lanes 4.2 ms; 100 -> 170 (0.59) 0.67 vs 0.50 ms.
constexpr double kDirectRowsPerOutputRow = 2.0 / 3.0;
// From half an input row per output row where the output is worth streaming but the lanes cannot stream its rows
// (streams_rows): their stores then go through the caches. Measured, 2 threads, core calls, lanes vs direct:
// (4,3,600,800) -> 1000x1333 4.1-5.1 vs 3.3 ms, -> 1200x1601 5.3-6.7 vs 4.7-4.8, (8,3,300,400) -> 520x700 1.75-2.73
// vs 1.75-1.78; at 0.4 rows, -> 1500x2001, 7.5-7.9 vs 7.4-7.5 (left to the lanes).
constexpr double kDirectRowsPerOutputRowUnstreamed = 0.5;
// NHWC rows of at least this many channels are vectors already: the direct forward and the channel-vector
// backward need no transposes (C = 64: direct 2.8 ms vs lanes 7.9 ms forward; C = 3: lanes 0.45 vs 0.65 ms
// upsampling x2).
constexpr int64_t kChannelVectors = 8;

// Narrow rows (narrow_ok) at AVX-512, where each input row is read by at most kNarrowRowsPerInput output rows and the
// lanes would not stream the output: the lanes W-interpolate an input row once for all its output rows, the narrow
// kernel once per output row, and their non-temporal stores skip the reads of the output's lines. Measured, 2
// threads, core calls: (64,64,14,14) -> 28^2 narrow 0.54 ms vs lanes 0.89, (2,256,13,21) -> 25x42 0.083 vs 0.114,
// (32,32,30,17) -> 60x34 0.39 vs 0.48, (8,64,32,32) -> 16^2 0.023 vs 0.053; beyond: (1,3,32,32) -> 224^2 0.018 vs
// 0.014, (1,512,7,7) -> 224^2 (streamed) 2.9 vs 1.9. At AVX2 a lookup takes four permutes and three blends:
// (8,256,25,25) -> 50^2 2.54 ms vs 1.87, one thread.
constexpr double kNarrowRowsPerInput = 4.0;
bool narrow_pays(const TensorView& output, int64_t out_w, double read_rows, double out_h) {
  return detail::simd_level() == detail::SimdLevel::kAvx512 && out_h <= kNarrowRowsPerInput * read_rows &&
         !(worth_streaming(output) && streams_rows(output, out_w));
}

// A pinned strategy takes the calls it has kernels for: direct, float32 NCHW rows without gaps or NHWC of
// float32/float64; rows, NHWC; narrow, the calls of narrow_ok.
template <class T>
UpsampleBilinear2dStrategy forward_path(const TensorView& input, const TensorView& output, Layout layout,
                                        const Tables<AccType<T>>& tab) {
  const bool nchw = layout == Layout::kNCHW, unit = input.stride(3) == 1;
  const bool direct_ok = nchw ? std::is_same_v<T, float> && unit : !detail::kIsHalfType<T>;
  const bool narrow = narrow_ok<T>(input, output, layout);
  return detail::choose_strategy<UpsampleBilinear2dStrategy>(
      [&](UpsampleBilinear2dStrategy pinned) {
        return pinned == UpsampleBilinear2dStrategy::kLanes ||
               (pinned == UpsampleBilinear2dStrategy::kDirect && direct_ok) ||
               (pinned == UpsampleBilinear2dStrategy::kRows && !nchw) ||
               (pinned == UpsampleBilinear2dStrategy::kNarrow && narrow);
      },
      [&] {
        const int64_t channels = input.size(dims_of(layout).c);
        const bool many_channels = !nchw && channels >= kChannelVectors;
        const double read = static_cast<double>(detail::read_inputs(tab.h)), out_h = static_cast<double>(tab.h.out);
        if (narrow && narrow_pays(output, tab.w.out, read, out_h)) return UpsampleBilinear2dStrategy::kNarrow;
        // NHWC channel vectors reuse each W-interpolated input row for its output rows: worth it beyond two
        // output rows per input row ((4,64,64,21) -> 256^2: rows 1.5 ms vs direct 4.3 ms; at x2 direct is as
        // fast or faster: (2,32,32,256) -> 64^2 0.50 vs 0.76 ms).
        if (many_channels && 2 * read < out_h) return UpsampleBilinear2dStrategy::kRows;
        const bool unstreamed = worth_streaming(output) && !streams_rows(output, tab.w.out);
        const double direct_from = unstreamed ? kDirectRowsPerOutputRowUnstreamed : kDirectRowsPerOutputRow;
        if (direct_ok && (many_channels || read >= direct_from * out_h)) return UpsampleBilinear2dStrategy::kDirect;
        return many_channels ? UpsampleBilinear2dStrategy::kRows : UpsampleBilinear2dStrategy::kLanes;
      });
}

// The backward has lanes, narrow and, for NHWC, rows (a pinned direct takes the cost model's choice).
template <class T>
UpsampleBilinear2dStrategy backward_path(Layout layout, const TensorView& grad_output, const TensorView& grad_input,
                                         const Tables<AccType<T>>&) {
  const bool nhwc = layout == Layout::kNHWC;
  const bool narrow = narrow_backward_ok<T>(grad_output, grad_input, layout);
  return detail::choose_strategy<UpsampleBilinear2dStrategy>(
      [&](UpsampleBilinear2dStrategy pinned) {
        return pinned == UpsampleBilinear2dStrategy::kLanes || (pinned == UpsampleBilinear2dStrategy::kRows && nhwc) ||
               (pinned == UpsampleBilinear2dStrategy::kNarrow && narrow);
      },
      [&] {
        // Narrow rows at AVX-512, 2 threads, core calls: (64,64,14,14) -> 28^2 0.91 -> 0.57 ms, (2,256,13,21) ->
        // 25x42 0.118 -> 0.082, (8,64,32,32) -> 16^2 0.178 -> 0.059, (4,19,8,8) -> 64^2 0.029 -> 0.023.
        if (narrow && detail::simd_level() == detail::SimdLevel::kAvx512) return UpsampleBilinear2dStrategy::kNarrow;
        return nhwc && grad_input.size(3) >= kChannelVectors ? UpsampleBilinear2dStrategy::kRows
                                                             : UpsampleBilinear2dStrategy::kLanes;
      });
}

// The validated operators (half precision converted by rows as the kernels read and write them).
template <class T>
void run_forward(const TensorView& input, const TensorView& output, const UpsampleBilinear2dParams& params) {
  const Layout layout = params.layout;
  const Dims d = dims_of(layout);
  const auto tab = make_tables<AccType<T>>(input.size(d.h), input.size(d.w), output.size(d.h), output.size(d.w),
                                           params.align_corners, params.scales_h, params.scales_w);
  switch (forward_path<T>(input, output, layout, tab)) {
    case UpsampleBilinear2dStrategy::kNarrow:
      if constexpr (std::is_same_v<T, float>) return forward_narrow(input, output, tab);
      break;
    case UpsampleBilinear2dStrategy::kDirect:
      if constexpr (!detail::kIsHalfType<T>) {
        if (layout == Layout::kNHWC) return forward_direct_nhwc(input, output, tab);
        if constexpr (std::is_same_v<T, float>) return forward_direct(input, output, tab);
      }
      break;
    case UpsampleBilinear2dStrategy::kRows:
      return forward_nhwc<T>(input, output, tab);
    default:
      break;
  }
  forward_lanes<T>(input, output, tab, layout);
}

template <class T>
void run_backward(const TensorView& grad_output, const TensorView& grad_input, const UpsampleBilinear2dParams& params) {
  const Layout layout = params.layout;
  const Dims d = dims_of(layout);
  const auto tab =
      make_tables<AccType<T>>(grad_input.size(d.h), grad_input.size(d.w), grad_output.size(d.h), grad_output.size(d.w),
                              params.align_corners, params.scales_h, params.scales_w);
  switch (backward_path<T>(layout, grad_output, grad_input, tab)) {
    case UpsampleBilinear2dStrategy::kRows:
      return backward_nhwc<T>(grad_output, grad_input, tab);
    case UpsampleBilinear2dStrategy::kNarrow:
      if constexpr (std::is_same_v<T, float>) return backward_narrow(grad_output, grad_input, tab);
      break;
    default:
      break;
  }
  backward_lanes<T>(grad_output, grad_input, tab, layout);
}

}  // namespace

std::vector<int64_t> upsample_bilinear2d_output_size(const std::vector<int64_t>& input_shape, double scales_h,
                                                     double scales_w, Layout layout) {
  detail::check_layout(kForward, layout);
  SG_CHECK(input_shape.size() == 4, kForward, "(): expected input to be 4-D ", order_of(layout), ", but got ",
           input_shape.size(), "-D tensor of shape ", format_list(input_shape));
  SG_CHECK(std::isfinite(scales_h) && std::isfinite(scales_w) && scales_h > 0 && scales_w > 0, kForward,
           "(): expected scale factors that are finite and > 0 when no output_size is given, but got (", scales_h, ", ",
           scales_w, ")");
  const Dims d = dims_of(layout);
  std::vector<int64_t> out(2);
  const int64_t in[2] = {input_shape[d.h], input_shape[d.w]};
  const double scales[2] = {scales_h, scales_w};
  for (int k = 0; k < 2; ++k) {
    // As PyTorch: floor of the double product (truncation, the product being positive).
    const double size = std::floor(static_cast<double>(in[k]) * scales[k]);
    SG_CHECK_KIND(size < 9.2e18, kOverflow, kForward, "(): expected an output size that fits in int64, but got ", in[k],
                  " * ", scales[k]);
    out[k] = static_cast<int64_t>(size);
    SG_CHECK(out[k] >= 1, kForward, "(): expected output sizes floor(input size * scale factor) >= 1, but got floor(",
             in[k], " * ", scales[k], ") = ", out[k], " for ", k == 0 ? "H" : "W");
  }
  return out;
}

std::vector<int64_t> upsample_bilinear2d_output_shape(const std::vector<int64_t>& input_shape,
                                                      const UpsampleBilinear2dParams& params) {
  const Layout layout = params.layout;
  detail::check_layout(kForward, layout);
  SG_CHECK(input_shape.size() == 4, kForward, "(): expected input to be 4-D ", order_of(layout), ", but got ",
           input_shape.size(), "-D tensor of shape ", format_list(input_shape));
  check_output_size(kForward, params.output_size);
  check_input_spatial(kForward, "input", input_shape, layout);
  const Dims d = dims_of(layout);
  return shape_in(layout, input_shape[d.n], input_shape[d.c], params.output_size[0], params.output_size[1]);
}

void upsample_bilinear2d(const TensorView& input, const TensorView& output, const UpsampleBilinear2dParams& params) {
  detail::check_shape(kForward, "output", output, upsample_bilinear2d_output_shape(input.sizes(), params));
  detail::check_same_dtype(kForward, "output", output, "input", input);
  detail::run_entry(kForward, "input", input.dtype(), [&](auto tag, auto&) {
    if (output.is_empty()) return;
    run_forward<typename decltype(tag)::type>(input, output, params);
  });
}

void check_upsample_bilinear2d_backward(const TensorView& grad_output, const std::vector<int64_t>& input_size,
                                        const TensorView& grad_input, const UpsampleBilinear2dParams& params) {
  const Layout layout = params.layout;
  const std::vector<int64_t>& output_size = params.output_size;
  detail::check_layout(kBackward, layout);
  detail::check_dim(kBackward, "grad_output", grad_output, 4);
  SG_CHECK(input_size.size() == 4, kBackward, "(): expected input_size to have 4 entries ", order_of(layout),
           ", but got ", input_size.size(), " (", format_list(input_size, "[", "]"), ")");
  check_output_size(kBackward, output_size);
  check_input_spatial(kBackward, "input_size", input_size, layout);
  const Dims d = dims_of(layout);
  detail::check_shape(kBackward, "grad_output", grad_output,
                      shape_in(layout, input_size[d.n], input_size[d.c], output_size[0], output_size[1]));
  detail::check_shape(kBackward, "grad_input", grad_input, input_size);
  detail::check_same_dtype(kBackward, "grad_input", grad_input, "grad_output", grad_output);
  detail::check_floating(kBackward, "grad_output", grad_output.dtype());
}

void upsample_bilinear2d_backward(const TensorView& grad_output, const std::vector<int64_t>& input_size,
                                  const TensorView& grad_input, const UpsampleBilinear2dParams& params) {
  check_upsample_bilinear2d_backward(grad_output, input_size, grad_input, params);
  detail::run_entry(kBackward, "grad_output", grad_output.dtype(), [&](auto tag, auto&) {
    if (grad_input.is_empty()) return;
    run_backward<typename decltype(tag)::type>(grad_output, grad_input, params);
  });
}

}  // namespace spatialgrad

#include "spatialgrad/upsample_bilinear2d.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/checks.h"
#include "detail/convert.h"
#include "detail/rows.h"
#include "detail/simd.h"
#include "detail/upsample_bilinear2d_axis.h"
#include "spatialgrad/parallel.h"

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

bool worth_streaming(const TensorView& output) {
  return output.numel() * dtype_size(output.dtype()) >= kStreamingBytes;
}

void check_layout(const char* op, Layout layout) {
  SG_CHECK(layout == Layout::kNCHW || layout == Layout::kNHWC, op, "(): expected layout NCHW (0) or NHWC (1), but got ",
           static_cast<int>(layout));
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
  std::pair<const Acc*, const Acc*> get(int64_t plane, int64_t r0, int64_t r1, const Fill& fill) {
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
  void load(int s, int64_t plane, int64_t row, const Fill& fill) {
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

// NCHW: the W axis is innermost; planes are (n, c).
template <class T>
void forward_nchw(const TensorView& input, const TensorView& output, const Tables<AccType<T>>& tab) {
  using Acc = AccType<T>;
  const Strides is = strides_of(input, Layout::kNCHW), os = strides_of(output, Layout::kNCHW);
  const int64_t channels = input.size(1), planes = input.size(0) * channels;
  const int64_t out_h = tab.h.out, out_w = tab.w.out;
  const std::vector<int64_t> col0 = scaled(tab.w.i0, is.w), col1 = scaled(tab.w.i1, is.w);
  const T* in = input.data<T>();
  T* out = output.data<T>();
  const int64_t work_per_row = 3 * out_w + 8;
  parallel_for(0, planes * out_h, grain_for(work_per_row), [&](int64_t lo, int64_t hi) {
    RowPairCache<Acc> cache(out_w);
    const Acc* lw0 = tab.w.l0.data();
    const Acc* lw1 = tab.w.l1.data();
    // float16/bfloat16 rows are converted whole, as vector loops (detail/convert.h).
    std::vector<float> wide(detail::kIsHalfType<T> ? static_cast<size_t>(tab.w.in) : 0);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t plane = item / out_h, oh = item % out_h;
      const int64_t n = plane / channels, c = plane % channels;
      const T* src = in + n * is.n + c * is.c;
      const auto rows = cache.get(plane, tab.h.i0[oh], tab.h.i1[oh], [&](int64_t ih, Acc* buf) {
        const T* row = src + ih * is.h;
        if constexpr (detail::kIsHalfType<T>) {
          detail::load_row(row, is.w, tab.w.in, wide.data());
          for (int64_t ow = 0; ow < out_w; ++ow) buf[ow] = lw0[ow] * wide[tab.w.i0[ow]] + lw1[ow] * wide[tab.w.i1[ow]];
        } else {
          for (int64_t ow = 0; ow < out_w; ++ow)
            buf[ow] = lw0[ow] * load_as<Acc>(row[col0[ow]]) + lw1[ow] * load_as<Acc>(row[col1[ow]]);
        }
      });
      T* dst = out + n * os.n + c * os.c + oh * os.h;
      detail::blend_rows(rows.first, rows.second, tab.h.l0[oh], tab.h.l1[oh], out_w, dst, os.w);
    }
  });
}

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
  void interpolate_row(const T* row, Acc* buf, float* wide) const {
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
  void blend_pixel(const S* p0, const S* p1, int64_t c_step, int64_t ow, Acc* b) const {
    const Acc w0 = tab.w.l0[ow], w1 = tab.w.l1[ow];
    if (c_step == 1) {
      for (int64_t c = 0; c < channels; ++c) b[c] = w0 * load_as<Acc>(p0[c]) + w1 * load_as<Acc>(p1[c]);
    } else {
      for (int64_t c = 0; c < channels; ++c)
        b[c] = w0 * load_as<Acc>(p0[c * c_step]) + w1 * load_as<Acc>(p1[c * c_step]);
    }
  }

  // Output row oh from its two interpolated input rows.
  void store_row(const Acc* r0, const Acc* r1, int64_t oh, T* dst) const {
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
  parallel_for(0, input.size(0) * out_h, grain_for(3 * row_len + 8), [&](int64_t lo, int64_t hi) {
    RowPairCache<Acc> cache(row_len);
    // An input row (iw, c), widened, for float16/bfloat16.
    std::vector<float> wide(detail::kIsHalfType<T> ? static_cast<size_t>(tab.w.in * pass.channels) : 0);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t n = item / out_h, oh = item % out_h;
      const T* src = in + n * pass.is.n;
      const auto rows = cache.get(n, tab.h.i0[oh], tab.h.i1[oh], [&](int64_t ih, Acc* buf) {
        pass.interpolate_row(src + ih * pass.is.h, buf, wide.data());
      });
      pass.store_row(rows.first, rows.second, oh, out + n * pass.os.n + oh * pass.os.h);
    }
    detail::store_fence();
  });
}

// ---- backward -----------------------------------------------------------------------------------------------
// Gather form, separable: a task owns whole grad_input rows. For input row ih it sums the weighted
// grad_output rows whose stencil touches ih (contract H, contiguous), then gathers along W from that
// buffer, and writes each grad_input element once. No zero-fill, no atomics.

// NCHW: the W gather is what costs (a few scalar taps per element), so it runs on blocks of
// kPlaneBlock planes at once: each plane's H-contracted row is transposed into (ow, plane) order,
// and every tap then updates all planes of the block in one vector operation.
constexpr int64_t kPlaneBlock = 8;
constexpr int64_t kPrefetchRows = 1;  // how many input rows ahead to prefetch grad_output rows

// gathered[iw][p] = sum over the sources e of iw of weight[e] * columns[source[e]][p], for the
// kPlaneBlock planes p of a block at once.
template <class Acc>
SG_SIMD_CLONES void gather_plane_block(Acc* gathered, const Acc* columns, const int64_t* start, const int64_t* source,
                                       const Acc* weight, int64_t in_w) {
  for (int64_t iw = 0; iw < in_w; ++iw) {
    Acc sum[kPlaneBlock] = {};
    for (int64_t e = start[iw]; e < start[iw + 1]; ++e) {
      const Acc w = weight[e];
      const Acc* column = columns + source[e] * kPlaneBlock;
      for (int64_t p = 0; p < kPlaneBlock; ++p) sum[p] += w * column[p];
    }
    for (int64_t p = 0; p < kPlaneBlock; ++p) gathered[iw * kPlaneBlock + p] = sum[p];
  }
}

// The passes of one NCHW backward task over its blocks of planes, with the task's scratch.
template <class T>
struct NchwBackward {
  using Acc = AccType<T>;
  // float16 source rows are converted by row functions (detail/rows.h: F16C where present; ~2x faster
  // here than per-element conversion in the kernel; bfloat16 widens with a shift, cheaper in
  // registers): fused with the H sum for unit-stride rows, else widened whole first.
  static constexpr bool kWidenRows = std::is_same_v<T, Half>;
  const Tables<Acc>& tab;
  Strides gs, is;
  int64_t channels;
  std::vector<Acc> rows, columns, gathered, sums;  // (plane, ow), (ow, plane), (iw, plane), (plane, iw)
  std::vector<const T*> g_rows;
  std::vector<float> wide;
  std::vector<const float*> wide_rows;

  NchwBackward(const Tables<Acc>& t, const Strides& g, const Strides& i, int64_t c)
      : tab(t),
        gs(g),
        is(i),
        channels(c),
        rows(static_cast<size_t>(kPlaneBlock * t.w.out)),
        columns(rows.size()),
        gathered(static_cast<size_t>(kPlaneBlock * t.w.in)),
        sums(gathered.size()),
        g_rows(static_cast<size_t>(t.h.max_sources)),
        wide(kWidenRows ? static_cast<size_t>(t.h.max_sources * t.w.out) : 0),
        wide_rows(kWidenRows ? static_cast<size_t>(t.h.max_sources) : 0) {}

  int64_t plane_offset(int64_t plane, const Strides& st) const {
    return (plane / channels) * st.n + (plane % channels) * st.c;
  }

  // The grad_output rows of input row `next` are mostly new: request them during this row, so their
  // loads overlap its arithmetic (the hardware prefetcher misses these short rows). (Into L2 only:
  // eight planes 2^k bytes apart share L1 sets.)
  void prefetch_sources(const T* go, int64_t first_plane, int64_t count, int64_t next) const {
    if (next >= tab.h.in || gs.w != 1) return;
    for (int64_t p = 0; p < count; ++p) {
      const T* g_plane = go + plane_offset(first_plane + p, gs);
      for (int64_t e = tab.h.start[next]; e < tab.h.start[next + 1]; ++e)
        prefetch_row(g_plane + tab.h.source[e] * gs.h, tab.w.out);
    }
  }

  // rows[p] = the H-contracted grad_output row of input row ih, for the block's planes p < count.
  void contract_h(const T* go, int64_t first_plane, int64_t count, int64_t ih) {
    const int64_t e_begin = tab.h.start[ih], h_count = tab.h.start[ih + 1] - e_begin;
    const Acc* h_weight = tab.h.weight.data() + e_begin;
    const int64_t out_w = tab.w.out;
    for (int64_t p = 0; p < count; ++p) {
      const T* g_plane = go + plane_offset(first_plane + p, gs);
      for (int64_t k = 0; k < h_count; ++k) g_rows[k] = g_plane + tab.h.source[e_begin + k] * gs.h;
      Acc* row = rows.data() + p * out_w;
      if constexpr (kWidenRows) {
        if (gs.w != 1) {
          for (int64_t k = 0; k < h_count; ++k) detail::load_row(g_rows[k], gs.w, out_w, wide.data() + k * out_w);
          for (int64_t k = 0; k < h_count; ++k) wide_rows[k] = wide.data() + k * out_w;
          detail::weighted_row_sum(wide_rows.data(), h_weight, h_count, 1, out_w, row);
          continue;
        }
      }
      detail::weighted_row_sum(g_rows.data(), h_weight, h_count, gs.w, out_w, row);
    }
  }

  // The W gather of the block, all planes at once, and the stores of grad_input row ih. Rows p >= count
  // hold stale values of an earlier block; they are computed but never stored.
  void gather_w_and_store(T* gi, int64_t first_plane, int64_t count, int64_t ih) {
    const int64_t in_w = tab.w.in;
    detail::transpose(rows.data(), kPlaneBlock, tab.w.out, columns.data());
    gather_plane_block(gathered.data(), columns.data(), tab.w.start.data(), tab.w.source.data(), tab.w.weight.data(),
                       in_w);
    detail::transpose(gathered.data(), in_w, kPlaneBlock, sums.data());
    for (int64_t p = 0; p < count; ++p)
      detail::store_row(sums.data() + p * in_w, in_w, gi + plane_offset(first_plane + p, is) + ih * is.h, is.w);
  }
};

template <class T>
void backward_nchw(const TensorView& grad_output, const TensorView& grad_input, const Tables<AccType<T>>& tab) {
  const Strides gs = strides_of(grad_output, Layout::kNCHW), is = strides_of(grad_input, Layout::kNCHW);
  const int64_t channels = grad_input.size(1), planes = grad_input.size(0) * channels;
  const int64_t blocks = (planes + kPlaneBlock - 1) / kPlaneBlock, in_h = tab.h.in;
  const T* go = grad_output.data<T>();
  T* gi = grad_input.data<T>();
  const int64_t work_per_item = kPlaneBlock * ((tab.h.max_sources + 2) * tab.w.out + 2 * tab.w.in);
  parallel_for(0, blocks * in_h, grain_for(work_per_item), [&](int64_t lo, int64_t hi) {
    NchwBackward<T> pass(tab, gs, is, channels);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t block = item / in_h, ih = item % in_h;
      const int64_t first_plane = block * kPlaneBlock, count = std::min(kPlaneBlock, planes - first_plane);
      if (tab.h.start[ih] == tab.h.start[ih + 1]) {  // no output row reads this input row
        for (int64_t p = 0; p < count; ++p)
          detail::zero_row(tab.w.in, gi + pass.plane_offset(first_plane + p, is) + ih * is.h, is.w);
        continue;
      }
      pass.prefetch_sources(go, first_plane, count, ih + kPrefetchRows);
      pass.contract_h(go, first_plane, count, ih);
      pass.gather_w_and_store(gi, first_plane, count, ih);
    }
  });
}

// A run of input columns [iw_begin, iw_end) and the output columns [ow_begin, ow_end) their
// gathers read (empty when none of them is read).
struct ColumnChunk {
  int64_t iw_begin, iw_end, ow_begin, ow_end;
};

// Splits the input columns into runs whose H-contracted (ow, c) buffer holds about
// kChunkElements values, so that it stays in L1 between the H and W passes.
template <class Acc>
std::vector<ColumnChunk> column_chunks(const detail::LinearAxis<Acc>& w_axis, int64_t channels) {
  constexpr int64_t kChunkElements = 4096;
  const int64_t per_input = (w_axis.out + w_axis.in - 1) / w_axis.in + 1;  // output columns per input column
  const int64_t width = std::clamp<int64_t>(kChunkElements / std::max<int64_t>(1, channels * per_input), 1, w_axis.in);
  std::vector<ColumnChunk> chunks;
  for (int64_t a = 0; a < w_axis.in; a += width) {
    const int64_t b = std::min(a + width, w_axis.in);
    ColumnChunk chunk{a, b, 0, 0};
    const int64_t e_begin = w_axis.start[a], e_end = w_axis.start[b];
    if (e_begin < e_end) {
      const auto range = std::minmax_element(w_axis.source.begin() + e_begin, w_axis.source.begin() + e_end);
      chunk.ow_begin = *range.first;
      chunk.ow_end = *range.second + 1;
    }
    chunks.push_back(chunk);
  }
  return chunks;
}

// The W gather of one NHWC chunk for float/double rows with unit channel stride: grad_input pixel iw
// gets sum over its sources k (in order) of w[k] * rows[(source[k] - ow0) * C + c], the sums of
// weighted_rows, computed two vectors of channels at a time in registers and stored straight to the
// output (streamed when `stream`), in one call per chunk: per-pixel calls and a sum row cost more than
// the arithmetic here.
template <class T>
SG_SIMD_CLONES void gather_columns_dense(const detail::LinearAxis<T>& w_axis, const ColumnChunk& chunk, const T* rows,
                                         int64_t channels, T* dst, int64_t pixel_stride, bool stream) {
  using Vec = detail::Vec<T, 32>;  // one AVX2 register (two SSE ones in the default clone)
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
      T block[2 * kLanes];
      std::memcpy(block, &s0, sizeof(Vec));
      std::memcpy(block + kLanes, &s1, sizeof(Vec));
      if (stream) {
        detail::store_row_streaming(block, 2 * kLanes, out + c, 1);
      } else {
        std::memcpy(out + c, block, sizeof(block));
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
  static constexpr bool kWidenRows = std::is_same_v<T, Half>;  // as in NchwBackward
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

  // As in backward_nchw, the next input row's new grad_output rows are requested during this row, a
  // piece of a chunk's columns at a time (contract_h): one burst per row overflows the miss queue and stalls.
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
  void contract_h(const T* g_image, int64_t ih, const ColumnChunk& chunk) {
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
        detail::weighted_row_sum(g_rows.data(), h_weight, h_count, 1, n, rows.data() + at);
      }
    } else if constexpr (kWidenRows) {
      for (int64_t k = 0; k < h_count; ++k) {
        wide_rows[k] = wide.data() + k * len;
        widen_pixels(source_row(k, ow0), gs.w, gs.c, width, channels, wide.data() + k * len);
      }
      if (width > 0) detail::weighted_row_sum(wide_rows.data(), h_weight, h_count, 1, len, rows.data());
    } else {
      for (int64_t ow = 0; ow < width; ++ow) {
        for (int64_t k = 0; k < h_count; ++k) g_rows[k] = source_row(k, ow0 + ow);
        detail::weighted_row_sum(g_rows.data(), h_weight, h_count, gs.c, channels, rows.data() + ow * channels);
      }
    }
  }

  // grad_input pixels of the chunk's columns of one row (dst: the row's first pixel) from `rows`.
  void gather_w(const ColumnChunk& chunk, T* dst) {
    if constexpr (std::is_same_v<T, Acc>) {
      if (is.c == 1) return gather_columns_dense(tab.w, chunk, rows.data(), channels, dst, is.w, stream);
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
      detail::weighted_row_sum(r_rows.data(), tab.w.weight.data() + e0, w_count, 1, channels, sum.data());
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
  const std::vector<ColumnChunk> chunks = column_chunks(tab.w, channels);
  int64_t max_width = 0;
  for (const ColumnChunk& chunk : chunks) max_width = std::max(max_width, chunk.ow_end - chunk.ow_begin);
  const T* go = grad_output.data<T>();
  T* gi = grad_input.data<T>();
  const int64_t work_per_row = ((tab.h.max_sources + 1) * out_w + 2 * out_w + in_w) * channels;
  parallel_for(0, grad_input.size(0) * in_h, grain_for(work_per_row), [&](int64_t lo, int64_t hi) {
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
        pass.contract_h(g_image, ih, chunk);
        pass.gather_w(chunk, dst);
      }
    }
    detail::store_fence();
  });
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kNCHW:
      return "NCHW";
    case Layout::kNHWC:
      return "NHWC";
  }
  return "unknown";
}

Layout parse_layout(const char* op, const std::string& name) {
  std::string upper(name);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (upper == "NCHW") return Layout::kNCHW;
  if (upper == "NHWC") return Layout::kNHWC;
  detail::fail(ErrorKind::kInvalidArgument, op, "(): expected layout \"NCHW\" or \"NHWC\", but got \"", name, "\"");
}

std::vector<int64_t> upsample_bilinear2d_output_size(const std::vector<int64_t>& input_shape, double scales_h,
                                                     double scales_w, Layout layout) {
  check_layout(kForward, layout);
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
                                                      const std::vector<int64_t>& output_size, Layout layout) {
  check_layout(kForward, layout);
  SG_CHECK(input_shape.size() == 4, kForward, "(): expected input to be 4-D ", order_of(layout), ", but got ",
           input_shape.size(), "-D tensor of shape ", format_list(input_shape));
  check_output_size(kForward, output_size);
  check_input_spatial(kForward, "input", input_shape, layout);
  const Dims d = dims_of(layout);
  return shape_in(layout, input_shape[d.n], input_shape[d.c], output_size[0], output_size[1]);
}

void upsample_bilinear2d(const TensorView& input, const std::vector<int64_t>& output_size, bool align_corners,
                         double scales_h, double scales_w, Layout layout, const TensorView& output) {
  detail::check_shape(kForward, "output", output, upsample_bilinear2d_output_shape(input.sizes(), output_size, layout));
  const Dims d = dims_of(layout);
  const int64_t in_h = input.size(d.h), in_w = input.size(d.w), out_h = output_size[0], out_w = output_size[1];
  detail::check_same_dtype(kForward, "output", output, "input", input);
  dispatch_floating(input.dtype(), kForward, "input", [&](auto tag) {
    using T = decltype(tag);
    if (output.is_empty()) return;
    const auto tab = make_tables<AccType<T>>(in_h, in_w, out_h, out_w, align_corners, scales_h, scales_w);
    if (layout == Layout::kNCHW) {
      forward_nchw<T>(input, output, tab);
    } else {
      forward_nhwc<T>(input, output, tab);
    }
  });
}

void check_upsample_bilinear2d_backward(const TensorView& grad_output, const std::vector<int64_t>& output_size,
                                        const std::vector<int64_t>& input_size, Layout layout,
                                        const TensorView& grad_input) {
  check_layout(kBackward, layout);
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
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [](auto) {});
}

void upsample_bilinear2d_backward(const TensorView& grad_output, const std::vector<int64_t>& output_size,
                                  const std::vector<int64_t>& input_size, bool align_corners, double scales_h,
                                  double scales_w, Layout layout, const TensorView& grad_input) {
  check_upsample_bilinear2d_backward(grad_output, output_size, input_size, layout, grad_input);
  const Dims d = dims_of(layout);
  const int64_t in_h = input_size[d.h], in_w = input_size[d.w], out_h = output_size[0], out_w = output_size[1];
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [&](auto tag) {
    using T = decltype(tag);
    if (grad_input.is_empty()) return;
    const auto tab = make_tables<AccType<T>>(in_h, in_w, out_h, out_w, align_corners, scales_h, scales_w);
    if (layout == Layout::kNCHW) {
      backward_nchw<T>(grad_output, grad_input, tab);
    } else {
      backward_nhwc<T>(grad_output, grad_input, tab);
    }
  });
}

}  // namespace spatialgrad

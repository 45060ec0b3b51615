#include "spatialgrad/ms_deform_attn.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "detail/checks.h"
#include "detail/convert.h"
#include "detail/float_staging.h"
#include "detail/ms_deform_attn.h"
#include "detail/rows.h"
#include "detail/simd.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "ms_deform_attn";
constexpr const char* kBackward = "ms_deform_attn_backward";
// Forward tasks cover this many queries of one (batch, head) pair.
constexpr int64_t kQueryBlock = 64;
// Channel reductions keep this many independent partial sums (vectorisable, fixed order).
constexpr int64_t kLanes = 8;
// The cost model of the parallel split (grain_for, parallel.h), in multiply-adds: a sampling point costs
// 4 taps per channel in the forward, and 4 taps reading value, 4 scattering grad_value and 4 forming the
// location gradient in the backward; the per-point terms are its coordinate and weight arithmetic. The
// backward also packs, zeroes and unpacks its slice (3 passes over rows * C values).
constexpr int64_t kForwardCostPerChannel = 4, kForwardCostPerPoint = 16;
constexpr int64_t kBackwardCostPerChannel = 12, kBackwardCostPerPoint = 32, kBackwardSlicePasses = 3;

using detail::DeformLevel;

using Problem = detail::DeformProblem;

void check_rank(const char* op, const char* name, const std::vector<int64_t>& shape, int64_t dim) {
  SG_CHECK(static_cast<int64_t>(shape.size()) == dim, op, "(): expected ", name, " to be ", dim, "-D, but got ",
           shape.size(), "-D tensor of shape ", format_list(shape));
}

void check_index_dtype(const char* op, const char* name, const TensorView& t) {
  SG_CHECK_KIND(t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64, kType, op, "(): expected ", name,
                " to be int32 or int64, but got ", dtype_name(t.dtype()));
}

// The int32/int64 element at `offset` (in elements) of an index view.
int64_t read_index(const TensorView& t, int64_t offset) {
  return t.dtype() == DType::kInt32 ? static_cast<int64_t>(t.data<int32_t>()[offset]) : t.data<int64_t>()[offset];
}

int64_t checked_add(const char* op, int64_t a, int64_t b) {
  int64_t out;
  SG_CHECK_KIND(!__builtin_add_overflow(a, b, &out), kOverflow, op,
                "(): expected sizes whose sum fits in int64, but got ", a, " + ", b);
  return out;
}

// Validates the inputs both directions share (docs/operators.md (Multi-scale deformable attention) plus what the NPU
// leaves unchecked) and reads the level table.
Problem validate(const char* op, const TensorView& value, const TensorView& spatial_shapes,
                 const TensorView& level_start_index, const TensorView& sampling_locations,
                 const TensorView& attention_weights) {
  detail::check_dim(op, "value", value, 4);
  detail::check_dim(op, "spatial_shapes", spatial_shapes, 2);
  SG_CHECK(spatial_shapes.size(1) == 2, op, "(): expected spatial_shapes of shape (L, 2), but got ",
           spatial_shapes.shape_string());
  detail::check_dim(op, "level_start_index", level_start_index, 1);
  detail::check_dim(op, "sampling_locations", sampling_locations, 6);
  SG_CHECK(sampling_locations.size(5) == 2, op,
           "(): expected sampling_locations of shape (bs, Q, nH, L, P, 2), but got last dimension ",
           sampling_locations.size(5), " in shape ", sampling_locations.shape_string());
  detail::check_dim(op, "attention_weights", attention_weights, 5);
  detail::check_same_dtype(op, "sampling_locations", sampling_locations, "value", value);
  detail::check_same_dtype(op, "attention_weights", attention_weights, "value", value);
  check_index_dtype(op, "spatial_shapes", spatial_shapes);
  check_index_dtype(op, "level_start_index", level_start_index);

  Problem pb;
  pb.batch = value.size(0);
  pb.spatial = value.size(1);
  pb.heads = value.size(2);
  pb.channels = value.size(3);
  pb.levels = spatial_shapes.size(0);
  pb.queries = sampling_locations.size(1);
  pb.points = sampling_locations.size(4);
  const std::vector<int64_t> loc_shape{pb.batch, pb.queries, pb.heads, pb.levels, pb.points, 2};
  SG_CHECK(sampling_locations.sizes() == loc_shape, op,
           "(): expected sampling_locations of shape (bs, Q, nH, L, P, 2) = ", format_list(loc_shape),
           " (bs, nH from value, L from spatial_shapes), but got ", sampling_locations.shape_string());
  const std::vector<int64_t> weight_shape{pb.batch, pb.queries, pb.heads, pb.levels, pb.points};
  SG_CHECK(attention_weights.sizes() == weight_shape, op,
           "(): expected attention_weights of shape (bs, Q, nH, L, P) = ", format_list(weight_shape),
           " (the first five dimensions of sampling_locations), but got ", attention_weights.shape_string());
  SG_CHECK(level_start_index.size(0) == pb.levels, op, "(): expected level_start_index of shape (L,) = (", pb.levels,
           ",) (one entry per level of spatial_shapes), but got ", level_start_index.shape_string());

  pb.level_table.resize(static_cast<size_t>(pb.levels));
  int64_t total = 0;
  for (int64_t l = 0; l < pb.levels; ++l) {
    const int64_t h = read_index(spatial_shapes, l * spatial_shapes.stride(0));
    const int64_t w = read_index(spatial_shapes, l * spatial_shapes.stride(0) + spatial_shapes.stride(1));
    SG_CHECK(h >= 1 && w >= 1, op, "(): expected spatial_shapes entries (H, W) >= 1, but got (", h, ", ", w,
             ") at level ", l);
    pb.level_table[static_cast<size_t>(l)] = DeformLevel{h, w, total};
    total = checked_add(op, total, detail::checked_mul(op, h, w));
  }
  SG_CHECK(total == pb.spatial, op, "(): expected value.shape[1] to be ", total,
           " (the sum of H*W over spatial_shapes), but got ", pb.spatial, " in value of shape ", value.shape_string());
  for (int64_t l = 0; l < pb.levels; ++l) {
    const int64_t start = read_index(level_start_index, l * level_start_index.stride(0));
    const int64_t expected = pb.level_table[static_cast<size_t>(l)].start;
    SG_CHECK(start == expected, op, "(): expected level_start_index[", l, "] to be ", expected,
             " (the sum of H*W over the levels before it), but got ", start);
  }
  return pb;
}

// No query, level, point or channel: the sums are empty, the results zeros. The kernels are not run: they
// would form pointers into the empty tensors, whose data may be null (null + offset is undefined).
bool nothing_sampled(const Problem& pb) {
  return pb.queries == 0 || pb.levels == 0 || pb.points == 0 || pb.channels == 0;
}

// Strided views flattened into the index arithmetic the kernels need.
struct Strides {
  int64_t v[4], loc[6], attn[5];
  Strides(const TensorView& value, const TensorView& loc_view, const TensorView& attn_view) {
    for (int d = 0; d < 4; ++d) v[d] = value.stride(d);
    for (int d = 0; d < 6; ++d) loc[d] = loc_view.stride(d);
    for (int d = 0; d < 5; ++d) attn[d] = attn_view.stride(d);
  }
};

// ---- padded levels ------------------------------------------------------------------------------------------
// The kernels copy the value rows of one (b, h) pair into a contiguous buffer in the accumulation
// type, each level with a one-pixel border of zero rows: a located point's corners (hl, wl) ..
// (hl+1, wl+1), with hl in [-1, H-1] and wl in [-1, W-1], are then always four rows of the buffer
// (a corner outside the level reads a zero), so the per-point work has no bounds tests. Gradients
// are accumulated in a buffer of the same layout; what lands on the border is discarded.

struct PaddedLevel {
  int64_t height, width, start;  // as in DeformLevel
  int64_t row_pitch;             // width + 2: rows of the buffer from one image row to the next
  int64_t first;                 // buffer row of pixel (0, 0)
};

struct PaddedLayout {
  std::vector<PaddedLevel> levels;
  int64_t rows = 0;  // buffer rows in all
};

PaddedLayout padded_layout(const Problem& pb) {
  PaddedLayout out;
  for (const DeformLevel& level : pb.level_table) {
    const int64_t pitch = level.width + 2;
    out.levels.push_back(PaddedLevel{level.height, level.width, level.start, pitch, out.rows + pitch + 1});
    out.rows += (level.height + 2) * pitch;
  }
  return out;
}

// The buffer row of a located point's top-left corner.
inline int64_t corner_row(const PaddedLevel& level, int64_t hl, int64_t wl) {
  return level.first + hl * level.row_pitch + wl;
}

// Rows of one head sit nH*C elements apart, a stride the hardware prefetchers do not follow across
// pages: the copies in and out of the per-pair buffers request the row kRowsAhead ahead themselves
// (measured ~1.4x faster copies).
constexpr int64_t kRowsAhead = 16;

template <class T>
SPATIALGRAD_INLINE void prefetch_span(const T* row, int64_t n, bool for_write) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  if (for_write) {
    detail::prefetch_bytes<detail::Access::kWrite>(row, bytes);
  } else {
    detail::prefetch_bytes(row, bytes);
  }
}

// Copies value[b, :, h, :] into the interior rows of `rows` (the border is left alone: zero).
// Cloned, and with a unit-stride path, so that the row copies (and conversions) are vector loops.
template <class T, class Acc>
SG_SIMD_CLONES void pack_value_slice(const TensorView& value, const Strides& st, const PaddedLayout& layout, int64_t b,
                                     int64_t h, int64_t channels, Acc* __restrict rows) {
  const T* src = value.data<T>() + b * st.v[0] + h * st.v[2];
  const int64_t row_stride = st.v[1], channel_stride = st.v[3];
  for (const PaddedLevel& level : layout.levels) {
    const int64_t pixels = level.height * level.width;
    const T* row = src + level.start * row_stride;
    for (int64_t y = 0, s = 0; y < level.height; ++y) {
      Acc* __restrict dst = rows + (level.first + y * level.row_pitch) * channels;
      for (int64_t x = 0; x < level.width; ++x, ++s, row += row_stride, dst += channels) {
        if (channel_stride == 1 && s + kRowsAhead < pixels)
          prefetch_span(row + kRowsAhead * row_stride, channels, false);
        detail::load_row(row, channel_stride, channels, dst);  // float16: F16C where the CPU has it
      }
    }
  }
}

// Writes the interior rows of `grads` to grad_value[b, :, h, :].
template <class T, class Acc>
SG_SIMD_CLONES void unpack_grad_slice(const Acc* __restrict grads, const PaddedLayout& layout, int64_t channels,
                                      T* slice, const int64_t (&st)[4]) {
  const int64_t row_stride = st[1], channel_stride = st[3];
  for (const PaddedLevel& level : layout.levels) {
    const int64_t pixels = level.height * level.width;
    T* row = slice + level.start * row_stride;
    for (int64_t y = 0, s = 0; y < level.height; ++y) {
      const Acc* __restrict src = grads + (level.first + y * level.row_pitch) * channels;
      for (int64_t x = 0; x < level.width; ++x, ++s, row += row_stride, src += channels) {
        if (channel_stride == 1 && s + kRowsAhead < pixels)
          prefetch_span(row + kRowsAhead * row_stride, channels, true);
        detail::store_row(src, channels, row, channel_stride);
      }
    }
  }
}

// Copies grad_output[b, q, h*C + c] for all q, c into `rows` (Q x C, contiguous).
template <class T, class Acc>
SG_SIMD_CLONES void pack_grad_output_slice(const TensorView& grad_output, int64_t b, int64_t h, int64_t queries,
                                           int64_t channels, Acc* rows) {
  const int64_t s1 = grad_output.stride(1), s2 = grad_output.stride(2);
  const T* src = grad_output.data<T>() + b * grad_output.stride(0) + h * channels * s2;
  for (int64_t q = 0; q < queries; ++q) {
    if (s2 == 1 && q + kRowsAhead < queries) prefetch_span(src + (q + kRowsAhead) * s1, channels, false);
    detail::load_row(src + q * s1, s2, channels, rows + q * channels);
  }
}

// Where gather_pair_points reads the points: the point tensors flattened to pointers and strides.
template <class T>
struct PointArgs {
  const T* loc;
  const T* attn;
  Strides st;  // (also value's, for pack_value_slice)
  int64_t points;
  // The location of point p of (b, q, h, l) (x; y is st.loc[5] further on), and the offset of the
  // weights of (b, q, h, l).
  const T* xy(int64_t b, int64_t q, int64_t h, int64_t l, int64_t p) const {
    return loc + b * st.loc[0] + q * st.loc[1] + h * st.loc[2] + l * st.loc[3] + p * st.loc[4];
  }
  int64_t attn_offset(int64_t b, int64_t q, int64_t h, int64_t l) const {
    return b * st.attn[0] + q * st.attn[1] + h * st.attn[2] + l * st.attn[3];
  }
};

// The locations and attention weights of queries [q_begin, q_end) of pair (b, h) as (x, y, a) per
// point, level by level: points[((l * n + q - q_begin) * P + p) * 3 ..], n = q_end - q_begin. The
// level walks of both directions then read them in order. The tensors hold the next query's values of
// (b, h, l) nH*L*P*2 elements further on, after a few small steps: a pattern the hardware prefetchers
// do not follow (loading the locations in the walks took ~15% of the backward and half the forward),
// so this pass requests the values of the query kQueriesAhead ahead itself.
constexpr int64_t kQueriesAhead = 8;

template <class T, class Acc>
void gather_pair_points(const PointArgs<T>& args, int64_t b, int64_t h, int64_t q_begin, int64_t q_end, int64_t levels,
                        Acc* __restrict points) {
  const int64_t P = args.points, loc_p = args.st.loc[4], loc_y = args.st.loc[5], attn_p = args.st.attn[4];
  const int64_t queries = q_end - q_begin;
  for (int64_t q = q_begin; q < q_end; ++q) {
    for (int64_t l = 0; l < levels; ++l) {
      if (q + kQueriesAhead < q_end) {
        detail::prefetch(args.xy(b, q + kQueriesAhead, h, l, 0));
        detail::prefetch(args.attn + args.attn_offset(b, q + kQueriesAhead, h, l));
      }
      const T* xy = args.xy(b, q, h, l, 0);
      const T* attn = args.attn + args.attn_offset(b, q, h, l);
      Acc* to = points + (l * queries + q - q_begin) * P * 3;
      for (int64_t p = 0; p < P; ++p) {
        to[3 * p] = load_as<Acc>(xy[p * loc_p]);
        to[3 * p + 1] = load_as<Acc>(xy[p * loc_p + loc_y]);
        to[3 * p + 2] = load_as<Acc>(attn[p * attn_p]);
      }
    }
  }
}

// ---- forward ------------------------------------------------------------------------------------------------

// sum += w0 v0 + w1 v1 + w2 v2 + w3 v3 over the channels, v0..v3 being the rows r, r + 1, r + pitch,
// r + pitch + 1 (C apart).
template <class Acc>
SPATIALGRAD_INLINE void forward_channels(int64_t channels, const Acc* corner, int64_t pitch, Acc w0, Acc w1, Acc w2,
                                         Acc w3, Acc* __restrict sum) {
  const Acc* __restrict v0 = corner;
  const Acc* __restrict v1 = corner + channels;
  const Acc* __restrict v2 = corner + pitch * channels;
  const Acc* __restrict v3 = v2 + channels;
  for (int64_t c = 0; c < channels; ++c) sum[c] += w0 * v0[c] + w1 * v1[c] + w2 * v2[c] + w3 * v3[c];
}

// Queries [q_begin, q_end) of pair (b, h): acc[(q - q_begin) * C + c] = the output row, summed level
// by level (the rows read at a time are one level's) and point by point; points holds their (x, y, a)
// (gather_pair_points). One function with an AVX2 clone: the channel passes inline into it and floor()
// is one instruction.
template <class Acc>
SG_SIMD_CLONES void forward_block(const PaddedLayout& layout, int64_t channels, int64_t points_per_query,
                                  int64_t queries, const Acc* __restrict points, const Acc* rows, Acc* acc) {
  const int64_t C = channels, P = points_per_query;
  for (int64_t l = 0; l < static_cast<int64_t>(layout.levels.size()); ++l) {
    const PaddedLevel& level = layout.levels[static_cast<size_t>(l)];
    const Acc* level_points = points + l * queries * P * 3;
    for (int64_t q = 0; q < queries; ++q) {
      Acc* sum = acc + q * C;
      for (int64_t p = 0; p < P; ++p) {
        const Acc* xya = level_points + (q * P + p) * 3;
        detail::DeformPoint<Acc> pt;
        if (!detail::locate_deform_point(xya[0], xya[1], level.height, level.width, pt)) continue;
        const Acc a = xya[2];
        forward_channels(C, rows + corner_row(level, pt.hl, pt.wl) * C, level.row_pitch, a * pt.weight[0],
                         a * pt.weight[1], a * pt.weight[2], a * pt.weight[3], sum);
      }
    }
  }
}

// T: the dtype of value and output; PT: that of the locations and weights (float32 staging for the
// half types: the gather reads them one value at a time).
template <class T, class PT>
void forward_kernel(const Problem& pb, const TensorView& value, const TensorView& loc_view, const TensorView& attn_view,
                    const TensorView& output) {
  using Acc = AccType<T>;
  const int64_t C = pb.channels, Q = pb.queries, L = pb.levels, P = pb.points;
  const PointArgs<PT> args{loc_view.data<PT>(), attn_view.data<PT>(), Strides(value, loc_view, attn_view), P};
  const PaddedLayout layout = padded_layout(pb);
  T* out = output.data<T>();
  const int64_t os0 = output.stride(0), os1 = output.stride(1), os2 = output.stride(2);
  const int64_t blocks = (Q + kQueryBlock - 1) / kQueryBlock;
  // Items are (b, h, query block), so the items of one thread share a packed value slice.
  const int64_t items = pb.batch * pb.heads * blocks;
  const double work_per_item =
      static_cast<double>(std::min(Q, kQueryBlock)) * L * P * (kForwardCostPerChannel * C + kForwardCostPerPoint) + 1;
  // Scratch (and the packed slice) per thread, kept across its chunks.
  parallel_chunks(0, items, grain_for(work_per_item), 0, [&](ChunkQueue& queue) {
    std::vector<Acc> rows(static_cast<size_t>(layout.rows * C), Acc(0));      // borders stay zero
    std::vector<Acc> acc(static_cast<size_t>(std::min(Q, kQueryBlock) * C));  // the block's output rows
    std::vector<Acc> points(static_cast<size_t>(std::min(Q, kQueryBlock) * L * P * 3));
    int64_t packed = -1;  // the (b, h) pair in `rows`
    for (int64_t lo, hi; queue.next(lo, hi);) {
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t pair = item / blocks, block = item % blocks;
        const int64_t b = pair / pb.heads, h = pair % pb.heads;
        if (pair != packed) {
          pack_value_slice<T>(value, args.st, layout, b, h, C, rows.data());
          packed = pair;
        }
        const int64_t q_begin = block * kQueryBlock, q_end = std::min(Q, q_begin + kQueryBlock);
        std::fill(acc.begin(), acc.end(), Acc(0));
        gather_pair_points(args, b, h, q_begin, q_end, L, points.data());
        forward_block(layout, C, P, q_end - q_begin, points.data(), rows.data(), acc.data());
        for (int64_t q = q_begin; q < q_end; ++q)
          detail::store_row(acc.data() + (q - q_begin) * C, C, out + b * os0 + q * os1 + h * C * os2, os2);
      }
    }
  });
}

// ---- backward -----------------------------------------------------------------------------------------------

// kLanes partial sums as one vector (detail::Vec): one AVX2 register for float.
template <class Acc>
using LanesVec = detail::Vec<Acc, kLanes * sizeof(Acc)>;

// The channel pass of one sampling point whose corners are the rows r, r + 1, r + pitch,
// r + pitch + 1 (C apart) of `value` and of `grad`. Every gradient but grad_value is linear in the
// corner values, so those are combinations of the four dot products dots[i] = <g, v_i>; the same pass
// adds aw_i * g to the four gradient rows.
template <class Acc>
SPATIALGRAD_INLINE void backward_channels(int64_t channels, const Acc* __restrict g, const Acc* value, Acc* grad,
                                          int64_t pitch, const Acc (&aw)[4], Acc (&dots)[4]) {
  using V = LanesVec<Acc>;
  const int64_t offset[4] = {0, channels, pitch * channels, (pitch + 1) * channels};
  const Acc* __restrict v0 = value + offset[0];
  const Acc* __restrict v1 = value + offset[1];
  const Acc* __restrict v2 = value + offset[2];
  const Acc* __restrict v3 = value + offset[3];
  Acc* __restrict d0 = grad + offset[0];
  Acc* __restrict d1 = grad + offset[1];
  Acc* __restrict d2 = grad + offset[2];
  Acc* __restrict d3 = grad + offset[3];
  V p0{}, p1{}, p2{}, p3{};
  int64_t c = 0;
  for (; c + kLanes <= channels; c += kLanes) {
    V gc, x, y;
    detail::load_u(gc, g + c);
    p0 += gc * detail::load_u(x, v0 + c);
    p1 += gc * detail::load_u(x, v1 + c);
    p2 += gc * detail::load_u(x, v2 + c);
    p3 += gc * detail::load_u(x, v3 + c);
    detail::store_u(d0 + c, detail::load_u(y, d0 + c) + aw[0] * gc);
    detail::store_u(d1 + c, detail::load_u(y, d1 + c) + aw[1] * gc);
    detail::store_u(d2 + c, detail::load_u(y, d2 + c) + aw[2] * gc);
    detail::store_u(d3 + c, detail::load_u(y, d3 + c) + aw[3] * gc);
  }
  if (c < channels) {
    // The last channels as zero-padded vectors: the padding lanes add 0 * 0 to the sums and write
    // nothing back, and channel c still lands in lane c % kLanes.
    const size_t n = static_cast<size_t>(channels - c) * sizeof(Acc);
    V gc{}, x0{}, x1{}, x2{}, x3{}, y0{}, y1{}, y2{}, y3{};
    std::memcpy(&gc, g + c, n);
    std::memcpy(&x0, v0 + c, n);
    std::memcpy(&x1, v1 + c, n);
    std::memcpy(&x2, v2 + c, n);
    std::memcpy(&x3, v3 + c, n);
    p0 += gc * x0;
    p1 += gc * x1;
    p2 += gc * x2;
    p3 += gc * x3;
    std::memcpy(&y0, d0 + c, n);
    std::memcpy(&y1, d1 + c, n);
    std::memcpy(&y2, d2 + c, n);
    std::memcpy(&y3, d3 + c, n);
    y0 += aw[0] * gc;
    y1 += aw[1] * gc;
    y2 += aw[2] * gc;
    y3 += aw[3] * gc;
    std::memcpy(d0 + c, &y0, n);
    std::memcpy(d1 + c, &y1, n);
    std::memcpy(d2 + c, &y2, n);
    std::memcpy(d3 + c, &y3, n);
  }
  detail::horizontal_sums4(p0, p1, p2, p3, dots);
}

// The backward of one located point: the channel pass over its corner rows (`corner` rows into the
// level's value and gradient rows), then its weight gradient and its location gradients (x, y) in
// out[0..3).
template <class Acc>
SPATIALGRAD_INLINE void backward_point(int64_t channels, const Acc* g, const Acc* value, Acc* grad, int64_t pitch,
                                       Acc a, const detail::DeformPoint<Acc>& pt, Acc width, Acc height,
                                       Acc (&out)[3]) {
  const Acc aw[4] = {a * pt.weight[0], a * pt.weight[1], a * pt.weight[2], a * pt.weight[3]};
  Acc dots[4];
  backward_channels(channels, g, value, grad, pitch, aw, dots);
  const Acc g0 = dots[0], g1 = dots[1], g2 = dots[2], g3 = dots[3];
  // Contract: sum_c tg * (w1 v1 + ... + w4 v4); gw = -hh v1 + hh v2 - lh v3 + lh v4; gh = -hw v1 - lw v2 + hw v3 + lw
  // v4.
  out[0] = pt.weight[0] * g0 + pt.weight[1] * g1 + pt.weight[2] * g2 + pt.weight[3] * g3;
  out[1] = width * a * (pt.hh * (g1 - g0) + pt.lh * (g3 - g2));
  out[2] = height * a * (pt.hw * (g2 - g0) + pt.lw * (g3 - g1));
}

// Where the backward writes the location and weight gradients.
template <class T>
struct GradPointArgs {
  T* grad_loc;
  T* grad_attn;
  int64_t gls[6], gas[5];
};

// Writes the (a, x, y) gradients of pair (b, h), laid out as gather_pair_points' points, to the
// weight and location gradients (requesting the values ahead, as there).
template <class T, class Acc>
void scatter_pair_grads(const GradPointArgs<T>& out, int64_t b, int64_t h, int64_t queries, int64_t levels,
                        int64_t points_per_query, const Acc* __restrict point_grads) {
  const int64_t P = points_per_query;
  const int64_t* gl = out.gls;
  const int64_t* ga = out.gas;
  auto loc_at = [&](int64_t q, int64_t l) { return out.grad_loc + b * gl[0] + q * gl[1] + h * gl[2] + l * gl[3]; };
  auto attn_at = [&](int64_t q, int64_t l) { return out.grad_attn + b * ga[0] + q * ga[1] + h * ga[2] + l * ga[3]; };
  for (int64_t q = 0; q < queries; ++q) {
    for (int64_t l = 0; l < levels; ++l) {
      if (q + kQueriesAhead < queries) {
        detail::prefetch<detail::Access::kWrite>(loc_at(q + kQueriesAhead, l));
        detail::prefetch<detail::Access::kWrite>(attn_at(q + kQueriesAhead, l));
      }
      T* gxy = loc_at(q, l);
      T* gattn = attn_at(q, l);
      const Acc* from = point_grads + (l * queries + q) * P * 3;
      for (int64_t p = 0; p < P; ++p) {
        gattn[p * ga[4]] = store_as<T>(from[3 * p]);
        gxy[p * gl[4]] = store_as<T>(from[3 * p + 1]);
        gxy[p * gl[4] + gl[5]] = store_as<T>(from[3 * p + 2]);
      }
    }
  }
}

// Levels whose value and gradient rows take more than this many bytes are walked in row order
// (backward_level sorts their points); smaller ones stay in L1/L2 in any order.
constexpr int64_t kSortLevelBytes = 96 << 10;
// Points per sorting chunk: a constant, as the order in which gradient rows receive their updates
// must depend on the problem alone.
constexpr int64_t kChunkPoints = 4096;

// A located point waiting for its channel pass (compact: chunks of them are sorted).
template <class Acc>
struct PendingPoint {
  int64_t corner;  // hl * pitch + wl: rows from the level's pixel (0, 0) to the top-left corner
  int64_t row;     // hl
  int32_t offset;  // its id (q * P + p, its place in the level's points) minus the chunk's first
  Acc lh, lw, a;
};

// Per-thread buffers of backward_level.
template <class Acc>
struct LevelScratch {
  std::vector<PendingPoint<Acc>> located, sorted;
  std::vector<int64_t> row_start;  // counting sort by top row
  explicit LevelScratch(int64_t max_height)
      : located(kChunkPoints), sorted(kChunkPoints), row_start(static_cast<size_t>(max_height + 2)) {}
};

// The queries and points of one level of a pair: adds their value gradients to `grads` (laid out as
// `rows`) and puts their weight and location gradients (a, x, y) in point_grads. g holds the pair's
// grad_output rows; points the level's (x, y, a) per point q * P + p (gather_pair_points).
// Points of a large level are taken in chunks of kChunkPoints, located, and visited sorted by their
// top row (a stable counting sort): the rows a stretch of points touches are then a few image rows
// that stay in L1, instead of random rows of a level larger than L2 (which made the backward
// memory-bound: ~2x slower than on levels that fit). One function with an AVX2 clone: the channel
// passes inline into it and floor() is one instruction.
template <class Acc>
SG_SIMD_CLONES void backward_level(int64_t channels, int64_t points_per_query, int64_t queries,
                                   const PaddedLevel& level, const Acc* rows, const Acc* g, Acc* grads,
                                   const Acc* __restrict points, Acc* __restrict point_grads,
                                   LevelScratch<Acc>& scratch) {
  const int64_t C = channels, P = points_per_query, H = level.height, W = level.width, pitch = level.row_pitch;
  const Acc height = static_cast<Acc>(H), width = static_cast<Acc>(W);
  const Acc* level_rows = rows + level.first * C;
  Acc* level_grads = grads + level.first * C;
  auto write = [&](int64_t id, const Acc(&grad)[3]) {
    Acc* to = point_grads + 3 * id;
    to[0] = grad[0];
    to[1] = grad[1];
    to[2] = grad[2];
  };
  const Acc zero[3] = {Acc(0), Acc(0), Acc(0)};
  auto locate = [&](int64_t id, detail::DeformPoint<Acc>& pt) {
    return C > 0 && detail::locate_deform_point(points[3 * id], points[3 * id + 1], H, W, pt);
  };
  const int64_t n_points = queries * P;
  const bool sort = 2 * (H + 2) * pitch * C * static_cast<int64_t>(sizeof(Acc)) > kSortLevelBytes;
  if (!sort) {
    for (int64_t id = 0; id < n_points; ++id) {
      detail::DeformPoint<Acc> pt;
      if (!locate(id, pt)) {
        write(id, zero);
        continue;
      }
      const int64_t corner = (pt.hl * pitch + pt.wl) * C;
      Acc grad[3];
      backward_point(C, g + (id / P) * C, level_rows + corner, level_grads + corner, pitch, points[3 * id + 2], pt,
                     width, height, grad);
      write(id, grad);
    }
    return;
  }
  PendingPoint<Acc>* located = scratch.located.data();
  PendingPoint<Acc>* sorted = scratch.sorted.data();
  int64_t* row_start = scratch.row_start.data();
  for (int64_t first = 0; first < n_points; first += kChunkPoints) {
    const int64_t last = std::min(n_points, first + kChunkPoints);
    std::fill(row_start, row_start + H + 2, int64_t(0));
    int64_t count = 0;
    for (int64_t id = first; id < last; ++id) {
      detail::DeformPoint<Acc> pt;
      if (!locate(id, pt)) {
        write(id, zero);
        continue;
      }
      located[count] = PendingPoint<Acc>{pt.hl * pitch + pt.wl, pt.hl, static_cast<int32_t>(id - first), pt.lh, pt.lw,
                                         points[3 * id + 2]};
      ++row_start[pt.hl + 2];  // hl in [-1, H-1]
      ++count;
    }
    for (int64_t r = 1; r < H + 2; ++r) row_start[r] += row_start[r - 1];
    for (int64_t i = 0; i < count; ++i) sorted[row_start[located[i].row + 1]++] = located[i];
    for (int64_t i = 0; i < count; ++i) {
      const PendingPoint<Acc>& pp = sorted[i];
      detail::DeformPoint<Acc> pt;
      detail::weigh_deform_point(pp.lh, pp.lw, pt);
      const int64_t id = first + pp.offset;
      Acc grad[3];
      backward_point(C, g + (id / P) * C, level_rows + pp.corner * C, level_grads + pp.corner * C, pitch, pp.a, pt,
                     width, height, grad);
      write(id, grad);
    }
  }
}

// One task per (b, h): it owns grad_value[b, :, h, :] (accumulated in a private buffer, written
// once at the end) and the location and weight gradients of that pair, and walks the levels,
// queries and points in a fixed order, so no atomics are needed and any thread count gives the same bits.
// T and PT as in forward_kernel (grad_output and grad_value are T, the other gradients PT).
template <class T, class PT>
void backward_kernel(const Problem& pb, const TensorView& value, const TensorView& loc_view,
                     const TensorView& attn_view, const TensorView& grad_output, const TensorView& grad_value,
                     const TensorView& grad_loc, const TensorView& grad_attn) {
  using Acc = AccType<T>;
  const int64_t C = pb.channels, Q = pb.queries, L = pb.levels, P = pb.points;
  const PointArgs<PT> args{loc_view.data<PT>(), attn_view.data<PT>(), Strides(value, loc_view, attn_view), P};
  GradPointArgs<PT> out{grad_loc.data<PT>(), grad_attn.data<PT>(), {}, {}};
  for (int d = 0; d < 6; ++d) out.gls[d] = grad_loc.stride(d);
  for (int d = 0; d < 5; ++d) out.gas[d] = grad_attn.stride(d);
  const PaddedLayout layout = padded_layout(pb);
  T* gv = grad_value.data<T>();
  int64_t gvs[4];
  for (int d = 0; d < 4; ++d) gvs[d] = grad_value.stride(d);
  const double work_per_item = static_cast<double>(Q) * L * P * (kBackwardCostPerChannel * C + kBackwardCostPerPoint) +
                               static_cast<double>(kBackwardSlicePasses) * layout.rows * C + 1;
  int64_t max_height = 0;
  for (const DeformLevel& level : pb.level_table) max_height = std::max(max_height, level.height);
  // One pair per chunk: few, long tasks, so a late thread's pairs go to the others (parallel.h).
  parallel_chunks(0, pb.batch * pb.heads, grain_for(work_per_item), 1, [&](ChunkQueue& queue) {
    std::vector<Acc> rows(static_cast<size_t>(layout.rows * C), Acc(0));  // borders stay zero
    std::vector<Acc> grads(static_cast<size_t>(layout.rows * C));
    std::vector<Acc> g(static_cast<size_t>(Q * C));  // grad_output[b, :, h, :]
    LevelScratch<Acc> scratch(max_height);
    std::vector<Acc> points(static_cast<size_t>(3 * Q * L * P)), point_grads(points.size());
    for (int64_t lo, hi; queue.next(lo, hi);) {
      for (int64_t pair = lo; pair < hi; ++pair) {
        const int64_t b = pair / pb.heads, h = pair % pb.heads;
        pack_value_slice<T>(value, args.st, layout, b, h, C, rows.data());
        std::fill(grads.begin(), grads.end(), Acc(0));
        pack_grad_output_slice<T>(grad_output, b, h, Q, C, g.data());
        gather_pair_points(args, b, h, 0, Q, L, points.data());
        // Level by level, so the rows one pass touches are those of one level (less cache pressure);
        // each grad_value row still receives its updates in query-then-point order.
        for (int64_t l = 0; l < L; ++l) {
          backward_level(C, P, Q, layout.levels[static_cast<size_t>(l)], rows.data(), g.data(), grads.data(),
                         points.data() + 3 * l * Q * P, point_grads.data() + 3 * l * Q * P, scratch);
        }
        scatter_pair_grads(out, b, h, Q, L, P, point_grads.data());
        unpack_grad_slice(grads.data(), layout, C, gv + b * gvs[0] + h * gvs[2], gvs);
      }
    }
  });
}

}  // namespace

std::vector<int64_t> ms_deform_attn_output_shape(const std::vector<int64_t>& value_shape,
                                                 const std::vector<int64_t>& sampling_locations_shape) {
  check_rank(kForward, "value", value_shape, 4);
  check_rank(kForward, "sampling_locations", sampling_locations_shape, 6);
  return {value_shape[0], sampling_locations_shape[1], detail::checked_mul(kForward, value_shape[2], value_shape[3])};
}

void ms_deform_attn(const TensorView& value, const TensorView& spatial_shapes, const TensorView& level_start_index,
                    const TensorView& sampling_locations, const TensorView& attention_weights,
                    const TensorView& output) {
  dispatch_floating(value.dtype(), kForward, "value", [&](auto tag) {
    using T = decltype(tag);
    const Problem pb =
        validate(kForward, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
    detail::check_shape(kForward, "output", output,
                        ms_deform_attn_output_shape(value.sizes(), sampling_locations.sizes()));
    detail::check_same_dtype(kForward, "output", output, "value", value);
    if (output.is_empty()) return;
    if (nothing_sampled(pb)) return fill_zeros(output);
    if constexpr (detail::kIsHalfType<T>) {
      // value rows are widened as the kernel packs them, output rows narrowed as it writes them; the
      // locations and weights, read one at a time, are staged in float32 (detail/float_staging.h).
      using detail::FloatStaging;
      const auto staged_locations = FloatStaging::copy_of(sampling_locations);
      const auto staged_weights = FloatStaging::copy_of(attention_weights);
      forward_kernel<T, float>(pb, value, staged_locations.view(), staged_weights.view(), output);
    } else {
      forward_kernel<T, T>(pb, value, sampling_locations, attention_weights, output);
    }
  });
}

namespace {

// The backward's checks beyond validate(): grad_output and the three gradients.
Problem validate_backward(const TensorView& value, const TensorView& spatial_shapes,
                          const TensorView& level_start_index, const TensorView& sampling_locations,
                          const TensorView& attention_weights, const TensorView& grad_output,
                          const TensorView& grad_value, const TensorView& grad_sampling_locations,
                          const TensorView& grad_attention_weights) {
  Problem pb = validate(kBackward, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
  detail::check_dim(kBackward, "grad_output", grad_output, 3);
  const std::vector<int64_t> out_shape{pb.batch, pb.queries, detail::checked_mul(kBackward, pb.heads, pb.channels)};
  SG_CHECK(grad_output.sizes() == out_shape, kBackward,
           "(): expected grad_output of shape (bs, Q, nH*C) = ", format_list(out_shape), ", but got ",
           grad_output.shape_string());
  detail::check_same_dtype(kBackward, "grad_output", grad_output, "value", value);
  detail::check_shape(kBackward, "grad_value", grad_value, value.sizes());
  detail::check_shape(kBackward, "grad_sampling_locations", grad_sampling_locations, sampling_locations.sizes());
  detail::check_shape(kBackward, "grad_attention_weights", grad_attention_weights, attention_weights.sizes());
  detail::check_same_dtype(kBackward, "grad_value", grad_value, "value", value);
  detail::check_same_dtype(kBackward, "grad_sampling_locations", grad_sampling_locations, "value", value);
  detail::check_same_dtype(kBackward, "grad_attention_weights", grad_attention_weights, "value", value);
  return pb;
}

}  // namespace

void check_ms_deform_attn_backward(const TensorView& value, const TensorView& spatial_shapes,
                                   const TensorView& level_start_index, const TensorView& sampling_locations,
                                   const TensorView& attention_weights, const TensorView& grad_output,
                                   const TensorView& grad_value, const TensorView& grad_sampling_locations,
                                   const TensorView& grad_attention_weights) {
  dispatch_floating(value.dtype(), kBackward, "value", [](auto) {});
  validate_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_output,
                    grad_value, grad_sampling_locations, grad_attention_weights);
}

void ms_deform_attn_backward(const TensorView& value, const TensorView& spatial_shapes,
                             const TensorView& level_start_index, const TensorView& sampling_locations,
                             const TensorView& attention_weights, const TensorView& grad_output,
                             const TensorView& grad_value, const TensorView& grad_sampling_locations,
                             const TensorView& grad_attention_weights) {
  dispatch_floating(value.dtype(), kBackward, "value", [&](auto tag) {
    using T = decltype(tag);
    const Problem pb =
        validate_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_output,
                          grad_value, grad_sampling_locations, grad_attention_weights);
    if (pb.batch == 0 || pb.heads == 0) return;  // every output is empty
    if (nothing_sampled(pb)) {
      fill_zeros(grad_value);
      fill_zeros(grad_sampling_locations);
      fill_zeros(grad_attention_weights);
      return;
    }
    if constexpr (detail::kIsHalfType<T>) {
      // As in the forward: value, grad_output and grad_value rows converted as the kernel packs and
      // writes them, the points and their gradients staged in float32 (detail/float_staging.h).
      using detail::FloatStaging;
      const auto staged_locations = FloatStaging::copy_of(sampling_locations);
      const auto staged_weights = FloatStaging::copy_of(attention_weights);
      const auto staged_grad_locations = FloatStaging::like(grad_sampling_locations);
      const auto staged_grad_weights = FloatStaging::like(grad_attention_weights);
      backward_kernel<T, float>(pb, value, staged_locations.view(), staged_weights.view(), grad_output, grad_value,
                                staged_grad_locations.view(), staged_grad_weights.view());
      staged_grad_locations.narrow_into(grad_sampling_locations);
      staged_grad_weights.narrow_into(grad_attention_weights);
    } else {
      backward_kernel<T, T>(pb, value, sampling_locations, attention_weights, grad_output, grad_value,
                            grad_sampling_locations, grad_attention_weights);
    }
  });
}

namespace detail {

DeformProblem validate_deform_attn(const char* op, const TensorView& value, const TensorView& spatial_shapes,
                                   const TensorView& level_start_index, const TensorView& sampling_locations,
                                   const TensorView& attention_weights) {
  return validate(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
}

}  // namespace detail

}  // namespace spatialgrad

#include "spatialgrad/ms_deform_attn.h"

#include <algorithm>
#include <vector>

#include "detail/checks.h"
#include "detail/ms_deform_attn.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "ms_deform_attn";
constexpr const char* kBackward = "ms_deform_attn_backward";
// Rough element-operations per parallel task below which splitting costs more than it saves.
constexpr int64_t kMinWorkPerTask = 1 << 15;
// Forward tasks cover this many queries of one (batch, head) pair.
constexpr int64_t kQueryBlock = 64;
// Channel reductions keep this many independent partial sums (vectorisable, fixed order).
constexpr int64_t kLanes = 8;

// Items per parallel task for items of the given cost (in double: huge problems must not overflow).
int64_t grain_for(double work_per_item) {
  return static_cast<int64_t>(std::min(static_cast<double>(kMinWorkPerTask), kMinWorkPerTask / work_per_item)) + 1;
}

using detail::DeformLevel;
using detail::DeformSample;

struct Problem {
  int64_t batch, spatial, heads, channels, queries, levels, points;
  std::vector<DeformLevel> level_table;
};

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

// Validates the inputs both directions share (SPEC §5 plus what the NPU leaves unchecked) and
// reads the level table.
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
  SG_CHECK(sampling_locations.sizes() == loc_shape, op, "(): expected sampling_locations of shape (bs, Q, nH, L, P, 2) = ",
           format_list(loc_shape), " (bs, nH from value, L from spatial_shapes), but got ",
           sampling_locations.shape_string());
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

// Strided views flattened into the index arithmetic the kernels need.
struct Strides {
  int64_t v[4], loc[6], attn[5];
  Strides(const TensorView& value, const TensorView& loc_view, const TensorView& attn_view) {
    for (int d = 0; d < 4; ++d) v[d] = value.stride(d);
    for (int d = 0; d < 6; ++d) loc[d] = loc_view.stride(d);
    for (int d = 0; d < 5; ++d) attn[d] = attn_view.stride(d);
  }
};

// Copies value[b, :, h, :] into rows [0, S) of `rows` (S x C, contiguous, accumulation type). The
// rows after them are left alone: the kernels keep them zero and point absent corners there, so the
// channel loops need no bounds checks and read unit-stride memory whatever the layout of value.
template <class T, class Acc>
void pack_value_slice(const TensorView& value, const Strides& st, int64_t b, int64_t h, int64_t spatial,
                      int64_t channels, Acc* rows) {
  const T* src = value.data<T>() + b * st.v[0] + h * st.v[2];
  for (int64_t s = 0; s < spatial; ++s) {
    const T* row = src + s * st.v[1];
    Acc* dst = rows + s * channels;
    for (int64_t c = 0; c < channels; ++c) dst[c] = load_as<Acc>(row[c * st.v[3]]);
  }
}

// Copies grad_output[b, q, h*C + c] for all q, c into `rows` (Q x C, contiguous).
template <class T, class Acc>
void pack_grad_output_slice(const TensorView& grad_output, int64_t b, int64_t h, int64_t queries, int64_t channels,
                            Acc* rows) {
  const int64_t s1 = grad_output.stride(1), s2 = grad_output.stride(2);
  const T* src = grad_output.data<T>() + b * grad_output.stride(0) + h * channels * s2;
  for (int64_t q = 0; q < queries; ++q) {
    for (int64_t c = 0; c < channels; ++c) rows[q * channels + c] = load_as<Acc>(src[q * s1 + c * s2]);
  }
}

// sum += w0 v0 + w1 v1 + w2 v2 + w3 v3 over the channels (a function so that __restrict holds).
template <class Acc>
inline void forward_channels(int64_t channels, const Acc* __restrict v0, const Acc* __restrict v1,
                             const Acc* __restrict v2, const Acc* __restrict v3, Acc w0, Acc w1, Acc w2, Acc w3,
                             Acc* __restrict sum) {
  for (int64_t c = 0; c < channels; ++c) sum[c] += w0 * v0[c] + w1 * v1[c] + w2 * v2[c] + w3 * v3[c];
}

template <class T>
void forward_kernel(const Problem& pb, const TensorView& value, const TensorView& loc_view,
                    const TensorView& attn_view, const TensorView& output) {
  using Acc = AccType<T>;
  const int64_t C = pb.channels, S = pb.spatial, Q = pb.queries, L = pb.levels, P = pb.points;
  const Strides st(value, loc_view, attn_view);
  const T* loc = loc_view.data<T>();
  const T* attn = attn_view.data<T>();
  T* out = output.data<T>();
  const int64_t os0 = output.stride(0), os1 = output.stride(1), os2 = output.stride(2);
  const int64_t blocks = (Q + kQueryBlock - 1) / kQueryBlock;
  // Items are (b, h, query block), so the items of one thread share a packed value slice.
  const int64_t items = pb.batch * pb.heads * blocks;
  const double work_per_item = static_cast<double>(std::min(Q, kQueryBlock)) * L * P * (4 * C + 16) + 1;
  parallel_for(0, items, grain_for(work_per_item), [&](int64_t lo, int64_t hi) {
    std::vector<Acc> rows(static_cast<size_t>((S + 1) * C), Acc(0));  // row S stays zero
    std::vector<Acc> acc(static_cast<size_t>(std::min(Q, kQueryBlock) * C));  // the block's output rows
    const Acc* zero_row = rows.data() + S * C;
    int64_t packed = -1;  // the (b, h) pair in `rows`
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t pair = item / blocks, block = item % blocks;
      const int64_t b = pair / pb.heads, h = pair % pb.heads;
      if (pair != packed) {
        pack_value_slice<T>(value, st, b, h, S, C, rows.data());
        packed = pair;
      }
      const int64_t q_begin = block * kQueryBlock, q_end = std::min(Q, q_begin + kQueryBlock);
      std::fill(acc.begin(), acc.end(), Acc(0));
      // Level by level over the block's queries: each output row still sums its points in (l, p) order.
      for (int64_t l = 0; l < L; ++l) {
        const DeformLevel& level = pb.level_table[static_cast<size_t>(l)];
        const Acc* level_rows = rows.data() + level.start * C;
        for (int64_t q = q_begin; q < q_end; ++q) {
          Acc* __restrict sum = acc.data() + (q - q_begin) * C;
          const int64_t loc_bqh = b * st.loc[0] + q * st.loc[1] + h * st.loc[2] + l * st.loc[3];
          const int64_t attn_bqh = b * st.attn[0] + q * st.attn[1] + h * st.attn[2] + l * st.attn[3];
          if (q + 1 < q_end && P > 0) {  // the next query's points sit a whole (nH, L, P) block away
            __builtin_prefetch(loc + loc_bqh + st.loc[1]);
            __builtin_prefetch(loc + loc_bqh + st.loc[1] + (P - 1) * st.loc[4] + st.loc[5]);
            __builtin_prefetch(attn + attn_bqh + st.attn[1]);
          }
          for (int64_t p = 0; p < P; ++p) {
            const T* xy = loc + loc_bqh + p * st.loc[4];
            DeformSample<Acc> s;
            if (!detail::locate_deform_sample(load_as<Acc>(xy[0]), load_as<Acc>(xy[st.loc[5]]), level.height,
                                              level.width, s)) {
              continue;
            }
            const Acc a = load_as<Acc>(attn[attn_bqh + p * st.attn[4]]);
            const Acc* __restrict v0 = s.pixel[0] >= 0 ? level_rows + s.pixel[0] * C : zero_row;
            const Acc* __restrict v1 = s.pixel[1] >= 0 ? level_rows + s.pixel[1] * C : zero_row;
            const Acc* __restrict v2 = s.pixel[2] >= 0 ? level_rows + s.pixel[2] * C : zero_row;
            const Acc* __restrict v3 = s.pixel[3] >= 0 ? level_rows + s.pixel[3] * C : zero_row;
            const Acc w0 = a * s.weight[0], w1 = a * s.weight[1], w2 = a * s.weight[2], w3 = a * s.weight[3];
            forward_channels(C, v0, v1, v2, v3, w0, w1, w2, w3, sum);
          }
        }
      }
      for (int64_t q = q_begin; q < q_end; ++q) {
        T* dst = out + b * os0 + q * os1 + h * C * os2;
        const Acc* src = acc.data() + (q - q_begin) * C;
        for (int64_t c = 0; c < C; ++c) dst[c * os2] = store_as<T>(src[c]);
      }
    }
  });
}

template <class Acc>
Acc sum_lanes(const Acc (&part)[kLanes]) {
  static_assert(kLanes == 8, "fixed pairwise order below");
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// The channel pass of one sampling point. Every gradient but grad_value is linear in the corner
// values, so those are combinations of the four dot products dots[i] = <g, v_i>; the same pass adds
// aw_i * g to the four grad_value rows d_i. A separate function so that __restrict holds (no
// run-time alias checks); kLanes partial sums per dot keep the loop vectorised and its order fixed.
template <class Acc>
inline void backward_channels(int64_t channels, const Acc* __restrict g, const Acc* __restrict v0,
                              const Acc* __restrict v1, const Acc* __restrict v2, const Acc* __restrict v3, Acc aw0,
                              Acc aw1, Acc aw2, Acc aw3, Acc* __restrict d0, Acc* __restrict d1, Acc* __restrict d2,
                              Acc* __restrict d3, Acc (&dots)[4]) {
  Acc p0[kLanes] = {}, p1[kLanes] = {}, p2[kLanes] = {}, p3[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= channels; c += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const Acc gc = g[c + lane];
      p0[lane] += gc * v0[c + lane];
      p1[lane] += gc * v1[c + lane];
      p2[lane] += gc * v2[c + lane];
      p3[lane] += gc * v3[c + lane];
      d0[c + lane] += aw0 * gc;
      d1[c + lane] += aw1 * gc;
      d2[c + lane] += aw2 * gc;
      d3[c + lane] += aw3 * gc;
    }
  }
  for (int64_t lane = 0; c < channels; ++c, ++lane) {
    const Acc gc = g[c];
    p0[lane] += gc * v0[c];
    p1[lane] += gc * v1[c];
    p2[lane] += gc * v2[c];
    p3[lane] += gc * v3[c];
    d0[c] += aw0 * gc;
    d1[c] += aw1 * gc;
    d2[c] += aw2 * gc;
    d3[c] += aw3 * gc;
  }
  dots[0] = sum_lanes(p0);
  dots[1] = sum_lanes(p1);
  dots[2] = sum_lanes(p2);
  dots[3] = sum_lanes(p3);
}

// One task per (b, h): it owns grad_value[b, :, h, :] (accumulated in a private buffer, written
// once at the end) and the location and weight gradients of that pair, and walks the levels,
// queries and points in a fixed order, so no atomics are needed and any thread count gives the same bits.
template <class T>
void backward_kernel(const Problem& pb, const TensorView& value, const TensorView& loc_view,
                     const TensorView& attn_view, const TensorView& grad_output, const TensorView& grad_value,
                     const TensorView& grad_loc, const TensorView& grad_attn) {
  using Acc = AccType<T>;
  const int64_t C = pb.channels, S = pb.spatial, Q = pb.queries, L = pb.levels, P = pb.points;
  const Strides st(value, loc_view, attn_view);
  const T* loc = loc_view.data<T>();
  const T* attn = attn_view.data<T>();
  T* gv = grad_value.data<T>();
  T* gl = grad_loc.data<T>();
  T* ga = grad_attn.data<T>();
  int64_t gvs[4], gls[6], gas[5];
  for (int d = 0; d < 4; ++d) gvs[d] = grad_value.stride(d);
  for (int d = 0; d < 6; ++d) gls[d] = grad_loc.stride(d);
  for (int d = 0; d < 5; ++d) gas[d] = grad_attn.stride(d);
  const double work_per_item = static_cast<double>(Q) * L * P * (12 * C + 32) + 3.0 * S * C + 1;
  parallel_for(0, pb.batch * pb.heads, grain_for(work_per_item), [&](int64_t lo, int64_t hi) {
    // value rows with one zero row after them; grad rows with four scratch rows after them, one per
    // corner, that absent corners write to (distinct, so the corner pointers never alias).
    std::vector<Acc> rows(static_cast<size_t>((S + 1) * C), Acc(0));
    std::vector<Acc> grad_rows(static_cast<size_t>((S + 4) * C));
    std::vector<Acc> g(static_cast<size_t>(Q * C));  // grad_output[b, :, h, :]
    const Acc* zero_row = rows.data() + S * C;
    for (int64_t pair = lo; pair < hi; ++pair) {
      const int64_t b = pair / pb.heads, h = pair % pb.heads;
      pack_value_slice<T>(value, st, b, h, S, C, rows.data());
      std::fill(grad_rows.begin(), grad_rows.end(), Acc(0));
      pack_grad_output_slice<T>(grad_output, b, h, Q, C, g.data());
      // Level by level, so the rows one pass touches are those of one level (less cache pressure);
      // each grad_value row still receives its updates in query-then-point order.
      for (int64_t l = 0; l < L; ++l) {
        const DeformLevel& level = pb.level_table[static_cast<size_t>(l)];
        const Acc* level_rows = rows.data() + level.start * C;
        Acc* level_grads = grad_rows.data() + level.start * C;
        for (int64_t q = 0; q < Q; ++q) {
          const Acc* __restrict gr = g.data() + q * C;
          const int64_t loc_bqh = b * st.loc[0] + q * st.loc[1] + h * st.loc[2] + l * st.loc[3];
          const int64_t attn_bqh = b * st.attn[0] + q * st.attn[1] + h * st.attn[2] + l * st.attn[3];
          const int64_t gl_bqh = b * gls[0] + q * gls[1] + h * gls[2] + l * gls[3];
          const int64_t ga_bqh = b * gas[0] + q * gas[1] + h * gas[2] + l * gas[3];
          if (q + 1 < Q && P > 0) {  // the next query's points sit a whole (nH, L, P) block away
            __builtin_prefetch(loc + loc_bqh + st.loc[1]);
            __builtin_prefetch(loc + loc_bqh + st.loc[1] + (P - 1) * st.loc[4] + st.loc[5]);
            __builtin_prefetch(attn + attn_bqh + st.attn[1]);
          }
          for (int64_t p = 0; p < P; ++p) {
            const T* xy = loc + loc_bqh + p * st.loc[4];
            T* gxy = gl + gl_bqh + p * gls[4];
            T* gw_out = ga + ga_bqh + p * gas[4];
            DeformSample<Acc> s;
            if (C == 0 || !detail::locate_deform_sample(load_as<Acc>(xy[0]), load_as<Acc>(xy[st.loc[5]]),
                                                        level.height, level.width, s)) {
              gxy[0] = store_as<T>(Acc(0));
              gxy[gls[5]] = store_as<T>(Acc(0));
              *gw_out = store_as<T>(Acc(0));
              continue;
            }
            const Acc a = load_as<Acc>(attn[attn_bqh + p * st.attn[4]]);
            const Acc* __restrict v0 = s.pixel[0] >= 0 ? level_rows + s.pixel[0] * C : zero_row;
            const Acc* __restrict v1 = s.pixel[1] >= 0 ? level_rows + s.pixel[1] * C : zero_row;
            const Acc* __restrict v2 = s.pixel[2] >= 0 ? level_rows + s.pixel[2] * C : zero_row;
            const Acc* __restrict v3 = s.pixel[3] >= 0 ? level_rows + s.pixel[3] * C : zero_row;
            Acc* scratch = grad_rows.data() + S * C;
            Acc* __restrict d0 = s.pixel[0] >= 0 ? level_grads + s.pixel[0] * C : scratch;
            Acc* __restrict d1 = s.pixel[1] >= 0 ? level_grads + s.pixel[1] * C : scratch + C;
            Acc* __restrict d2 = s.pixel[2] >= 0 ? level_grads + s.pixel[2] * C : scratch + 2 * C;
            Acc* __restrict d3 = s.pixel[3] >= 0 ? level_grads + s.pixel[3] * C : scratch + 3 * C;
            const Acc aw0 = a * s.weight[0], aw1 = a * s.weight[1], aw2 = a * s.weight[2], aw3 = a * s.weight[3];
            Acc dots[4];
            backward_channels(C, gr, v0, v1, v2, v3, aw0, aw1, aw2, aw3, d0, d1, d2, d3, dots);
            const Acc g0 = dots[0], g1 = dots[1], g2 = dots[2], g3 = dots[3];
            // SPEC: sum_c tg * (w1 v1 + ... + w4 v4); gw = -hh v1 + hh v2 - lh v3 + lh v4; gh = -hw v1 - lw v2 + hw v3 + lw v4.
            *gw_out = store_as<T>(s.weight[0] * g0 + s.weight[1] * g1 + s.weight[2] * g2 + s.weight[3] * g3);
            gxy[0] = store_as<T>(static_cast<Acc>(level.width) * a * (s.hh * (g1 - g0) + s.lh * (g3 - g2)));
            gxy[gls[5]] = store_as<T>(static_cast<Acc>(level.height) * a * (s.hw * (g2 - g0) + s.lw * (g3 - g1)));
          }
        }
      }
      T* gv_slice = gv + b * gvs[0] + h * gvs[2];
      for (int64_t s = 0; s < S; ++s) {
        T* dst = gv_slice + s * gvs[1];
        const Acc* src = grad_rows.data() + s * C;
        for (int64_t c = 0; c < C; ++c) dst[c * gvs[3]] = store_as<T>(src[c]);
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
    const Problem pb = validate(kForward, value, spatial_shapes, level_start_index, sampling_locations,
                                attention_weights);
    detail::check_shape(kForward, "output", output, ms_deform_attn_output_shape(value.sizes(), sampling_locations.sizes()));
    detail::check_same_dtype(kForward, "output", output, "value", value);
    if (output.is_empty()) return;
    forward_kernel<T>(pb, value, sampling_locations, attention_weights, output);
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
  SG_CHECK(grad_output.sizes() == out_shape, kBackward, "(): expected grad_output of shape (bs, Q, nH*C) = ",
           format_list(out_shape), ", but got ", grad_output.shape_string());
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
    const Problem pb = validate_backward(value, spatial_shapes, level_start_index, sampling_locations,
                                         attention_weights, grad_output, grad_value, grad_sampling_locations,
                                         grad_attention_weights);
    if (pb.batch == 0 || pb.heads == 0) return;  // every output is empty
    backward_kernel<T>(pb, value, sampling_locations, attention_weights, grad_output, grad_value,
                       grad_sampling_locations, grad_attention_weights);
  });
}

}  // namespace spatialgrad

// Second derivatives of multi-scale deformable attention (the vjp of ms_deform_attn_backward).
//
// For one sampling point with attention weight A, location (x, y) and corner weights w_k (k = 0..3,
// zero-padded corners dropped), let a_k = d w_k / d(x, y) and hxy_k = d^2 w_k / dx dy (the bilinear
// weights are linear in x and in y, so d^2/dx^2 = d^2/dy^2 = 0). The first-order backward is
//   grad_value[corner k, c] += go[c] A w_k,   grad_loc = A sum_c go[c] sum_k a_k v_k[c],
//   grad_attn = sum_c go[c] sum_k w_k v_k[c].
// With cotangents U (of grad_value), V (of grad_loc, at the point) and Wt (of grad_attn, at the point):
//   d_grad_output[c] += A sum_k (w_k U_k[c] + (V . a_k) v_k[c]) + Wt sum_k w_k v_k[c]
//   d_value[corner k, c] += go[c] (A (V . a_k) + Wt w_k)
//   d_attn = sum_c go[c] sum_k (w_k U_k[c] + (V . a_k) v_k[c])
//   d_loc  = sum_c go[c] sum_k (A a_k U_k[c] + A hxy_k (V_y, V_x) v_k[c] + Wt a_k v_k[c]).
//
// A task owns one (batch, head) pair: the value rows of that pair and every point and output row of it,
// so the tasks write disjoint memory, each in one fixed order (deterministic for any thread count, no
// atomics). Float32 and half precision accumulate in float32, float64 in float64.
#include <algorithm>
#include <vector>

#include "detail/checks.h"
#include "detail/entry.h"
#include "detail/ms_deform_attn.h"
#include "detail/parallel_for.h"
#include "spatialgrad/ms_deform_attn.h"

namespace spatialgrad {
namespace {

constexpr const char* kOp = "ms_deform_attn_double_backward";

using detail::DeformLevel;
using detail::DeformPoint;
using detail::DeformProblem;
using detail::is_absent;

// A strided view as base pointer plus strides (null base for an absent cotangent).
template <class T, int D>
struct Strided {
  T* data = nullptr;
  int64_t s[D] = {};
  Strided() = default;
  explicit Strided(const TensorView& t) {
    if (is_absent(t)) return;
    data = t.data<T>();
    for (int d = 0; d < D; ++d) s[d] = t.stride(d);
  }
  explicit operator bool() const { return data != nullptr; }
};

template <class T>
struct Problem {
  using Acc = AccType<T>;
  DeformProblem shape;
  Strided<const T, 4> value, gg_value;
  Strided<const T, 6> loc, gg_loc;
  Strided<const T, 5> attn, gg_attn;
  Strided<const T, 3> grad_output;
  Strided<T, 4> d_value;
  Strided<T, 6> d_loc;
  Strided<T, 5> d_attn;
  Strided<T, 3> d_grad_output;
};

// The corners of a located point that lie inside its level: value row, weight, d weight / d(x, y) and
// d^2 weight / dx dy.
template <class Acc>
struct Corners {
  int count = 0;
  int64_t row[4];
  Acc w[4], ax[4], ay[4], hxy[4];
};

template <class Acc>
Corners<Acc> corners_of(const DeformPoint<Acc>& pt, const DeformLevel& level) {
  const Acc sx = static_cast<Acc>(level.width), sy = static_cast<Acc>(level.height);
  // d w / d lw and d w / d lh for the corners (hl, wl), (hl, wl+1), (hl+1, wl), (hl+1, wl+1).
  const Acc dw_dlw[4] = {-pt.hh, pt.hh, -pt.lh, pt.lh};
  const Acc dw_dlh[4] = {-pt.hw, -pt.lw, pt.hw, pt.lw};
  const Acc d2w[4] = {1, -1, -1, 1};
  Corners<Acc> out;
  for (int k = 0; k < 4; ++k) {
    const int64_t r = pt.hl + k / 2, c = pt.wl + k % 2;
    if (r < 0 || r >= level.height || c < 0 || c >= level.width) continue;
    const int i = out.count++;
    out.row[i] = level.start + r * level.width + c;
    out.w[i] = pt.weight[k];
    out.ax[i] = dw_dlw[k] * sx;
    out.ay[i] = dw_dlh[k] * sy;
    out.hxy[i] = d2w[k] * sx * sy;
  }
  return out;
}

// Channel loops over one corner's row (C entries, `stride` apart; unit stride is the common layout and
// gets its own loop so that it vectorises).
// kLanes independent partial sums (a fixed order the compiler may vectorise), added up at the end.
template <class T, class Acc>
Acc dot_row(const Acc* go, const T* row, int64_t stride, int64_t C) {
  constexpr int64_t kLanes = 8;
  Acc lanes[kLanes] = {};
  int64_t c = 0;
  if (stride == 1) {
    for (; c + kLanes <= C; c += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] += go[c + j] * load_as<Acc>(row[c + j]);
  }
  Acc sum = 0;
  for (; c < C; ++c) sum += go[c] * load_as<Acc>(row[c * stride]);
  for (int64_t j = 0; j < kLanes; ++j) sum += lanes[j];
  return sum;
}

template <class T, class Acc>
void add_scaled_row(Acc* acc, Acc scale, const T* row, int64_t stride, int64_t C) {
  if (stride == 1) {
    for (int64_t c = 0; c < C; ++c) acc[c] += scale * load_as<Acc>(row[c]);
  } else {
    for (int64_t c = 0; c < C; ++c) acc[c] += scale * load_as<Acc>(row[c * stride]);
  }
}

template <class T, class Acc>
void add_scaled_into_row(T* row, int64_t stride, Acc scale, const Acc* go, int64_t C) {
  if (stride == 1) {
    for (int64_t c = 0; c < C; ++c) row[c] = store_as<T>(load_as<Acc>(row[c]) + scale * go[c]);
  } else {
    for (int64_t c = 0; c < C; ++c) row[c * stride] = store_as<T>(load_as<Acc>(row[c * stride]) + scale * go[c]);
  }
}

// The point's values at (b, q, h, l, p): x, y of a location-shaped view, or the weight-shaped entry.
template <class T, int D>
const T* point_entry(const Strided<const T, D>& t, int64_t b, int64_t q, int64_t h, int64_t l, int64_t p) {
  return t.data + b * t.s[0] + q * t.s[1] + h * t.s[2] + l * t.s[3] + p * t.s[4];
}

// One point of pair (b, h): adds its terms to d_go (C entries) and d_value, writes d_loc and d_attn.
// Per corner k, with cU = A w_k and cV = A (V . a_k) + Wt w_k (the corner's d_value coefficient):
//   d_go += cU U_k + cV v_k,  d_value_k += cV go,
//   d_attn += w_k (go . U_k) + (V . a_k) (go . v_k),
//   d_loc  += A a_k (go . U_k) + (A hxy_k (V_y, V_x) + Wt a_k) (go . v_k).
template <class T>
void point_terms(const Problem<T>& pb, int64_t b, int64_t q, int64_t h, int64_t l, int64_t p, const AccType<T>* go,
                 AccType<T>* d_go) {
  using Acc = AccType<T>;
  const int64_t C = pb.shape.channels;
  const T* xy = point_entry(pb.loc, b, q, h, l, p);
  const Acc A = load_as<Acc>(*point_entry(pb.attn, b, q, h, l, p));
  Acc vx = 0, vy = 0, wt = 0;
  if (pb.gg_loc) {
    const T* v = point_entry(pb.gg_loc, b, q, h, l, p);
    vx = load_as<Acc>(v[0]);
    vy = load_as<Acc>(v[pb.gg_loc.s[5]]);
  }
  if (pb.gg_attn) wt = load_as<Acc>(*point_entry(pb.gg_attn, b, q, h, l, p));
  Acc sum_x = 0, sum_y = 0, sum_attn = 0;
  const DeformLevel& level = pb.shape.level_table[static_cast<size_t>(l)];
  DeformPoint<Acc> pt;
  if (detail::locate_deform_point(load_as<Acc>(xy[0]), load_as<Acc>(xy[pb.loc.s[5]]), level.height, level.width, pt)) {
    const Corners<Acc> k4 = corners_of(pt, level);
    for (int k = 0; k < k4.count; ++k) {
      const Acc cv = vx * k4.ax[k] + vy * k4.ay[k];
      const Acc cU = A * k4.w[k], cV = A * cv + wt * k4.w[k];
      const T* v_row = pb.value.data + b * pb.value.s[0] + h * pb.value.s[2] + k4.row[k] * pb.value.s[1];
      const Acc go_v = dot_row(go, v_row, pb.value.s[3], C);
      add_scaled_row(d_go, cV, v_row, pb.value.s[3], C);
      Acc go_u = 0;
      if (pb.gg_value) {
        const T* u_row = pb.gg_value.data + b * pb.gg_value.s[0] + h * pb.gg_value.s[2] + k4.row[k] * pb.gg_value.s[1];
        go_u = dot_row(go, u_row, pb.gg_value.s[3], C);
        add_scaled_row(d_go, cU, u_row, pb.gg_value.s[3], C);
      }
      T* d_row = pb.d_value.data + b * pb.d_value.s[0] + h * pb.d_value.s[2] + k4.row[k] * pb.d_value.s[1];
      add_scaled_into_row(d_row, pb.d_value.s[3], cV, go, C);
      sum_attn += k4.w[k] * go_u + cv * go_v;
      sum_x += A * k4.ax[k] * go_u + (A * k4.hxy[k] * vy + wt * k4.ax[k]) * go_v;
      sum_y += A * k4.ay[k] * go_u + (A * k4.hxy[k] * vx + wt * k4.ay[k]) * go_v;
    }
  }
  const int64_t dl = b * pb.d_loc.s[0] + q * pb.d_loc.s[1] + h * pb.d_loc.s[2] + l * pb.d_loc.s[3] + p * pb.d_loc.s[4];
  pb.d_loc.data[dl] = store_as<T>(sum_x);
  pb.d_loc.data[dl + pb.d_loc.s[5]] = store_as<T>(sum_y);
  pb.d_attn
      .data[b * pb.d_attn.s[0] + q * pb.d_attn.s[1] + h * pb.d_attn.s[2] + l * pb.d_attn.s[3] + p * pb.d_attn.s[4]] =
      store_as<T>(sum_attn);
}

// Everything pair (b, h) owns: its d_value rows (zeroed first), then query after query its points and
// its d_grad_output row.
template <class T>
void pair_task(const Problem<T>& pb, int64_t b, int64_t h, std::vector<AccType<T>>& scratch) {
  using Acc = AccType<T>;
  const DeformProblem& sh = pb.shape;
  const int64_t C = sh.channels;
  for (int64_t s = 0; s < sh.spatial; ++s)
    for (int64_t c = 0; c < C; ++c)
      pb.d_value.data[b * pb.d_value.s[0] + s * pb.d_value.s[1] + h * pb.d_value.s[2] + c * pb.d_value.s[3]] =
          store_as<T>(Acc(0));
  Acc* go = scratch.data();
  Acc* d_go = go + C;
  for (int64_t q = 0; q < sh.queries; ++q) {
    const int64_t row = b * pb.grad_output.s[0] + q * pb.grad_output.s[1] + h * C * pb.grad_output.s[2];
    for (int64_t c = 0; c < C; ++c) {
      go[c] = load_as<Acc>(pb.grad_output.data[row + c * pb.grad_output.s[2]]);
      d_go[c] = 0;
    }
    for (int64_t l = 0; l < sh.levels; ++l)
      for (int64_t p = 0; p < sh.points; ++p) point_terms(pb, b, q, h, l, p, go, d_go);
    const int64_t out = b * pb.d_grad_output.s[0] + q * pb.d_grad_output.s[1] + h * C * pb.d_grad_output.s[2];
    for (int64_t c = 0; c < C; ++c) pb.d_grad_output.data[out + c * pb.d_grad_output.s[2]] = store_as<T>(d_go[c]);
  }
}

template <class T>
void run(const Problem<T>& pb) {
  const DeformProblem& sh = pb.shape;
  const double work = 1.0 + static_cast<double>(sh.spatial) * sh.channels +
                      static_cast<double>(sh.queries) * sh.levels * sh.points * (sh.channels + 1) * 40;
  const int64_t grain = grain_for(work);
  parallel_chunks(0, sh.batch * sh.heads, grain, 0, [&](ChunkQueue& queue) {
    std::vector<AccType<T>> scratch(static_cast<size_t>(2 * sh.channels));  // outside any kernel
    for (int64_t lo, hi; queue.next(lo, hi);)
      for (int64_t i = lo; i < hi; ++i) pair_task(pb, i / sh.heads, i % sh.heads, scratch);
  });
}

DeformProblem check_arguments(const TensorView& value, const TensorView& spatial_shapes,
                              const TensorView& level_start_index, const TensorView& loc, const TensorView& attn,
                              const TensorView& grad_output, const TensorView& gg_value, const TensorView& gg_loc,
                              const TensorView& gg_attn, const TensorView& d_value, const TensorView& d_loc,
                              const TensorView& d_attn, const TensorView& d_grad_output) {
  detail::check_floating(kOp, "value", value.dtype());
  DeformProblem pb = detail::validate_deform_attn(kOp, value, spatial_shapes, level_start_index, loc, attn);
  const std::vector<int64_t> out_shape{pb.batch, pb.queries, detail::checked_mul(kOp, pb.heads, pb.channels)};
  const struct {
    const TensorView& t;
    const char* name;
    const std::vector<int64_t>& shape;
    bool used;
  } operands[] = {{grad_output, "grad_output", out_shape, true},
                  {gg_value, "grad_grad_value", value.sizes(), !is_absent(gg_value)},
                  {gg_loc, "grad_grad_sampling_locations", loc.sizes(), !is_absent(gg_loc)},
                  {gg_attn, "grad_grad_attention_weights", attn.sizes(), !is_absent(gg_attn)},
                  {d_value, "d_value", value.sizes(), true},
                  {d_loc, "d_sampling_locations", loc.sizes(), true},
                  {d_attn, "d_attention_weights", attn.sizes(), true},
                  {d_grad_output, "d_grad_output", out_shape, true}};
  for (const auto& o : operands) {
    if (!o.used) continue;
    detail::check_shape(kOp, o.name, o.t, o.shape);
    detail::check_same_dtype(kOp, o.name, o.t, "value", value);
  }
  return pb;
}

// The validated operator in float32/float64 (half precision arrives here staged to float32).
template <typename T>
void run_validated(const DeformProblem& shape, const TensorView& value, const TensorView& loc, const TensorView& attn,
                   const TensorView& grad_output, const TensorView& gg_value, const TensorView& gg_loc,
                   const TensorView& gg_attn, const TensorView& d_value, const TensorView& d_loc,
                   const TensorView& d_attn, const TensorView& d_grad_output) {
  Problem<T> pb{shape,
                Strided<const T, 4>(value),
                Strided<const T, 4>(gg_value),
                Strided<const T, 6>(loc),
                Strided<const T, 6>(gg_loc),
                Strided<const T, 5>(attn),
                Strided<const T, 5>(gg_attn),
                Strided<const T, 3>(grad_output),
                Strided<T, 4>(d_value),
                Strided<T, 6>(d_loc),
                Strided<T, 5>(d_attn),
                Strided<T, 3>(d_grad_output)};
  run(pb);
}

}  // namespace

void ms_deform_attn_double_backward(const TensorView& value, const TensorView& spatial_shapes,
                                    const TensorView& level_start_index, const TensorView& sampling_locations,
                                    const TensorView& attention_weights, const TensorView& grad_output,
                                    const TensorView& grad_grad_value, const TensorView& grad_grad_sampling_locations,
                                    const TensorView& grad_grad_attention_weights, const TensorView& d_value,
                                    const TensorView& d_sampling_locations, const TensorView& d_attention_weights,
                                    const TensorView& d_grad_output) {
  const DeformProblem shape =
      check_arguments(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_output,
                      grad_grad_value, grad_grad_sampling_locations, grad_grad_attention_weights, d_value,
                      d_sampling_locations, d_attention_weights, d_grad_output);
  if (shape.batch == 0 || shape.heads == 0) return;  // every output is empty
  if (shape.queries == 0 || shape.levels == 0 || shape.points == 0 || shape.channels == 0) {
    // Empty sums: zeros, without forming pointers into empty (possibly null) tensors.
    for (const TensorView* t : {&d_value, &d_sampling_locations, &d_attention_weights, &d_grad_output}) fill_zeros(*t);
    return;
  }
  // float16/bfloat16: every operand widened once to float32, the float32 kernel, every output rounded once.
  detail::run_entry(kOp, "value", value.dtype(), [&](auto tag, auto& s) {
    using T = AccType<typename decltype(tag)::type>;
    run_validated<T>(shape, s.in(value), s.in(sampling_locations), s.in(attention_weights), s.in(grad_output),
                     s.in(grad_grad_value), s.in(grad_grad_sampling_locations), s.in(grad_grad_attention_weights),
                     s.out(d_value), s.out(d_sampling_locations), s.out(d_attention_weights), s.out(d_grad_output));
  });
}

}  // namespace spatialgrad

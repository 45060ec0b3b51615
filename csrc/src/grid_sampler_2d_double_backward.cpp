// Second derivatives of grid_sampler_2d (the vjp of grid_sampler_2d_backward).
//
// Every mode samples a point as a sum over taps k of w_k(grid) * input[tap k], with w_k a product of one
// weight per axis. With a_k = d w_k / d(gx, gy) and H_k its 2x2 Hessian, the first-order backward is
//   grad_input[c, tap k] += go[c, p] * w_k          grad_grid[p] = sum_c go[c, p] * sum_k a_k * x[c, tap k]
// so, for cotangents u (of grad_input) and v (of grad_grid, at point p),
//   d_grad_output[c, p] = sum_k w_k u[c, tap k] + (v . a_k) x[c, tap k]
//   d_input[c, tap k]  += go[c, p] * (v . a_k)
//   d_grid[p]           = sum_c go[c, p] * sum_k a_k u[c, tap k] + (H_k v) x[c, tap k].
// The padding maps are piecewise linear (their second derivative is zero); nearest has a = H = 0.
//
// Two passes, each writing disjoint outputs in one fixed order (deterministic for any thread count, no
// atomics): per grid point (d_grad_output and d_grid, channels inside) and per input plane (d_input,
// points inside). Float32 and half precision accumulate in float32, float64 in float64.
#include <algorithm>
#include <cmath>
#include <vector>

#include "detail/checks.h"
#include "detail/entry.h"
#include "detail/grid_sampler_2d_checks.h"
#include "detail/grid_sampler_2d_coords.h"
#include "detail/parallel_for.h"
#include "spatialgrad/grid_sampler_2d.h"

namespace spatialgrad {
namespace {

using detail::CoordGrad;
using detail::is_absent;

constexpr const char* kOp = "grid_sampler_2d_double_backward";

// ---- taps ------------------------------------------------------------------------------------------

// The taps of a point along one axis: the pixel, whether it is inside the image, and the axis weight
// with its first and second derivatives with respect to the (normalised) grid value.
template <class Acc>
struct AxisTaps {
  int count = 0;
  int64_t index[4];
  bool inside[4];
  Acc f[4], df[4], d2f[4];

  void add(Acc coordinate, int64_t size, Acc weight, Acc d1, Acc d2) {
    const bool in = detail::in_bounds(coordinate, size);  // false for NaN: never converted
    index[count] = in ? static_cast<int64_t>(coordinate) : 0;
    inside[count] = in;
    f[count] = weight;
    df[count] = d1;
    d2f[count] = d2;
    ++count;
  }
};

template <class Acc>
AxisTaps<Acc> bilinear_axis(Acc g, int64_t size, const GridSampler2dParams& p) {
  const CoordGrad<Acc> u = detail::source_coordinate(g, size, p.padding_mode, p.align_corners);
  const Acc base = std::floor(u.value), t = u.value - base;
  AxisTaps<Acc> axis;
  axis.add(base, size, 1 - t, -u.grad, Acc(0));
  axis.add(base + 1, size, t, u.grad, Acc(0));
  return axis;
}

template <class Acc>
AxisTaps<Acc> nearest_axis(Acc g, int64_t size, const GridSampler2dParams& p) {
  const Acc u = detail::source_coordinate(g, size, p.padding_mode, p.align_corners).value;
  AxisTaps<Acc> axis;
  axis.add(std::nearbyint(u), size, Acc(1), Acc(0), Acc(0));
  return axis;
}

// Bicubic taps floor(u) - 1 .. floor(u) + 2 (each padded on its own, as the first order does) with the
// cubic convolution weights of t = u - floor(u) and their t-derivatives times d u / d grid value.
template <class Acc>
AxisTaps<Acc> bicubic_axis(Acc g, int64_t size, const GridSampler2dParams& p) {
  const CoordGrad<Acc> u = detail::unnormalize(g, size, p.align_corners);
  const Acc base = std::floor(u.value), t = u.value - base, s = u.grad;
  constexpr Acc A = detail::Cubic<Acc>::A;
  // outer(d) = A d^3 - 5A d^2 + 8A d - 4A (1 < d < 2), inner(d) = (A+2) d^3 - (A+3) d^2 + 1 (d <= 1)
  const auto outer1 = [](Acc d) { return (3 * A * d - 10 * A) * d + 8 * A; };
  const auto outer2 = [](Acc d) { return 6 * A * d - 10 * A; };
  const auto inner1 = [](Acc d) { return (3 * (A + 2) * d - 2 * (A + 3)) * d; };
  const auto inner2 = [](Acc d) { return 6 * (A + 2) * d - 2 * (A + 3); };
  Acc w[4];
  detail::Cubic<Acc>::weights(t, w);
  // Distances to the taps: t + 1, t, 1 - t, 2 - t (the last two fall as t grows).
  const Acc d1[4] = {outer1(t + 1), inner1(t), -inner1(1 - t), -outer1(2 - t)};
  const Acc d2[4] = {outer2(t + 1), inner2(t), inner2(1 - t), outer2(2 - t)};
  AxisTaps<Acc> axis;
  for (int i = 0; i < 4; ++i) {
    const Acc tap = detail::apply_padding<Acc>(base + Acc(i - 1), size, p.padding_mode, p.align_corners).value;
    axis.add(tap, size, w[i], d1[i] * s, d2[i] * s * s);
  }
  return axis;
}

// The inside taps of one point: pixel (y, x), weight, gradient (ax, ay) and Hessian of the weight.
template <class Acc>
struct PointTaps {
  int count = 0;
  int64_t y[16], x[16];
  Acc w[16], ax[16], ay[16], hxx[16], hxy[16], hyy[16];
};

template <class Acc>
PointTaps<Acc> combine(const AxisTaps<Acc>& tx, const AxisTaps<Acc>& ty) {
  PointTaps<Acc> pt;
  for (int j = 0; j < ty.count; ++j) {
    for (int i = 0; i < tx.count; ++i) {
      if (!(tx.inside[i] && ty.inside[j])) continue;
      const int k = pt.count++;
      pt.y[k] = ty.index[j];
      pt.x[k] = tx.index[i];
      pt.w[k] = tx.f[i] * ty.f[j];
      pt.ax[k] = tx.df[i] * ty.f[j];
      pt.ay[k] = tx.f[i] * ty.df[j];
      pt.hxx[k] = tx.d2f[i] * ty.f[j];
      pt.hxy[k] = tx.df[i] * ty.df[j];
      pt.hyy[k] = tx.f[i] * ty.d2f[j];
    }
  }
  return pt;
}

// ---- views -----------------------------------------------------------------------------------------

// A 4-D strided view; data is null for an absent cotangent or an output that is not wanted.
template <class T>
struct View4 {
  T* data = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  explicit operator bool() const { return data != nullptr; }
  T* plane(int64_t n, int64_t c) const { return data + n * s0 + c * s1; }
};

template <class T>
View4<T> view4(const TensorView& t) {
  if (t.raw_data() == nullptr || t.dim() != 4) return {};
  return {t.data<T>(), t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

template <class T>
struct Problem {
  using Acc = AccType<T>;
  int64_t N, C, H, W, Ho, Wo;
  GridSampler2dParams params;
  View4<const T> gg_input, gg_grid, grad_output, input, grid;
  View4<T> d_grad_output, d_input, d_grid;

  PointTaps<Acc> taps_at(int64_t n, int64_t h, int64_t w) const {
    const T* g = grid.data + n * grid.s0 + h * grid.s1 + w * grid.s2;
    const Acc gx = load_as<Acc>(g[0]), gy = load_as<Acc>(g[grid.s3]);
    switch (params.interpolation_mode) {
      case GridSamplerInterpolation::kBilinear:
        return combine(bilinear_axis(gx, W, params), bilinear_axis(gy, H, params));
      case GridSamplerInterpolation::kNearest:
        return combine(nearest_axis(gx, W, params), nearest_axis(gy, H, params));
      case GridSamplerInterpolation::kBicubic:
        break;
    }
    return combine(bicubic_axis(gx, W, params), bicubic_axis(gy, H, params));
  }
  // The cotangent of grad_grid at a point (zero when absent).
  void grid_cotangent(int64_t n, int64_t h, int64_t w, Acc& vx, Acc& vy) const {
    vx = vy = 0;
    if (!gg_grid) return;
    const T* v = gg_grid.data + n * gg_grid.s0 + h * gg_grid.s1 + w * gg_grid.s2;
    vx = load_as<Acc>(v[0]);
    vy = load_as<Acc>(v[gg_grid.s3]);
  }
  int64_t taps_per_point() const {
    switch (params.interpolation_mode) {
      case GridSamplerInterpolation::kBilinear:
        return 4;
      case GridSamplerInterpolation::kNearest:
        return 1;
      case GridSamplerInterpolation::kBicubic:
        break;
    }
    return 16;
  }
};

// ---- pass 1: per grid point --------------------------------------------------------------------------

// d_grad_output[n, :, h, w] and d_grid[n, h, w] of one point, channel after channel.
template <class T>
void point_pass(const Problem<T>& pb, int64_t n, int64_t h, int64_t w) {
  using Acc = AccType<T>;
  const PointTaps<Acc> pt = pb.taps_at(n, h, w);
  Acc vx, vy;
  pb.grid_cotangent(n, h, w, vx, vy);
  Acc cv[16], hx[16], hy[16];  // v . a_k, and H_k v
  for (int k = 0; k < pt.count; ++k) {
    cv[k] = vx * pt.ax[k] + vy * pt.ay[k];
    hx[k] = pt.hxx[k] * vx + pt.hxy[k] * vy;
    hy[k] = pt.hxy[k] * vx + pt.hyy[k] * vy;
  }
  Acc sum_x = 0, sum_y = 0;
  for (int64_t c = 0; c < pb.C; ++c) {
    const T* x = pb.input.plane(n, c);
    const T* u = pb.gg_input ? pb.gg_input.plane(n, c) : nullptr;
    Acc d_go = 0, gx = 0, gy = 0;
    for (int k = 0; k < pt.count; ++k) {
      const Acc xv = load_as<Acc>(x[pt.y[k] * pb.input.s2 + pt.x[k] * pb.input.s3]);
      const Acc uv = u ? load_as<Acc>(u[pt.y[k] * pb.gg_input.s2 + pt.x[k] * pb.gg_input.s3]) : Acc(0);
      d_go += pt.w[k] * uv + cv[k] * xv;
      gx += pt.ax[k] * uv + hx[k] * xv;
      gy += pt.ay[k] * uv + hy[k] * xv;
    }
    if (pb.d_grad_output)
      pb.d_grad_output.plane(n, c)[h * pb.d_grad_output.s2 + w * pb.d_grad_output.s3] = store_as<T>(d_go);
    const Acc go = load_as<Acc>(pb.grad_output.plane(n, c)[h * pb.grad_output.s2 + w * pb.grad_output.s3]);
    sum_x += go * gx;
    sum_y += go * gy;
  }
  if (pb.d_grid) {
    T* out = pb.d_grid.data + n * pb.d_grid.s0 + h * pb.d_grid.s1 + w * pb.d_grid.s2;
    out[0] = store_as<T>(sum_x);
    out[pb.d_grid.s3] = store_as<T>(sum_y);
  }
}

template <class T>
void run_point_pass(const Problem<T>& pb) {
  const int64_t points = pb.Ho * pb.Wo;
  const int64_t work = std::max<int64_t>(1, pb.C * pb.taps_per_point() * 6);
  parallel_for(0, pb.N * points, grain_for(work), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) point_pass(pb, i / points, (i % points) / pb.Wo, i % pb.Wo);
  });
}

// ---- pass 2: per input plane -------------------------------------------------------------------------

template <class T>
void zero_plane(const View4<T>& v, int64_t n, int64_t c, int64_t H, int64_t W) {
  T* plane = v.plane(n, c);
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) plane[y * v.s2 + x * v.s3] = store_as<T>(AccType<T>(0));
}

// d_input planes (n, c0) .. (n, c1 - 1): zeroed, then every point of batch n adds go * (v . a_k) to
// its taps, points in order (the taps of a point computed once for the planes).
template <class T>
void scatter_planes(const Problem<T>& pb, int64_t n, int64_t c0, int64_t c1) {
  using Acc = AccType<T>;
  for (int64_t c = c0; c < c1; ++c) zero_plane(pb.d_input, n, c, pb.H, pb.W);
  if (!pb.gg_grid) return;
  for (int64_t h = 0; h < pb.Ho; ++h) {
    for (int64_t w = 0; w < pb.Wo; ++w) {
      const PointTaps<Acc> pt = pb.taps_at(n, h, w);
      Acc vx, vy;
      pb.grid_cotangent(n, h, w, vx, vy);
      for (int64_t c = c0; c < c1; ++c) {
        const Acc go = load_as<Acc>(pb.grad_output.plane(n, c)[h * pb.grad_output.s2 + w * pb.grad_output.s3]);
        T* out = pb.d_input.plane(n, c);
        for (int k = 0; k < pt.count; ++k) {
          T& cell = out[pt.y[k] * pb.d_input.s2 + pt.x[k] * pb.d_input.s3];
          cell = store_as<T>(load_as<Acc>(cell) + go * (vx * pt.ax[k] + vy * pt.ay[k]));
        }
      }
    }
  }
}

template <class T>
void run_plane_pass(const Problem<T>& pb) {
  const int64_t work = std::max<int64_t>(1, pb.H * pb.W + (pb.gg_grid ? pb.Ho * pb.Wo * pb.taps_per_point() * 3 : 0));
  parallel_for(0, pb.N * pb.C, grain_for(work), [&](int64_t lo, int64_t hi) {
    // The chunk's planes, batch by batch.
    for (int64_t i = lo; i < hi;) {
      const int64_t n = i / pb.C, c0 = i % pb.C, c1 = std::min(pb.C, c0 + (hi - i));
      scatter_planes(pb, n, c0, c1);
      i += c1 - c0;
    }
  });
}

// ---- entry -------------------------------------------------------------------------------------------

void check_arguments(const TensorView& gg_input, const TensorView& gg_grid, const TensorView& grad_output,
                     const TensorView& input, const TensorView& grid, const TensorView& d_grad_output,
                     const TensorView& d_input, const TensorView& d_grid, const GridSampler2dParams& params,
                     const std::vector<bool>& mask) {
  detail::check_grid_sampler_modes(kOp, params);
  SG_CHECK(mask.size() == 3, kOp,
           "(): expected output_mask to have 3 entries (d_grad_output, d_input, d_grid), but got ", mask.size());
  const std::vector<int64_t> expected = detail::grid_sampler_output_shape(kOp, input.sizes(), grid.sizes());
  detail::check_grid_sampler_grad_output(kOp, grad_output, expected);
  detail::check_same_dtype(kOp, "input", input, "grad_output", grad_output);
  detail::check_same_dtype(kOp, "grid", grid, "grad_output", grad_output);
  const struct {
    const TensorView& t;
    const char* name;
    const std::vector<int64_t>& shape;
    bool used;
  } operands[] = {{gg_input, "grad_grad_input", input.sizes(), !is_absent(gg_input)},
                  {gg_grid, "grad_grad_grid", grid.sizes(), !is_absent(gg_grid)},
                  {d_grad_output, "d_grad_output", grad_output.sizes(), mask[0]},
                  {d_input, "d_input", input.sizes(), mask[1]},
                  {d_grid, "d_grid", grid.sizes(), mask[2]}};
  for (const auto& o : operands) {
    if (!o.used) continue;
    detail::check_shape(kOp, o.name, o.t, o.shape);
    detail::check_same_dtype(kOp, o.name, o.t, "grad_output", grad_output);
  }
  detail::check_floating(kOp, "grad_output", grad_output.dtype());
}

// The validated operator in float32/float64 (half precision arrives here staged to float32).
template <typename T>
void run_validated(const TensorView& gg_input, const TensorView& gg_grid, const TensorView& grad_output,
                   const TensorView& input, const TensorView& grid, const TensorView& d_grad_output,
                   const TensorView& d_input, const TensorView& d_grid, const GridSampler2dParams& params,
                   const std::vector<bool>& mask) {
  const bool want_go = mask[0] && !d_grad_output.is_empty();
  const bool want_input = mask[1] && !d_input.is_empty();
  const bool want_grid = mask[2] && !d_grid.is_empty();
  Problem<T> pb{input.size(0),
                input.size(1),
                input.size(2),
                input.size(3),
                grid.size(1),
                grid.size(2),
                params,
                view4<const T>(gg_input),
                view4<const T>(gg_grid),
                view4<const T>(grad_output),
                view4<const T>(input),
                view4<const T>(grid),
                want_go ? view4<T>(d_grad_output) : View4<T>{},
                want_input ? view4<T>(d_input) : View4<T>{},
                want_grid ? view4<T>(d_grid) : View4<T>{}};
  if (want_go || want_grid) run_point_pass(pb);
  if (want_input) run_plane_pass(pb);
}

}  // namespace

void grid_sampler_2d_double_backward(const TensorView& grad_grad_input, const TensorView& grad_grad_grid,
                                     const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                                     const TensorView& d_grad_output, const TensorView& d_input,
                                     const TensorView& d_grid, const GridSampler2dParams& params,
                                     const std::vector<bool>& output_mask) {
  check_arguments(grad_grad_input, grad_grad_grid, grad_output, input, grid, d_grad_output, d_input, d_grid, params,
                  output_mask);
  const bool want_go = output_mask[0] && !d_grad_output.is_empty();
  const bool want_input = output_mask[1] && !d_input.is_empty();
  const bool want_grid = output_mask[2] && !d_grid.is_empty();
  if (!(want_go || want_input || want_grid)) return;
  // float16/bfloat16: every operand widened once to float32, the float32 kernel, every output rounded once.
  detail::run_entry(kOp, "grad_output", grad_output.dtype(), [&](auto tag, auto& s) {
    using T = AccType<typename decltype(tag)::type>;
    run_validated<T>(s.in(grad_grad_input), s.in(grad_grad_grid), s.in(grad_output), s.in(input), s.in(grid),
                     s.out(d_grad_output, output_mask[0]), s.out(d_input, output_mask[1]),
                     s.out(d_grid, output_mask[2]), params, output_mask);
  });
}

}  // namespace spatialgrad

// Grid-sampler coordinate math shared by the forward and the backward (docs/operators.md, Grid sampling). Every helper
// returns the coordinate together with its derivative with respect to its argument.
//
// NaN and infinite grid values never reach an integer conversion: callers test bounds in floating
// point first. As in PyTorch's CPU kernel, border and reflection padding map NaN (and reflection maps
// +-Inf) to coordinate 0; zeros padding keeps NaN, whose corners are then all out of bounds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "simd.h"
#include "spatialgrad/grid_sampler_2d.h"  // GridSamplerPadding

namespace spatialgrad::detail {

template <class Acc>
struct CoordGrad {
  Acc value;
  Acc grad;  // d value / d argument
};

// Grid value in [-1, 1] -> pixel coordinate along an axis of `size` pixels:
//   align_corners: (x + 1) / 2 * (size - 1), derivative (size - 1) / 2;
//   otherwise:     ((x + 1) * size - 1) / 2, derivative size / 2.
// Written in PyTorch's CPU operation order ((x + 1) * scale [- 0.5]) so that nearest rounding at exact
// half pixels picks the same pixel as torch.
template <class Acc>
inline CoordGrad<Acc> unnormalize(Acc x, int64_t size, bool align_corners) {
  if (align_corners) {
    const Acc scale = static_cast<Acc>(size - 1) / 2;
    return {(x + 1) * scale, scale};
  }
  const Acc scale = static_cast<Acc>(size) / 2;
  return {(x + 1) * scale - Acc(0.5), scale};
}

// Border padding: clamp to [0, size - 1]; derivative 1 strictly inside, 0 at and beyond the borders.
// NaN maps to 0 with derivative 0 (PyTorch's CPU clamp keeps the bound when the value is NaN).
template <class Acc>
inline CoordGrad<Acc> clip(Acc ix, int64_t size) {
  const Acc high = static_cast<Acc>(size - 1);
  if (!(ix > 0)) return {Acc(0), Acc(0)};
  if (ix >= high) return {high, Acc(0)};
  return {ix, Acc(1)};
}

// Reflection padding (before the clip): reflect about the low and high edges,
//   align_corners: edges 0 and size - 1; otherwise -0.5 and size - 0.5.
// the contract's form takes extra = fmod(in, span) and the parity of floor(in / span); here one exact fmod by
// the period 2 * span gives both (r <= span: even number of flips), so rounding in in / span can never
// pick the wrong parity. Non-finite input gives NaN, which the clip then maps to 0.
template <class Acc>
inline CoordGrad<Acc> reflect(Acc ix, int64_t size, bool align_corners) {
  const int64_t twice_low = align_corners ? 0 : -1;
  const int64_t twice_high = align_corners ? 2 * (size - 1) : 2 * size - 1;
  if (twice_low == twice_high) return {Acc(0), Acc(0)};
  const Acc low = static_cast<Acc>(twice_low) / 2;
  const Acc span = static_cast<Acc>(twice_high - twice_low) / 2;
  Acc in = ix - low;
  Acc sign = 1;
  if (in < 0) {
    sign = -1;
    in = -in;
  }
  if (!std::isfinite(in)) return {std::numeric_limits<Acc>::quiet_NaN(), Acc(0)};
  const Acc r = std::fmod(in, 2 * span);
  if (r <= span) return {r + low, sign};
  return {(2 * span - r) + low, -sign};
}

// Padding applied to an unnormalised coordinate (also to each bicubic tap): its value and derivative.
template <class Acc>
inline CoordGrad<Acc> apply_padding(Acc ix, int64_t size, GridSamplerPadding padding, bool align_corners) {
  if (padding == GridSamplerPadding::kBorder) return clip(ix, size);
  if (padding == GridSamplerPadding::kReflection) {
    const CoordGrad<Acc> r = reflect(ix, size, align_corners);
    const CoordGrad<Acc> c = clip(r.value, size);
    return {c.value, r.grad * c.grad};
  }
  return {ix, Acc(1)};
}

// Grid value -> padded source coordinate and d coordinate / d grid value (bilinear and nearest).
template <class Acc>
inline CoordGrad<Acc> source_coordinate(Acc x, int64_t size, GridSamplerPadding padding, bool align_corners) {
  const CoordGrad<Acc> u = unnormalize(x, size, align_corners);
  const CoordGrad<Acc> p = apply_padding(u.value, size, padding, align_corners);
  return {p.value, u.grad * p.grad};
}

// std::floor(x), exactly (default rounding mode), in a form GCC vectorises (it vectorises neither floor
// nor a compare-and-select after nearbyint under the default -ftrapping-math): r = nearbyint(x) is floor
// or floor + 1, and it is floor + 1 exactly when x - r is negative, which its sign bit says. x - r is +0
// for integral x (also -0); NaN and +-Inf pass through (r - 0 or r - 1 is r).
template <class Acc>
SPATIALGRAD_INLINE Acc floor_of(Acc x) {
  using Bits = std::conditional_t<sizeof(Acc) == 4, uint32_t, uint64_t>;
  const Acc r = std::nearbyint(x);
  const Acc t = x - r;
  Bits bits;
  std::memcpy(&bits, &t, sizeof bits);
  return r - static_cast<Acc>(static_cast<int32_t>(bits >> (8 * sizeof(Acc) - 1)));
}

// ---- a block of coordinates at once -----------------------------------------------------------------
// The same values and derivatives as source_coordinate, for n grid values of one axis, written as
// branch-free loops (the padding chosen outside them) that the compiler vectorises.

// clip() without branches: the value, and whether it moves with ix (derivative 1, else 0). GCC 12
// vectorised these loops only in this form (checked with -fopt-info-vec): comparisons made
// unconditionally (& for &&) and floating-point selects between values already computed. A nested select,
// or a product of a selected value, kept them scalar (under -ftrapping-math it will not speculate the
// operation), so derivatives are selected whole, with the signs and zeros the scalar products give.
template <class Acc>
SPATIALGRAD_INLINE Acc clip_to(Acc ix, Acc high, bool& moves) {
  const bool above = ix > 0, below = ix < high;
  const Acc below_high = below ? ix : high;
  moves = above & below;
  return above ? below_high : Acc(0);
}

// reflect() then clip() for a vector u of unnormalised coordinates, written with vector operations (GCC
// does not vectorise the scalar form: its selects become branches). Exact for the lanes within one
// period of the low edge (all of them when the grid stays within a reflection of the image), where fmod
// is the identity; clears the lanes of `reached` that are not (NaN, Inf, farther), for the caller to redo
// them. grad = scale * (reflection sign * clip derivative), with the signed zeros of those products.
template <class V, class Acc, class Mask>
SPATIALGRAD_INLINE void reflect_lanes(const V& u, Acc low, Acc span, Acc high, Acc scale, V& value, V& grad,
                                      Mask& reached) {
  const V in = u - low;
  const auto negative = in < 0;
  const V distance = negative ? -in : in;
  reached &= distance < 2 * span;  // false for NaN and +-Inf
  const auto mirrored = distance > span;
  const V reflected = (mirrored ? 2 * span - distance : distance) + low;
  const auto above = reflected > 0, below = reflected < high;
  value = above ? (below ? reflected : V{} + high) : V{};
  const auto flip = negative != mirrored;
  const V zero{};
  grad = (above & below) ? (flip ? zero - scale : zero + scale) : (flip ? -zero : zero);
}

// source_coordinates for reflection padding: vectors of reflect_lanes, and the scalar formula for the
// vectors it hands back and for the tail.
template <class Acc>
SPATIALGRAD_INLINE void reflected_coordinates(const Acc* __restrict g, int64_t n, int64_t size, bool align_corners,
                                              Acc scale, Acc shift, Acc* __restrict value, Acc* __restrict grad) {
  using V = Vec<Acc, 32>;
  constexpr int64_t kLanes = kVecLanes<Acc, 32>;
  const Acc high = static_cast<Acc>(size - 1), low = align_corners ? Acc(0) : Acc(-0.5);
  const Acc span = align_corners ? high : static_cast<Acc>(size);  // as reflect(): half the period
  auto scalar = [&](int64_t i) {
    const CoordGrad<Acc> c = source_coordinate(g[i], size, GridSamplerPadding::kReflection, align_corners);
    value[i] = c.value;
    grad[i] = c.grad;
  };
  // The lanes' masks are gathered over the whole run and checked once (a test per vector cost a fifth
  // of the nearest backward on a reflected flow grid); a run with a lane out of reach is redone by the
  // scalar formula, which gives the same values for the lanes in reach.
  int64_t i = 0;
  auto reached = V{} == V{};
  for (; i + kLanes <= n; i += kLanes) {
    V x, v, d;
    reflect_lanes(V((load_u(x, g + i) + 1) * scale - shift), low, span, high, scale, v, d, reached);
    store_u(value + i, v);
    store_u(grad + i, d);
  }
  if (!all_lanes(reached)) i = 0;
  for (; i < n; ++i) scalar(i);
}

template <class Isa, class Acc>
SG_SIMD_KERNEL void source_coordinates(Isa, const Acc* __restrict g, int64_t n, int64_t size, GridSamplerPadding padding,
                                       bool align_corners, Acc* __restrict value, Acc* __restrict grad) {
  const CoordGrad<Acc> at_zero = unnormalize(Acc(0), size, align_corners);
  const Acc scale = at_zero.grad, shift = align_corners ? Acc(0) : Acc(0.5);  // x - 0 == x, also for -0
  const Acc high = static_cast<Acc>(size - 1);
  if (padding == GridSamplerPadding::kZeros) {
    for (int64_t i = 0; i < n; ++i) {
      value[i] = (g[i] + 1) * scale - shift;
      grad[i] = scale;
    }
  } else if (padding == GridSamplerPadding::kBorder) {
    for (int64_t i = 0; i < n; ++i) {
      bool moves;
      value[i] = clip_to((g[i] + 1) * scale - shift, high, moves);
      grad[i] = moves ? scale : Acc(0);
    }
  } else {
    reflected_coordinates(g, n, size, align_corners, scale, shift, value, grad);
  }
}
template <class Acc>
void source_coordinates(const Acc* g, int64_t n, int64_t size, GridSamplerPadding padding, bool align_corners, Acc* value,
                        Acc* grad) {
  SG_SIMD_DISPATCH(source_coordinates(isa, g, n, size, padding, align_corners, value, grad));
}

// True when an integral-valued coordinate names a pixel of an axis of `size` (false for NaN): the only
// gate before converting a coordinate to an integer.
template <class Acc>
inline bool in_bounds(Acc index, int64_t size) {
  return index > Acc(-1) && index < static_cast<Acc>(size);
}

// Bicubic convolution (A = -0.75, as PyTorch): weights of the taps at floor(x) - 1 .. floor(x) + 2 for
// t = x - floor(x), and their derivatives with respect to x. Same operation order as PyTorch.
template <class Acc>
struct Cubic {
  static constexpr Acc A = Acc(-0.75);
  // The formulas for an Acc or a vector of Acc (lane by lane, the same operations).
  template <class X>
  static SPATIALGRAD_INLINE void outer_of(const X& x, X& r) {  // 1 < |x| < 2
    r = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  }
  template <class X>
  static SPATIALGRAD_INLINE void inner_of(const X& x, X& r) {  // |x| <= 1
    r = ((A + 2) * x - (A + 3)) * x * x + 1;
  }
  static Acc outer(Acc x) {
    Acc r;
    outer_of(x, r);
    return r;
  }
  static Acc inner(Acc x) {
    Acc r;
    inner_of(x, r);
    return r;
  }
  static void weights(Acc t, Acc (&w)[4]) {
    w[0] = outer(t + 1);
    w[1] = inner(t);
    w[2] = inner(1 - t);
    w[3] = outer(2 - t);
  }
  // d w[i] / d x, from the signed distances x - tap (for an Acc or a vector of Acc).
  template <class X>
  static SPATIALGRAD_INLINE void derivatives_of(const X& t, X (&d)[4]) {
    X x = -1 - t;
    d[0] = (-3 * A * x - 10 * A) * x - 8 * A;
    x = 0 - t;
    d[1] = (-3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 1 - t;
    d[2] = (3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 2 - t;
    d[3] = (3 * A * x - 10 * A) * x + 8 * A;
  }
  static void derivatives(Acc t, Acc (&d)[4]) { derivatives_of(t, d); }
};

}  // namespace spatialgrad::detail

// The grid sampler's plane strategy: per-block tables of tap columns, rows and weights, and sweeps that
// gather from (and scatter into) the input planes where they lie, one channel at a time. No tile is packed,
// so the cost follows the points and the scratch is a table per thread, whatever the plane. The tile
// strategy (grid_sampler_2d_tables.h) packs a plane into lane-interleaved channel tiles first, which pays
// when many channels share each table entry and the plane is small next to the points; the drivers and the
// choice between the two are in grid_sampler_2d.cpp (docs/design.md, "Shape-aware strategies").
//
// Every value is computed with the tile sweeps' formulas in the same operation order, and a tap outside the
// image reads 0 (then multiplied by its weight, so NaN weights still give NaN); the grid gradient is summed
// per lane of a tile and then over the lanes, as in the tiles (the driver keeps the lane sums). So both
// strategies give the same bits, and the driver may choose between them by the thread count.
//
// Backward tasks own bands of rows of the input-gradient planes: a task scatters only the taps in its
// band, visiting the points in order, so every element is summed in point order whatever the bands; the
// grid gradient of a point is written by the band that holds its home row.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "convert.h"
#include "gather.h"
#include "grid_sampler_2d_coords.h"
#include "grid_sampler_2d_tables.h"  // kBlock, Context, View4, BicubicTable::taps
#include "simd.h"
#include "spatialgrad/dtype.h"

namespace spatialgrad::detail::grid_sampler {

// True when index names a pixel of an axis of `size` pixels (taps outside are -1 or -2).
SPATIALGRAD_INLINE bool inside(int32_t index, int32_t size) {
  return static_cast<uint32_t>(index) < static_cast<uint32_t>(size);
}

// An input plane's geometry (strides in elements).
struct PlaneGeometry {
  int64_t s2, s3;
  int32_t H, W;
  // Every element's offset fits int32 and strides are not negative: tables also hold int32 tap indices,
  // and float/double planes are read by gathers (gather.h).
  bool index32;
  bool gathers;  // index32 and a float/double plane: the kernels read it by gathers, not by offsets

  PlaneGeometry(int64_t s2_, int64_t s3_, int64_t H_, int64_t W_, bool gather_type)
      : s2(s2_), s3(s3_), H(static_cast<int32_t>(H_)), W(static_cast<int32_t>(W_)) {
    index32 = s2 >= 0 && s3 >= 0 && s2 <= INT32_MAX && s3 <= INT32_MAX &&
              (H_ - 1) * s2 + (W_ - 1) * s3 <= INT32_MAX;  // no overflow: H, W, s2, s3 < 2^31
    gathers = index32 && gather_type;
  }
  int64_t at(int32_t y, int32_t x) const { return y * s2 + x * s3; }
  // Elements from the plane's first to its last, inclusive (a window of them may be loaded whole).
  int64_t extent() const { return int64_t{H - 1} * s2 + int64_t{W - 1} * s3 + 1; }
  // The int32 index of (y, x), -1 when outside the image (index32 planes); in uint32 arithmetic, so that
  // rows or columns just outside cannot overflow.
  SPATIALGRAD_INLINE int32_t index(int32_t y, int32_t x) const {
    const uint32_t at32 = static_cast<uint32_t>(y) * static_cast<uint32_t>(s2) + static_cast<uint32_t>(x) * static_cast<uint32_t>(s3);
    return inside(x, W) & inside(y, H) ? static_cast<int32_t>(at32) : -1;
  }
};

template <class T>
constexpr bool kGathers = std::is_same_v<T, float> || std::is_same_v<T, double>;

// True when offsets[i] = offsets[0] + i for i < n (n >= 1): the points' outputs are one run. The sweeps'
// `straight` argument (the driver checks once per block, not per channel).
inline bool consecutive(const int64_t* offsets, int64_t n) {
  bool all = true;
  for (int64_t i = 1; i < n; ++i) all &= offsets[i] == offsets[0] + i;
  return all;
}

// Where a backward task adds its input gradient: rows [band.begin, band.end) of a channel's plane,
// element (y, x) at base[(y - row0) * s2 + x * s3] (row0 = 0 when writing the gradient in place, the
// band's first row when writing a float staging buffer of the band).
template <class Acc>
struct GradTarget {
  Acc* base;
  int64_t s2, s3;
  int32_t row0, begin, end;  // the band
  template <bool kBanded>
  SPATIALGRAD_INLINE void add(int32_t y, int32_t x, Acc v) const {
    if (kBanded && !(y >= begin && y < end)) return;
    base[(y - row0) * s2 + x * s3] += v;
  }
  // The four corners of a point whose corners are all inside the image (v: nw, ne, sw, se).
  template <bool kBanded>
  SPATIALGRAD_INLINE void add_corners(int32_t y, int32_t x, Acc nw, Acc ne, Acc sw, Acc se) const {
    Acc* p = base + (y - row0) * s2 + x * s3;
    if (!kBanded || (y >= begin && y < end)) add_pair(p, nw, ne);
    if (!kBanded || (y + 1 >= begin && y + 1 < end)) add_pair(p + s2, sw, se);
  }
  // p[0] += a, p[s3] += b. (Tried: one two-lane vector add for adjacent columns. It halved a random grid's
  // loads and stores (5.7 -> 5.4 ms), but on a smooth grid neighbouring points' pairs overlap by one value,
  // and the 8-byte load of a pair the previous point half wrote cannot take its value from the store:
  // (2,3,1024,1024) flow backward 61 -> 85 ms.)
  SPATIALGRAD_INLINE void add_pair(Acc* p, Acc a, Acc b) const {
    p[0] += a;
    p[s3] += b;
  }
};

// The home row of a coordinate (its floor, clamped into the plane; 0 for NaN): the band holding it writes
// the point's grid gradient.
template <class Acc>
SPATIALGRAD_INLINE int32_t home_row(Acc y0, int32_t H) {
  const Acc clamped = y0 > Acc(0) ? (y0 < Acc(H - 1) ? y0 : Acc(H - 1)) : Acc(0);
  return static_cast<int32_t>(clamped);
}

// A coordinate's grid gradient from its per-lane sums: ((0 + sums[0] + sums[1]) + ...) * mult, lanes in
// order as the tiles add them (rows.h add_lane_sums), for n points at once (vector loops: summed point by
// point, this took 13% of a one-channel backward).
template <class Isa, class Acc>
SG_SIMD_KERNEL void sum_lanes(Isa, const Acc (*__restrict sums)[kBlock], int64_t lanes, const Acc* __restrict mult,
                              int64_t n, Acc* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sums[0][i];
  for (int64_t l = 1; l < lanes; ++l) {
    for (int64_t i = 0; i < n; ++i) out[i] += sums[l][i];
  }
  for (int64_t i = 0; i < n; ++i) out[i] = (Acc(0) + out[i]) * mult[i];
}
template <class Acc>
void sum_lanes(const Acc (*sums)[kBlock], int64_t lanes, const Acc* mult, int64_t n, Acc* out) {
  SG_SIMD_DISPATCH(sum_lanes(isa, sums, lanes, mult, n, out));
}

// ---- bilinear ----------------------------------------------------------------------------------------

template <class Acc>
struct PlaneBilinear {
  static constexpr bool kHasGridGrad = true;
  static constexpr int64_t kTaps = 4;  // read (and scattered) per point and channel
  static constexpr int64_t kCost = 4;  // rough operations per point and channel
  int64_t count;
  int32_t x[kBlock], y[kBlock];  // the nw corner; -2 when no corner is inside (then none is read)
  int32_t home[kBlock];
  int64_t offset[kBlock];    // of the nw corner in the input plane (is_inner points; not with gathers)
  int32_t index[4][kBlock];  // of the nw, ne, sw, se corners, -1 outside (index32 planes)
  Acc w[4][kBlock];          // nw, ne, sw, se
  Acc dist[4][kBlock];       // ty, 1-ty, tx, 1-tx
  Acc mult[2][kBlock];       // d coordinate / d grid value along x and y

  // The table of `n` points whose grid values are gx, gy (n <= kBlock).
  template <class T>
  void build(const Context<T>& ctx, const Acc* gx, const Acc* gy, int64_t n, const PlaneGeometry& g,
             bool /*with_grad: always*/) {
    Acc cx[kBlock], cy[kBlock];
    count = n;
    detail::source_coordinates(gx, count, ctx.W, ctx.padding, ctx.align, cx, mult[0]);
    detail::source_coordinates(gy, count, ctx.H, ctx.padding, ctx.align, cy, mult[1]);
    fill(cx, cy, g);
  }

  // The rows point i reads (inside the image), with its home row: [lo, hi].
  void rows(int64_t i, const PlaneGeometry& g, int32_t& lo, int32_t& hi) const {
    lo = hi = home[i];
    for (int32_t r : {y[i], y[i] + 1}) {
      if (inside(r, g.H)) {
        lo = std::min(lo, r);
        hi = std::max(hi, r);
      }
    }
  }

  // As BilinearTable::fill, with columns and rows in place of tile pixels: branch-free selects of
  // values already computed, then conversions, so that GCC vectorises the loop (as BilinearTable::fill);
  // the int64 offsets (no AVX2 multiply) and the home rows in a second, scalar loop.
  template <class Isa>
  SG_SIMD_KERNEL void fill(Isa, const Acc* __restrict cx, const Acc* __restrict cy, PlaneGeometry g) {
    const Acc W = static_cast<Acc>(g.W), H = static_cast<Acc>(g.H);
    for (int64_t i = 0; i < count; ++i) {
      const Acc x0 = detail::floor_of(cx[i]), y0 = detail::floor_of(cy[i]);
      const Acc tx = cx[i] - x0, ty = cy[i] - y0, ex = 1 - tx, sy = 1 - ty;
      // Converted only when within a pixel of the image, so NaN, Inf or huge coordinates never reach an int.
      const bool framed = (x0 >= -1) & (x0 < W) & (y0 >= -1) & (y0 < H);
      x[i] = static_cast<int32_t>(framed ? x0 : Acc(-2));
      y[i] = static_cast<int32_t>(framed ? y0 : Acc(-2));
      w[0][i] = sy * ex;
      w[1][i] = sy * tx;
      w[2][i] = ty * ex;
      w[3][i] = ty * tx;
      dist[0][i] = ty;
      dist[1][i] = sy;
      dist[2][i] = tx;
      dist[3][i] = ex;
    }
    for (int64_t i = 0; i < count; ++i) home[i] = std::clamp(y[i], 0, g.H - 1);
    if (!g.gathers) {
      for (int64_t i = 0; i < count; ++i) offset[i] = is_inner(i, g) ? g.at(y[i], x[i]) : 0;
    }
    if (g.index32) fill_indices(g);
  }
  void fill(const Acc* cx, const Acc* cy, PlaneGeometry g) { SG_SIMD_DISPATCH(fill(isa, cx, cy, g)); }

  // g.index of the four corners, with one multiply per point: the others are the nw offset plus s3, s2
  // or both (in uint32, as g.index, and kept only where the corner is inside).
  template <class Isa>
  SG_SIMD_KERNEL void fill_indices(Isa, PlaneGeometry g) {
    const auto s2 = static_cast<uint32_t>(g.s2), s3 = static_cast<uint32_t>(g.s3);
    for (int64_t i = 0; i < count; ++i) {
      const uint32_t at = static_cast<uint32_t>(y[i]) * s2 + static_cast<uint32_t>(x[i]) * s3;
      const bool x0 = inside(x[i], g.W), x1 = inside(x[i] + 1, g.W), y0 = inside(y[i], g.H), y1 = inside(y[i] + 1, g.H);
      index[0][i] = x0 & y0 ? static_cast<int32_t>(at) : -1;
      index[1][i] = x1 & y0 ? static_cast<int32_t>(at + s3) : -1;
      index[2][i] = x0 & y1 ? static_cast<int32_t>(at + s2) : -1;
      index[3][i] = x1 & y1 ? static_cast<int32_t>(at + s2 + s3) : -1;
    }
  }
  void fill_indices(PlaneGeometry g) { SG_SIMD_DISPATCH(fill_indices(isa, g)); }

  // All four corners inside: read from offset, unchecked.
  SPATIALGRAD_INLINE bool is_inner(int64_t i, const PlaneGeometry& g) const {
    return inside(x[i], g.W - 1) & inside(y[i], g.H - 1);
  }

  // The values of point i's nw, ne, sw, se corners (0 outside the image).
  template <class T>
  SPATIALGRAD_INLINE void corners(const T* plane, const PlaneGeometry& g, int64_t i, Acc (&v)[4]) const {
    if (is_inner(i, g)) {
      const T* q = plane + offset[i];
      v[0] = load_as<Acc>(q[0]);
      v[1] = load_as<Acc>(q[g.s3]);
      v[2] = load_as<Acc>(q[g.s2]);
      v[3] = load_as<Acc>(q[g.s2 + g.s3]);
      return;
    }
    for (int k = 0; k < 4; ++k) {
      const int32_t yk = y[i] + (k >> 1), xk = x[i] + (k & 1);
      v[k] = inside(xk, g.W) && inside(yk, g.H) ? load_as<Acc>(plane[g.at(yk, xk)]) : Acc(0);
    }
  }

  template <class T>
  void forward(const T* __restrict plane, PlaneGeometry g, T* __restrict out, const int64_t* __restrict out_offset,
               bool straight) const {
    if constexpr (kGathers<T>) {
      if constexpr (std::is_same_v<T, float>) {
        // Into a run of outputs: the four corners of eight points gathered together, their cache misses
        // overlapping (a 64^2 grid on (1,3,2048,2048): 0.165 -> 0.158 ms; (8,1,256,256): 2.75 -> 2.46 ms).
        if (g.gathers && straight) {
          const int32_t* corners[4] = {index[0], index[1], index[2], index[3]};
          const float* weights[4] = {w[0], w[1], w[2], w[3]};
          return detail::gather4_weighted(plane, corners, weights, count, out + out_offset[0]);
        }
      }
      if (g.gathers) {
        Acc v[4][kBlock];
        for (int k = 0; k < 4; ++k) detail::gather(plane, index[k], count, v[k]);
        return combine(v, out, out_offset, straight);
      }
    }
    forward_checked(plane, g, out, out_offset);
  }

  // The gathered corners' weighted sums (the same operations as forward_checked).
  template <class Isa, class T>
  SG_SIMD_KERNEL void combine(Isa, const Acc (&v)[4][kBlock], T* __restrict out, const int64_t* __restrict out_offset,
                              bool straight) const {
    Acc sums[kBlock];
    Acc* to = straight ? out + out_offset[0] : sums;
    for (int64_t i = 0; i < count; ++i) to[i] = v[0][i] * w[0][i] + v[1][i] * w[1][i] + v[2][i] * w[2][i] + v[3][i] * w[3][i];
    if (!straight) {
      for (int64_t i = 0; i < count; ++i) out[out_offset[i]] = sums[i];
    }
  }
  template <class T>
  void combine(const Acc (&v)[4][kBlock], T* out, const int64_t* out_offset, bool straight) const {
    SG_SIMD_DISPATCH(combine(isa, v, out, out_offset, straight));
  }

  template <class Isa, class T>
  SG_SIMD_KERNEL void forward_checked(Isa, const T* __restrict plane, PlaneGeometry g, T* __restrict out,
                                      const int64_t* __restrict out_offset) const {
    for (int64_t i = 0; i < count; ++i) {
      Acc v[4];
      corners(plane, g, i, v);
      out[out_offset[i]] = store_as<T>(v[0] * w[0][i] + v[1] * w[1][i] + v[2] * w[2][i] + v[3] * w[3][i]);
    }
  }
  template <class T>
  void forward_checked(const T* plane, PlaneGeometry g, T* out, const int64_t* out_offset) const {
    SG_SIMD_DISPATCH(forward_checked(isa, plane, g, out, out_offset));
  }

  // One channel's backward: kGrid adds d output / d coordinate * g to sx, sy (points with owned[i]
  // only when kBanded), kScatter adds the weighted g to the target's corners in its band.
  template <bool kBanded, bool kScatter, bool kGrid, class T>
  void backward(const T* __restrict plane, PlaneGeometry g, const T* __restrict go, const int64_t* __restrict go_offset,
                GradTarget<Acc> target, const bool* __restrict owned, Acc* __restrict sx, Acc* __restrict sy) const {
    if constexpr (kGathers<T> && kGrid) {
      if (g.gathers) {
        Acc v[4][kBlock];
        if constexpr (std::is_same_v<T, float>) {  // nw, ne and sw, se: horizontal neighbours
          detail::gather_adjacent(plane, index[0], index[1], count, g.extent(), v[0], v[1]);
          detail::gather_adjacent(plane, index[2], index[3], count, g.extent(), v[2], v[3]);
        } else {
          for (int k = 0; k < 4; ++k) detail::gather(plane, index[k], count, v[k]);
        }
        add_grid_terms<kBanded>(v, go, go_offset, owned, sx, sy);
        if constexpr (kScatter) backward_checked<kBanded, true, false>(plane, g, go, go_offset, target, owned, sx, sy);
        return;
      }
    }
    backward_checked<kBanded, kScatter, kGrid>(plane, g, go, go_offset, target, owned, sx, sy);
  }

  // The grid terms of the gathered corners (the same operations as backward_checked), added to sx, sy
  // for the points the task owns.
  template <bool kBanded, class Isa, class T>
  SG_SIMD_KERNEL void add_grid_terms(Isa, const Acc (&v)[4][kBlock], const T* __restrict go,
                                     const int64_t* __restrict go_offset, const bool* __restrict owned,
                                     Acc* __restrict sx, Acc* __restrict sy) const {
    Acc gv[kBlock];
    for (int64_t i = 0; i < count; ++i) gv[i] = go[go_offset[i]];
    for (int64_t i = 0; i < count; ++i) {
      const Acc tx = ((v[1][i] - v[0][i]) * dist[1][i] + (v[3][i] - v[2][i]) * dist[0][i]) * gv[i];
      const Acc ty = ((v[2][i] - v[0][i]) * dist[3][i] + (v[3][i] - v[1][i]) * dist[2][i]) * gv[i];
      const Acc nx = sx[i] + tx, ny = sy[i] + ty;
      sx[i] = !kBanded || owned[i] ? nx : sx[i];
      sy[i] = !kBanded || owned[i] ? ny : sy[i];
    }
  }
  template <bool kBanded, class T>
  void add_grid_terms(const Acc (&v)[4][kBlock], const T* go, const int64_t* go_offset, const bool* owned, Acc* sx,
                      Acc* sy) const {
    SG_SIMD_DISPATCH(this->template add_grid_terms<kBanded>(isa, v, go, go_offset, owned, sx, sy));
  }

  template <bool kBanded, bool kScatter, bool kGrid, class Isa, class T>
  SG_SIMD_KERNEL void backward_checked(Isa, const T* __restrict plane, PlaneGeometry g, const T* __restrict go,
                                       const int64_t* __restrict go_offset, GradTarget<Acc> target,
                                       const bool* __restrict owned, Acc* __restrict sx, Acc* __restrict sy) const {
    for (int64_t i = 0; i < count; ++i) {
      const Acc gv = load_as<Acc>(go[go_offset[i]]);
      if constexpr (kGrid) {
        if (!kBanded || owned[i]) {
          Acc v[4];
          corners(plane, g, i, v);
          sx[i] += ((v[1] - v[0]) * dist[1][i] + (v[3] - v[2]) * dist[0][i]) * gv;
          sy[i] += ((v[2] - v[0]) * dist[3][i] + (v[3] - v[1]) * dist[2][i]) * gv;
        }
      }
      if constexpr (kScatter) {
        if (is_inner(i, g)) {
          target.template add_corners<kBanded>(y[i], x[i], w[0][i] * gv, w[1][i] * gv, w[2][i] * gv, w[3][i] * gv);
          continue;
        }
        for (int k = 0; k < 4; ++k) {
          const int32_t yk = y[i] + (k >> 1), xk = x[i] + (k & 1);
          if (inside(xk, g.W) && inside(yk, g.H)) target.template add<kBanded>(yk, xk, w[k][i] * gv);
        }
      }
    }
  }
  template <bool kBanded, bool kScatter, bool kGrid, class T>
  void backward_checked(const T* plane, PlaneGeometry g, const T* go, const int64_t* go_offset, GradTarget<Acc> target,
                        const bool* owned, Acc* sx, Acc* sy) const {
    SG_SIMD_DISPATCH(
        this->template backward_checked<kBanded, kScatter, kGrid>(isa, plane, g, go, go_offset, target, owned, sx, sy));
  }
};

// ---- nearest -----------------------------------------------------------------------------------------

template <class Acc>
struct PlaneNearest {
  static constexpr bool kHasGridGrad = false;
  static constexpr int64_t kTaps = 1;  // read (and scattered) per point and channel
  static constexpr int64_t kCost = 1;
  int64_t count;
  int32_t x[kBlock], y[kBlock];  // -1 when outside the image
  int32_t home[kBlock];
  int64_t offset[kBlock];  // of the tap in the input plane (not with gathers)
  int32_t index[kBlock];   // offset as int32, -1 outside (index32 planes)
  Acc mult[2][kBlock];    // unused (no grid gradient); kept for the drivers' common shape

  template <class T>
  void build(const Context<T>& ctx, const Acc* gx, const Acc* gy, int64_t n, const PlaneGeometry& g,
             bool /*with_grad*/) {
    count = n;
    if (ctx.padding == GridSamplerPadding::kZeros) return fill_unpadded(gx, gy, ctx.align, g);
    Acc cx[kBlock], cy[kBlock];
    detail::source_coordinates(gx, count, ctx.W, ctx.padding, ctx.align, cx, mult[0]);
    detail::source_coordinates(gy, count, ctx.H, ctx.padding, ctx.align, cy, mult[1]);
    fill(cx, cy, g);
  }

  void rows(int64_t i, const PlaneGeometry&, int32_t& lo, int32_t& hi) const { lo = hi = home[i]; }

  // Point i's tap from its rounded coordinates (round half to even, as NearestTable::fill).
  SPATIALGRAD_INLINE void set(int64_t i, Acc xr, Acc yr, Acc W, Acc H) {
    const bool in = (xr >= 0) & (xr < W) & (yr >= 0) & (yr < H);  // false for NaN
    x[i] = static_cast<int32_t>(in ? xr : Acc(-1));  // selected, then converted: vectorised
    y[i] = static_cast<int32_t>(in ? yr : Acc(-1));
    home[i] = static_cast<int32_t>(in ? yr : Acc(0));
  }

  // Zeros padding: the coordinates as source_coordinates computes them, rounded in the same pass (no
  // coordinate rows, no unused derivatives: the table is most of a nearest call's own cost).
  template <class Isa>
  SG_SIMD_KERNEL void fill_unpadded(Isa, const Acc* __restrict gx, const Acc* __restrict gy, bool align, PlaneGeometry g) {
    const Acc W = static_cast<Acc>(g.W), H = static_cast<Acc>(g.H);
    const Acc sx = detail::unnormalize(Acc(0), g.W, align).grad, sy = detail::unnormalize(Acc(0), g.H, align).grad;
    const Acc shift = align ? Acc(0) : Acc(0.5);
    for (int64_t i = 0; i < count; ++i) {
      set(i, std::nearbyint((gx[i] + 1) * sx - shift), std::nearbyint((gy[i] + 1) * sy - shift), W, H);
    }
    fill_offsets(g);
  }
  void fill_unpadded(const Acc* gx, const Acc* gy, bool align, PlaneGeometry g) {
    SG_SIMD_DISPATCH(fill_unpadded(isa, gx, gy, align, g));
  }

  template <class Isa>
  SG_SIMD_KERNEL void fill(Isa, const Acc* __restrict cx, const Acc* __restrict cy, PlaneGeometry g) {
    const Acc W = static_cast<Acc>(g.W), H = static_cast<Acc>(g.H);
    for (int64_t i = 0; i < count; ++i) set(i, std::nearbyint(cx[i]), std::nearbyint(cy[i]), W, H);
    fill_offsets(g);
  }
  void fill(const Acc* cx, const Acc* cy, PlaneGeometry g) { SG_SIMD_DISPATCH(fill(isa, cx, cy, g)); }

  void fill_offsets(const PlaneGeometry& g) {
    if (!g.gathers) {
      for (int64_t i = 0; i < count; ++i) offset[i] = x[i] >= 0 ? g.at(y[i], x[i]) : 0;
    }
    if (g.index32) fill_indices(g);
  }

  template <class Isa>
  SG_SIMD_KERNEL void fill_indices(Isa, PlaneGeometry g) {
    for (int64_t i = 0; i < count; ++i) index[i] = g.index(y[i], x[i]);
  }
  void fill_indices(PlaneGeometry g) { SG_SIMD_DISPATCH(fill_indices(isa, g)); }

  template <class T>
  void forward(const T* __restrict plane, PlaneGeometry g, T* __restrict out, const int64_t* __restrict out_offset,
               bool straight) const {
    if constexpr (kGathers<T>) {
      if (g.gathers && straight) {  // into the output
        return detail::gather(plane, index, count, out + out_offset[0]);
      }
      if (g.gathers) {
        T v[kBlock];
        detail::gather(plane, index, count, v);
        for (int64_t i = 0; i < count; ++i) out[out_offset[i]] = v[i];
        return;
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      out[out_offset[i]] = x[i] >= 0 ? plane[offset[i]] : store_as<T>(Acc(0));
    }
  }

  template <bool kBanded, bool kScatter, bool kGrid, class Isa, class T>
  SG_SIMD_KERNEL void backward(Isa, PlaneGeometry g, const T* __restrict go, const int64_t* __restrict go_offset,
                               GradTarget<Acc> target) const {
    static_assert(!kGrid, "nearest has no grid gradient");
    if constexpr (kScatter) {
      if (!kBanded && target.row0 == 0 && target.s2 == g.s2 && target.s3 == g.s3 && g.index32) {
        // The gradient laid out as the input: the taps' input indices address it (no multiply per tap).
        for (int64_t i = 0; i < count; ++i) {
          if (index[i] >= 0) target.base[index[i]] += load_as<Acc>(go[go_offset[i]]);
        }
        return;
      }
      for (int64_t i = 0; i < count; ++i) {
        if (x[i] >= 0) target.template add<kBanded>(y[i], x[i], load_as<Acc>(go[go_offset[i]]));
      }
    }
  }
  template <bool kBanded, bool kScatter, bool kGrid, class T>
  void backward(const T*, PlaneGeometry g, const T* go, const int64_t* go_offset, GradTarget<Acc> target, const bool*, Acc*,
                Acc*) const {
    SG_SIMD_DISPATCH(this->template backward<kBanded, kScatter, kGrid>(isa, g, go, go_offset, target));
  }
};

// ---- bicubic -----------------------------------------------------------------------------------------

template <class Acc>
struct PlaneBicubic {
  static constexpr bool kHasGridGrad = true;
  static constexpr int64_t kTaps = 16;  // read (and scattered) per point and channel
  static constexpr int64_t kCost = 20;
  int64_t count;
  int32_t xs[4][kBlock], ys[4][kBlock];  // padded tap columns and rows, -1 when outside
  int64_t row[4][kBlock], col[4][kBlock];  // ys * s2 and xs * s3: tap (j, i) at row[j] + col[i]
  bool inner[kBlock];                      // all 16 taps inside: read unchecked
  int32_t home[kBlock];
  Acc cx[4][kBlock], cy[4][kBlock];  // tap weights
  Acc dx[4][kBlock], dy[4][kBlock];  // their derivatives (grid gradient only)
  Acc mult[2][kBlock];

  void rows(int64_t p, const PlaneGeometry&, int32_t& lo, int32_t& hi) const {
    lo = hi = home[p];
    for (int k = 0; k < 4; ++k) {
      if (ys[k][p] >= 0) {
        lo = std::min(lo, ys[k][p]);
        hi = std::max(hi, ys[k][p]);
      }
    }
  }

  template <class T>
  void build(const Context<T>& ctx, const Acc* gx, const Acc* gy, int64_t n, const PlaneGeometry& g, bool with_grad) {
    count = n;
    std::fill(mult[0], mult[0] + count, detail::unnormalize<Acc>(0, ctx.W, ctx.align).grad);
    std::fill(mult[1], mult[1] + count, detail::unnormalize<Acc>(0, ctx.H, ctx.align).grad);
    for (int64_t p = 0; p < count; ++p) {
      const BicubicPoint<Acc> point(ctx, gx[p], gy[p], with_grad);
      int32_t x4[4], y4[4];
      BicubicTable<Acc>::taps(point.ux, ctx.W, ctx, x4);
      BicubicTable<Acc>::taps(point.uy, ctx.H, ctx, y4);
      home[p] = home_row(std::floor(point.uy), g.H);
      inner[p] = true;
      for (int k = 0; k < 4; ++k) {
        xs[k][p] = x4[k];
        ys[k][p] = y4[k];
        row[k][p] = int64_t{y4[k]} * g.s2;
        col[k][p] = int64_t{x4[k]} * g.s3;
        inner[p] = inner[p] && x4[k] >= 0 && y4[k] >= 0;
        cx[k][p] = point.wx[k];
        cy[k][p] = point.wy[k];
        dx[k][p] = point.dx[k];
        dy[k][p] = point.dy[k];
      }
    }
  }

  template <class T>
  SPATIALGRAD_INLINE Acc tap(const T* plane, int64_t p, int j, int i) const {
    if (inner[p]) return load_as<Acc>(plane[row[j][p] + col[i][p]]);
    return xs[i][p] >= 0 && ys[j][p] >= 0 ? load_as<Acc>(plane[row[j][p] + col[i][p]]) : Acc(0);
  }

  // Rows first (x taps), then the column of row sums (y taps), as BicubicTable::forward.
  template <class Isa, class T>
  SG_SIMD_KERNEL void forward(Isa, const T* __restrict plane, T* __restrict out, const int64_t* __restrict out_offset) const {
    for (int64_t p = 0; p < count; ++p) {
      Acc rows[4];
      for (int j = 0; j < 4; ++j) {
        rows[j] = tap(plane, p, j, 0) * cx[0][p];
        for (int i = 1; i < 4; ++i) rows[j] += tap(plane, p, j, i) * cx[i][p];
      }
      out[out_offset[p]] = store_as<T>(rows[0] * cy[0][p] + rows[1] * cy[1][p] + rows[2] * cy[2][p] + rows[3] * cy[3][p]);
    }
  }
  template <class T>
  void forward(const T* plane, PlaneGeometry, T* out, const int64_t* out_offset, bool /*straight*/) const {
    SG_SIMD_DISPATCH(forward(isa, plane, out, out_offset));
  }

  // As BicubicTable::backward, tap order included (x taps outside, y taps inside).
  template <bool kBanded, bool kScatter, bool kGrid, class Isa, class T>
  SG_SIMD_KERNEL void backward(Isa, const T* __restrict plane, const T* __restrict go, const int64_t* __restrict go_offset,
                               GradTarget<Acc> target, const bool* __restrict owned, Acc* __restrict sx,
                               Acc* __restrict sy) const {
    for (int64_t p = 0; p < count; ++p) {
      const Acc gv = load_as<Acc>(go[go_offset[p]]);
      const bool grid = kGrid && (!kBanded || owned[p]);
      Acc ax = 0, ay = 0;
      for (int i = 0; i < 4; ++i) {
        const Acc gx = gv * cx[i][p];
        for (int j = 0; j < 4; ++j) {
          const bool in = inner[p] || (xs[i][p] >= 0 && ys[j][p] >= 0);
          if (kScatter && in) target.template add<kBanded>(ys[j][p], xs[i][p], gx * cy[j][p]);
          if (grid) {
            const Acc vg = tap(plane, p, j, i) * gv;
            ax -= vg * dx[i][p] * cy[j][p];
            ay -= vg * dy[j][p] * cx[i][p];
          }
        }
      }
      if (grid) {
        sx[p] += ax;
        sy[p] += ay;
      }
    }
  }
  template <bool kBanded, bool kScatter, bool kGrid, class T>
  void backward(const T* plane, PlaneGeometry, const T* go, const int64_t* go_offset, GradTarget<Acc> target,
                const bool* owned, Acc* sx, Acc* sy) const {
    SG_SIMD_DISPATCH(this->template backward<kBanded, kScatter, kGrid>(isa, plane, go, go_offset, target, owned, sx, sy));
  }
};

}  // namespace spatialgrad::detail::grid_sampler

// The grid sampler's per-block tables: for kBlock grid points, the pixels and weights of each
// interpolation mode (bilinear, nearest, bicubic), computed once per call and shared by every channel,
// with the forward and backward sweeps over them. The sweeps work on lane-interleaved tiles of
// kTileLanes channels (rows.h pack_lanes): a pixel of the input (or input-gradient) tile and a point of
// the output (or grad_output) tile are one vector of kTileLanes channels, so a tap is one vector load
// and every channel of a block shares the table entry. Each input tile has one more pixel after its
// H * W: zero in the input, a sink in the input gradient. A tap outside the image reads and writes that
// pixel, which gives PyTorch's "reads 0, receives nothing" without a mask. The drivers that split the
// work and move the tiles are in grid_sampler_2d.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "grid_sampler_2d_coords.h"
#include "rows.h"
#include "simd.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/grid_sampler_2d.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail::grid_sampler {

using detail::CoordGrad;
using detail::in_bounds;
using detail::load_u;
using detail::store_u;

// Channels per tile vector: one 32-byte vector (an AVX2 register; two SSE ones).
constexpr int kTileBytes = 32;
template <class Acc>
constexpr int64_t kTileLanes = kTileBytes / static_cast<int64_t>(sizeof(Acc));
template <class Acc>
using TileVec = detail::Vec<Acc, kTileBytes>;

// *p += v for the tile vector at p (a pixel of an input-gradient tile).
template <class Acc>
SPATIALGRAD_INLINE void add_to(Acc* p, const TileVec<Acc>& v) {
  TileVec<Acc> old;
  store_u(p, load_u(old, p) + v);
}

// Grid points per table. A table (corner offsets, weights, masks of its points) is computed once per
// call and reused for every channel; it stays in L1 while the channel loop runs over it.
constexpr int64_t kBlock = 256;

// ---- geometry ----------------------------------------------------------------------------------------

template <class T>
struct View4 {
  T* data;
  int64_t s0, s1, s2, s3;
  T* plane(int64_t n, int64_t c) const { return data + n * s0 + c * s1; }
};

template <class T>
View4<T> view4(const TensorView& t) {
  return {t.data<T>(), t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// What the tables need to know about one call.
template <class T>
struct Context {
  using Acc = AccType<T>;
  int64_t N, C, H, W, Ho, Wo;
  int64_t points;  // Ho * Wo
  int64_t blocks;  // tables per batch
  GridSamplerPadding padding;
  bool align;
  View4<const T> input, grid;
  int64_t point_s2, point_s3;  // strides over (Ho, Wo) of the output (forward) or grad_output (backward)

  int64_t block_end(int64_t b) const { return std::min(points, (b + 1) * kBlock); }
  // Calls fn(p, h, w) for the points of block b (p = h * Wo + w), without a division per point.
  template <class Fn>
  void for_points(int64_t b, Fn&& fn) const {
    const int64_t begin = b * kBlock, end = block_end(b);
    int64_t h = begin / Wo, w = begin % Wo;
    for (int64_t p = begin; p < end; ++p) {
      fn(p, h, w);
      if (++w == Wo) {
        w = 0;
        ++h;
      }
    }
  }
  // Grid value of point p of batch n, as (x, y).
  void grid_at(int64_t n, int64_t h, int64_t w, Acc& x, Acc& y) const {
    const T* g = grid.data + n * grid.s0 + h * grid.s1 + w * grid.s2;
    x = load_as<Acc>(g[0]);
    y = load_as<Acc>(g[grid.s3]);
  }
};

template <class T>
Context<T> make_context(const TensorView& input, const TensorView& grid, const TensorView& points,
                        const GridSampler2dParams& params) {
  Context<T> ctx;
  ctx.N = input.size(0);
  ctx.C = input.size(1);
  ctx.H = input.size(2);
  ctx.W = input.size(3);
  ctx.Ho = grid.size(1);
  ctx.Wo = grid.size(2);
  ctx.points = ctx.Ho * ctx.Wo;
  ctx.blocks = (ctx.points + kBlock - 1) / kBlock;
  ctx.padding = detail::padding_of(params);
  ctx.align = params.align_corners;
  ctx.input = view4<const T>(input);
  ctx.grid = view4<const T>(grid);
  ctx.point_s2 = points.stride(2);
  ctx.point_s3 = points.stride(3);
  return ctx;
}

// ---- bilinear ----------------------------------------------------------------------------------------

// Weights follow PyTorch's CPU kernel: with tx = x - floor(x), ty = y - floor(y),
//   nw = (1-ty)(1-tx), ne = (1-ty)tx, sw = ty(1-tx), se = ty tx,
// and an out-of-bounds corner reads as 0 (the tile's zero pixel), so a NaN coordinate, whose weights are
// NaN, gives NaN as in PyTorch. Points with all four corners inside take the "inner" path (one pixel
// index); the others ("edge") carry each corner's pixel, the zero pixel when outside.
template <class Acc>
struct BilinearTable {
  static constexpr int64_t kCost = 3;  // rough operations per point and tile of channels
  static constexpr bool kHasGridGrad = true;
  static constexpr int64_t kLanes = kTileLanes<Acc>;
  using V = TileVec<Acc>;
  int64_t inner, edge;
  int64_t inner_at[kBlock];  // the point's row in the block's point tile
  int64_t inner_px[kBlock];  // nw corner pixel y * W + x (ne = +1, sw = +W, se = +W+1)
  Acc inner_w[4][kBlock];
  int64_t edge_at[kBlock];
  int64_t edge_px[4][kBlock];  // H * W (the zero pixel) for a corner outside
  Acc edge_w[4][kBlock];
  // Grid gradient only, per slot (inner slots, then edge slots at kBlock + j): the point, the distances
  // (ty, 1-ty, tx, 1-tx) and d coordinate / d grid value along x and y.
  int64_t point[2 * kBlock];
  Acc dist[4][2 * kBlock];
  Acc mult[2][2 * kBlock];

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool with_grad) {
    inner = edge = 0;
    const int64_t W = ctx.W, H = ctx.H, outside = H * W, begin = b * kBlock;
    ctx.for_points(b, [&](int64_t p, int64_t h, int64_t w) {
      Acc gx, gy;
      ctx.grid_at(n, h, w, gx, gy);
      const CoordGrad<Acc> cx = detail::source_coordinate(gx, W, ctx.padding, ctx.align);
      const CoordGrad<Acc> cy = detail::source_coordinate(gy, H, ctx.padding, ctx.align);
      const Acc x0 = std::floor(cx.value), y0 = std::floor(cy.value);
      const Acc tx = cx.value - x0, ty = cy.value - y0;
      const Acc ex = 1 - tx, sy = 1 - ty;
      const bool x_in[2] = {in_bounds(x0, W), in_bounds(x0 + 1, W)};
      const bool y_in[2] = {in_bounds(y0, H), in_bounds(y0 + 1, H)};
      int64_t slot;
      if (x_in[0] && x_in[1] && y_in[0] && y_in[1]) {
        slot = inner++;
        inner_at[slot] = p - begin;
        inner_px[slot] = static_cast<int64_t>(y0) * W + static_cast<int64_t>(x0);
        inner_w[0][slot] = sy * ex;
        inner_w[1][slot] = sy * tx;
        inner_w[2][slot] = ty * ex;
        inner_w[3][slot] = ty * tx;
      } else {
        const int64_t j = edge++;
        slot = kBlock + j;
        edge_at[j] = p - begin;
        // Converted only when inside, so NaN, Inf or huge coordinates never reach an integer.
        const int64_t xs[2] = {x_in[0] ? static_cast<int64_t>(x0) : 0, x_in[1] ? static_cast<int64_t>(x0) + 1 : 0};
        const int64_t ys[2] = {y_in[0] ? static_cast<int64_t>(y0) : 0, y_in[1] ? static_cast<int64_t>(y0) + 1 : 0};
        for (int k = 0; k < 4; ++k) {  // corner k = (row k / 2, column k % 2)
          const int ky = k / 2, kx = k % 2;
          edge_px[k][j] = y_in[ky] && x_in[kx] ? ys[ky] * W + xs[kx] : outside;
          edge_w[k][j] = (ky == 0 ? sy : ty) * (kx == 0 ? ex : tx);
        }
      }
      if (with_grad) {
        point[slot] = p;
        dist[0][slot] = ty;
        dist[1][slot] = sy;
        dist[2][slot] = tx;
        dist[3][slot] = ex;
        mult[0][slot] = cx.grad;
        mult[1][slot] = cy.grad;
      }
    });
  }

  // out (the block's point tile) from `tile` (the input tile, rows of W pixels).
  SG_SIMD_CLONES void forward(const Acc* __restrict tile, int64_t W, Acc* __restrict out) const {
    for (int64_t i = 0; i < inner; ++i) {
      V nw, ne, sw, se;
      load_corners(tile + inner_px[i] * kLanes, W, nw, ne, sw, se);
      store_u(out + inner_at[i] * kLanes,
              nw * inner_w[0][i] + ne * inner_w[1][i] + sw * inner_w[2][i] + se * inner_w[3][i]);
    }
    for (int64_t j = 0; j < edge; ++j) {
      V v[4];
      for (int q = 0; q < 4; ++q) load_u(v[q], tile + edge_px[q][j] * kLanes);
      store_u(out + edge_at[j] * kLanes,
              v[0] * edge_w[0][j] + v[1] * edge_w[1][j] + v[2] * edge_w[2][j] + v[3] * edge_w[3][j]);
    }
  }

  // The backward over the block's grad_output point tile g: kScatter adds the weighted g into the
  // input-gradient tile gi; kGrid writes d output / d coordinate * g of each channel (PyTorch's CPU
  // formula) to the per-slot vectors vx, vy, which add_grid_sums() then sums into the grid gradient.
  // Either part alone, or both in one sweep, gives the same values.
  template <bool kScatter, bool kGrid>
  SG_SIMD_CLONES void backward(const Acc* __restrict tile, const Acc* __restrict g, Acc* __restrict gi, int64_t W,
                               Acc* __restrict vx, Acc* __restrict vy) const {
    for (int64_t i = 0; i < inner; ++i) {
      V gv;
      load_u(gv, g + inner_at[i] * kLanes);
      const int64_t px = inner_px[i];
      if constexpr (kGrid) {
        V nw, ne, sw, se;
        load_corners(tile + px * kLanes, W, nw, ne, sw, se);
        store_u(vx + i * kLanes, ((ne - nw) * dist[1][i] + (se - sw) * dist[0][i]) * gv);
        store_u(vy + i * kLanes, ((sw - nw) * dist[3][i] + (se - ne) * dist[2][i]) * gv);
      }
      if constexpr (kScatter) {
        const int64_t corner[4] = {px, px + 1, px + W, px + W + 1};
        for (int q = 0; q < 4; ++q) add_to(gi + corner[q] * kLanes, inner_w[q][i] * gv);
      }
    }
    for (int64_t j = 0; j < edge; ++j) {
      const int64_t slot = kBlock + j;
      V gv;
      load_u(gv, g + edge_at[j] * kLanes);
      if constexpr (kGrid) {
        V v[4];
        for (int q = 0; q < 4; ++q) load_u(v[q], tile + edge_px[q][j] * kLanes);
        store_u(vx + slot * kLanes, ((v[1] - v[0]) * dist[1][slot] + (v[3] - v[2]) * dist[0][slot]) * gv);
        store_u(vy + slot * kLanes, ((v[2] - v[0]) * dist[3][slot] + (v[3] - v[1]) * dist[2][slot]) * gv);
      }
      if constexpr (kScatter) {
        for (int q = 0; q < 4; ++q) add_to(gi + edge_px[q][j] * kLanes, edge_w[q][j] * gv);
      }
    }
  }

  // ax[slot] += the lanes of vx[slot] summed (rows.h add_lane_sums), likewise ay: once per channel tile.
  void add_grid_sums(const Acc* vx, const Acc* vy, Acc* scratch, Acc* ax, Acc* ay) const {
    for (const auto& [first, n] : {std::pair<int64_t, int64_t>{0, inner}, {kBlock, edge}}) {
      detail::add_lane_sums<kLanes>(vx + first * kLanes, n, scratch, ax + first);
      detail::add_lane_sums<kLanes>(vy + first * kLanes, n, scratch, ay + first);
    }
  }

  template <class T>
  void write_grid_grad(const Context<T>& ctx, const View4<T>& gg, int64_t n, const Acc* ax, const Acc* ay) const {
    auto write = [&](int64_t slot) {
      const int64_t p = point[slot];
      T* out = gg.data + n * gg.s0 + (p / ctx.Wo) * gg.s1 + (p % ctx.Wo) * gg.s2;
      out[0] = store_as<T>(ax[slot] * mult[0][slot]);
      out[gg.s3] = store_as<T>(ay[slot] * mult[1][slot]);
    };
    for (int64_t i = 0; i < inner; ++i) write(i);
    for (int64_t j = 0; j < edge; ++j) write(kBlock + j);
  }

  // The nw, ne, sw, se corners of an inner point whose nw corner is at s (rows of W pixels).
  static SPATIALGRAD_INLINE void load_corners(const Acc* s, int64_t W, V& nw, V& ne, V& sw, V& se) {
    load_u(nw, s);
    load_u(ne, s + kLanes);
    load_u(sw, s + W * kLanes);
    load_u(se, s + (W + 1) * kLanes);
  }
};

// ---- nearest -----------------------------------------------------------------------------------------

// Pixel round(x), round(y) with round half to even (std::nearbyint in the default rounding mode, like
// PyTorch's vectorised round); outside the image it reads 0 (the zero pixel). The grid gradient is zero.
template <class Acc>
struct NearestTable {
  static constexpr int64_t kCost = 1;
  static constexpr bool kHasGridGrad = false;
  static constexpr int64_t kLanes = kTileLanes<Acc>;
  using V = TileVec<Acc>;
  int64_t count;
  int64_t at[kBlock], px[kBlock];

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool /*with_grad*/) {
    count = 0;
    ctx.for_points(b, [&](int64_t p, int64_t h, int64_t w) {
      Acc gx, gy;
      ctx.grid_at(n, h, w, gx, gy);
      const Acc x = std::nearbyint(detail::source_coordinate(gx, ctx.W, ctx.padding, ctx.align).value);
      const Acc y = std::nearbyint(detail::source_coordinate(gy, ctx.H, ctx.padding, ctx.align).value);
      const bool inside = in_bounds(x, ctx.W) && in_bounds(y, ctx.H);
      at[count] = p - b * kBlock;
      px[count] = inside ? static_cast<int64_t>(y) * ctx.W + static_cast<int64_t>(x) : ctx.H * ctx.W;
      ++count;
    });
  }

  SG_SIMD_CLONES void forward(const Acc* __restrict tile, int64_t /*W*/, Acc* __restrict out) const {
    V v;
    for (int64_t i = 0; i < count; ++i) store_u(out + at[i] * kLanes, load_u(v, tile + px[i] * kLanes));
  }

  template <bool kScatter, bool kGrid>
  SG_SIMD_CLONES void backward(const Acc*, const Acc* __restrict g, Acc* __restrict gi, int64_t, Acc*, Acc*) const {
    static_assert(!kGrid, "nearest has no grid gradient");
    V gv;
    for (int64_t i = 0; i < count; ++i) add_to(gi + px[i] * kLanes, load_u(gv, g + at[i] * kLanes));
  }
};

// ---- bicubic -----------------------------------------------------------------------------------------

// 4x4 taps around floor(x), floor(y) of the unnormalised coordinate; each tap coordinate is padded
// (clip / reflect) on its own and reads 0 outside the image (the zero pixel). The grid gradient uses the
// unnormalise derivative only (the padding of integral taps does not move with the coordinate).
template <class Acc>
struct BicubicTable {
  static constexpr int64_t kCost = 10;
  static constexpr bool kHasGridGrad = true;
  static constexpr int64_t kLanes = kTileLanes<Acc>;
  using V = TileVec<Acc>;
  int64_t count;
  int64_t at[kBlock], point[kBlock];
  int64_t px[4][4][kBlock];          // [y tap j][x tap i]: pixel y * W + x, H * W (the zero pixel) when outside
  Acc cx[4][kBlock], cy[4][kBlock];  // tap weights
  Acc dx[4][kBlock], dy[4][kBlock];  // their derivatives (grid gradient only)
  Acc mult_x, mult_y;

  // The four padded tap indices along one axis of size `size`, -1 when outside.
  template <class T>
  static void taps(Acc u, int64_t size, const Context<T>& ctx, int64_t (&index)[4]) {
    const Acc base = std::floor(u);
    for (int i = 0; i < 4; ++i) {
      const Acc tap = detail::apply_padding<Acc>(base + Acc(i - 1), size, ctx.padding, ctx.align).value;
      index[i] = in_bounds(tap, size) ? static_cast<int64_t>(tap) : -1;
    }
  }

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool with_grad) {
    count = 0;
    mult_x = detail::unnormalize<Acc>(0, ctx.W, ctx.align).grad;
    mult_y = detail::unnormalize<Acc>(0, ctx.H, ctx.align).grad;
    ctx.for_points(b, [&](int64_t p, int64_t h, int64_t w) {
      const int64_t slot = count++;
      Acc gx, gy;
      ctx.grid_at(n, h, w, gx, gy);
      const Acc ux = detail::unnormalize(gx, ctx.W, ctx.align).value;
      const Acc uy = detail::unnormalize(gy, ctx.H, ctx.align).value;
      at[slot] = p - b * kBlock;
      point[slot] = p;
      int64_t xs[4], ys[4];
      taps(ux, ctx.W, ctx, xs);
      taps(uy, ctx.H, ctx, ys);
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) px[j][i][slot] = ys[j] >= 0 && xs[i] >= 0 ? ys[j] * ctx.W + xs[i] : ctx.H * ctx.W;
      const Acc tx = ux - std::floor(ux), ty = uy - std::floor(uy);
      Acc wx[4], wy[4];
      detail::Cubic<Acc>::weights(tx, wx);
      detail::Cubic<Acc>::weights(ty, wy);
      for (int i = 0; i < 4; ++i) {
        cx[i][slot] = wx[i];
        cy[i][slot] = wy[i];
      }
      if (with_grad) {
        detail::Cubic<Acc>::derivatives(tx, wx);
        detail::Cubic<Acc>::derivatives(ty, wy);
        for (int i = 0; i < 4; ++i) {
          dx[i][slot] = wx[i];
          dy[i][slot] = wy[i];
        }
      }
    });
  }

  // Rows first (x taps), then the column of row sums (y taps), as PyTorch.
  SG_SIMD_CLONES void forward(const Acc* __restrict tile, int64_t /*W*/, Acc* __restrict out) const {
    for (int64_t p = 0; p < count; ++p) {
      V rows[4];
      for (int j = 0; j < 4; ++j) {
        V v;
        rows[j] = load_u(v, tile + px[j][0][p] * kLanes) * cx[0][p];
        for (int i = 1; i < 4; ++i) rows[j] += load_u(v, tile + px[j][i][p] * kLanes) * cx[i][p];
      }
      store_u(out + at[p] * kLanes, rows[0] * cy[0][p] + rows[1] * cy[1][p] + rows[2] * cy[2][p] + rows[3] * cy[3][p]);
    }
  }

  // As BilinearTable::backward, in PyTorch's tap order (x taps outside, y taps inside).
  template <bool kScatter, bool kGrid>
  SG_SIMD_CLONES void backward(const Acc* __restrict tile, const Acc* __restrict g, Acc* __restrict gi, int64_t,
                               Acc* __restrict vx, Acc* __restrict vy) const {
    for (int64_t p = 0; p < count; ++p) {
      V gv, sx{}, sy{};
      load_u(gv, g + at[p] * kLanes);
      for (int i = 0; i < 4; ++i) {
        const V gx = gv * cx[i][p];
        for (int j = 0; j < 4; ++j) {
          const int64_t pixel = px[j][i][p] * kLanes;
          if constexpr (kScatter) add_to(gi + pixel, V(gx * cy[j][p]));
          if constexpr (kGrid) {
            V value;
            const V vg = load_u(value, tile + pixel) * gv;
            sx -= vg * dx[i][p] * cy[j][p];
            sy -= vg * dy[j][p] * cx[i][p];
          }
        }
      }
      if constexpr (kGrid) {
        store_u(vx + p * kLanes, sx);
        store_u(vy + p * kLanes, sy);
      }
    }
  }

  void add_grid_sums(const Acc* vx, const Acc* vy, Acc* scratch, Acc* ax, Acc* ay) const {
    detail::add_lane_sums<kLanes>(vx, count, scratch, ax);
    detail::add_lane_sums<kLanes>(vy, count, scratch, ay);
  }

  template <class T>
  void write_grid_grad(const Context<T>& ctx, const View4<T>& gg, int64_t n, const Acc* ax, const Acc* ay) const {
    for (int64_t p = 0; p < count; ++p) {
      T* out = gg.data + n * gg.s0 + (point[p] / ctx.Wo) * gg.s1 + (point[p] % ctx.Wo) * gg.s2;
      out[0] = store_as<T>(ax[p] * mult_x);
      out[gg.s3] = store_as<T>(ay[p] * mult_y);
    }
  }
};

// A table allocated without zero-filling (every field a kernel reads is written by build()).
template <class Table>
std::unique_ptr<Table[]> new_tables(int64_t count) {
  return std::unique_ptr<Table[]>(new Table[static_cast<size_t>(count)]);
}

}  // namespace spatialgrad::detail::grid_sampler

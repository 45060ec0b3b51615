// The grid sampler's per-block tables: for kBlock grid points, the pixels and weights of each
// interpolation mode (bilinear, nearest, bicubic), computed once per call and shared by every channel,
// with the forward and backward sweeps over them. The sweeps work on lane-interleaved tiles of
// kTileLanes channels (rows.h pack_lanes): a pixel of the input (or input-gradient) tile and a point of
// the output (or grad_output) tile are one vector of kTileLanes channels, so a tap is one vector load
// and every channel of a block shares the table entry. An input tile frames the image with a border of
// one pixel and two more rows below (TileLayout): zero in the input, a sink in the input gradient. A tap
// outside the image reads and writes a framing pixel, which gives PyTorch's "reads 0, receives nothing"
// without a mask, and lets every bilinear point address its four corners from one index. The drivers
// that split the work and move the tiles are in grid_sampler_2d.cpp.
#pragma once

#include <algorithm>
#include <climits>
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

// Grid points per table. A table (corner pixels and weights of its points) is computed once per call and
// reused for every channel; it stays in L1 while the channel loop runs over it.
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

// The pixels of a tile: rows of W + 2 pixels, image pixel (y, x) at (y + 1) * row + x + 1, so the image
// is framed by pixels that are never written (x = -1 and W; y = -1, H and H + 1). Tables hold pixel
// numbers as int32 (half the table size): planes whose tile would not fit take the plane strategy.
struct TileLayout {
  int32_t row;     // W + 2
  int32_t pixels;  // (H + 3) * row
  int32_t zero;    // pixel (H, -1): it and its ne, sw, se neighbours are framing pixels

  int32_t pixel(int32_t y, int32_t x) const { return (y + 1) * row + x + 1; }
};

// What the tables need to know about one call.
template <class T>
struct Context {
  using Acc = AccType<T>;
  int64_t N, C, H, W, Ho, Wo;
  int64_t points;  // Ho * Wo
  int64_t blocks;  // tables per batch
  GridSamplerPadding padding;
  bool align;
  TileLayout layout{};   // for the tile strategy; valid when tile_pixels <= INT32_MAX
  int64_t tile_pixels;  // (H + 3) * (W + 2)
  View4<const T> input, grid;
  int64_t point_s2, point_s3;  // strides over (Ho, Wo) of the output (forward) or grad_output (backward)

  int64_t block_end(int64_t b) const { return std::min(points, (b + 1) * kBlock); }
  // True when a grid-shaped (N, Ho, Wo, 2) view holds each batch's (x, y) pairs in one dense run.
  template <class U>
  bool dense_pairs(const View4<U>& g) const {
    return g.s3 == 1 && g.s2 == 2 && g.s1 == 2 * Wo;
  }
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
  // The grid values of the points of block b of batch n: x in gx, y in gy. Returns the point count.
  int64_t grid_block(int64_t n, int64_t b, Acc* __restrict gx, Acc* __restrict gy) const {
    const int64_t begin = b * kBlock, count = block_end(b) - begin;
    if (dense_pairs(grid)) {  // the block is one run of (x, y) pairs: split (and widened as a row, rows.h)
      const T* run = grid.data + n * grid.s0 + 2 * begin;
      if constexpr (std::is_same_v<T, Acc>) {
        detail::split_pairs(run, count, gx, gy);
      } else {
        Acc pairs[2 * kBlock];
        detail::load_row(run, 1, 2 * count, pairs);
        detail::split_pairs(pairs, count, gx, gy);
      }
      return count;
    }
    for_points(b, [&](int64_t p, int64_t h, int64_t w) {
      const T* g = grid.data + n * grid.s0 + h * grid.s1 + w * grid.s2;
      gx[p - begin] = load_as<Acc>(g[0]);
      gy[p - begin] = load_as<Acc>(g[grid.s3]);
    });
    return count;
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
  ctx.padding = params.padding_mode;
  ctx.align = params.align_corners;
  // The tile layout, when a framed plane's pixels fit int32 (H, W < 2^31: check_grid_sampler_plane);
  // other planes take the plane strategy, which does not read it.
  ctx.tile_pixels = (ctx.H + 3) * (ctx.W + 2);
  if (ctx.tile_pixels <= INT32_MAX) {
    ctx.layout.row = static_cast<int32_t>(ctx.W + 2);
    ctx.layout.pixels = static_cast<int32_t>(ctx.tile_pixels);
    ctx.layout.zero = static_cast<int32_t>((ctx.H + 1) * (ctx.W + 2));
  }
  ctx.input = view4<const T>(input);
  ctx.grid = view4<const T>(grid);
  ctx.point_s2 = points.stride(2);
  ctx.point_s3 = points.stride(3);
  return ctx;
}

// The grid gradient of block b of batch n from its slots' lane vectors vx, vy (the channel sums still
// spread over the lanes): each slot's lanes summed in lane order (rows.h add_lane_sums), times the
// table's d coordinate / d grid value. `scratch` holds kBlock * kTileLanes values.
template <class T, class Table>
void write_grid_grad(const Table& table, const Context<T>& ctx, const View4<T>& gg, int64_t n, int64_t b,
                     const AccType<T>* vx, const AccType<T>* vy, AccType<T>* scratch) {
  using Acc = AccType<T>;
  Acc sx[kBlock] = {}, sy[kBlock] = {};
  detail::add_lane_sums<kTileLanes<Acc>>(vx, table.count, scratch, sx);
  detail::add_lane_sums<kTileLanes<Acc>>(vy, table.count, scratch, sy);
  if (ctx.dense_pairs(gg)) {  // one run of (x, y) pairs: rounded as a row (rows.h)
    Acc pairs[2 * kBlock];
    for (int64_t i = 0; i < table.count; ++i) {
      pairs[2 * i] = sx[i] * table.mult[0][i];
      pairs[2 * i + 1] = sy[i] * table.mult[1][i];
    }
    detail::store_row(pairs, 2 * table.count, gg.data + n * gg.s0 + 2 * b * kBlock, 1);
    return;
  }
  ctx.for_points(b, [&](int64_t p, int64_t h, int64_t w) {
    const int64_t i = p - b * kBlock;
    T* out = gg.data + n * gg.s0 + h * gg.s1 + w * gg.s2;
    out[0] = store_as<T>(sx[i] * table.mult[0][i]);
    out[gg.s3] = store_as<T>(sy[i] * table.mult[1][i]);
  });
}

// ---- bilinear ----------------------------------------------------------------------------------------

// Weights follow PyTorch's CPU kernel: with tx = x - floor(x), ty = y - floor(y),
//   nw = (1-ty)(1-tx), ne = (1-ty)tx, sw = ty(1-tx), se = ty tx,
// and an out-of-bounds corner reads as 0 (a framing pixel), so a NaN coordinate, whose weights are NaN,
// gives NaN as in PyTorch. A point whose nw corner is within one pixel of the image addresses its corners
// from that corner's pixel; any other point has all four corners outside and uses the layout's zero pixel.
template <class Acc>
struct BilinearTable {
  static constexpr int64_t kCost = 3;  // rough operations per point and tile of channels
  static constexpr bool kHasGridGrad = true;
  static constexpr int64_t kLanes = kTileLanes<Acc>;
  using V = TileVec<Acc>;
  int64_t count;
  int32_t px[kBlock];   // the nw corner's tile pixel (ne = +1, sw = +row, se = +row+1)
  Acc w[4][kBlock];     // nw, ne, sw, se
  Acc dist[4][kBlock];  // ty, 1-ty, tx, 1-tx (read by the grid gradient)
  Acc mult[2][kBlock];  // d coordinate / d grid value along x and y

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool /*with_grad: distances are always filled*/) {
    Acc gx[kBlock], gy[kBlock], cx[kBlock], cy[kBlock];
    count = ctx.grid_block(n, b, gx, gy);
    detail::source_coordinates(gx, count, ctx.W, ctx.padding, ctx.align, cx, mult[0]);
    detail::source_coordinates(gy, count, ctx.H, ctx.padding, ctx.align, cy, mult[1]);
    fill(cx, cy, static_cast<Acc>(ctx.W), static_cast<Acc>(ctx.H), ctx.layout);
  }

  // Corner pixels, weights and distances from the coordinates: branch-free, vectorised.
  template <class Isa>
  SG_SIMD_KERNEL void fill(Isa, const Acc* __restrict cx, const Acc* __restrict cy, Acc W, Acc H, TileLayout layout) {
    for (int64_t i = 0; i < count; ++i) {
      const Acc x0 = detail::floor_of(cx[i]), y0 = detail::floor_of(cy[i]);
      const Acc tx = cx[i] - x0, ty = cy[i] - y0, ex = 1 - tx, sy = 1 - ty;
      // Converted only when inside, so NaN, Inf or huge coordinates never reach an integer.
      const bool framed = (x0 >= -1) & (x0 < W) & (y0 >= -1) & (y0 < H);  // & for &&: see clip_to
      const int32_t x = static_cast<int32_t>(framed ? x0 : Acc(0)), y = static_cast<int32_t>(framed ? y0 : Acc(0));
      px[i] = framed ? layout.pixel(y, x) : layout.zero;
      w[0][i] = sy * ex;
      w[1][i] = sy * tx;
      w[2][i] = ty * ex;
      w[3][i] = ty * tx;
      dist[0][i] = ty;  // (also in the forward: four stores, cheaper than a second floor pass)
      dist[1][i] = sy;
      dist[2][i] = tx;
      dist[3][i] = ex;
    }
  }
  void fill(const Acc* cx, const Acc* cy, Acc W, Acc H, TileLayout layout) {
    SG_SIMD_DISPATCH(fill(isa, cx, cy, W, H, layout));
  }

  // out (the block's point tile) from `tile` (the input tile).
  template <class Isa>
  SG_SIMD_KERNEL void forward(Isa, const Acc* __restrict tile, int64_t row, Acc* __restrict out) const {
    for (int64_t i = 0; i < count; ++i) {
      V nw, ne, sw, se;
      load_corners(tile + int64_t{px[i]} * kLanes, row, nw, ne, sw, se);
      store_u(out + i * kLanes, nw * w[0][i] + ne * w[1][i] + sw * w[2][i] + se * w[3][i]);
    }
  }
  void forward(const Acc* tile, int64_t row, Acc* out) const { SG_SIMD_DISPATCH(forward(isa, tile, row, out)); }

  // The backward over the block's grad_output point tile g: kScatter adds the weighted g into the
  // input-gradient tile gi; kGrid adds d output / d coordinate * g of each channel (PyTorch's CPU
  // formula) to the slot's lane vectors in vx, vy, which hold the sums over the channel tiles so far.
  // Either part alone, or both in one sweep, gives the same values.
  template <bool kScatter, bool kGrid, class Isa>
  SG_SIMD_KERNEL void backward(Isa, const Acc* __restrict tile, const Acc* __restrict g, Acc* __restrict gi, int64_t row,
                               Acc* __restrict vx, Acc* __restrict vy) const {
    for (int64_t i = 0; i < count; ++i) {
      V gv;
      load_u(gv, g + i * kLanes);
      const int64_t nw = int64_t{px[i]} * kLanes;
      if constexpr (kGrid) {
        V v[4];
        load_corners(tile + nw, row, v[0], v[1], v[2], v[3]);
        add_to(vx + i * kLanes, V(((v[1] - v[0]) * dist[1][i] + (v[3] - v[2]) * dist[0][i]) * gv));
        add_to(vy + i * kLanes, V(((v[2] - v[0]) * dist[3][i] + (v[3] - v[1]) * dist[2][i]) * gv));
      }
      if constexpr (kScatter) {
        const int64_t corner[4] = {nw, nw + kLanes, nw + row * kLanes, nw + (row + 1) * kLanes};
        for (int q = 0; q < 4; ++q) add_to(gi + corner[q], V(w[q][i] * gv));
      }
    }
  }
  template <bool kScatter, bool kGrid>
  void backward(const Acc* tile, const Acc* g, Acc* gi, int64_t row, Acc* vx, Acc* vy) const {
    SG_SIMD_DISPATCH(this->template backward<kScatter, kGrid>(isa, tile, g, gi, row, vx, vy));
  }

  // The nw, ne, sw, se corners of a point whose nw corner is at s (rows of `row` pixels).
  static SPATIALGRAD_INLINE void load_corners(const Acc* s, int64_t row, V& nw, V& ne, V& sw, V& se) {
    load_u(nw, s);
    load_u(ne, s + kLanes);
    load_u(sw, s + row * kLanes);
    load_u(se, s + (row + 1) * kLanes);
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
  int32_t px[kBlock];

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool /*with_grad*/) {
    Acc gx[kBlock], gy[kBlock], cx[kBlock], cy[kBlock], unused[kBlock];
    count = ctx.grid_block(n, b, gx, gy);
    detail::source_coordinates(gx, count, ctx.W, ctx.padding, ctx.align, cx, unused);
    detail::source_coordinates(gy, count, ctx.H, ctx.padding, ctx.align, cy, unused);
    fill(cx, cy, static_cast<Acc>(ctx.W), static_cast<Acc>(ctx.H), ctx.layout);
  }

  template <class Isa>
  SG_SIMD_KERNEL void fill(Isa, const Acc* __restrict cx, const Acc* __restrict cy, Acc W, Acc H, TileLayout layout) {
    for (int64_t i = 0; i < count; ++i) {
      const Acc x = std::nearbyint(cx[i]), y = std::nearbyint(cy[i]);
      const bool inside = (x >= 0) & (x < W) & (y >= 0) & (y < H);  // false for NaN; & for &&: see clip_to
      const int32_t xi = static_cast<int32_t>(inside ? x : Acc(0)), yi = static_cast<int32_t>(inside ? y : Acc(0));
      px[i] = inside ? layout.pixel(yi, xi) : layout.zero;
    }
  }
  void fill(const Acc* cx, const Acc* cy, Acc W, Acc H, TileLayout layout) {
    SG_SIMD_DISPATCH(fill(isa, cx, cy, W, H, layout));
  }

  template <class Isa>
  SG_SIMD_KERNEL void forward(Isa, const Acc* __restrict tile, Acc* __restrict out) const {
    V v;
    for (int64_t i = 0; i < count; ++i) store_u(out + i * kLanes, load_u(v, tile + int64_t{px[i]} * kLanes));
  }
  void forward(const Acc* tile, int64_t /*row*/, Acc* out) const { SG_SIMD_DISPATCH(forward(isa, tile, out)); }

  template <bool kScatter, bool kGrid, class Isa>
  SG_SIMD_KERNEL void backward(Isa, const Acc* __restrict g, Acc* __restrict gi) const {
    static_assert(!kGrid, "nearest has no grid gradient");
    V gv;
    for (int64_t i = 0; i < count; ++i) add_to(gi + int64_t{px[i]} * kLanes, load_u(gv, g + i * kLanes));
  }
  template <bool kScatter, bool kGrid>
  void backward(const Acc*, const Acc* g, Acc* gi, int64_t, Acc*, Acc*) const {
    SG_SIMD_DISPATCH(this->template backward<kScatter, kGrid>(isa, g, gi));
  }
};

// ---- bicubic -----------------------------------------------------------------------------------------

// One bicubic point: its unnormalised coordinates, the weights of its taps along x and y and (with_grad)
// their derivatives; shared by the tile and plane tables.
template <class Acc>
struct BicubicPoint {
  Acc ux, uy;
  Acc wx[4], wy[4], dx[4] = {}, dy[4] = {};

  template <class T>
  BicubicPoint(const Context<T>& ctx, Acc gx, Acc gy, bool with_grad)
      : ux(detail::unnormalize(gx, ctx.W, ctx.align).value), uy(detail::unnormalize(gy, ctx.H, ctx.align).value) {
    const Acc tx = ux - std::floor(ux), ty = uy - std::floor(uy);
    detail::Cubic<Acc>::weights(tx, wx);
    detail::Cubic<Acc>::weights(ty, wy);
    if (with_grad) {
      detail::Cubic<Acc>::derivatives(tx, dx);
      detail::Cubic<Acc>::derivatives(ty, dy);
    }
  }
};

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
  int32_t px[4][4][kBlock];          // [y tap j][x tap i]: the tap's tile pixel, the zero pixel when outside
  Acc cx[4][kBlock], cy[4][kBlock];  // tap weights
  Acc dx[4][kBlock], dy[4][kBlock];  // their derivatives (grid gradient only)
  Acc mult[2][kBlock];               // d coordinate / d grid value along x and y (the same for every point)

  // The four padded tap indices along one axis of size `size`, -1 when outside.
  template <class T>
  static void taps(Acc u, int64_t size, const Context<T>& ctx, int32_t (&index)[4]) {
    const Acc base = std::floor(u);
    for (int i = 0; i < 4; ++i) {
      const Acc tap = detail::apply_padding<Acc>(base + Acc(i - 1), size, ctx.padding, ctx.align).value;
      index[i] = in_bounds(tap, size) ? static_cast<int32_t>(tap) : -1;
    }
  }

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool with_grad) {
    Acc gx[kBlock], gy[kBlock];
    count = ctx.grid_block(n, b, gx, gy);
    std::fill(mult[0], mult[0] + count, detail::unnormalize<Acc>(0, ctx.W, ctx.align).grad);
    std::fill(mult[1], mult[1] + count, detail::unnormalize<Acc>(0, ctx.H, ctx.align).grad);
    for (int64_t p = 0; p < count; ++p) {
      const BicubicPoint<Acc> point(ctx, gx[p], gy[p], with_grad);
      int32_t xs[4], ys[4];
      taps(point.ux, ctx.W, ctx, xs);
      taps(point.uy, ctx.H, ctx, ys);
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i)
          px[j][i][p] = ys[j] >= 0 && xs[i] >= 0 ? ctx.layout.pixel(ys[j], xs[i]) : ctx.layout.zero;
      for (int i = 0; i < 4; ++i) {
        cx[i][p] = point.wx[i];
        cy[i][p] = point.wy[i];
        dx[i][p] = point.dx[i];
        dy[i][p] = point.dy[i];
      }
    }
  }

  // Rows first (x taps), then the column of row sums (y taps), as PyTorch.
  template <class Isa>
  SG_SIMD_KERNEL void forward(Isa, const Acc* __restrict tile, Acc* __restrict out) const {
    for (int64_t p = 0; p < count; ++p) {
      V rows[4];
      for (int j = 0; j < 4; ++j) {
        V v;
        rows[j] = load_u(v, tile + int64_t{px[j][0][p]} * kLanes) * cx[0][p];
        for (int i = 1; i < 4; ++i) rows[j] += load_u(v, tile + int64_t{px[j][i][p]} * kLanes) * cx[i][p];
      }
      store_u(out + p * kLanes, rows[0] * cy[0][p] + rows[1] * cy[1][p] + rows[2] * cy[2][p] + rows[3] * cy[3][p]);
    }
  }
  void forward(const Acc* tile, int64_t /*row*/, Acc* out) const { SG_SIMD_DISPATCH(forward(isa, tile, out)); }

  // As BilinearTable::backward, in PyTorch's tap order (x taps outside, y taps inside).
  template <bool kScatter, bool kGrid, class Isa>
  SG_SIMD_KERNEL void backward(Isa, const Acc* __restrict tile, const Acc* __restrict g, Acc* __restrict gi,
                               Acc* __restrict vx, Acc* __restrict vy) const {
    for (int64_t p = 0; p < count; ++p) {
      V gv, sx{}, sy{};
      load_u(gv, g + p * kLanes);
      for (int i = 0; i < 4; ++i) {
        const V gx = gv * cx[i][p];
        for (int j = 0; j < 4; ++j) {
          const int64_t pixel = int64_t{px[j][i][p]} * kLanes;
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
        add_to(vx + p * kLanes, sx);
        add_to(vy + p * kLanes, sy);
      }
    }
  }
  template <bool kScatter, bool kGrid>
  void backward(const Acc* tile, const Acc* g, Acc* gi, int64_t, Acc* vx, Acc* vy) const {
    SG_SIMD_DISPATCH(this->template backward<kScatter, kGrid>(isa, tile, g, gi, vx, vy));
  }
};

// A table allocated without zero-filling (every field a kernel reads is written by build()).
template <class Table>
std::unique_ptr<Table[]> new_tables(int64_t count) {
  return std::unique_ptr<Table[]>(new Table[static_cast<size_t>(count)]);
}

}  // namespace spatialgrad::detail::grid_sampler

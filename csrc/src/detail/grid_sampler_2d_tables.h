// The grid sampler's per-block tables: for kBlock grid points, the corner offsets, weights and masks of
// each interpolation mode (bilinear, nearest, bicubic), computed once per call and shared by every
// channel, with the per-channel forward and backward sweeps over them. The drivers that split the work
// are in grid_sampler_2d.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "grid_sampler_2d_coords.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/grid_sampler_2d.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail::grid_sampler {

using detail::CoordGrad;
using detail::in_bounds;
using detail::keep_if;
using detail::mask_of;
using detail::MaskBits;

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
// and an out-of-bounds corner reads as 0 (so a NaN coordinate, whose weights are NaN, gives NaN as in
// PyTorch). Points with all four corners inside take the unmasked path; points with finite weights and
// no corner inside ("dead") output 0, pass nothing to the input and 0 * g to the grid.
template <class Acc>
struct BilinearTable {
  static constexpr int64_t kCost = 12;  // rough operations per point and channel
  static constexpr bool kHasGridGrad = true;
  using Bits = MaskBits<Acc>;
  int64_t inner, edge, dead;
  // Points whose four corners are inside: nw corner (ne = +sW, sw = +sH, se = +sH+sW) and weights.
  int64_t inner_at[kBlock];     // offset of the point in an output / grad_output plane
  int64_t inner_src[kBlock];    // nw corner in an input plane
  int64_t inner_dense[kBlock];  // nw corner as y * W + x (input-gradient planes are dense)
  Acc inner_w[4][kBlock];
  // Other points: each corner with its own offsets and a keep-mask.
  int64_t edge_at[kBlock];
  int64_t edge_src[4][kBlock];
  int64_t edge_dense[4][kBlock];
  Acc edge_w[4][kBlock];
  Bits edge_mask[4][kBlock];
  // Dead points; their grid-gradient slots are 2 * kBlock - 1 - m (edge + dead <= kBlock, so no overlap).
  int64_t dead_at[kBlock];
  // Grid gradient only, per slot (inner slots, then edge slots at kBlock + j): the point, the distances
  // (ty, 1-ty, tx, 1-tx) and d coordinate / d grid value along x and y.
  int64_t point[2 * kBlock];
  Acc dist[4][2 * kBlock];
  Acc mult[2][2 * kBlock];

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool with_grad) {
    inner = edge = dead = 0;
    const int64_t sH = ctx.input.s2, sW = ctx.input.s3, W = ctx.W, H = ctx.H;
    ctx.for_points(b, [&](int64_t p, int64_t h, int64_t w) {
      Acc gx, gy;
      ctx.grid_at(n, h, w, gx, gy);
      const CoordGrad<Acc> cx = detail::source_coordinate(gx, W, ctx.padding, ctx.align);
      const CoordGrad<Acc> cy = detail::source_coordinate(gy, H, ctx.padding, ctx.align);
      const Acc x0 = std::floor(cx.value), y0 = std::floor(cy.value);
      const Acc tx = cx.value - x0, ty = cy.value - y0;
      const Acc ex = 1 - tx, sy = 1 - ty;
      // Corner k = (row k / 2, column k % 2); computed where stored (a local array costs a stack round trip).
      auto weight = [&](int k) { return (k < 2 ? sy : ty) * (k % 2 == 0 ? ex : tx); };
      const bool x_in[2] = {in_bounds(x0, W), in_bounds(x0 + 1, W)};
      const bool y_in[2] = {in_bounds(y0, H), in_bounds(y0 + 1, H)};
      const int64_t at = h * ctx.point_s2 + w * ctx.point_s3;
      int64_t slot;
      if (x_in[0] && x_in[1] && y_in[0] && y_in[1]) {
        slot = inner++;
        const int64_t xi = static_cast<int64_t>(x0), yi = static_cast<int64_t>(y0);
        inner_at[slot] = at;
        inner_src[slot] = yi * sH + xi * sW;
        inner_dense[slot] = yi * W + xi;
        inner_w[0][slot] = sy * ex;
        inner_w[1][slot] = sy * tx;
        inner_w[2][slot] = ty * ex;
        inner_w[3][slot] = ty * tx;
      } else if (!(x_in[0] || x_in[1]) || !(y_in[0] || y_in[1])) {
        if (std::isfinite(cx.value) && std::isfinite(cy.value)) {
          const int64_t m = dead++;
          slot = 2 * kBlock - 1 - m;
          dead_at[m] = at;
        } else {
          // NaN / Inf coordinate: NaN weights, which the masked path turns into NaN like PyTorch.
          const int64_t j = edge++;
          slot = kBlock + j;
          edge_at[j] = at;
          for (int k = 0; k < 4; ++k) {
            edge_src[k][j] = edge_dense[k][j] = 0;
            edge_w[k][j] = weight(k);
            edge_mask[k][j] = mask_of<Acc>(false);
          }
        }
      } else {
        const int64_t j = edge++;
        slot = kBlock + j;
        // Converted only when inside, so NaN, Inf or huge coordinates never reach an integer.
        const int64_t xs[2] = {x_in[0] ? static_cast<int64_t>(x0) : 0, x_in[1] ? static_cast<int64_t>(x0) + 1 : 0};
        const int64_t ys[2] = {y_in[0] ? static_cast<int64_t>(y0) : 0, y_in[1] ? static_cast<int64_t>(y0) + 1 : 0};
        edge_at[j] = at;
        for (int k = 0; k < 4; ++k) {
          const int ky = k / 2, kx = k % 2;
          const bool inside = y_in[ky] && x_in[kx];
          edge_src[k][j] = inside ? ys[ky] * sH + xs[kx] * sW : 0;
          edge_dense[k][j] = inside ? ys[ky] * W + xs[kx] : 0;
          edge_w[k][j] = weight(k);
          edge_mask[k][j] = mask_of<Acc>(inside);
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

  // kGroup channels at a time (planes src_step / dst_step apart), so each table entry is loaded once
  // per group.
  template <int kGroup, class T>
  void forward(const Context<T>& ctx, const T* __restrict src, int64_t src_step, T* __restrict dst,
               int64_t dst_step) const {
    const int64_t sH = ctx.input.s2, sW = ctx.input.s3, sHW = sH + sW;
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t o = inner_src[i], at = inner_at[i];
      const Acc w0 = inner_w[0][i], w1 = inner_w[1][i], w2 = inner_w[2][i], w3 = inner_w[3][i];
      for (int k = 0; k < kGroup; ++k) {
        const T* s = src + k * src_step + o;
        dst[k * dst_step + at] = store_as<T>(load_as<Acc>(s[0]) * w0 + load_as<Acc>(s[sW]) * w1 +
                                             load_as<Acc>(s[sH]) * w2 + load_as<Acc>(s[sHW]) * w3);
      }
    }
    for (int64_t j = 0; j < edge; ++j) {
      for (int k = 0; k < kGroup; ++k) {
        const T* s = src + k * src_step;
        Acc v[4];
        for (int q = 0; q < 4; ++q) v[q] = keep_if(load_as<Acc>(s[edge_src[q][j]]), edge_mask[q][j]);
        dst[k * dst_step + edge_at[j]] =
            store_as<T>(v[0] * edge_w[0][j] + v[1] * edge_w[1][j] + v[2] * edge_w[2][j] + v[3] * edge_w[3][j]);
      }
    }
    for (int64_t m = 0; m < dead; ++m)
      for (int k = 0; k < kGroup; ++k) dst[k * dst_step + dead_at[m]] = store_as<T>(Acc(0));
  }

  // kGroup channels of the backward (planes *_step apart): kScatter adds this table's share of the
  // grad_output planes g into the dense input-gradient planes gi (rows of W); kGrid adds
  // d output / d coordinate * g into the per-slot grid-gradient sums ax, ay (PyTorch's CPU formula),
  // channel after channel. Either part alone, or both in one sweep, gives the same sums.
  template <bool kScatter, bool kGrid, int kGroup, class T>
  void backward(const Context<T>& ctx, const T* __restrict src, int64_t src_step, const T* __restrict g, int64_t g_step,
                Acc* __restrict gi, int64_t gi_step, Acc* __restrict ax, Acc* __restrict ay) const {
    const int64_t sH = ctx.input.s2, sW = ctx.input.s3, sHW = sH + sW, W = ctx.W;
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t at = inner_at[i], o = inner_src[i], d = inner_dense[i];
      Acc sx = kGrid ? ax[i] : Acc(0), sy = kGrid ? ay[i] : Acc(0);
      for (int k = 0; k < kGroup; ++k) {
        const Acc gv = load_as<Acc>(g[k * g_step + at]);
        if constexpr (kGrid) {
          const T* s = src + k * src_step + o;
          const Acc nw = load_as<Acc>(s[0]), ne = load_as<Acc>(s[sW]), sw = load_as<Acc>(s[sH]),
                    se = load_as<Acc>(s[sHW]);
          sx += ((ne - nw) * dist[1][i] + (se - sw) * dist[0][i]) * gv;
          sy += ((sw - nw) * dist[3][i] + (se - ne) * dist[2][i]) * gv;
        }
        if constexpr (kScatter) {
          Acc* dd = gi + k * gi_step + d;
          dd[0] += inner_w[0][i] * gv;
          dd[1] += inner_w[1][i] * gv;
          dd[W] += inner_w[2][i] * gv;
          dd[W + 1] += inner_w[3][i] * gv;
        }
      }
      if constexpr (kGrid) {
        ax[i] = sx;
        ay[i] = sy;
      }
    }
    for (int64_t j = 0; j < edge; ++j) {
      const int64_t slot = kBlock + j;
      for (int k = 0; k < kGroup; ++k) {
        const Acc gv = load_as<Acc>(g[k * g_step + edge_at[j]]);
        if constexpr (kGrid) {
          const T* s = src + k * src_step;
          Acc v[4];
          for (int q = 0; q < 4; ++q) v[q] = keep_if(load_as<Acc>(s[edge_src[q][j]]), edge_mask[q][j]);
          ax[slot] += ((v[1] - v[0]) * dist[1][slot] + (v[3] - v[2]) * dist[0][slot]) * gv;
          ay[slot] += ((v[2] - v[0]) * dist[3][slot] + (v[3] - v[1]) * dist[2][slot]) * gv;
        }
        if constexpr (kScatter) {
          // A masked corner adds exactly +0 to pixel 0 (never 0 * Inf = NaN).
          Acc* plane = gi + k * gi_step;
          for (int q = 0; q < 4; ++q) plane[edge_dense[q][j]] += keep_if(edge_w[q][j] * gv, edge_mask[q][j]);
        }
      }
    }
    if constexpr (kGrid) {
      // All corners read 0: PyTorch's sum is 0 * g per channel (NaN when g is NaN or Inf).
      for (int64_t m = 0; m < dead; ++m) {
        const int64_t slot = 2 * kBlock - 1 - m;
        for (int k = 0; k < kGroup; ++k) {
          const Acc zero_term = Acc(0) * load_as<Acc>(g[k * g_step + dead_at[m]]);
          ax[slot] += zero_term;
          ay[slot] += zero_term;
        }
      }
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
    for (int64_t m = 0; m < dead; ++m) write(2 * kBlock - 1 - m);
  }
};

// ---- nearest -----------------------------------------------------------------------------------------

// Pixel round(x), round(y) with round half to even (std::nearbyint in the default rounding mode, like
// PyTorch's vectorised round); outside the image it reads 0. The grid gradient is zero.
template <class Acc>
struct NearestTable {
  static constexpr int64_t kCost = 2;
  static constexpr bool kHasGridGrad = false;
  int64_t inside, outside;
  int64_t in_at[kBlock], in_src[kBlock], in_dense[kBlock];
  int64_t out_at[kBlock];

  template <class T>
  void build(const Context<T>& ctx, int64_t n, int64_t b, bool /*with_grad*/) {
    inside = outside = 0;
    ctx.for_points(b, [&](int64_t, int64_t h, int64_t w) {
      Acc gx, gy;
      ctx.grid_at(n, h, w, gx, gy);
      const Acc x = std::nearbyint(detail::source_coordinate(gx, ctx.W, ctx.padding, ctx.align).value);
      const Acc y = std::nearbyint(detail::source_coordinate(gy, ctx.H, ctx.padding, ctx.align).value);
      const int64_t at = h * ctx.point_s2 + w * ctx.point_s3;
      if (in_bounds(x, ctx.W) && in_bounds(y, ctx.H)) {
        const int64_t xi = static_cast<int64_t>(x), yi = static_cast<int64_t>(y);
        in_at[inside] = at;
        in_src[inside] = yi * ctx.input.s2 + xi * ctx.input.s3;
        in_dense[inside] = yi * ctx.W + xi;
        ++inside;
      } else {
        out_at[outside++] = at;
      }
    });
  }

  template <int kGroup, class T>
  void forward(const Context<T>&, const T* __restrict src, int64_t src_step, T* __restrict dst,
               int64_t dst_step) const {
    for (int64_t i = 0; i < inside; ++i)
      for (int k = 0; k < kGroup; ++k) dst[k * dst_step + in_at[i]] = src[k * src_step + in_src[i]];
    for (int64_t j = 0; j < outside; ++j)
      for (int k = 0; k < kGroup; ++k) dst[k * dst_step + out_at[j]] = store_as<T>(Acc(0));
  }

  template <bool kScatter, bool kGrid, int kGroup, class T>
  void backward(const Context<T>&, const T*, int64_t, const T* __restrict g, int64_t g_step, Acc* __restrict gi,
                int64_t gi_step, Acc*, Acc*) const {
    static_assert(!kGrid, "nearest has no grid gradient");
    for (int64_t i = 0; i < inside; ++i)
      for (int k = 0; k < kGroup; ++k) gi[k * gi_step + in_dense[i]] += load_as<Acc>(g[k * g_step + in_at[i]]);
  }
};

// ---- bicubic -----------------------------------------------------------------------------------------

// 4x4 taps around floor(x), floor(y) of the unnormalised coordinate; each tap coordinate is padded
// (clip / reflect) on its own and reads 0 outside the image. The grid gradient uses the unnormalise
// derivative only (the padding of integral taps does not move with the coordinate).
template <class Acc>
struct BicubicTable {
  static constexpr int64_t kCost = 40;
  static constexpr bool kHasGridGrad = true;
  using Bits = MaskBits<Acc>;
  int64_t count;
  int64_t at[kBlock], point[kBlock];
  int64_t src_x[4][kBlock], src_y[4][kBlock];      // tap offsets x * sW, y * sH in an input plane
  int64_t dense_x[4][kBlock], dense_y[4][kBlock];  // x and y * W in a dense plane
  Bits mask_x[4][kBlock], mask_y[4][kBlock];
  Acc cx[4][kBlock], cy[4][kBlock];  // tap weights
  Acc dx[4][kBlock], dy[4][kBlock];  // their derivatives (grid gradient only)
  Acc mult_x, mult_y;

  template <class T>
  static void taps(Acc u, int64_t size, int64_t stride, int64_t dense_step, const Context<T>& ctx, int64_t slot,
                   int64_t (&src)[4][kBlock], int64_t (&dense)[4][kBlock], Bits (&mask)[4][kBlock]) {
    const Acc base = std::floor(u);
    for (int i = 0; i < 4; ++i) {
      const Acc tap = detail::apply_padding<Acc>(base + Acc(i - 1), size, ctx.padding, ctx.align).value;
      const bool inside = in_bounds(tap, size);
      const int64_t index = inside ? static_cast<int64_t>(tap) : 0;
      src[i][slot] = index * stride;
      dense[i][slot] = index * dense_step;
      mask[i][slot] = mask_of<Acc>(inside);
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
      at[slot] = h * ctx.point_s2 + w * ctx.point_s3;
      point[slot] = p;
      taps(ux, ctx.W, ctx.input.s3, 1, ctx, slot, src_x, dense_x, mask_x);
      taps(uy, ctx.H, ctx.input.s2, ctx.W, ctx, slot, src_y, dense_y, mask_y);
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

  template <int kGroup, class T>
  void forward(const Context<T>&, const T* __restrict src, int64_t src_step, T* __restrict dst,
               int64_t dst_step) const {
    for (int64_t p = 0; p < count; ++p) {
      for (int k = 0; k < kGroup; ++k) {
        Acc rows[4];
        for (int j = 0; j < 4; ++j) {
          const T* row = src + k * src_step + src_y[j][p];
          const Bits my = mask_y[j][p];
          Acc sum = cx[0][p] * keep_if(load_as<Acc>(row[src_x[0][p]]), mask_x[0][p] & my);
          for (int i = 1; i < 4; ++i) sum += cx[i][p] * keep_if(load_as<Acc>(row[src_x[i][p]]), mask_x[i][p] & my);
          rows[j] = sum;
        }
        dst[k * dst_step + at[p]] =
            store_as<T>(cy[0][p] * rows[0] + cy[1][p] * rows[1] + cy[2][p] * rows[2] + cy[3][p] * rows[3]);
      }
    }
  }

  // The four y taps of x tap i of point p: scatter gv-weighted values into the input-gradient column
  // `gi_column`, and/or subtract the grid-gradient terms of input column `column` from (sx, sy).
  template <bool kScatter, bool kGrid, class T>
  SPATIALGRAD_INLINE void backward_column(int64_t p, int i, Acc gv, const T* column, Acc* gi_column, Acc& sx,
                                          Acc& sy) const {
    const Acc gx = gv * cx[i][p];
    for (int j = 0; j < 4; ++j) {
      const Bits keep = mask_x[i][p] & mask_y[j][p];
      if constexpr (kScatter) gi_column[dense_y[j][p]] += keep_if(gx * cy[j][p], keep);
      if constexpr (kGrid) {
        const Acc vg = keep_if(load_as<Acc>(column[src_y[j][p]]), keep) * gv;
        sx -= vg * dx[i][p] * cy[j][p];
        sy -= vg * dy[j][p] * cx[i][p];
      }
    }
  }

  // As BilinearTable::backward, in PyTorch's tap order (x taps outside, y taps inside).
  template <bool kScatter, bool kGrid, int kGroup, class T>
  void backward(const Context<T>&, const T* __restrict src, int64_t src_step, const T* __restrict g, int64_t g_step,
                Acc* __restrict gi, int64_t gi_step, Acc* __restrict ax, Acc* __restrict ay) const {
    for (int64_t p = 0; p < count; ++p) {
      Acc sx = kGrid ? ax[p] : Acc(0), sy = kGrid ? ay[p] : Acc(0);
      for (int k = 0; k < kGroup; ++k) {
        const Acc gv = load_as<Acc>(g[k * g_step + at[p]]);
        for (int i = 0; i < 4; ++i) {
          const T* column = kGrid ? src + k * src_step + src_x[i][p] : nullptr;
          Acc* gi_column = kScatter ? gi + k * gi_step + dense_x[i][p] : nullptr;
          backward_column<kScatter, kGrid>(p, i, gv, column, gi_column, sx, sy);
        }
      }
      if constexpr (kGrid) {
        ax[p] = sx;
        ay[p] = sy;
      }
    }
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

#include "spatialgrad/grid_sampler_2d.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "detail/checks.h"
#include "detail/float_staging.h"
#include "detail/grid_sampler_2d_checks.h"
#include "detail/grid_sampler_2d_coords.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad {
namespace {

using detail::CoordGrad;
using detail::in_bounds;
using detail::keep_if;
using detail::mask_of;
using detail::MaskBits;

constexpr const char* kForward = "grid_sampler_2d";
constexpr const char* kBackward = "grid_sampler_2d_backward";
// Grid points per table. A table (corner offsets, weights, masks of its points) is computed once per
// call and reused for every channel; it stays in L1 while the channel loop runs over it.
constexpr int64_t kBlock = 256;
// Input-gradient planes per backward task, at most.
constexpr int64_t kMaxChannelBlock = 8;

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
  int64_t padding;
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
  ctx.padding = params.padding_mode;
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

  // As BilinearTable::backward, in PyTorch's tap order (x taps outside, y taps inside).
  template <bool kScatter, bool kGrid, int kGroup, class T>
  void backward(const Context<T>&, const T* __restrict src, int64_t src_step, const T* __restrict g, int64_t g_step,
                Acc* __restrict gi, int64_t gi_step, Acc* __restrict ax, Acc* __restrict ay) const {
    for (int64_t p = 0; p < count; ++p) {
      Acc sx = kGrid ? ax[p] : Acc(0), sy = kGrid ? ay[p] : Acc(0);
      for (int k = 0; k < kGroup; ++k) {
        const Acc gv = load_as<Acc>(g[k * g_step + at[p]]);
        for (int i = 0; i < 4; ++i) {
          const Acc gx = gv * cx[i][p];
          for (int j = 0; j < 4; ++j) {
            const Bits keep = mask_x[i][p] & mask_y[j][p];
            if constexpr (kScatter) gi[k * gi_step + dense_x[i][p] + dense_y[j][p]] += keep_if(gx * cy[j][p], keep);
            if constexpr (kGrid) {
              const T* column = src + k * src_step + src_x[i][p];
              const Acc vg = keep_if(load_as<Acc>(column[src_y[j][p]]), keep) * gv;
              sx -= vg * dx[i][p] * cy[j][p];
              sy -= vg * dy[j][p] * cx[i][p];
            }
          }
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

// ---- drivers -----------------------------------------------------------------------------------------

// Tables are grouped into runs of consecutive blocks of one batch. Kernels loop channels outside and
// the run's points inside, so one input (or input-gradient) plane stays in L1 while the run's tables
// stream from L2. A run has at most kMaxRunBlocks blocks, fewer when there are
// too few runs to give every thread two.
constexpr int64_t kMaxRunBlocks = 16;

// Channels handled per table sweep (each table entry is loaded once per group).
constexpr int kChannelGroup = 4;

// Calls fn(std::integral_constant<int, G>{}, c) for the groups [c, c + G) that cover [c0, c1).
template <class Fn>
void for_channel_groups(int64_t c0, int64_t c1, Fn&& fn) {
  int64_t c = c0;
  for (; c + kChannelGroup <= c1; c += kChannelGroup) fn(std::integral_constant<int, kChannelGroup>{}, c);
  for (; c < c1; ++c) fn(std::integral_constant<int, 1>{}, c);
}

struct Runs {
  int64_t blocks_per_run, per_batch, count;
};

template <class T>
Runs make_runs(const Context<T>& ctx, int64_t threads) {
  const int64_t wanted = (ctx.N * ctx.blocks + 2 * threads - 1) / (2 * threads);
  const int64_t per_run = std::clamp<int64_t>(wanted, 1, kMaxRunBlocks);
  const int64_t per_batch = (ctx.blocks + per_run - 1) / per_run;
  return {per_run, per_batch, ctx.N * per_batch};
}

// Forward: tasks are (batch, run, channel chunk); a task builds its run's tables once and loops its
// channels over them. Channels are chunked only when there are too few runs for the threads.
template <class T, class Table>
void forward_kernel(const Context<T>& ctx, const View4<T>& out) {
  const int64_t threads = get_num_threads();
  const Runs runs = make_runs(ctx, threads);
  int64_t chunk = ctx.C;
  if (runs.count < 2 * threads) chunk = std::max<int64_t>(1, ctx.C * runs.count / (2 * threads));
  const int64_t chunks = (ctx.C + chunk - 1) / chunk;
  const int64_t work =
      std::max<int64_t>(1, std::min(ctx.points, kBlock * runs.blocks_per_run) * (chunk * Table::kCost + 10));
  parallel_for(0, runs.count * chunks, grain_for(work), [&](int64_t lo, int64_t hi) {
    std::unique_ptr<Table[]> tables = new_tables<Table>(runs.blocks_per_run);
    int64_t built = -1, b0 = 0, b1 = 0, n = 0;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t run = task / chunks, c0 = (task % chunks) * chunk, c1 = std::min(ctx.C, c0 + chunk);
      if (run != built) {
        n = run / runs.per_batch;
        b0 = (run % runs.per_batch) * runs.blocks_per_run;
        b1 = std::min(ctx.blocks, b0 + runs.blocks_per_run);
        for (int64_t b = b0; b < b1; ++b) tables[b - b0].build(ctx, n, b, false);
        built = run;
      }
      for_channel_groups(c0, c1, [&](auto group, int64_t c) {
        const T* src = ctx.input.plane(n, c);
        T* dst = out.plane(n, c);
        for (int64_t b = b0; b < b1; ++b) {
          tables[b - b0].template forward<decltype(group)::value>(ctx, src, ctx.input.s1, dst, out.s1);
        }
      });
    }
  });
}

// Input-gradient planes (n, c), (n, c + 1), ... as dense Acc planes step() apart: grad_input itself
// when its planes are dense rows of W, else scratch planes that finish() copies out through the strides.
template <class T>
struct GradInputPlanes {
  using Acc = AccType<T>;
  View4<T> gi;
  int64_t H, W;
  bool direct;

  GradInputPlanes(const TensorView& grad_input, int64_t H_, int64_t W_)
      : gi(view4<T>(grad_input)),
        H(H_),
        W(W_),
        direct(std::is_same_v<T, Acc> && gi.s3 == 1 && (gi.s2 == W_ || H_ == 1)) {}
  int64_t step() const { return direct ? gi.s1 : H * W; }
  std::vector<Acc> scratch() const { return std::vector<Acc>(direct ? 0 : static_cast<size_t>(kChannelGroup * H * W)); }
  Acc* start(std::vector<Acc>& scratch, int64_t n, int64_t c, int count) const {
    Acc* first = direct ? reinterpret_cast<Acc*>(gi.plane(n, c)) : scratch.data();
    for (int k = 0; k < count; ++k) std::fill(first + k * step(), first + k * step() + H * W, Acc(0));
    return first;
  }
  void finish(const Acc* first, int64_t n, int64_t c, int count) const {
    if (direct) return;
    for (int k = 0; k < count; ++k) {
      const Acc* plane = first + k * H * W;
      T* dst = gi.plane(n, c + k);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) dst[h * gi.s2 + w * gi.s3] = store_as<T>(plane[h * W + w]);
    }
  }
};

template <class T, class Table>
void write_zero_grid_grad(const Context<T>& ctx, const View4<T>& gg) {
  for (int64_t n = 0; n < ctx.N; ++n)
    for (int64_t h = 0; h < ctx.Ho; ++h)
      for (int64_t w = 0; w < ctx.Wo; ++w) {
        T* out = gg.data + n * gg.s0 + h * gg.s1 + w * gg.s2;
        out[0] = out[gg.s3] = store_as<T>(AccType<T>(0));
      }
}

// Backward. Every written element is summed in one fixed order (grid gradient: channels in order;
// input gradient: tables in block order, slots in table order), whatever the split, so results are
// bitwise identical for any thread count and no atomics are needed:
//  - fused, when every thread gets at least two batches: a task owns whole batches and does both
//    gradients in one sweep per channel (one read of grad_output and of the tables);
//  - otherwise two passes: (1) per (batch, run): build the tables and sum the grid gradient of their
//    points; (2) per (batch, channel block): scatter every table of the batch into zeroed planes.
template <class T, class Table>
void backward_kernel(const Context<T>& ctx, const View4<const T>& go, const TensorView* grad_input,
                     const View4<T>* grad_grid) {
  using Acc = AccType<T>;
  const int64_t threads = get_num_threads();
  const bool with_grad = grad_grid != nullptr && Table::kHasGridGrad;
  if constexpr (!Table::kHasGridGrad) {
    if (grad_grid != nullptr) write_zero_grid_grad<T, Table>(ctx, *grad_grid);
  }
  const int64_t units = ctx.N * ctx.blocks;
  if (units == 0 && grad_input == nullptr) return;
  // Work per (point, channel), for the grain.
  const int64_t cost = Table::kCost * ((grad_input ? 1 : 0) + (with_grad ? 1 : 0));

  if constexpr (Table::kHasGridGrad) {
    if (grad_input != nullptr && with_grad && ctx.N >= 2 * threads) {
      const GradInputPlanes<T> planes(*grad_input, ctx.H, ctx.W);
      const int64_t work = ctx.points * (ctx.C * cost + 10) + ctx.C * ctx.H * ctx.W;
      parallel_for(0, ctx.N, grain_for(work), [&](int64_t lo, int64_t hi) {
        std::unique_ptr<Table[]> tables = new_tables<Table>(std::max<int64_t>(ctx.blocks, 1));
        std::vector<Acc> ax(static_cast<size_t>(2 * kBlock * ctx.blocks)), ay(ax.size()), scratch = planes.scratch();
        for (int64_t n = lo; n < hi; ++n) {
          for (int64_t b = 0; b < ctx.blocks; ++b) tables[b].build(ctx, n, b, true);
          std::fill(ax.begin(), ax.end(), Acc(0));
          std::fill(ay.begin(), ay.end(), Acc(0));
          for_channel_groups(0, ctx.C, [&](auto group, int64_t c) {
            constexpr int kGroup = decltype(group)::value;
            Acc* gi = planes.start(scratch, n, c, kGroup);
            const T* src = ctx.input.plane(n, c);
            const T* g = go.plane(n, c);
            for (int64_t b = 0; b < ctx.blocks; ++b) {
              const int64_t slots = 2 * kBlock * b;
              tables[b].template backward<true, true, kGroup>(ctx, src, ctx.input.s1, g, go.s1, gi, planes.step(),
                                                              ax.data() + slots, ay.data() + slots);
            }
            planes.finish(gi, n, c, kGroup);
          });
          for (int64_t b = 0; b < ctx.blocks; ++b) {
            const int64_t slots = 2 * kBlock * b;
            tables[b].write_grid_grad(ctx, *grad_grid, n, ax.data() + slots, ay.data() + slots);
          }
        }
      });
      return;
    }
  }

  std::unique_ptr<Table[]> tables;
  if (grad_input != nullptr && units > 0) tables = new_tables<Table>(units);
  if (units > 0 && (tables || with_grad)) {
    const Runs runs = make_runs(ctx, threads);
    const int64_t work =
        std::min(ctx.points, kBlock * runs.blocks_per_run) * (with_grad ? ctx.C * Table::kCost + 10 : 10);
    parallel_for(0, runs.count, grain_for(work), [&](int64_t lo, int64_t hi) {
      std::unique_ptr<Table[]> local;
      if (!tables) local = new_tables<Table>(runs.blocks_per_run);
      std::vector<Acc> ax(with_grad ? 2 * kBlock * runs.blocks_per_run : 0), ay(ax.size());
      for (int64_t run = lo; run < hi; ++run) {
        const int64_t n = run / runs.per_batch, b0 = (run % runs.per_batch) * runs.blocks_per_run;
        const int64_t b1 = std::min(ctx.blocks, b0 + runs.blocks_per_run);
        Table* run_tables = tables ? &tables[n * ctx.blocks + b0] : local.get();
        for (int64_t b = b0; b < b1; ++b) run_tables[b - b0].build(ctx, n, b, with_grad);
        if constexpr (Table::kHasGridGrad) {
          if (!with_grad) continue;
          std::fill(ax.begin(), ax.end(), Acc(0));
          std::fill(ay.begin(), ay.end(), Acc(0));
          for_channel_groups(0, ctx.C, [&](auto group, int64_t c) {
            const T* src = ctx.input.plane(n, c);
            const T* g = go.plane(n, c);
            for (int64_t b = b0; b < b1; ++b) {
              const int64_t slots = 2 * kBlock * (b - b0);
              run_tables[b - b0].template backward<false, true, decltype(group)::value>(
                  ctx, src, ctx.input.s1, g, go.s1, nullptr, 0, ax.data() + slots, ay.data() + slots);
            }
          });
          for (int64_t b = b0; b < b1; ++b) {
            const int64_t slots = 2 * kBlock * (b - b0);
            run_tables[b - b0].write_grid_grad(ctx, *grad_grid, n, ax.data() + slots, ay.data() + slots);
          }
        }
      }
    });
  }
  if (grad_input == nullptr) return;

  const GradInputPlanes<T> planes(*grad_input, ctx.H, ctx.W);
  const int64_t channel_block =
      std::clamp<int64_t>((ctx.N * ctx.C + 2 * threads - 1) / (2 * threads), 1, std::min(ctx.C, kMaxChannelBlock));
  const int64_t cblocks = (ctx.C + channel_block - 1) / channel_block;
  const int64_t work = channel_block * (ctx.H * ctx.W + ctx.points * Table::kCost);
  parallel_for(0, ctx.N * cblocks, grain_for(work), [&](int64_t lo, int64_t hi) {
    std::vector<Acc> scratch = planes.scratch();
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / cblocks, c0 = (task % cblocks) * channel_block;
      for_channel_groups(c0, std::min(ctx.C, c0 + channel_block), [&](auto group, int64_t c) {
        constexpr int kGroup = decltype(group)::value;
        Acc* gi = planes.start(scratch, n, c, kGroup);
        const T* g = go.plane(n, c);
        for (int64_t b = 0; b < ctx.blocks; ++b) {
          tables[n * ctx.blocks + b].template backward<true, false, kGroup>(ctx, static_cast<const T*>(nullptr), 0, g,
                                                                            go.s1, gi, planes.step(), nullptr, nullptr);
        }
        planes.finish(gi, n, c, kGroup);
      });
    }
  });
}

template <class X>
struct TypeTag {
  using type = X;
};

// Calls fn(TypeTag<Table>{}) with the table type of the interpolation mode.
template <class T, class Fn>
void dispatch_table(int64_t interpolation_mode, Fn&& fn) {
  using Acc = AccType<T>;
  switch (interpolation_mode) {
    case 0:
      return fn(TypeTag<BilinearTable<Acc>>{});
    case 1:
      return fn(TypeTag<NearestTable<Acc>>{});
    default:
      return fn(TypeTag<BicubicTable<Acc>>{});
  }
}

}  // namespace

std::vector<int64_t> grid_sampler_2d_output_shape(const std::vector<int64_t>& input_shape,
                                                  const std::vector<int64_t>& grid_shape) {
  return detail::grid_sampler_output_shape(kForward, input_shape, grid_shape);
}

void grid_sampler_2d(const TensorView& input, const TensorView& grid, const TensorView& output,
                     const GridSampler2dParams& params) {
  detail::check_grid_sampler_modes(kForward, params);
  const std::vector<int64_t> expected = detail::grid_sampler_output_shape(kForward, input.sizes(), grid.sizes());
  detail::check_same_dtype(kForward, "grid", grid, "input", input);
  detail::check_shape(kForward, "output", output, expected);
  detail::check_same_dtype(kForward, "output", output, "input", input);
  dispatch_floating(input.dtype(), kForward, "input", [&](auto tag) {
    using T = decltype(tag);
    if (output.is_empty()) return;
    if constexpr (detail::kIsHalfType<T>) {  // detail/float_staging.h
      const auto staged_input = detail::FloatStaging::copy_of(input), staged_grid = detail::FloatStaging::copy_of(grid);
      const auto staged_output = detail::FloatStaging::like(output);
      grid_sampler_2d(staged_input.view(), staged_grid.view(), staged_output.view(), params);
      staged_output.narrow_into(output);
    } else {
      const Context<T> ctx = make_context<T>(input, grid, output, params);
      dispatch_table<T>(params.interpolation_mode, [&](auto table_tag) {
        forward_kernel<T, typename decltype(table_tag)::type>(ctx, view4<T>(output));
      });
    }
  });
}

void check_grid_sampler_2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                                    const TensorView& grad_input, const TensorView& grad_grid,
                                    const GridSampler2dParams& params, const std::vector<bool>& output_mask) {
  detail::check_grid_sampler_modes(kBackward, params);
  SG_CHECK(output_mask.size() == 2, kBackward,
           "(): expected output_mask to have 2 entries (grad_input, grad_grid), but got ", output_mask.size());
  const std::vector<int64_t> expected = detail::grid_sampler_output_shape(kBackward, input.sizes(), grid.sizes());
  detail::check_grid_sampler_grad_output(kBackward, grad_output, expected);
  detail::check_same_dtype(kBackward, "input", input, "grad_output", grad_output);
  detail::check_same_dtype(kBackward, "grid", grid, "grad_output", grad_output);
  const bool want_input = output_mask[0], want_grid = output_mask[1];
  if (want_input) {
    detail::check_shape(kBackward, "grad_input", grad_input, input.sizes());
    detail::check_same_dtype(kBackward, "grad_input", grad_input, "grad_output", grad_output);
  }
  if (want_grid) {
    detail::check_shape(kBackward, "grad_grid", grad_grid, grid.sizes());
    detail::check_same_dtype(kBackward, "grad_grid", grad_grid, "grad_output", grad_output);
  }
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [](auto) {});
}

void grid_sampler_2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                              const TensorView& grad_input, const TensorView& grad_grid,
                              const GridSampler2dParams& params, const std::vector<bool>& output_mask) {
  check_grid_sampler_2d_backward(grad_output, input, grid, grad_input, grad_grid, params, output_mask);
  const bool want_input = output_mask[0], want_grid = output_mask[1];
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [&](auto tag) {
    using T = decltype(tag);
    if ((!want_input || grad_input.is_empty()) && (!want_grid || grad_grid.is_empty())) return;
    if (grad_output.is_empty()) {
      // No output point or no channel: zero gradients, without forming pointers into the empty (possibly
      // null) tensors (found by the aclnn fuzzer).
      if (want_input) fill_zeros(grad_input);
      if (want_grid) fill_zeros(grad_grid);
      return;
    }
    if constexpr (detail::kIsHalfType<T>) {  // detail/float_staging.h
      using detail::FloatStaging;
      const auto staged_grad_output = FloatStaging::copy_of(grad_output);
      const auto staged_input = FloatStaging::copy_of(input), staged_grid = FloatStaging::copy_of(grid);
      const auto staged_grad_input = want_input ? FloatStaging::like(grad_input) : FloatStaging();
      const auto staged_grad_grid = want_grid ? FloatStaging::like(grad_grid) : FloatStaging();
      grid_sampler_2d_backward(staged_grad_output.view(), staged_input.view(), staged_grid.view(),
                               staged_grad_input.view(), staged_grad_grid.view(), params, output_mask);
      if (want_input) staged_grad_input.narrow_into(grad_input);
      if (want_grid) staged_grad_grid.narrow_into(grad_grid);
    } else {
      const Context<T> ctx = make_context<T>(input, grid, grad_output, params);
      const View4<T> gg = want_grid ? view4<T>(grad_grid) : View4<T>{};
      dispatch_table<T>(params.interpolation_mode, [&](auto table_tag) {
        backward_kernel<T, typename decltype(table_tag)::type>(
            ctx, view4<const T>(grad_output), want_input && !grad_input.is_empty() ? &grad_input : nullptr,
            want_grid ? &gg : nullptr);
      });
    }
  });
}

}  // namespace spatialgrad

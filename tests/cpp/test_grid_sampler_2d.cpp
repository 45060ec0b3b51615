#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "detail/gather.h"
#include "detail/grid_sampler_2d_coords.h"
#include "detail/strategy.h"
#include "detail/rows.h"
#include "detail/simd.h"
#include "spatialgrad/grid_sampler_2d.h"
#include "simd_levels.h"
#include "spatialgrad/parallel.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::expect_error;
using testing::OwnedTensor;
using testing::random_tensor;

// Straight from docs/operators.md (Grid sampling) (the generic PyTorch formulas): per point and channel, one tap at a
// time.
struct NaiveGridSampler {
  int64_t mode, padding;
  bool align;

  struct Coord {
    double value, grad;
  };
  Coord unnormalize(double x, int64_t size) const {
    if (align) return {(x + 1) / 2 * (size - 1), (size - 1) / 2.0};
    return {((x + 1) * size - 1) / 2, size / 2.0};
  }
  static Coord clip(double x, int64_t size) {
    if (x <= 0) return {0, 0};
    if (x >= size - 1) return {double(size - 1), 0};
    return {x, 1};
  }
  Coord reflect(double x, int64_t size) const {
    const double lo = align ? 0 : -1, hi = align ? 2.0 * (size - 1) : 2.0 * size - 1;
    if (lo == hi) return {0, 0};
    const double min = lo / 2, span = (hi - lo) / 2;
    double in = x - min, sign = 1;
    if (in < 0) {
      sign = -1;
      in = -in;
    }
    const double extra = std::fmod(in, span);
    const int64_t flips = static_cast<int64_t>(std::floor(in / span));
    if (flips % 2 == 0) return {extra + min, sign};
    return {span - extra + min, -sign};
  }
  Coord pad(double x, int64_t size) const {
    if (padding == 1) return clip(x, size);
    if (padding == 2) {
      const Coord r = reflect(x, size), c = clip(r.value, size);
      return {c.value, r.grad * c.grad};
    }
    return {x, 1};
  }
  Coord source(double x, int64_t size) const {
    const Coord u = unnormalize(x, size), p = pad(u.value, size);
    return {p.value, u.grad * p.grad};
  }
  static void cubic(double t, double (&w)[4], double (&d)[4]) {
    const double A = -0.75;
    auto c1 = [&](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
    auto c2 = [&](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
    w[0] = c2(t + 1);
    w[1] = c1(t);
    w[2] = c1(1 - t);
    w[3] = c2(2 - t);
    double x = -1 - t;
    d[0] = (-3 * A * x - 10 * A) * x - 8 * A;
    x = -t;
    d[1] = (-3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 1 - t;
    d[2] = (3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 2 - t;
    d[3] = (3 * A * x - 10 * A) * x + 8 * A;
  }

  // Calls tap(y, x, weight, dweight_dx, dweight_dy) for every in-bounds tap of grid point (gx, gy),
  // with derivatives taken with respect to the grid values.
  template <class Tap>
  void taps(double gx, double gy, int64_t H, int64_t W, Tap tap) const {
    if (mode == 2) {
      const Coord ux = unnormalize(gx, W), uy = unnormalize(gy, H);
      const double fx = std::floor(ux.value), fy = std::floor(uy.value);
      double wx[4], dx[4], wy[4], dy[4];
      cubic(ux.value - fx, wx, dx);
      cubic(uy.value - fy, wy, dy);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const int64_t x = static_cast<int64_t>(pad(fx - 1 + i, W).value);
          const int64_t y = static_cast<int64_t>(pad(fy - 1 + j, H).value);
          if (x < 0 || x >= W || y < 0 || y >= H) continue;
          tap(y, x, wx[i] * wy[j], -dx[i] * wy[j] * ux.grad, -wx[i] * dy[j] * uy.grad);
        }
      return;
    }
    const Coord cx = source(gx, W), cy = source(gy, H);
    if (mode == 1) {
      const int64_t x = static_cast<int64_t>(std::nearbyint(cx.value)),
                    y = static_cast<int64_t>(std::nearbyint(cy.value));
      if (x >= 0 && x < W && y >= 0 && y < H) tap(y, x, 1.0, 0.0, 0.0);
      return;
    }
    const int64_t x0 = static_cast<int64_t>(std::floor(cx.value)), y0 = static_cast<int64_t>(std::floor(cy.value));
    for (int64_t y = y0; y <= y0 + 1; ++y)
      for (int64_t x = x0; x <= x0 + 1; ++x) {
        if (x < 0 || x >= W || y < 0 || y >= H) continue;
        const double ax = x == x0 ? x0 + 1 - cx.value : cx.value - x0, sx = x == x0 ? -1 : 1;
        const double ay = y == y0 ? y0 + 1 - cy.value : cy.value - y0, sy = y == y0 ? -1 : 1;
        tap(y, x, ax * ay, sx * ay * cx.grad, sy * ax * cy.grad);
      }
  }
};

GridSampler2dParams params_of(const NaiveGridSampler& n) {
  GridSampler2dParams p;
  p.interpolation_mode = static_cast<GridSamplerInterpolation>(n.mode);
  p.padding_mode = static_cast<GridSamplerPadding>(n.padding);
  p.align_corners = n.align;
  return p;
}

struct Reference {
  std::vector<double> out, grad_input, grad_grid;
};

Reference naive(const NaiveGridSampler& ref, OwnedTensor<double>& x, OwnedTensor<double>& grid,
                OwnedTensor<double>& g) {
  const int64_t N = x.view.size(0), C = x.view.size(1), H = x.view.size(2), W = x.view.size(3);
  const int64_t Ho = grid.view.size(1), Wo = grid.view.size(2);
  Reference r{std::vector<double>(static_cast<size_t>(N * C * Ho * Wo)), std::vector<double>(x.storage.size()),
              std::vector<double>(grid.storage.size())};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < Ho; ++h)
      for (int64_t w = 0; w < Wo; ++w) {
        const int64_t p = (n * Ho + h) * Wo + w;
        ref.taps(grid[2 * p], grid[2 * p + 1], H, W, [&](int64_t y, int64_t xx, double wt, double dgx, double dgy) {
          for (int64_t c = 0; c < C; ++c) {
            const int64_t in = ((n * C + c) * H + y) * W + xx, o = ((n * C + c) * Ho + h) * Wo + w;
            r.out[o] += wt * x[in];
            r.grad_input[in] += wt * g[o];
            r.grad_grid[2 * p] += dgx * x[in] * g[o];
            r.grad_grid[2 * p + 1] += dgy * x[in] * g[o];
          }
        });
      }
  return r;
}

class GridSamplerSweep : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(GridSamplerSweep, ForwardAndBackwardMatchNaiveLoops) {
  const auto [mode, padding, align] = GetParam();
  const NaiveGridSampler ref{mode, padding, align};
  const GridSampler2dParams params = params_of(ref);
  uint32_t seed = 100;
  for (auto [H, W] : {std::pair<int64_t, int64_t>{1, 1}, {1, 5}, {4, 1}, {5, 7}, {8, 6}}) {
    for (auto [Ho, Wo] : {std::pair<int64_t, int64_t>{3, 4}, {17, 33}}) {
      const int64_t N = 2, C = 3;
      auto x = random_tensor<double>({N, C, H, W}, ++seed);
      auto grid = random_tensor<double>({N, Ho, Wo, 2}, ++seed, -1.4, 1.4);
      auto g = random_tensor<double>({N, C, Ho, Wo}, ++seed);
      OwnedTensor<double> y({N, C, Ho, Wo}), gi({N, C, H, W}), gg({N, Ho, Wo, 2});
      ASSERT_EQ(grid_sampler_2d_output_shape(x.view.sizes(), grid.view.sizes()), y.view.sizes());
      grid_sampler_2d(x.view, grid.view, y.view, params);
      grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, params);
      const Reference r = naive(ref, x, grid, g);
      SCOPED_TRACE(::testing::Message() << "H=" << H << " W=" << W << " Ho=" << Ho << " Wo=" << Wo);
      testing::expect_all_near(y.storage, r.out, 1e-12);
      testing::expect_all_near(gi.storage, r.grad_input, 1e-12);
      testing::expect_all_near(gg.storage, r.grad_grid, 1e-11);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllModes, GridSamplerSweep,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(0, 1, 2), ::testing::Bool()));

// floor_of (the vectorisable floor) gives std::floor's bits, at and around every integer and half,
// at the float/double integer limits, for signed zeros, subnormals, infinities and NaN.
template <class T>
void expect_floor_of_is_floor() {
  const T inf = std::numeric_limits<T>::infinity(), big = T(1) / std::numeric_limits<T>::epsilon();
  std::vector<T> values = {T(0),
                           -T(0),
                           inf,
                           -inf,
                           std::numeric_limits<T>::denorm_min(),
                           -std::numeric_limits<T>::denorm_min(),
                           std::numeric_limits<T>::max(),
                           std::numeric_limits<T>::lowest(),
                           big,
                           -big,
                           2 * big,
                           -2 * big};
  for (T base = -70; base <= 70; base += T(0.5)) {
    for (T v : {base, std::nextafter(base, -inf), std::nextafter(base, inf)}) values.push_back(v);
  }
  for (T v : {big, -big, big / 2, -big / 2}) {
    values.push_back(std::nextafter(v, -inf));
    values.push_back(std::nextafter(v, inf));
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-30, 30);
  for (int i = 0; i < 20000; ++i) values.push_back(static_cast<T>((i % 2 ? 1 : -1) * std::exp2(exponent(rng))));
  for (T v : values) {
    const T expected = std::floor(v), got = detail::floor_of(v);
    EXPECT_EQ(std::memcmp(&expected, &got, sizeof(T)), 0) << v << ": " << got << " != " << expected;
  }
  EXPECT_TRUE(std::isnan(detail::floor_of(std::numeric_limits<T>::quiet_NaN())));
}

// The grid's (x, y) pairs are split into two rows and the grid gradient stored back as pairs: every count
// (the vector steps and the tails), float (vectorised), double and half (rounded once).
template <class T>
void expect_pairs_round_trip() {
  using Acc = AccType<T>;
  for (int64_t n = 0; n <= 19; ++n) {
    std::vector<T> pairs(static_cast<size_t>(2 * n) + 1, store_as<T>(Acc(-7)));
    for (int64_t i = 0; i < 2 * n; ++i) pairs[static_cast<size_t>(i)] = store_as<T>(Acc(0.25) * static_cast<Acc>(i + 1));
    std::vector<Acc> wide(pairs.size()), x(static_cast<size_t>(n) + 1, Acc(-1)), y(x);
    for (size_t i = 0; i < pairs.size(); ++i) wide[i] = load_as<Acc>(pairs[i]);
    detail::split_pairs(wide.data(), n, x.data(), y.data());
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(x[static_cast<size_t>(i)], wide[static_cast<size_t>(2 * i)]) << n << " " << i;
      EXPECT_EQ(y[static_cast<size_t>(i)], wide[static_cast<size_t>(2 * i + 1)]) << n << " " << i;
    }
    EXPECT_EQ(x[static_cast<size_t>(n)], Acc(-1)) << "split_pairs wrote past n = " << n;
    std::vector<T> back(pairs.size(), store_as<T>(Acc(-7)));
    detail::store_pairs(x.data(), y.data(), n, back.data());
    for (size_t i = 0; i < pairs.size(); ++i) EXPECT_EQ(load_as<Acc>(back[i]), load_as<Acc>(pairs[i])) << n << " " << i;
  }
}

TEST(GridSamplerCoords, PairsSplitAndStoreBack) {
  expect_pairs_round_trip<float>();
  expect_pairs_round_trip<double>();
  expect_pairs_round_trip<Half>();
}

TEST(GridSamplerCoords, AllLanesNeedsEveryLane) {
  using V = detail::Vec<float, 32>;
  const V zero{}, ones = zero + 1;
  EXPECT_TRUE(detail::all_lanes(zero < ones));
  EXPECT_FALSE(detail::all_lanes(zero > ones));
  for (int k = 0; k < 8; ++k) {
    V one_off = ones;
    one_off[k] = 0;
    EXPECT_FALSE(detail::all_lanes(zero < one_off)) << k;
  }
}

TEST(GridSamplerCoords, FloorOfIsFloor) {
  expect_floor_of_is_floor<float>();
  expect_floor_of_is_floor<double>();
}

// source_coordinates (a block at once, vectorised) gives source_coordinate's value and derivative bits
// for every padding, both alignments, axes of 1, 2 and more pixels, values inside, at the edges, beyond
// one reflection, huge and non-finite, and block lengths around the vector width.
template <class T>
void expect_block_coordinates_match_scalar() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  std::vector<T> values;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(-4.5, 4.5);
  for (int i = 0; i < 600; ++i) values.push_back(static_cast<T>(uniform(rng)));
  // Each special value once among random ones (in its own vector), then eight of it (one whole vector).
  const T specials[] = {T(-1), T(1), T(0), -T(0), T(3), T(-3), T(5), T(-5), T(1.5), nan, inf, -inf, T(1e30), T(-1e30)};
  for (size_t k = 0; k < std::size(specials); ++k) {
    values[16 * k + 3] = specials[k];
    values.insert(values.end(), 8, specials[k]);
  }
  for (int64_t size : {1, 2, 5, 64})
    for (int padding : {0, 1, 2})
      for (bool align : {false, true})
        for (size_t n : {size_t{1}, size_t{7}, size_t{9}, size_t{16}, values.size()}) {
          const auto pad = static_cast<GridSamplerPadding>(padding);
          std::vector<T> value(n), grad(n);
          detail::source_coordinates(values.data(), static_cast<int64_t>(n), size, pad, align, value.data(),
                                     grad.data());
          for (size_t i = 0; i < n; ++i) {
            const detail::CoordGrad<T> c = detail::source_coordinate(values[i], size, pad, align);
            SCOPED_TRACE(::testing::Message()
                         << "size " << size << " padding " << padding << " align " << align << " value " << values[i]);
            if (std::isnan(c.value)) {
              EXPECT_TRUE(std::isnan(value[i]));
            } else {
              EXPECT_EQ(std::memcmp(&value[i], &c.value, sizeof(T)), 0) << value[i] << " != " << c.value;
            }
            EXPECT_EQ(std::memcmp(&grad[i], &c.grad, sizeof(T)), 0) << grad[i] << " != " << c.grad;
          }
        }
}

TEST(GridSamplerCoords, BlockCoordinatesMatchScalar) {
  expect_block_coordinates_match_scalar<float>();
  expect_block_coordinates_match_scalar<double>();
}

// The kernels work on tiles of 4 double / 8 float channels (a partial last tile is zero-padded) and on
// blocks of 256 grid points: channel counts below, at and above a tile, blocks that span grid rows, and
// rows of the input wider than a transpose block, against the naive loops.
// Reflection takes grid values to +-3.2, beyond one reflection of the image (the vectorised
// coordinates hand those lanes back to the scalar formula).
TEST(GridSampler2d, ChannelTilesMatchNaiveLoops) {
  const detail::StrategyForTesting tiles(detail::GridSampler2dStrategy::kTiles);
  for (int64_t C : {4, 8, 11})
    for (int mode : {0, 1, 2})
      for (int padding : {0, 1, 2})
        for (bool align : {false, true}) {
          const NaiveGridSampler ref{mode, padding, align};
          const int64_t N = 2, H = 9, W = 70, Ho = 19, Wo = 23;
          const double reach = padding == 2 ? 3.2 : 1.3;
          auto x = random_tensor<double>({N, C, H, W}, 51);
          auto grid = random_tensor<double>({N, Ho, Wo, 2}, 52, -reach, reach);
          auto g = random_tensor<double>({N, C, Ho, Wo}, 53);
          OwnedTensor<double> y({N, C, Ho, Wo}), gi(x.view.sizes()), gg(grid.view.sizes());
          grid_sampler_2d(x.view, grid.view, y.view, params_of(ref));
          grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, params_of(ref));
          const Reference r = naive(ref, x, grid, g);
          SCOPED_TRACE(::testing::Message()
                       << "C=" << C << " mode=" << mode << " padding=" << padding << " align=" << align);
          testing::expect_all_near(y.storage, r.out, 1e-12);
          testing::expect_all_near(gi.storage, r.grad_input, 1e-12);
          testing::expect_all_near(gg.storage, r.grad_grid, 1e-10);
        }
}

// A channels-last copy of x (same values, strides (H*W*C, 1, W*C, C)), which the tiles read through
// strided rows instead of transposing whole planes.
template <class T>
TensorView channels_last(const OwnedTensor<T>& x, std::vector<T>& buffer) {
  const int64_t N = x.view.size(0), C = x.view.size(1), H = x.view.size(2), W = x.view.size(3);
  buffer.resize(x.storage.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i)
        buffer[static_cast<size_t>((n * H * W + i) * C + c)] = x.storage[static_cast<size_t>((n * C + c) * H * W + i)];
  return TensorView(buffer.data(), x.view.dtype(), x.view.sizes(), {H * W * C, 1, W * C, C});
}

// float32 tiles (8 channels, 8x8 transposes) against float64 on the same rounded values, and the
// channels-last layout giving the same bits as the contiguous one. The grid-gradient tolerance is
// float32's own: PyTorch's float32 kernel is as far from float64 on these inputs (bicubic: 2.5e-3).
TEST(GridSampler2d, Float32TilesMatchFloat64AndChannelsLast) {
  const detail::StrategyForTesting tiles(detail::GridSampler2dStrategy::kTiles);
  for (int64_t C : {8, 13, 16})
    for (int mode : {0, 1, 2}) {
      GridSampler2dParams p;
      p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
      const int64_t N = 3, H = 11, W = 67, Ho = 21, Wo = 25;
      auto xf = random_tensor<float>({N, C, H, W}, 61);
      auto gridf = random_tensor<float>({N, Ho, Wo, 2}, 62, -1.2, 1.2);
      auto gf = random_tensor<float>({N, C, Ho, Wo}, 63);
      OwnedTensor<double> x(xf.view.sizes()), grid(gridf.view.sizes()), g(gf.view.sizes());
      for (size_t i = 0; i < x.storage.size(); ++i) x.storage[i] = xf.storage[i];
      for (size_t i = 0; i < grid.storage.size(); ++i) grid.storage[i] = gridf.storage[i];
      for (size_t i = 0; i < g.storage.size(); ++i) g.storage[i] = gf.storage[i];
      OwnedTensor<double> y({N, C, Ho, Wo}), gi(x.view.sizes()), gg(grid.view.sizes());
      OwnedTensor<float> yf({N, C, Ho, Wo}), gif(xf.view.sizes()), ggf(gridf.view.sizes());
      grid_sampler_2d(x.view, grid.view, y.view, p);
      grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
      grid_sampler_2d(xf.view, gridf.view, yf.view, p);
      grid_sampler_2d_backward(gf.view, xf.view, gridf.view, gif.view, ggf.view, p);
      SCOPED_TRACE(::testing::Message() << "C=" << C << " mode=" << mode);
      for (size_t i = 0; i < y.storage.size(); ++i) ASSERT_NEAR(yf.storage[i], y.storage[i], 3e-5) << i;
      for (size_t i = 0; i < gi.storage.size(); ++i) ASSERT_NEAR(gif.storage[i], gi.storage[i], 3e-5) << i;
      for (size_t i = 0; i < gg.storage.size(); ++i)
        ASSERT_NEAR(ggf.storage[i], gg.storage[i], 2e-3 * (1 + std::abs(gg.storage[i]))) << i;
      std::vector<float> x_buffer;
      const TensorView x_last = channels_last(xf, x_buffer);
      OwnedTensor<float> y2(yf.view.sizes()), gi2(xf.view.sizes()), gg2(gridf.view.sizes());
      grid_sampler_2d(x_last, gridf.view, y2.view, p);
      grid_sampler_2d_backward(gf.view, x_last, gridf.view, gi2.view, gg2.view, p);
      EXPECT_EQ(y2.storage, yf.storage);
      EXPECT_EQ(gi2.storage, gif.storage);
      EXPECT_EQ(gg2.storage, ggf.storage);
    }
}

// Float32 runs the same kernels with float accumulation: close to the float64 result.
TEST(GridSampler2d, Float32MatchesFloat64) {
  for (int mode : {0, 1, 2}) {
    GridSampler2dParams p;
    p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
    p.padding_mode = GridSamplerPadding::kReflection;
    auto x = random_tensor<double>({2, 5, 9, 11}, 1);
    auto grid = random_tensor<double>({2, 7, 6, 2}, 2, -1.2, 1.2);
    auto g = random_tensor<double>({2, 5, 7, 6}, 3);
    OwnedTensor<float> xf({2, 5, 9, 11}), gridf({2, 7, 6, 2}), gf({2, 5, 7, 6});
    for (size_t i = 0; i < x.storage.size(); ++i) xf.storage[i] = static_cast<float>(x.storage[i]);
    for (size_t i = 0; i < grid.storage.size(); ++i) gridf.storage[i] = static_cast<float>(grid.storage[i]);
    for (size_t i = 0; i < g.storage.size(); ++i) gf.storage[i] = static_cast<float>(g.storage[i]);
    // Reference on the float-rounded values, in double.
    for (size_t i = 0; i < x.storage.size(); ++i) x.storage[i] = xf.storage[i];
    for (size_t i = 0; i < grid.storage.size(); ++i) grid.storage[i] = gridf.storage[i];
    for (size_t i = 0; i < g.storage.size(); ++i) g.storage[i] = gf.storage[i];
    OwnedTensor<double> y({2, 5, 7, 6}), gi(x.view.sizes()), gg(grid.view.sizes());
    OwnedTensor<float> yf({2, 5, 7, 6}), gif(x.view.sizes()), ggf(grid.view.sizes());
    grid_sampler_2d(x.view, grid.view, y.view, p);
    grid_sampler_2d(xf.view, gridf.view, yf.view, p);
    grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
    grid_sampler_2d_backward(gf.view, xf.view, gridf.view, gif.view, ggf.view, p);
    for (size_t i = 0; i < y.storage.size(); ++i) EXPECT_NEAR(yf.storage[i], y.storage[i], 1e-5) << mode;
    for (size_t i = 0; i < gi.storage.size(); ++i) EXPECT_NEAR(gif.storage[i], gi.storage[i], 1e-5) << mode;
    for (size_t i = 0; i < gg.storage.size(); ++i) EXPECT_NEAR(ggf.storage[i], gg.storage[i], 1e-4) << mode;
  }
}

TEST(GridSampler2d, StridedAndNegativeStrideViews) {
  for (int mode : {0, 1, 2}) {
    GridSampler2dParams p;
    p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
    p.padding_mode = GridSamplerPadding::kBorder;
    auto x = random_tensor<double>({2, 3, 6, 7}, 5);
    auto grid = random_tensor<double>({2, 5, 4, 2}, 6, -1.2, 1.2);
    auto g = random_tensor<double>({2, 3, 5, 4}, 7);
    OwnedTensor<double> y({2, 3, 5, 4}), gi(x.view.sizes()), gg(grid.view.sizes());
    grid_sampler_2d(x.view, grid.view, y.view, p);
    grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
    // Inputs flipped in memory (negative strides) along W, C and the coordinate axis.
    auto xw = testing::flipped_copy(x, 3), xc = testing::flipped_copy(x, 1);
    auto grid_xy = testing::flipped_copy(grid, 3), grid_h = testing::flipped_copy(grid, 1);
    auto gw = testing::flipped_copy(g, 3);
    for (auto* xv : {&x, &xw, &xc})
      for (auto* gridv : {&grid, &grid_xy, &grid_h}) {
        OwnedTensor<double> y2(y.view.sizes()), gi2(x.view.sizes()), gg2(grid.view.sizes());
        grid_sampler_2d(xv->view, gridv->view, y2.view, p);
        EXPECT_EQ(y2.storage, y.storage);
        grid_sampler_2d_backward(gw.view, xv->view, gridv->view, gi2.view, gg2.view, p);
        EXPECT_EQ(gi2.storage, gi.storage);
        EXPECT_EQ(gg2.storage, gg.storage);
      }
    // Strided outputs: every other element of larger buffers (grad_input goes through a scratch plane).
    auto strided = [](std::vector<double>& buffer, const std::vector<int64_t>& shape) {
      buffer.assign(static_cast<size_t>(checked_numel(shape) * 2), -7.0);
      std::vector<int64_t> strides = contiguous_strides(shape);
      for (auto& s : strides) s *= 2;
      return TensorView(buffer.data(), DType::kFloat64, shape, strides);
    };
    std::vector<double> yb, gib, ggb;
    const TensorView ys = strided(yb, y.view.sizes()), gis = strided(gib, x.view.sizes()),
                     ggs = strided(ggb, grid.view.sizes());
    grid_sampler_2d(x.view, grid.view, ys, p);
    grid_sampler_2d_backward(g.view, x.view, grid.view, gis, ggs, p);
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(yb[2 * i], y[i]);
    for (int64_t i = 0; i < gi.numel(); ++i) EXPECT_EQ(gib[2 * i], gi[i]);
    for (int64_t i = 0; i < gg.numel(); ++i) EXPECT_EQ(ggb[2 * i], gg[i]);
    for (size_t i = 1; i < gib.size(); i += 2) EXPECT_EQ(gib[i], -7.0);
  }
}

TEST(GridSampler2d, OutputMaskSkipsUnrequestedGradients) {
  for (int mode : {0, 1, 2}) {
    GridSampler2dParams p;
    p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
    auto x = random_tensor<float>({3, 4, 5, 6}, 8);
    auto grid = random_tensor<float>({3, 7, 2, 2}, 9, -1.1, 1.1);
    auto g = random_tensor<float>({3, 4, 7, 2}, 10);
    OwnedTensor<float> gi(x.view.sizes()), gg(grid.view.sizes());
    grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
    OwnedTensor<float> gi_only(x.view.sizes()), gg_only(grid.view.sizes());
    // An unrequested output may be an empty view: it is neither validated nor written.
    grid_sampler_2d_backward(g.view, x.view, grid.view, gi_only.view, TensorView(), p, {true, false});
    grid_sampler_2d_backward(g.view, x.view, grid.view, TensorView(), gg_only.view, p, {false, true});
    EXPECT_EQ(gi_only.storage, gi.storage);
    EXPECT_EQ(gg_only.storage, gg.storage);
    OwnedTensor<float> untouched(grid.view.sizes(), 5.0f);
    grid_sampler_2d_backward(g.view, x.view, grid.view, gi_only.view, untouched.view, p, {true, false});
    for (float v : untouched.storage) EXPECT_EQ(v, 5.0f);
    if (mode == 1) {
      for (float v : gg.storage) EXPECT_EQ(v, 0.0f);  // nearest: zero grid gradient
    }
  }
}

TEST(GridSampler2d, EmptyTensorsGiveShapedZeroResults) {
  GridSampler2dParams p;
  // No grid points: the forward output is empty and grad_input is all zeros.
  OwnedTensor<float> x({2, 3, 4, 5}, 1.0f), grid({2, 0, 6, 2}), y({2, 3, 0, 6}), g({2, 3, 0, 6});
  grid_sampler_2d(x.view, grid.view, y.view, p);
  OwnedTensor<float> gi(x.view.sizes(), 9.0f), gg(grid.view.sizes());
  grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
  for (float v : gi.storage) EXPECT_EQ(v, 0.0f);
  // No channels: the grid gradient is a sum over nothing.
  OwnedTensor<float> x0({1, 0, 4, 4}), grid0 = random_tensor<float>({1, 3, 3, 2}, 4), g0({1, 0, 3, 3});
  OwnedTensor<float> gi0(x0.view.sizes()), gg0(grid0.view.sizes(), 9.0f), y0({1, 0, 3, 3});
  grid_sampler_2d(x0.view, grid0.view, y0.view, p);
  grid_sampler_2d_backward(g0.view, x0.view, grid0.view, gi0.view, gg0.view, p);
  for (float v : gg0.storage) EXPECT_EQ(v, 0.0f);
  // No batch.
  OwnedTensor<float> xn({0, 2, 3, 3}), gridn({0, 4, 4, 2}), yn({0, 2, 4, 4});
  grid_sampler_2d(xn.view, gridn.view, yn.view, p);
  grid_sampler_2d_backward(yn.view, xn.view, gridn.view, xn.view, gridn.view, p);
}

// NaN / Inf / huge grid values follow PyTorch's CPU kernel and never reach an integer conversion
// (the sanitizer build checks the latter).
TEST(GridSampler2d, NonFiniteGridValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  OwnedTensor<double> x({1, 1, 4, 5});
  for (int64_t i = 0; i < 20; ++i) x[i] = i + 1;
  for (int mode : {0, 1, 2})
    for (int padding : {0, 1, 2})
      for (double bad : {nan, inf, -inf, 1e300, -1e300}) {
        GridSampler2dParams p;
        p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
        p.padding_mode = static_cast<GridSamplerPadding>(padding);
        OwnedTensor<double> grid({1, 1, 2, 2}), y({1, 1, 1, 2}), g({1, 1, 1, 2}, 1.0), gi(x.view.sizes()),
            gg(grid.view.sizes());
        grid.storage = {bad, 0.3, 0.3, bad};
        grid_sampler_2d(x.view, grid.view, y.view, p);
        grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
        SCOPED_TRACE(::testing::Message() << "mode " << mode << " padding " << padding << " value " << bad);
        const bool finite_weights = std::isfinite(bad) || padding != 0;
        for (double v : y.storage) {
          if (mode == 1) {
            EXPECT_TRUE(std::isfinite(v));  // nearest never multiplies
          } else if (mode == 0 && finite_weights) {
            EXPECT_TRUE(std::isfinite(v));  // clipped / far-away coordinates have finite weights
          } else if (!std::isfinite(bad)) {
            EXPECT_TRUE(std::isnan(v));  // NaN weights times masked corners: NaN, as in PyTorch
          }
        }
        if (padding == 0) {
          for (double v : gi.storage) EXPECT_EQ(v, 0.0);  // every tap is out of bounds
        }
        if (padding == 1 && mode == 0) {
          // Border clamps NaN and +-Inf (to pixel 0 or the last pixel): the clamped coordinate has gradient 0.
          EXPECT_EQ(gg[0], 0.0);
          EXPECT_EQ(gg[3], 0.0);
        }
      }
  // Spot values from torch 1.13 (input 1..20 as 4x5, grid point (NaN, 0.3), align_corners=false).
  GridSampler2dParams border;
  border.padding_mode = GridSamplerPadding::kBorder;
  OwnedTensor<double> grid({1, 1, 1, 2}), y({1, 1, 1, 1});
  grid.storage = {nan, 0.3};
  grid_sampler_2d(x.view, grid.view, y.view, border);
  EXPECT_DOUBLE_EQ(y[0], 11.5);
  border.interpolation_mode = GridSamplerInterpolation::kNearest;
  grid_sampler_2d(x.view, grid.view, y.view, border);
  EXPECT_DOUBLE_EQ(y[0], 11.0);
}

TEST(GridSampler2d, ThreadCountDoesNotChangeBits) {
  // Tiles: N = 1 and 3 take the two-pass backward (split by runs and channel blocks), N = 8 the fused
  // one with 1-4 threads. Planes: N = 1 and 3 split the input gradient into bands of rows (more bands
  // for more threads), N = 8 gives a batch per task. Every path must give the same bytes.
  for (auto strategy : {detail::GridSampler2dStrategy::kTiles, detail::GridSampler2dStrategy::kPlanes})
    for (int mode : {0, 1, 2})
      for (int64_t N : {1, 3, 8}) {
        const detail::StrategyForTesting forced(strategy);
        GridSampler2dParams p;
        p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
        p.padding_mode = GridSamplerPadding::kZeros;
        auto x = random_tensor<float>({N, 9, 13, 17}, 31);
        auto grid = random_tensor<float>({N, 40, 37, 2}, 32, -1.2, 1.2);
        auto g = random_tensor<float>({N, 9, 40, 37}, 33);
        SCOPED_TRACE("mode " + std::to_string(mode) + " N " + std::to_string(N) + " strategy " +
                     std::to_string(static_cast<int>(strategy)));
        testing::expect_same_bits_for_thread_counts({1, 2, 3, 4}, [&] {
          OwnedTensor<float> y({N, 9, 40, 37}), gi(x.view.sizes()), gg(grid.view.sizes());
          grid_sampler_2d(x.view, grid.view, y.view, p);
          grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
          return testing::concatenated({&y, &gi, &gg});
        });
      }
}

// Bilinear calls with 2 or 3 float channels take the planes (tile_min_channels; nearest ones forward); their
// bits are the tiles', for every mode, padding and alignment, at the shapes of the choice's crossover (4
// channels take the tiles).
TEST(GridSampler2d, FewChannelsGiveTheSameBitsOnEitherStrategy) {
  for (const std::array<int64_t, 4>& shape : std::vector<std::array<int64_t, 4>>{{1, 2, 8, 8}, {1, 3, 16, 16}, {2, 4, 8, 8}})
    for (int mode : {0, 1, 2})
      for (int padding : {0, 1, 2})
        for (bool align : {false, true}) {
          const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];  // not bindings: clang 14 lambdas
          GridSampler2dParams p;
          p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
          p.padding_mode = static_cast<GridSamplerPadding>(padding);
          p.align_corners = align;
          auto x = random_tensor<float>({N, C, H, W}, 81);
          auto grid = random_tensor<float>({N, H, W, 2}, 82, -1.3, 1.3);
          auto g = random_tensor<float>({N, C, H, W}, 83);
          auto run = [&](detail::GridSampler2dStrategy strategy) {
            const detail::StrategyForTesting forced(strategy);
            OwnedTensor<float> y({N, C, H, W}), gi(x.view.sizes()), gg(grid.view.sizes());
            grid_sampler_2d(x.view, grid.view, y.view, p);
            grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
            return testing::concatenated({&y, &gi, &gg});
          };
          SCOPED_TRACE("C " + std::to_string(C) + " mode " + std::to_string(mode) + " padding " +
                       std::to_string(padding) + " align " + std::to_string(align));
          const std::vector<float> automatic = run(detail::GridSampler2dStrategy::kAuto);
          for (auto strategy : {detail::GridSampler2dStrategy::kTiles, detail::GridSampler2dStrategy::kPlanes}) {
            const std::vector<float> forced = run(strategy);
            ASSERT_EQ(forced.size(), automatic.size());
            EXPECT_EQ(0, std::memcmp(forced.data(), automatic.data(), automatic.size() * sizeof(float)));
          }
        }
}

// The plane strategy (gathers in place, bands of rows) against the naive loops, for few and many
// channels, one-pixel rows and columns, a grid reaching beyond a reflection, both alignments; N = 1 so
// that the backward splits the rows into bands.
TEST(GridSampler2d, PlanesMatchNaiveLoops) {
  const detail::StrategyForTesting planes(detail::GridSampler2dStrategy::kPlanes);
  for (auto [N, C, H, W] : std::vector<std::array<int64_t, 4>>{{1, 1, 9, 70}, {2, 3, 1, 6}, {1, 5, 7, 1}, {3, 9, 6, 5}})
    for (int mode : {0, 1, 2})
      for (int padding : {0, 1, 2})
        for (bool align : {false, true}) {
          const NaiveGridSampler ref{mode, padding, align};
          const int64_t Ho = 19, Wo = 23;
          const double reach = padding == 2 ? 3.2 : 1.3;
          auto x = random_tensor<double>({N, C, H, W}, 71);
          auto grid = random_tensor<double>({N, Ho, Wo, 2}, 72, -reach, reach);
          auto g = random_tensor<double>({N, C, Ho, Wo}, 73);
          OwnedTensor<double> y({N, C, Ho, Wo}), gi(x.view.sizes()), gg(grid.view.sizes());
          set_num_threads(3);
          grid_sampler_2d(x.view, grid.view, y.view, params_of(ref));
          grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, params_of(ref));
          set_num_threads(0);
          const Reference r = naive(ref, x, grid, g);
          SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " H=" << H << " W=" << W << " mode=" << mode
                                            << " padding=" << padding << " align=" << align);
          testing::expect_all_near(y.storage, r.out, 1e-12);
          testing::expect_all_near(gi.storage, r.grad_input, 1e-12);
          testing::expect_all_near(gg.storage, r.grad_grid, 1e-10);
        }
}

// Both strategies compute every element with the same operations in the same order (the grid gradient
// lane by lane, then over the lanes): the same bits, in float32 and float16 (the planes' float band
// buffers against the float tiles), also for non-finite grid values and a channels-last input.
template <class T>
OwnedTensor<T> stored_as(const OwnedTensor<float>& t) {
  OwnedTensor<T> out(t.view.sizes(), T{});
  for (size_t i = 0; i < t.storage.size(); ++i) out.storage[i] = store_as<T>(t.storage[i]);
  return out;
}

template <class T>
void expect_strategies_agree(int mode, int padding) {
  GridSampler2dParams p;
  p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
  p.padding_mode = static_cast<GridSamplerPadding>(padding);
  const int64_t N = 2, C = 19, H = 10, W = 13, Ho = 17, Wo = 19;
  auto gridf = random_tensor<float>({N, Ho, Wo, 2}, 82, -1.3, 1.3);
  gridf.storage[5] = std::numeric_limits<float>::quiet_NaN();
  gridf.storage[8] = std::numeric_limits<float>::infinity();
  auto x = stored_as<T>(random_tensor<float>({N, C, H, W}, 81)), grid = stored_as<T>(gridf);
  auto g = stored_as<T>(random_tensor<float>({N, C, Ho, Wo}, 83));
  std::vector<T> x_buffer;
  const TensorView x_last = channels_last(x, x_buffer);
  std::vector<float> results[2];
  for (auto strategy : {detail::GridSampler2dStrategy::kTiles, detail::GridSampler2dStrategy::kPlanes}) {
    const detail::StrategyForTesting forced(strategy);
    OwnedTensor<T> y({N, C, Ho, Wo}, T{}), gi(x.view.sizes(), T{}), gg(grid.view.sizes(), T{}), y2(y.view.sizes(), T{});
    grid_sampler_2d(x.view, grid.view, y.view, p);
    grid_sampler_2d(x_last, grid.view, y2.view, p);
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), y.storage.size() * sizeof(T)), 0);
    grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
    std::vector<float>& r = results[strategy == detail::GridSampler2dStrategy::kPlanes];
    for (const auto* t : {&y, &gi, &gg})
      for (T v : t->storage) r.push_back(load_as<float>(v));
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    const float a = results[0][i], b = results[1][i];
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << i << ": " << a << " vs " << b;
  }
}

// gather() reads the taps at every level (masked AVX2 and AVX-512 gathers, the portable loop; negative
// indices give 0 and are not read), for every length around the vector widths.
TEST(Gather, EveryLevelReadsTheTaps) {
  std::vector<float> src(100);
  std::vector<double> src64(100);
  for (size_t i = 0; i < src.size(); ++i) src64[i] = src[i] = 0.5f + static_cast<float>(i);
  for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 33, 48}) {
    std::vector<int32_t> index(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) index[static_cast<size_t>(i)] = i % 3 == 1 ? -1 : static_cast<int32_t>((i * 37) % 100);
    testing::for_each_simd_level([&] {
      std::vector<float> a(static_cast<size_t>(n), 7.0f);
      std::vector<double> a64(static_cast<size_t>(n), 7.0);
      detail::gather(src.data(), index.data(), n, a.data());
      detail::gather(src64.data(), index.data(), n, a64.data());
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        EXPECT_EQ(a[k], index[k] < 0 ? 0.0f : src[static_cast<size_t>(index[k])]);
        EXPECT_EQ(a64[k], index[k] < 0 ? 0.0 : src64[static_cast<size_t>(index[k])]);
      }
    });
  }
}

// gather_adjacent reads both taps at every level: runs of horizontal neighbours (read as pairs), runs with a
// tap outside or a pair that is not adjacent (two masked gathers), and the tail.
TEST(Gather, AdjacentTapsAtEveryLevel) {
  std::vector<float> src(200);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0.25f + static_cast<float>(i);
  for (int64_t n : {0, 5, 16, 33, 64}) {
    std::vector<int32_t> left(static_cast<size_t>(n)), right(left.size());
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      left[k] = static_cast<int32_t>((i * 37) % 190);
      right[k] = i < 32 ? left[k] + 1 : (i % 5 == 0 ? -1 : left[k] + 1 + (i % 7 == 0));  // adjacent, then mixed
      if (i == 40) left[k] = -1;
    }
    testing::for_each_simd_level([&] {
      std::vector<float> first(static_cast<size_t>(n), 7.0f), second(first);
      detail::gather_adjacent(src.data(), left.data(), right.data(), n, 200, first.data(), second.data());
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        EXPECT_EQ(first[k], left[k] < 0 ? 0.0f : src[static_cast<size_t>(left[k])]) << i;
        EXPECT_EQ(second[k], right[k] < 0 ? 0.0f : src[static_cast<size_t>(right[k])]) << i;
      }
    });
  }
}

// Runs of adjacent pairs read from one window of 32 floats (AVX-512) where their left taps fit it: walking right
// and left, and the runs that must not take it: spread wider than the window, a window that would start before
// the array or end past the extent (the array's end: an overrun would read past it, which asan reports).
TEST(Gather, AdjacentTapsInWindowsAtEveryLevel) {
  std::vector<float> src(200);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0.5f + static_cast<float>(i);
  const std::vector<std::function<int32_t(int32_t)>> runs = {
      [](int32_t i) { return 60 + i; },           // a window
      [](int32_t i) { return 100 - i; },          // walking left
      [](int32_t i) { return 40 + i + i / 4; },   // with steps, still within 30
      [](int32_t i) { return 2 + i; },            // the window would start before the array
      [](int32_t i) { return 180 + i % 3; },      // ... end past the extent
      [](int32_t i) { return 10 * i; },           // wider than the window
      [](int32_t i) { return 120 + 2 * i; }};     // 34 apart: just wider
  std::vector<int32_t> left, right;
  for (const auto& run : runs) {
    for (int32_t i = 0; i < 16; ++i) {
      left.push_back(run(i));
      right.push_back(run(i) + 1);
    }
  }
  const auto n = static_cast<int64_t>(left.size());
  testing::for_each_simd_level([&] {
    std::vector<float> first(left.size(), 7.0f), second(first);
    detail::gather_adjacent(src.data(), left.data(), right.data(), n, static_cast<int64_t>(src.size()), first.data(),
                            second.data());
    for (size_t k = 0; k < left.size(); ++k) {
      EXPECT_EQ(first[k], src[static_cast<size_t>(left[k])]) << k;
      EXPECT_EQ(second[k], src[static_cast<size_t>(right[k])]) << k;
    }
  });
}

// The plane strategy at every level (AVX-512 and AVX2 gathers, gather()'s portable loop): the same bits.
// (The checked loads through int64 offsets, taken by float16/bfloat16 planes, are compared with the tiles
// in TilesAndPlanesAgree.)
TEST(GridSampler2d, PlaneGathersMatchCheckedLoads) {
  const detail::StrategyForTesting planes(detail::GridSampler2dStrategy::kPlanes);
  for (int mode : {0, 1, 2}) {
    GridSampler2dParams p;
    p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
    auto x = random_tensor<float>({2, 3, 12, 15}, 91);
    auto grid = random_tensor<float>({2, 9, 31, 2}, 92, -1.2, 1.2);
    auto g = random_tensor<float>({2, 3, 9, 31}, 93);
    SCOPED_TRACE(mode);
    testing::expect_same_bits_at_each_level([&] {
      OwnedTensor<float> y({2, 3, 9, 31}), gi(x.view.sizes()), gg(grid.view.sizes());
      grid_sampler_2d(x.view, grid.view, y.view, p);
      grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
      return testing::concatenated({&y, &gi, &gg});
    });
  }
}

// Large planes are swept bin by bin (points listed by bins of rows, two bins for a point whose rows straddle
// them): the same bits as the tiles and as the block sweep, for any thread count and bin size. The bins are
// reached by pinning their rows (the band size); the cost model bins only planes beyond the L3 cache.
TEST(GridSampler2d, BinnedPlanesMatchTiles) {
  for (int mode : {0, 1, 2})
    for (int padding : {0, 2}) {
      GridSampler2dParams p;
      p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
      p.padding_mode = static_cast<GridSamplerPadding>(padding);
      const int64_t N = 2, C = 2, H = 110, W = 60, Ho = 40, Wo = 31;
      auto x = random_tensor<float>({N, C, H, W}, 101);
      auto grid = random_tensor<float>({N, Ho, Wo, 2}, 102, -1.1, 1.1);
      auto g = random_tensor<float>({N, C, Ho, Wo}, 103);
      struct Run {
        detail::GridSampler2dStrategy strategy;
        int64_t rows;  // per bin, 0: the cost model's choice (the block sweep at this size)
        int threads;
      };
      const std::vector<Run> runs = {{detail::GridSampler2dStrategy::kTiles, 0, 2},
                                     {detail::GridSampler2dStrategy::kPlanes, 0, 2},
                                     {detail::GridSampler2dStrategy::kPlanes, 1, 1},
                                     {detail::GridSampler2dStrategy::kPlanes, 7, 3},
                                     {detail::GridSampler2dStrategy::kPlanes, 50, 2}};
      std::vector<std::vector<float>> results;
      for (const Run& run : runs) {
        const detail::StrategyForTesting forced(run.strategy, run.rows);
        set_num_threads(run.threads);
        OwnedTensor<float> y({N, C, Ho, Wo}), gi(x.view.sizes()), gg(grid.view.sizes());
        grid_sampler_2d(x.view, grid.view, y.view, p);
        grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
        results.push_back(testing::concatenated({&y, &gi, &gg}));
      }
      set_num_threads(0);
      SCOPED_TRACE("mode " + std::to_string(mode) + " padding " + std::to_string(padding));
      for (size_t k = 1; k < results.size(); ++k) {
        ASSERT_EQ(results[0].size(), results[k].size());
        EXPECT_EQ(std::memcmp(results[0].data(), results[k].data(), results[0].size() * sizeof(float)), 0) << k;
      }
    }
}

// The plane strategy's point vectors (float and double planes read by gathers) and backward against the
// tiles, bit for bit at every level: grids well inside the image (every vector reads its taps as pairs of adjacent
// values), grids crossing the borders (masked gathers, and vectors mixing both), point counts that leave
// partial vectors, a strided grid and output, and a channels-last input (no pairs: column stride C).
template <class T>
void expect_point_vectors_match_tiles(int mode, int padding, bool align) {
  GridSampler2dParams p;
  p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
  p.padding_mode = static_cast<GridSamplerPadding>(padding);
  p.align_corners = align;
  const int64_t N = 2, H = 13, W = 37, Ho = 7, Wo = 19;
  for (int64_t C : {1, 3})
    for (double reach : {0.6, 1.3}) {
      SCOPED_TRACE(::testing::Message() << "channels " << C << " reach " << reach);
      auto x = random_tensor<T>({N, C, H, W}, 111);
      auto grid = random_tensor<T>({N, Ho, Wo, 2}, 112, -reach, reach);
      // The same values, the grid as a view with a row stride of 2 * Wo + 6, the input channels-last.
      std::vector<T> grid_rows(static_cast<size_t>(N * Ho * (2 * Wo + 6)), T(9));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < Ho; ++h)
          for (int64_t k = 0; k < 2 * Wo; ++k)
            grid_rows[static_cast<size_t>((n * Ho + h) * (2 * Wo + 6) + k)] = grid[(n * Ho + h) * 2 * Wo + k];
      const TensorView strided_grid(grid_rows.data(), dtype_of<T>(), {N, Ho, Wo, 2}, {Ho * (2 * Wo + 6), 2 * Wo + 6, 2, 1});
      OwnedTensor<T> x_last({N, C, H, W});
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < H * W; ++i) x_last[(n * H * W + i) * C + c] = x[(n * C + c) * H * W + i];
      x_last.view = TensorView(x_last.data(), dtype_of<T>(), {N, C, H, W}, {C * H * W, 1, W * C, C});
      auto g = random_tensor<T>({N, C, Ho, Wo}, 113);
      // Both gradients too (the planes' backward reads its corners as pairs where they are adjacent).
      auto backward = [&] {
        OwnedTensor<T> gi({N, C, H, W}), gg({N, Ho, Wo, 2});
        grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
        return testing::concatenated({&gi, &gg});
      };
      std::vector<T> tiles, tiles_backward;
      {
        const detail::StrategyForTesting forced(detail::GridSampler2dStrategy::kTiles);
        OwnedTensor<T> y({N, C, Ho, Wo});
        grid_sampler_2d(x.view, grid.view, y.view, p);
        tiles = y.storage;
        tiles_backward = backward();
      }
      const detail::StrategyForTesting forced(detail::GridSampler2dStrategy::kPlanes);
      testing::for_each_simd_level([&] {
        const std::vector<T> planes_backward = backward();
        ASSERT_EQ(std::memcmp(planes_backward.data(), tiles_backward.data(), tiles_backward.size() * sizeof(T)), 0);
        const TensorView* inputs[] = {&x.view, &x_last.view};
        const TensorView* grids[] = {&grid.view, &strided_grid};
        for (const TensorView* in : inputs)
          for (const TensorView* at : grids) {
            std::vector<T> out(static_cast<size_t>(2 * N * C * Ho * Wo), T(-5));
            const TensorView y(out.data(), dtype_of<T>(), {N, C, Ho, Wo}, {2 * C * Ho * Wo, 2 * Ho * Wo, 2 * Wo, 2});
            grid_sampler_2d(*in, *at, y, p);
            for (size_t i = 0; i < tiles.size(); ++i) {
              ASSERT_EQ(std::memcmp(&out[2 * i], &tiles[i], sizeof(T)), 0) << "output " << i << ": " << out[2 * i]
                                                                          << " vs " << tiles[i];
              ASSERT_EQ(out[2 * i + 1], T(-5)) << "wrote between the outputs";
            }
          }
      });
    }
}

TEST(GridSampler2d, PointVectorsAndPlanesMatchTiles) {
  for (int mode : {0, 1, 2})
    for (int padding : {0, 1, 2})
      for (bool align : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "mode " << mode << " padding " << padding << " align " << align);
        expect_point_vectors_match_tiles<float>(mode, padding, align);
        expect_point_vectors_match_tiles<double>(mode, padding, align);
      }
}

// The plane strategy's forward of a float input at every level, bit for bit the tiles'.
void expect_planes_forward_match_tiles(const TensorView& x, const TensorView& grid, const GridSampler2dParams& p) {
  const std::vector<int64_t> shape = {x.size(0), x.size(1), grid.size(1), grid.size(2)};
  OwnedTensor<float> tiles(shape);
  {
    const detail::StrategyForTesting forced(detail::GridSampler2dStrategy::kTiles);
    grid_sampler_2d(x, grid, tiles.view, p);
  }
  const detail::StrategyForTesting forced(detail::GridSampler2dStrategy::kPlanes);
  testing::for_each_simd_level([&] {
    OwnedTensor<float> planes(shape);
    grid_sampler_2d(x, grid, planes.view, p);
    ASSERT_EQ(std::memcmp(planes.data(), tiles.data(), tiles.storage.size() * sizeof(float)), 0);
  });
}

// Smooth grids: the point vectors read each row's pairs through one window of two vectors (simd.h
// find_pair_window) where a vector's points lie close together: the identity with a small flow, a mirrored
// one (points walking left), an upscale, a downscale (windows too wide: pair gathers), and grids reaching the
// plane's first and last pixels (windows that would leave the plane: pair gathers). The bits are the tiles' at
// every level, for one to three channels (a single channel skips the windows at AVX2).
TEST(GridSampler2d, WindowedPairsMatchTiles) {
  const int64_t H = 21, W = 70, Ho = 19, Wo = 67;
  struct Grid {
    const char* name;
    double zoom, flow, shift;  // x = zoom * identity + flow * sin(...) + shift, in normalised units
  };
  const Grid grids[] = {{"flow", 1.0, 0.05, 0.0},     {"mirrored", -1.0, 0.03, 0.0}, {"upscale", 0.4, 0.0, 0.1},
                        {"downscale", 2.0, 0.0, 0.0}, {"top left", 0.3, 0.01, -0.7}, {"bottom right", 0.3, 0.01, 0.7}};
  for (bool align : {false, true})
    for (int padding : {0, 1})
      for (const Grid& shape : grids)
        for (int64_t C : {1, 2, 3}) {
          SCOPED_TRACE(::testing::Message() << shape.name << " channels " << C << " padding " << padding << " align " << align);
          GridSampler2dParams p;
          p.padding_mode = static_cast<GridSamplerPadding>(padding);
          p.align_corners = align;
          auto x = random_tensor<float>({1, C, H, W}, 121);
          OwnedTensor<float> grid({1, Ho, Wo, 2});
          for (int64_t h = 0; h < Ho; ++h)
            for (int64_t w = 0; w < Wo; ++w) {
              const double gx = (2.0 * w + 1) / Wo - 1, gy = (2.0 * h + 1) / Ho - 1;
              grid[(h * Wo + w) * 2] = static_cast<float>(shape.zoom * gx + shape.flow * std::sin(0.3 * h + 0.1 * w) + shape.shift);
              grid[(h * Wo + w) * 2 + 1] = static_cast<float>(std::abs(shape.zoom) * gy + shape.flow * std::cos(0.2 * h - 0.15 * w) + shape.shift);
            }
          expect_planes_forward_match_tiles(x.view, grid.view, p);
        }
}

// Many channels of large planes (8 MiB a batch): the bilinear point vectors prefetch the corners of the
// channel 8 ahead (random points: every lane's corners; a smooth grid: each row's window). Prefetches change no
// value: the tiles' bits at every level.
TEST(GridSampler2d, PrefetchingPointVectorsMatchTiles) {
  const int64_t C = 32, H = 256, W = 256;
  auto x = random_tensor<float>({1, C, H, W}, 131);
  for (bool smooth : {false, true}) {
    SCOPED_TRACE(smooth ? "smooth grid" : "random points");
    const int64_t Ho = smooth ? 8 : 50, Wo = smooth ? 40 : 1;
    auto grid = random_tensor<float>({1, Ho, Wo, 2}, 132, -1.05, 1.05);
    if (smooth) {
      for (int64_t i = 0; i < Ho * Wo; ++i) {
        grid[2 * i] = static_cast<float>(-0.5 + 0.01 * static_cast<double>(i % Wo));
        grid[2 * i + 1] = static_cast<float>(-0.3 + 0.05 * static_cast<double>(i / Wo));
      }
    }
    expect_planes_forward_match_tiles(x.view, grid.view, GridSampler2dParams{});
  }
}

// Nearest point vectors compute a pixel's offset in float where every offset of the plane is below 2^24
// (simd.h box_index), else in int32: planes whose last offset is 2^24 - 1 (4096 x 4096) and 2^24 + 4095
// (4097 x 4096), a channels_last plane (column stride 2), each sampled at its corners and edges, just
// outside them, at ties, at non-finite and -0 grid values and at random points: the tiles' bits at every level.
TEST(GridSampler2d, NearestOffsetsInFloatAndInt32MatchTiles) {
  struct Plane {
    int64_t C, H, W;
    bool channels_last;
  };
  for (const Plane& plane : {Plane{1, 4096, 4096, false}, Plane{1, 4097, 4096, false}, Plane{2, 40, 50, true}}) {
    const int64_t C = plane.C, H = plane.H, W = plane.W;
    SCOPED_TRACE(::testing::Message() << H << "x" << W << (plane.channels_last ? " channels_last" : ""));
    OwnedTensor<float> x({1, C, H, W});
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>(i % 65521) + 0.5f;
    if (plane.channels_last) x.view = TensorView(x.data(), DType::kFloat32, {1, C, H, W}, {C * H * W, 1, W * C, C});
    std::vector<float> values;  // (x, y) pairs, normalised (align_corners=false: pixel p is at (2p + 1) / size - 1)
    const auto at = [](double pixel, int64_t size) { return static_cast<float>((2 * pixel + 1) / static_cast<double>(size) - 1); };
    for (double py : {-1.0, 0.0, 0.5, 1.0, static_cast<double>(H) - 1.5, static_cast<double>(H) - 1, static_cast<double>(H)})
      for (double px : {-1.0, -0.5, 0.0, 1.5, static_cast<double>(W) - 2, static_cast<double>(W) - 1, static_cast<double>(W) - 0.5}) {
        values.push_back(at(px, W));
        values.push_back(at(py, H));
      }
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (float odd : {nan, inf, -inf, -0.0f, 1.0f, -1.0f}) values.insert(values.end(), {odd, 0.25f, 0.25f, odd, odd, odd});
    std::mt19937 gen(141);
    std::uniform_real_distribution<float> dist(-1.02f, 1.02f);
    while (values.size() < 2 * 301) values.push_back(dist(gen));
    const int64_t points = static_cast<int64_t>(values.size()) / 2;
    OwnedTensor<float> grid({1, 1, points, 2});
    std::copy(values.begin(), values.end(), grid.storage.begin());
    for (int padding : {0, 1, 2})
      for (bool align : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "padding " << padding << " align " << align);
        GridSampler2dParams p;
        p.interpolation_mode = GridSamplerInterpolation::kNearest;
        p.padding_mode = static_cast<GridSamplerPadding>(padding);
        p.align_corners = align;
        expect_planes_forward_match_tiles(x.view, grid.view, p);
      }
  }
}

// The fused bilinear backward (one or two float channels, zeros padding, one band a batch: the points as
// vectors, no table; grid_sampler_2d_vectors.h) and the tables it stands in for (three channels; bands, with one
// batch on two or three threads), against the tiles bit for bit at every level: each gradient alone and both,
// a grid with non-finite values, points outside and at the edges, a grad_output view (its points are not one
// run), a strided grid (not pairs) and a channels-last input (corners not read in pairs).
TEST(GridSampler2d, FusedBilinearBackwardMatchesTiles) {
  const int64_t H = 11, W = 29, Ho = 9, Wo = 37;
  for (int64_t N : {1, 3})
    for (int64_t C : {1, 2, 3}) {
      auto x = random_tensor<float>({N, C, H, W}, 151);
      auto grid = random_tensor<float>({N, Ho, Wo, 2}, 152, -1.15, 1.15);
      const float inf = std::numeric_limits<float>::infinity();
      for (auto [at, value] : {std::pair<int64_t, float>{3, std::numeric_limits<float>::quiet_NaN()}, {10, inf}, {17, -inf},
                               {20, -1.0f}, {21, 1.0f}, {40, -0.0f}, {71, 1.0f}})
        grid[at] = value;
      std::vector<float> x_buffer, go_buffer(static_cast<size_t>(N * C * Ho * (Wo + 3)), 5.0f);
      const TensorView x_last = channels_last(x, x_buffer);
      auto g = random_tensor<float>({N, C, Ho, Wo}, 153);
      for (int64_t i = 0; i < N * C * Ho; ++i)
        std::copy(g.data() + i * Wo, g.data() + (i + 1) * Wo, go_buffer.data() + i * (Wo + 3));
      const TensorView go_rows(go_buffer.data(), DType::kFloat32, {N, C, Ho, Wo}, {C * Ho * (Wo + 3), Ho * (Wo + 3), Wo + 3, 1});
      std::vector<float> grid_buffer(static_cast<size_t>(N * Ho * Wo * 3), 7.0f);
      for (int64_t i = 0; i < N * Ho * Wo; ++i) std::copy(grid.data() + 2 * i, grid.data() + 2 * i + 2, grid_buffer.data() + 3 * i);
      const TensorView grid_spaced(grid_buffer.data(), DType::kFloat32, {N, Ho, Wo, 2}, {Ho * Wo * 3, Wo * 3, 3, 1});
      struct Case {
        const char* name;
        TensorView go, x, grid;
      };
      for (const Case& use : {Case{"dense", g.view, x.view, grid.view}, Case{"grad_output rows", go_rows, x.view, grid.view},
                              Case{"strided grid", g.view, x.view, grid_spaced}, Case{"channels_last", g.view, x_last, grid.view}})
        for (const std::vector<bool>& mask : {std::vector<bool>{true, true}, {true, false}, {false, true}}) {
          SCOPED_TRACE(::testing::Message() << "N " << N << " C " << C << " " << use.name << " mask " << mask[0] << mask[1]);
          auto backward = [&] {
            OwnedTensor<float> gi({N, C, H, W}, 3.0f), gg({N, Ho, Wo, 2}, 3.0f);
            grid_sampler_2d_backward(use.go, use.x, use.grid, mask[0] ? gi.view : TensorView(),
                                     mask[1] ? gg.view : TensorView(), GridSampler2dParams{}, mask);
            return testing::concatenated({&gi, &gg});
          };
          std::vector<float> tiles;
          {
            const detail::StrategyForTesting forced(detail::GridSampler2dStrategy::kTiles);
            tiles = backward();
          }
          const detail::StrategyForTesting forced(detail::GridSampler2dStrategy::kPlanes);
          for (int threads : {1, 2, 3}) {
            set_num_threads(threads);
            testing::for_each_simd_level([&] {
              const std::vector<float> planes = backward();
              ASSERT_EQ(std::memcmp(planes.data(), tiles.data(), tiles.size() * sizeof(float)), 0) << threads << " threads";
            });
          }
          set_num_threads(0);
        }
    }
}

TEST(GridSampler2d, TilesAndPlanesAgree) {
  for (int mode : {0, 1, 2})
    for (int padding : {0, 1, 2}) {
      SCOPED_TRACE("mode " + std::to_string(mode) + " padding " + std::to_string(padding));
      expect_strategies_agree<float>(mode, padding);
      expect_strategies_agree<Half>(mode, padding);
    }
}

// The two backward paths (fused per batch, or two passes) sum every element in the same order.
TEST(GridSampler2d, FusedAndTwoPassBackwardAgreeBitwise) {
  const detail::StrategyForTesting tiles(detail::GridSampler2dStrategy::kTiles);
  GridSampler2dParams p;
  auto x = random_tensor<float>({4, 6, 10, 12}, 41);
  auto grid = random_tensor<float>({4, 30, 20, 2}, 42, -1.1, 1.1);
  auto g = random_tensor<float>({4, 6, 30, 20}, 43);
  OwnedTensor<float> gi1(x.view.sizes()), gg1(grid.view.sizes()), gi2(x.view.sizes()), gg2(grid.view.sizes());
  set_num_threads(2);  // N = 4 >= 2 * 2: fused
  grid_sampler_2d_backward(g.view, x.view, grid.view, gi1.view, gg1.view, p);
  set_num_threads(3);  // N = 4 < 2 * 3: two passes
  grid_sampler_2d_backward(g.view, x.view, grid.view, gi2.view, gg2.view, p);
  set_num_threads(0);
  EXPECT_EQ(std::memcmp(gi1.data(), gi2.data(), gi1.storage.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gg1.data(), gg2.data(), gg1.storage.size() * sizeof(float)), 0);
}

// A plane whose framed pixels pass int32 (46342 x 46342, a broadcast view of one value) runs on the
// plane strategy, also when the tiles are forced: every mode samples the value, and the grid gradient
// of a constant plane is zero.
TEST(GridSampler2d, PlanesBeyondTheTilesInt32PixelsRun) {
  const detail::StrategyForTesting tiles(detail::GridSampler2dStrategy::kTiles);
  float value = 2.5f;
  const TensorView huge(&value, DType::kFloat32, {1, 1, 46342, 46342}, {0, 0, 0, 0});
  OwnedTensor<float> grid({1, 2, 3, 2}, 0.25f), y({1, 1, 2, 3}), g({1, 1, 2, 3}, 1.0f), gg({1, 2, 3, 2});
  for (int mode : {0, 1, 2}) {
    GridSampler2dParams p;
    p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
    grid_sampler_2d(huge, grid.view, y.view, p);
    for (float v : y.storage) EXPECT_FLOAT_EQ(v, 2.5f) << mode;
    grid_sampler_2d_backward(g.view, huge, grid.view, TensorView(), gg.view, p, {false, true});
    for (float v : gg.storage) EXPECT_NEAR(v, 0.0f, 1e-3f) << mode;
  }
}

TEST(GridSampler2d, ValidationErrors) {
  GridSampler2dParams p;
  OwnedTensor<float> x({2, 3, 4, 5}), grid({2, 6, 7, 2}), y({2, 3, 6, 7}), gi({2, 3, 4, 5}), gg({2, 6, 7, 2});
  auto forward_error = [&](const TensorView& in, const TensorView& gr, const TensorView& out,
                           const GridSampler2dParams& params, ErrorKind kind, const std::string& text) {
    expect_error([&] { grid_sampler_2d(in, gr, out, params); }, kind, text);
  };
  auto backward_error = [&](const TensorView& go, const TensorView& in, const TensorView& gr,
                            const GridSampler2dParams& params, ErrorKind kind, const std::string& text,
                            const std::vector<bool>& mask = {true, true}) {
    expect_error([&] { grid_sampler_2d_backward(go, in, gr, gi.view, gg.view, params, mask); }, kind, text);
  };
  // Modes.
  GridSampler2dParams bad = p;
  bad.interpolation_mode = static_cast<GridSamplerInterpolation>(3);
  forward_error(
      x.view, grid.view, y.view, bad, ErrorKind::kInvalidArgument,
      "grid_sampler_2d(): expected interpolation_mode in {0 (bilinear), 1 (nearest), 2 (bicubic)}, but got 3");
  backward_error(y.view, x.view, grid.view, bad, ErrorKind::kInvalidArgument,
                 "grid_sampler_2d_backward(): expected interpolation_mode in");
  bad = p;
  bad.padding_mode = static_cast<GridSamplerPadding>(-1);
  forward_error(x.view, grid.view, y.view, bad, ErrorKind::kInvalidArgument,
                "expected padding_mode in {0 (zeros), 1 (border), 2 (reflection)}, but got -1");
  backward_error(y.view, x.view, grid.view, bad, ErrorKind::kInvalidArgument, "expected padding_mode in");
  // Rows or columns beyond the kernel's int32 numbers: refused before any element is read (the view's
  // data is a single float).
  float one = 1;
  const TensorView huge(&one, DType::kFloat32, {1, 1, 3, int64_t{1} << 31}, {0, 0, 0, 0});
  OwnedTensor<float> grid1({1, 1, 1, 2}), y1({1, 1, 1, 1});
  forward_error(huge, grid1.view, y1.view, p, ErrorKind::kOverflow,
                "grid_sampler_2d(): expected input planes with H and W below 2^31 - 2 (the CPU kernel's int32 rows "
                "and columns), but got H x W = 3 x 2147483648");
  expect_error(
      [&] {
        grid_sampler_2d_backward(y1.view, huge, grid1.view, y1.view, grid1.view, p, {false, true});
      },
      ErrorKind::kOverflow, "grid_sampler_2d_backward(): expected input planes with");
  // Ranks.
  OwnedTensor<float> x3({3, 4, 5}), grid3({2, 6, 7}), y3({3, 6, 7});
  forward_error(x3.view, grid.view, y.view, p, ErrorKind::kInvalidArgument,
                "grid_sampler_2d(): expected input to be 4-D (N, C, H, W), but got 3-D shape (3, 4, 5)");
  forward_error(x.view, grid3.view, y.view, p, ErrorKind::kInvalidArgument,
                "expected grid to be 4-D (N, Ho, Wo, 2), but got 3-D shape (2, 6, 7)");
  backward_error(y3.view, x.view, grid.view, p, ErrorKind::kInvalidArgument,
                 "grid_sampler_2d_backward(): expected grad_output to be 4-D, but got 3-D");
  // Grid last dimension.
  OwnedTensor<float> grid_xyz({2, 6, 7, 3});
  forward_error(x.view, grid_xyz.view, y.view, p, ErrorKind::kInvalidArgument,
                "expected grid's last dimension to be 2 (x, y), but got grid of shape (2, 6, 7, 3)");
  backward_error(y.view, x.view, grid_xyz.view, p, ErrorKind::kInvalidArgument,
                 "expected grid's last dimension to be 2");
  // Batch sizes.
  OwnedTensor<float> grid_b({3, 6, 7, 2}), y_b({3, 3, 6, 7});
  forward_error(x.view, grid_b.view, y.view, p, ErrorKind::kInvalidArgument,
                "expected grid to have the batch size of input (2), but got 3");
  backward_error(y_b.view, x.view, grid.view, p, ErrorKind::kInvalidArgument,
                 "expected grad_output to have the batch size of input (2), but got 3");
  // Channels.
  OwnedTensor<float> y_c({2, 4, 6, 7});
  backward_error(y_c.view, x.view, grid.view, p, ErrorKind::kInvalidArgument,
                 "expected grad_output to have the channels of input (3), but got 4");
  // grad_output spatial size == grid (Ho, Wo); forward output shape.
  OwnedTensor<float> y_s({2, 3, 6, 8});
  backward_error(y_s.view, x.view, grid.view, p, ErrorKind::kInvalidArgument,
                 "expected grad_output's spatial size to equal grid's (Ho, Wo) = (6, 7), but got (6, 8)");
  forward_error(x.view, grid.view, y_s.view, p, ErrorKind::kInvalidArgument,
                "grid_sampler_2d(): expected output of shape (2, 3, 6, 7), but got (2, 3, 6, 8)");
  // Empty input plane.
  OwnedTensor<float> x_empty({2, 3, 0, 5});
  forward_error(x_empty.view, grid.view, y.view, p, ErrorKind::kInvalidArgument,
                "expected input to have non-empty spatial dimensions (H, W), but got input of shape (2, 3, 0, 5)");
  backward_error(y.view, x_empty.view, grid.view, p, ErrorKind::kInvalidArgument,
                 "expected input to have non-empty spatial dimensions");
  // output_mask entries and output shapes.
  backward_error(y.view, x.view, grid.view, p, ErrorKind::kInvalidArgument,
                 "expected output_mask to have 2 entries (grad_input, grad_grid), but got 3", {true, true, false});
  OwnedTensor<float> gi_wrong({2, 3, 4, 6}), gg_wrong({2, 6, 6, 2});
  expect_error([&] { grid_sampler_2d_backward(y.view, x.view, grid.view, gi_wrong.view, gg.view, p); },
               ErrorKind::kInvalidArgument, "expected grad_input of shape (2, 3, 4, 5), but got (2, 3, 4, 6)");
  expect_error([&] { grid_sampler_2d_backward(y.view, x.view, grid.view, gi.view, gg_wrong.view, p); },
               ErrorKind::kInvalidArgument, "expected grad_grid of shape (2, 6, 7, 2), but got (2, 6, 6, 2)");
  // Dtypes.
  OwnedTensor<double> grid_d({2, 6, 7, 2}), y_d({2, 3, 6, 7});
  forward_error(x.view, grid_d.view, y.view, p, ErrorKind::kType,
                "grid_sampler_2d(): expected grid to have the dtype of input (float32), but got float64");
  forward_error(x.view, grid.view, y_d.view, p, ErrorKind::kType,
                "expected output to have the dtype of input (float32), but got float64");
  backward_error(y_d.view, x.view, grid.view, p, ErrorKind::kType,
                 "expected input to have the dtype of grad_output (float64), but got float32");
  OwnedTensor<double> gi_d({2, 3, 4, 5});
  expect_error([&] { grid_sampler_2d_backward(y.view, x.view, grid.view, gi_d.view, gg.view, p); }, ErrorKind::kType,
               "expected grad_input to have the dtype of grad_output (float32), but got float64");
  OwnedTensor<int32_t> xi({2, 3, 4, 5}), gridi({2, 6, 7, 2}), yi({2, 3, 6, 7});
  forward_error(xi.view, gridi.view, yi.view, p, ErrorKind::kType,
                "grid_sampler_2d(): expected input to be float16, bfloat16, float32 or float64, but got int32");
}

}  // namespace
}  // namespace spatialgrad

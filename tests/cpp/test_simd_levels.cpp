// Every operator at every instruction level this CPU has (baseline, AVX2, AVX-512; detail/cpu.h), pinned
// in turn: the same bits as the baseline level, for every dtype, both directions, the second-order
// kernels, and the strategies and layouts that run different kernels (docs/design.md, "Kernel
// vocabulary": no level enables FMA, so every level performs the same operations in the same order).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "detail/strategy.h"
#include "simd_levels.h"
#include "spatialgrad/avg_pool2d.h"
#include "spatialgrad/grid_sampler_2d.h"
#include "spatialgrad/ms_deform_attn.h"
#include "spatialgrad/roi_align.h"
#include "spatialgrad/upsample_bilinear2d.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::OwnedTensor;

// x in dtype T (float16/bfloat16 rounded from float).
template <class T>
T value_of(double x) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_half(static_cast<float>(x));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bfloat16(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

// Zeros of dtype T.
template <class T>
OwnedTensor<T> zeros(std::vector<int64_t> sizes) {
  return OwnedTensor<T>(std::move(sizes), value_of<T>(0.0));
}

// Random values of dtype T in [lo, hi).
template <class T>
OwnedTensor<T> random_of(std::vector<int64_t> sizes, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  OwnedTensor<T> t = zeros<T>(std::move(sizes));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (auto& v : t.storage) v = value_of<T>(dist(gen));
  return t;
}

// The bytes of the tensors' storage, one after the other: what the levels must agree on.
template <class T>
std::vector<uint8_t> bytes_of(std::initializer_list<const OwnedTensor<T>*> tensors) {
  std::vector<uint8_t> all;
  for (const OwnedTensor<T>* t : tensors) {
    const auto* p = reinterpret_cast<const uint8_t*>(t->storage.data());
    all.insert(all.end(), p, p + t->storage.size() * sizeof(T));
  }
  return all;
}

// A channels-last (N, C, H, W) view of fresh storage holding `src`'s values.
template <class T>
OwnedTensor<T> channels_last(const OwnedTensor<T>& src) {
  const std::vector<int64_t>& s = src.view.sizes();
  OwnedTensor<T> out = zeros<T>(s);
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) out.storage[((n * H + h) * W + w) * C + c] = src.storage[((n * C + c) * H + h) * W + w];
  out.view = TensorView(out.storage.data(), dtype_of<T>(), s, {H * W * C, 1, W * C, C});
  return out;
}

// ---- avg_pool2d ------------------------------------------------------------------------------------------------

struct PoolCase {
  std::vector<int64_t> input;
  int64_t k, s, p;
  bool ceil_mode, count_include_pad, channels_last;
};

template <class T>
std::vector<uint8_t> pool(const PoolCase& c) {
  AvgPool2dParams p;
  p.kernel_size = {c.k};
  p.stride = {c.s};
  p.padding = {c.p};
  p.ceil_mode = c.ceil_mode;
  p.count_include_pad = c.count_include_pad;
  OwnedTensor<T> x = random_of<T>(c.input, 11);
  if (c.channels_last) x = channels_last(x);
  OwnedTensor<T> y = zeros<T>(avg_pool2d_output_shape(c.input, p));
  avg_pool2d(x.view, y.view, p);
  OwnedTensor<T> g = random_of<T>(y.view.sizes(), 12), gi = zeros<T>(c.input);
  if (c.channels_last) gi = channels_last(gi);
  avg_pool2d_backward(g.view, x.view, gi.view, p);
  return bytes_of<T>({&y, &gi});
}

TEST(SimdLevels, AvgPool2dEveryFamily) {
  const PoolCase cases[] = {
      {{1, 2, 8, 8}, 2, 2, 0, false, true, false},           // direct
      {{2, 16, 13, 11}, 3, 1, 1, false, false, false},        // plane tiles
      {{1, 3, 40, 90}, 3, 2, 1, true, true, false},           // planes
      {{2, 16, 9, 21}, 3, 2, 1, false, true, true},           // channels-last lanes
      {{2, 3, 30, 33}, 2, 2, 0, false, true, true},           // channels-last, few channels: planes
      {{1, 5, 64, 70}, 5, 1, 2, false, true, false},          // wide windows
  };
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "input " << c.input[1] << "x" << c.input[2] << "x" << c.input[3] << " k" << c.k);
    testing::expect_same_bits_at_each_level([&] { return pool<float>(c); });
    testing::expect_same_bits_at_each_level([&] { return pool<double>(c); });
    testing::expect_same_bits_at_each_level([&] { return pool<Half>(c); });
    testing::expect_same_bits_at_each_level([&] { return pool<BFloat16>(c); });
  }
}

// ---- upsample_bilinear2d ---------------------------------------------------------------------------------------

template <class T>
std::vector<uint8_t> upsample(std::vector<int64_t> input, std::vector<int64_t> size, bool align, Layout layout) {
  UpsampleBilinear2dParams p;
  p.output_size = size;
  p.align_corners = align;
  p.layout = layout;
  OwnedTensor<T> x = random_of<T>(input, 21);
  OwnedTensor<T> y = zeros<T>(upsample_bilinear2d_output_shape(input, p));
  upsample_bilinear2d(x.view, y.view, p);
  OwnedTensor<T> g = random_of<T>(y.view.sizes(), 22), gi = zeros<T>(input);
  upsample_bilinear2d_backward(g.view, input, gi.view, p);
  return bytes_of<T>({&y, &gi});
}

template <class T>
void expect_upsample_levels_agree() {
  for (bool align : {false, true}) {
    testing::expect_same_bits_at_each_level([&] { return upsample<T>({2, 3, 17, 13}, {31, 29}, align, Layout::kNCHW); });
    testing::expect_same_bits_at_each_level([&] { return upsample<T>({1, 2, 40, 36}, {23, 19}, align, Layout::kNCHW); });
    testing::expect_same_bits_at_each_level([&] { return upsample<T>({2, 9, 10, 12}, {20, 7}, align, Layout::kNHWC); });
    testing::expect_same_bits_at_each_level([&] { return upsample<T>({1, 6, 7, 3}, {13, 12}, align, Layout::kNHWC); });
  }
}

TEST(SimdLevels, UpsampleBilinear2d) {
  expect_upsample_levels_agree<float>();
  expect_upsample_levels_agree<double>();
  expect_upsample_levels_agree<Half>();
  expect_upsample_levels_agree<BFloat16>();
}

// ---- grid_sampler_2d -------------------------------------------------------------------------------------------

GridSampler2dParams sampler(int mode, int padding, bool align) {
  GridSampler2dParams p;
  p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
  p.padding_mode = static_cast<GridSamplerPadding>(padding);
  p.align_corners = align;
  return p;
}

// Forward, backward (both gradients) and the second order of one call; grids reach past the borders and
// hold a NaN and an infinity.
template <class T>
std::vector<uint8_t> sample(int64_t N, int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                            const GridSampler2dParams& p, bool input_channels_last) {
  OwnedTensor<T> x = random_of<T>({N, C, H, W}, 31);
  if (input_channels_last) x = channels_last(x);
  OwnedTensor<T> grid = random_of<T>({N, Ho, Wo, 2}, 32, -1.3, 1.3);
  if constexpr (std::is_floating_point_v<T>) {
    grid.storage[3] = std::numeric_limits<T>::quiet_NaN();
    grid.storage[8] = std::numeric_limits<T>::infinity();
  }
  OwnedTensor<T> y = zeros<T>({N, C, Ho, Wo}), g = random_of<T>({N, C, Ho, Wo}, 33);
  OwnedTensor<T> gi = zeros<T>({N, C, H, W}), gg = zeros<T>({N, Ho, Wo, 2});
  grid_sampler_2d(x.view, grid.view, y.view, p);
  grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
  std::vector<uint8_t> out = bytes_of<T>({&y, &gi, &gg});
  if constexpr (std::is_floating_point_v<T>) {
    OwnedTensor<T> u = random_of<T>({N, C, H, W}, 34), v = random_of<T>({N, Ho, Wo, 2}, 35);
    OwnedTensor<T> d_go({N, C, Ho, Wo}), d_x({N, C, H, W}), d_grid({N, Ho, Wo, 2});
    grid_sampler_2d_double_backward(u.view, v.view, g.view, x.view, grid.view, d_go.view, d_x.view, d_grid.view, p);
    const std::vector<uint8_t> second = bytes_of<T>({&d_go, &d_x, &d_grid});
    out.insert(out.end(), second.begin(), second.end());
  }
  return out;
}

template <class T>
void expect_sampler_levels_agree() {
  using detail::GridSampler2dStrategy;
  for (GridSampler2dStrategy strategy :
       {GridSampler2dStrategy::kAuto, GridSampler2dStrategy::kTiles, GridSampler2dStrategy::kPlanes}) {
    const detail::StrategyForTesting forced(strategy);
    for (int mode : {0, 1, 2})
      for (int padding : {0, 1, 2})
        for (bool align : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "strategy " << static_cast<int>(strategy) << " mode " << mode << " padding "
                                          << padding << " align " << align);
          const GridSampler2dParams p = sampler(mode, padding, align);
          testing::expect_same_bits_at_each_level([&] { return sample<T>(2, 1, 9, 14, 7, 21, p, false); });
          testing::expect_same_bits_at_each_level([&] { return sample<T>(1, 3, 12, 11, 13, 5, p, false); });
          testing::expect_same_bits_at_each_level([&] { return sample<T>(2, 9, 6, 7, 5, 6, p, true); });
        }
  }
}

TEST(SimdLevels, GridSampler2dFloat) { expect_sampler_levels_agree<float>(); }
TEST(SimdLevels, GridSampler2dDouble) { expect_sampler_levels_agree<double>(); }
TEST(SimdLevels, GridSampler2dHalf) { expect_sampler_levels_agree<Half>(); }
TEST(SimdLevels, GridSampler2dBFloat16) { expect_sampler_levels_agree<BFloat16>(); }

// ---- roi_align -------------------------------------------------------------------------------------------------

template <class T>
std::vector<uint8_t> align_rois(int64_t C, int64_t sampling_ratio) {
  RoiAlignParams p;
  p.pooled_height = 3;
  p.pooled_width = 4;
  p.spatial_scale = 0.5;
  p.sampling_ratio = sampling_ratio;
  const std::vector<int64_t> in_shape = {2, C, 20, 24};
  OwnedTensor<T> x = random_of<T>(in_shape, 41);
  OwnedTensor<T> boxes = zeros<T>({7, 5});
  std::mt19937 gen(42);
  std::uniform_real_distribution<double> at(-4.0, 50.0);
  for (int64_t k = 0; k < 7; ++k) {
    const double x0 = at(gen), y0 = at(gen), x1 = x0 + at(gen) / 2, y1 = y0 + at(gen) / 3;
    const double row[5] = {static_cast<double>(k % 2), x0, y0, x1, y1};
    for (int j = 0; j < 5; ++j) boxes.storage[k * 5 + j] = value_of<T>(row[j]);
  }
  OwnedTensor<T> y = zeros<T>(roi_align_output_shape(in_shape, {7, 5}, p));
  roi_align(x.view, boxes.view, y.view, p);
  OwnedTensor<T> g = random_of<T>(y.view.sizes(), 43), gi = zeros<T>(in_shape);
  roi_align_backward(g.view, boxes.view, in_shape, gi.view, p);
  return bytes_of<T>({&y, &gi});
}

// Each kernel family pinned in turn (the packed ones run in the level's vectors), and the cost model's choice.
TEST(SimdLevels, RoiAlign) {
  for (const char* strategy : {"auto", "direct", "packed", "packed_narrow"}) {
    const detail::StrategyForTesting pinned("roi_align", strategy);
    for (int64_t C : {1, 3, 17, 40})
      for (int64_t ratio : {0, 2}) {
        SCOPED_TRACE(::testing::Message() << strategy << ", channels " << C << " sampling " << ratio);
        testing::expect_same_bits_at_each_level([&] { return align_rois<float>(C, ratio); });
        testing::expect_same_bits_at_each_level([&] { return align_rois<double>(C, ratio); });
        testing::expect_same_bits_at_each_level([&] { return align_rois<Half>(C, ratio); });
      }
  }
}

// ---- ms_deform_attn --------------------------------------------------------------------------------------------

template <class T>
std::vector<uint8_t> deform(int64_t heads, int64_t channels, int64_t queries) {
  const std::vector<int64_t> levels = {6, 7, 3, 4};  // (H, W) of two levels
  const int64_t bs = 2, L = 2, P = 3, S = 6 * 7 + 3 * 4;
  OwnedTensor<int64_t> shapes({L, 2}), starts({L});
  for (int64_t i = 0; i < 2 * L; ++i) shapes.storage[i] = levels[i];
  starts.storage = {0, 6 * 7};
  OwnedTensor<T> value = random_of<T>({bs, S, heads, channels}, 51);
  OwnedTensor<T> loc = random_of<T>({bs, queries, heads, L, P, 2}, 52, -0.1, 1.1);
  OwnedTensor<T> attn = random_of<T>({bs, queries, heads, L, P}, 53, 0.0, 1.0);
  OwnedTensor<T> out = zeros<T>({bs, queries, heads * channels}), go = random_of<T>({bs, queries, heads * channels}, 54);
  ms_deform_attn(value.view, shapes.view, starts.view, loc.view, attn.view, out.view);
  OwnedTensor<T> gv = zeros<T>(value.view.sizes()), gl = zeros<T>(loc.view.sizes()), ga = zeros<T>(attn.view.sizes());
  ms_deform_attn_backward(value.view, shapes.view, starts.view, loc.view, attn.view, go.view, gv.view, gl.view, ga.view);
  std::vector<uint8_t> bytes = bytes_of<T>({&out, &gv, &gl, &ga});
  if constexpr (std::is_floating_point_v<T>) {
    OwnedTensor<T> u = random_of<T>(value.view.sizes(), 55), v = random_of<T>(loc.view.sizes(), 56);
    OwnedTensor<T> wt = random_of<T>(attn.view.sizes(), 57);
    OwnedTensor<T> dv(value.view.sizes()), dl(loc.view.sizes()), da(attn.view.sizes()), dg(go.view.sizes());
    ms_deform_attn_double_backward(value.view, shapes.view, starts.view, loc.view, attn.view, go.view, u.view, v.view,
                                   wt.view, dv.view, dl.view, da.view, dg.view);
    const std::vector<uint8_t> second = bytes_of<T>({&dv, &dl, &da, &dg});
    bytes.insert(bytes.end(), second.begin(), second.end());
  }
  return bytes;
}

TEST(SimdLevels, MsDeformAttn) {
  for (int64_t heads : {1, 2})
    for (int64_t channels : {5, 8, 16, 32, 64}) {
      SCOPED_TRACE(::testing::Message() << "heads " << heads << " channels " << channels);
      testing::expect_same_bits_at_each_level([&] { return deform<float>(heads, channels, 9); });
      testing::expect_same_bits_at_each_level([&] { return deform<double>(heads, channels, 9); });
      testing::expect_same_bits_at_each_level([&] { return deform<Half>(heads, channels, 9); });
      testing::expect_same_bits_at_each_level([&] { return deform<BFloat16>(heads, channels, 9); });
    }
}

// The pin is the one place the level comes from: the kernels run at the pinned level (or the best the
// CPU has below it) and the previous level comes back when the pin ends.
TEST(SimdLevels, PinsAndRestores) {
  const detail::SimdLevel before = detail::simd_level();
  for (detail::SimdLevel level : testing::available_simd_levels()) {
    const detail::PinnedSimdLevel pinned(level);
    EXPECT_EQ(detail::simd_level(), level);
  }
  EXPECT_EQ(detail::simd_level(), before);
  EXPECT_TRUE(detail::cpu_has_simd_level(detail::SimdLevel::kBaseline));
  const detail::PinnedSimdLevel top(detail::SimdLevel::kAvx512);
  EXPECT_TRUE(detail::cpu_has_simd_level(detail::simd_level()));
}

}  // namespace
}  // namespace spatialgrad

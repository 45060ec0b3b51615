// float16 and bfloat16 kernels of every operator: a half-precision result is the float32 kernel's
// result on the widened inputs, rounded once to nearest even -- bit for bit, forward and backward.
// (Accuracy against float64 and against PyTorch is tested in tests/python/test_half_precision.py.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "spatialgrad/avg_pool2d.h"
#include "spatialgrad/grid_sampler_2d.h"
#include "spatialgrad/ms_deform_attn.h"
#include "spatialgrad/roi_align.h"
#include "spatialgrad/upsample_bilinear2d.h"

namespace spatialgrad {
namespace {

float widen(float v) { return v; }
float widen(Half v) { return to_float(v); }
float widen(BFloat16 v) { return to_float(v); }

template <class T>
T narrow(float v) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_half(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bfloat16(v);
  } else {
    return v;
  }
}

// The inputs of a case as float values that every storage type holds exactly.
struct Data {
  std::vector<std::vector<float>> arrays;
};

// A tensor of type T holding `values`, and a view of it.
template <class T>
struct Buffer {
  std::vector<T> storage;
  TensorView view;
  // The first numel(shape) of `values`.
  Buffer(const std::vector<float>& values, std::vector<int64_t> shape) {
    const size_t n = static_cast<size_t>(checked_numel(shape));
    EXPECT_GE(values.size(), n) << "test data too short";
    for (size_t i = 0; i < n; ++i) storage.push_back(narrow<T>(i < values.size() ? values[i] : 0.0f));
    view = TensorView(storage.data(), dtype_of<T>(), std::move(shape));
  }
  explicit Buffer(std::vector<int64_t> shape) : Buffer(std::vector<float>(checked_numel(shape), 0.0f), shape) {}
  std::vector<float> widened() const {
    std::vector<float> out;
    for (const T& v : storage) out.push_back(widen(v));
    return out;
  }
};

// Random values in [lo, hi), rounded through `Round` (Half or BFloat16) so that they are exact in it.
template <class Round>
std::vector<float> exact_values(int64_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = widen(narrow<Round>(dist(gen)));
  return out;
}

// A case: runs forward and backward in storage type T on the given data, returns every output widened.
template <class T>
using Runner = std::function<std::vector<std::vector<float>>(const Data&)>;

template <class Round>
void expect_one_rounding_of_float32(const Data& data, const Runner<Round>& run_half, const Runner<float>& run_float) {
  const auto half = run_half(data);
  const auto single = run_float(data);
  ASSERT_EQ(half.size(), single.size());
  for (size_t k = 0; k < half.size(); ++k) {
    ASSERT_EQ(half[k].size(), single[k].size());
    size_t nonzero = 0;
    for (size_t i = 0; i < half[k].size(); ++i) {
      const uint16_t got = narrow<Round>(half[k][i]).bits, want = narrow<Round>(single[k][i]).bits;
      ASSERT_EQ(got, want) << "output " << k << " element " << i << ": " << half[k][i] << " vs float32 "
                           << single[k][i];
      nonzero += half[k][i] != 0.0f;
    }
    EXPECT_GT(nonzero, half[k].size() / 4) << "output " << k << " is mostly zero: a weak test";
  }
}

// ---- the operators ----

template <class T>
std::vector<std::vector<float>> run_avg_pool2d(const Data& d) {
  AvgPool2dParams p;
  p.kernel_size = {3};
  p.stride = {2};
  p.padding = {1};
  p.ceil_mode = true;
  p.count_include_pad = false;
  const std::vector<int64_t> in_shape{2, 3, 13, 11};
  Buffer<T> x(d.arrays[0], in_shape);
  const auto out_shape = avg_pool2d_output_shape(in_shape, p);
  Buffer<T> y(out_shape);
  avg_pool2d(x.view, y.view, p);
  Buffer<T> go(d.arrays[1], out_shape), gi(in_shape);
  avg_pool2d_backward(go.view, x.view, gi.view, p);
  return {y.widened(), gi.widened()};
}

template <class T, bool kNhwc>
std::vector<std::vector<float>> run_upsample(const Data& d) {
  const Layout layout = kNhwc ? Layout::kNHWC : Layout::kNCHW;
  const std::vector<int64_t> in_shape = kNhwc ? std::vector<int64_t>{2, 7, 9, 5} : std::vector<int64_t>{2, 5, 7, 9};
  const std::vector<int64_t> size{12, 20};
  const std::vector<int64_t> out_shape =
      kNhwc ? std::vector<int64_t>{2, 12, 20, 5} : std::vector<int64_t>{2, 5, 12, 20};
  Buffer<T> x(d.arrays[0], in_shape), y(out_shape), gi(in_shape);
  upsample_bilinear2d(x.view, y.view, {size, kNhwc, 0.0, 0.0, layout});
  Buffer<T> go(d.arrays[1], out_shape);
  upsample_bilinear2d_backward(go.view, in_shape, gi.view, {size, kNhwc, 0.0, 0.0, layout});
  return {y.widened(), gi.widened()};
}

template <class T>
std::vector<std::vector<float>> run_grid_sampler(const Data& d, int64_t mode, int64_t padding) {
  GridSampler2dParams p;
  p.interpolation_mode = static_cast<GridSamplerInterpolation>(mode);
  p.padding_mode = static_cast<GridSamplerPadding>(padding);
  p.align_corners = padding == 1;
  const std::vector<int64_t> in_shape{2, 3, 8, 9}, grid_shape{2, 6, 7, 2}, out_shape{2, 3, 6, 7};
  Buffer<T> x(d.arrays[0], in_shape), grid(d.arrays[2], grid_shape), y(out_shape);
  grid_sampler_2d(x.view, grid.view, y.view, p);
  Buffer<T> go(d.arrays[1], out_shape), gi(in_shape), gg(grid_shape);
  grid_sampler_2d_backward(go.view, x.view, grid.view, gi.view, gg.view, p);
  if (mode == 1) return {y.widened(), gi.widened()};  // nearest: the grid gradient is zero by definition
  return {y.widened(), gi.widened(), gg.widened()};
}

template <class T>
std::vector<std::vector<float>> run_roi_align(const Data& d) {
  RoiAlignParams p;
  p.pooled_height = 3;
  p.pooled_width = 4;
  p.spatial_scale = 0.5;
  p.sampling_ratio = 0;
  p.aligned = true;
  const std::vector<int64_t> in_shape{2, 3, 12, 14}, boxes_shape{4, 5};
  const std::vector<float> boxes = {0, 1, 2, 20, 17.5f, 1, 4, 3, 26, 9.5f, 0, 10, 0.5f, 17, 15, 1, 0, 0, 27, 23};
  Buffer<T> x(d.arrays[0], in_shape), b(boxes, boxes_shape);
  const auto out_shape = roi_align_output_shape(in_shape, boxes_shape, p);
  Buffer<T> y(out_shape), gi(in_shape);
  roi_align(x.view, b.view, y.view, p);
  Buffer<T> go(d.arrays[1], out_shape);
  roi_align_backward(go.view, b.view, in_shape, gi.view, p);
  return {y.widened(), gi.widened()};
}

template <class T>
std::vector<std::vector<float>> run_ms_deform_attn(const Data& d) {
  std::vector<int64_t> shapes{8, 9, 4, 5}, starts{0, 72};
  const TensorView shapes_view(shapes.data(), DType::kInt64, {2, 2}), starts_view(starts.data(), DType::kInt64, {2});
  const std::vector<int64_t> value_shape{2, 92, 2, 12}, loc_shape{2, 5, 2, 2, 3, 2}, attn_shape{2, 5, 2, 2, 3},
      out_shape{2, 5, 24};
  Buffer<T> value(d.arrays[0], value_shape), loc(d.arrays[2], loc_shape), attn(d.arrays[3], attn_shape), y(out_shape);
  ms_deform_attn(value.view, shapes_view, starts_view, loc.view, attn.view, y.view);
  Buffer<T> go(d.arrays[1], out_shape), gv(value_shape), gl(loc_shape), ga(attn_shape);
  ms_deform_attn_backward(value.view, shapes_view, starts_view, loc.view, attn.view, go.view, gv.view, gl.view,
                          ga.view);
  return {y.widened(), gv.widened(), gl.widened(), ga.widened()};
}

template <class Round>
Data random_data(uint32_t seed) {
  // Large enough for every case: input, output gradient, a grid / locations in [-1.1, 1.1] or [0, 1.1],
  // and weights in [0, 1).
  constexpr int64_t n = 8192;
  return Data{{exact_values<Round>(n, seed), exact_values<Round>(n, seed + 1),
               exact_values<Round>(n, seed + 2, -1.1f, 1.1f), exact_values<Round>(n, seed + 3, 0.0f, 1.0f)}};
}

template <class Round>
class HalfKernels : public ::testing::Test {};
using HalfTypes = ::testing::Types<Half, BFloat16>;
TYPED_TEST_SUITE(HalfKernels, HalfTypes);

TYPED_TEST(HalfKernels, AvgPool2dIsOneRoundingOfFloat32) {
  expect_one_rounding_of_float32<TypeParam>(random_data<TypeParam>(1), run_avg_pool2d<TypeParam>,
                                            run_avg_pool2d<float>);
}

TYPED_TEST(HalfKernels, UpsampleBilinear2dIsOneRoundingOfFloat32) {
  const Data data = random_data<TypeParam>(2);
  expect_one_rounding_of_float32<TypeParam>(data, run_upsample<TypeParam, false>, run_upsample<float, false>);
  expect_one_rounding_of_float32<TypeParam>(data, run_upsample<TypeParam, true>, run_upsample<float, true>);
}

TYPED_TEST(HalfKernels, GridSampler2dIsOneRoundingOfFloat32) {
  const Data data = random_data<TypeParam>(3);
  for (int64_t mode = 0; mode < 3; ++mode) {
    for (int64_t padding = 0; padding < 3; ++padding) {
      SCOPED_TRACE(::testing::Message() << "mode " << mode << " padding " << padding);
      expect_one_rounding_of_float32<TypeParam>(
          data, [&](const Data& d) { return run_grid_sampler<TypeParam>(d, mode, padding); },
          [&](const Data& d) { return run_grid_sampler<float>(d, mode, padding); });
    }
  }
}

TYPED_TEST(HalfKernels, RoiAlignIsOneRoundingOfFloat32) {
  expect_one_rounding_of_float32<TypeParam>(random_data<TypeParam>(4), run_roi_align<TypeParam>, run_roi_align<float>);
}

TYPED_TEST(HalfKernels, MsDeformAttnIsOneRoundingOfFloat32) {
  Data data = random_data<TypeParam>(5);
  for (float& v : data.arrays[2]) v = widen(narrow<TypeParam>((v + 1.1f) / 2.0f));  // locations in [0, 1.1]
  expect_one_rounding_of_float32<TypeParam>(data, run_ms_deform_attn<TypeParam>, run_ms_deform_attn<float>);
}

}  // namespace
}  // namespace spatialgrad

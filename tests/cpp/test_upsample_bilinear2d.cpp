#include "spatialgrad/upsample_bilinear2d.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "detail/strategy.h"
#include "detail/upsample_bilinear2d_axis.h"
#include "spatialgrad/parallel.h"
#include "simd_levels.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::OwnedTensor;
using testing::expect_error;
using testing::random_tensor;

// Straight from docs/operators.md (Bilinear upsampling), one output element at a time: source taps (i0, i1) and weights (l0, l1).
struct NaiveTap {
  int64_t i0, i1;
  double l0, l1;
};

NaiveTap naive_tap(int64_t in, int64_t out, bool align_corners, double scale, int64_t d) {
  if (in == out) return {d, d, 1.0, 0.0};
  double r;
  if (align_corners) {
    r = out > 1 ? double(in - 1) / double(out - 1) : 0.0;
  } else {
    r = scale > 0 ? 1.0 / scale : double(in) / double(out);
  }
  const double src = align_corners ? r * d : std::max(0.0, r * (d + 0.5) - 0.5);
  const int64_t i0 = static_cast<int64_t>(std::min(std::floor(src), double(in - 1)));
  const double l1 = std::min(std::max(src - double(i0), 0.0), 1.0);
  return {i0, i0 + (i0 < in - 1 ? 1 : 0), 1.0 - l1, l1};
}

struct Problem {
  int64_t n, c, h, w, oh, ow;
  bool align_corners;
  double scales_h, scales_w;
  Layout layout;

  std::vector<int64_t> shape(int64_t hh, int64_t ww) const {
    return layout == Layout::kNCHW ? std::vector<int64_t>{n, c, hh, ww} : std::vector<int64_t>{n, hh, ww, c};
  }
  int64_t index(int64_t b, int64_t ch, int64_t y, int64_t x, int64_t hh, int64_t ww) const {
    return layout == Layout::kNCHW ? ((b * c + ch) * hh + y) * ww + x : ((b * hh + y) * ww + x) * c + ch;
  }
  // Calls visit(input flat index, output flat index, weight) for every tap of every output element.
  template <class Visit>
  void taps(Visit visit) const {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t x = 0; x < ow; ++x) {
            const NaiveTap th = naive_tap(h, oh, align_corners, scales_h, y);
            const NaiveTap tw = naive_tap(w, ow, align_corners, scales_w, x);
            const int64_t o = index(b, ch, y, x, oh, ow);
            visit(index(b, ch, th.i0, tw.i0, h, w), o, th.l0 * tw.l0);
            visit(index(b, ch, th.i0, tw.i1, h, w), o, th.l0 * tw.l1);
            visit(index(b, ch, th.i1, tw.i0, h, w), o, th.l1 * tw.l0);
            visit(index(b, ch, th.i1, tw.i1, h, w), o, th.l1 * tw.l1);
          }
  }
};

void check_against_naive(const Problem& p) {
  auto x = random_tensor<double>(p.shape(p.h, p.w), 31);
  auto g = random_tensor<double>(p.shape(p.oh, p.ow), 32);
  OwnedTensor<double> y(p.shape(p.oh, p.ow), 123.0), gi(p.shape(p.h, p.w), 456.0);
  upsample_bilinear2d(x.view, y.view, {{p.oh, p.ow}, p.align_corners, p.scales_h, p.scales_w, p.layout});
  upsample_bilinear2d_backward(g.view, p.shape(p.h, p.w), gi.view,
                               {{p.oh, p.ow}, p.align_corners, p.scales_h, p.scales_w, p.layout});
  std::vector<double> y_ref(y.storage.size(), 0.0), gi_ref(gi.storage.size(), 0.0);
  p.taps([&](int64_t i, int64_t o, double weight) {
    y_ref[o] += weight * x[i];
    gi_ref[i] += weight * g[o];
  });
  testing::expect_all_near(y.storage, y_ref, 1e-12);
  testing::expect_all_near(gi.storage, gi_ref, 1e-12);
}

class UpsampleSweep : public ::testing::TestWithParam<std::tuple<bool, int, int>> {};

TEST_P(UpsampleSweep, ForwardAndBackwardMatchNaiveLoops) {
  const auto [align_corners, scale_mode, layout_index] = GetParam();
  const Layout layout = layout_index ? Layout::kNHWC : Layout::kNCHW;
  for (int64_t h : {1, 2, 5}) {
    for (int64_t w : {1, 3, 8}) {
      for (int64_t oh : {1, 2, 5, 11}) {
        for (int64_t ow : {1, 4, 8, 13}) {
          double sh = 0.0, sw = 0.0;
          if (scale_mode == 1) {  // consistent with the sizes, as interpolate(scale_factor=...) passes them
            sh = double(oh) / double(h);
            sw = double(ow) / double(w);
          } else if (scale_mode == 2) {  // arbitrary: only the ratio changes
            sh = 0.37;
            sw = 2.6;
          } else if (scale_mode == 3) {  // "not given" spellings
            sh = -1.0;
            sw = std::numeric_limits<double>::quiet_NaN();
          }
          SCOPED_TRACE(::testing::Message() << "h=" << h << " w=" << w << " oh=" << oh << " ow=" << ow);
          check_against_naive(Problem{2, 3, h, w, oh, ow, align_corners, sh, sw, layout});
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Params, UpsampleSweep,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0, 1, 2, 3), ::testing::Values(0, 1)));

TEST(UpsampleBilinear2d, ChannelCountsAndBatchInNhwc) {
  for (int64_t c : {1, 5, 17}) {
    check_against_naive(Problem{3, c, 6, 7, 9, 4, false, 0.0, 0.0, Layout::kNHWC});
    check_against_naive(Problem{3, c, 6, 7, 9, 4, true, 0.0, 0.0, Layout::kNCHW});
  }
}

TEST(UpsampleBilinear2d, WideRowsSplitIntoColumnChunksAndPlaneBlocks) {
  // Wide NHWC rows take several column chunks in the backward; 2 x 9 planes make full and partial
  // plane blocks in NCHW. Up- and down-sampling, with and without align_corners.
  for (bool align : {false, true}) {
    check_against_naive(Problem{1, 48, 3, 70, 4, 131, align, 0.0, 0.0, Layout::kNHWC});
    check_against_naive(Problem{2, 40, 4, 90, 3, 20, align, 0.0, 0.0, Layout::kNHWC});
    check_against_naive(Problem{2, 9, 5, 33, 7, 70, align, 0.0, 0.0, Layout::kNCHW});
    check_against_naive(Problem{2, 9, 12, 40, 5, 9, align, 0.0, 0.0, Layout::kNCHW});
  }
}

TEST(UpsampleBilinear2d, SameSizeIsIdentityWhateverTheScale) {
  auto x = random_tensor<float>({2, 3, 6, 5}, 4);
  OwnedTensor<float> y({2, 3, 6, 5});
  for (bool align : {false, true}) {
    upsample_bilinear2d(x.view, y.view, {{6, 5}, align, 0.3, 4.0, Layout::kNCHW});
    EXPECT_EQ(y.storage, x.storage);
    upsample_bilinear2d_backward(x.view, {2, 3, 6, 5}, y.view, {{6, 5}, align, 0.3, 4.0, Layout::kNCHW});
    EXPECT_EQ(y.storage, x.storage);
  }
}

TEST(UpsampleBilinear2d, KnownValues) {
  // 1x1x2x2 -> 3x3 with align_corners: corners kept, centre is the mean, edges midpoints.
  OwnedTensor<double> x({1, 1, 2, 2}), y({1, 1, 3, 3});
  x.storage = {1.0, 2.0, 3.0, 4.0};
  upsample_bilinear2d(x.view, y.view, {{3, 3}, true, 0.0, 0.0, Layout::kNCHW});
  EXPECT_EQ(y.storage, (std::vector<double>{1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0}));
  // Without align_corners, 2 -> 4 samples at -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to the edge).
  OwnedTensor<double> y4({1, 1, 1, 4}), x2({1, 1, 1, 2});
  x2.storage = {0.0, 8.0};
  upsample_bilinear2d(x2.view, y4.view, {{1, 4}, false, 0.0, 0.0, Layout::kNCHW});
  EXPECT_EQ(y4.storage, (std::vector<double>{0.0, 2.0, 6.0, 8.0}));
  // A scale of 4 with 4 outputs reads 1/4 steps: sources -0.375 -> 0, -0.125 -> 0, 0.125, 0.375.
  upsample_bilinear2d(x2.view, y4.view, {{1, 4}, false, 0.0, 4.0, Layout::kNCHW});
  EXPECT_EQ(y4.storage, (std::vector<double>{0.0, 0.0, 1.0, 3.0}));
}

TEST(UpsampleBilinear2d, NhwcEqualsTransposedNchw) {
  const int64_t n = 2, c = 7, h = 9, w = 6, oh = 14, ow = 5;
  auto x = random_tensor<float>({n, c, h, w}, 8);
  auto g = random_tensor<float>({n, c, oh, ow}, 9);
  OwnedTensor<float> y({n, c, oh, ow}), gi({n, c, h, w});
  upsample_bilinear2d(x.view, y.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNCHW});
  upsample_bilinear2d_backward(g.view, {n, c, h, w}, gi.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNCHW});
  // NHWC views of the same NCHW memory (strided, channels not innermost), and NHWC-contiguous copies.
  auto nhwc_view = [](const TensorView& t) {
    return TensorView(t.raw_data(), t.dtype(), {t.size(0), t.size(2), t.size(3), t.size(1)},
                      {t.stride(0), t.stride(2), t.stride(3), t.stride(1)});
  };
  OwnedTensor<float> y2({n, c, oh, ow}), gi2({n, c, h, w});
  upsample_bilinear2d(nhwc_view(x.view), nhwc_view(y2.view), {{oh, ow}, false, 0.0, 0.0, Layout::kNHWC});
  upsample_bilinear2d_backward(nhwc_view(g.view), {n, h, w, c}, nhwc_view(gi2.view),
                               {{oh, ow}, false, 0.0, 0.0, Layout::kNHWC});
  EXPECT_EQ(y2.storage, y.storage);
  EXPECT_EQ(gi2.storage, gi.storage);
  OwnedTensor<float> xl({n, h, w, c}), gl({n, oh, ow, c}), yl({n, oh, ow, c}), gil({n, h, w, c});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) xl[((b * h + i) * w + j) * c + ch] = x[((b * c + ch) * h + i) * w + j];
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) gl[((b * oh + i) * ow + j) * c + ch] = g[((b * c + ch) * oh + i) * ow + j];
    }
  upsample_bilinear2d(xl.view, yl.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNHWC});
  upsample_bilinear2d_backward(gl.view, {n, h, w, c}, gil.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNHWC});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          ASSERT_EQ(yl[((b * oh + i) * ow + j) * c + ch], y[((b * c + ch) * oh + i) * ow + j]);
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          ASSERT_EQ(gil[((b * h + i) * w + j) * c + ch], gi[((b * c + ch) * h + i) * w + j]);
    }
}

// NHWC outputs of at least 4 MiB take the non-temporal store paths; NCHW never does. Both must give
// the same bits (transposed), and with odd channel counts the rows start unaligned.
TEST(UpsampleBilinear2d, LargeNhwcOutputsMatchNchwBitwise) {
  for (int64_t c : {64, 33}) {
    const int64_t n = 1, h = 128, w = 128, oh = 192, ow = 170;
    auto x = random_tensor<float>({n, c, h, w}, 41);
    auto g = random_tensor<float>({n, c, oh, ow}, 42);
    OwnedTensor<float> y({n, c, oh, ow}), gi({n, c, h, w});
    upsample_bilinear2d(x.view, y.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNCHW});
    upsample_bilinear2d_backward(g.view, {n, c, h, w}, gi.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNCHW});
    auto to_nhwc = [&](const OwnedTensor<float>& t, int64_t hh, int64_t ww) {
      OwnedTensor<float> out({n, hh, ww, c});
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < hh; ++i)
          for (int64_t j = 0; j < ww; ++j) out[(i * ww + j) * c + ch] = t.storage[static_cast<size_t>((ch * hh + i) * ww + j)];
      return out;
    };
    auto xl = to_nhwc(x, h, w), gl = to_nhwc(g, oh, ow);
    ASSERT_GE(y.numel() * 4, 4 << 20);                   // streamed forward output
    if (c == 64) ASSERT_GE(gi.numel() * 4, 4 << 20);   // streamed grad_input (c = 33: regular stores)
    OwnedTensor<float> yl({n, oh, ow, c}), gil({n, h, w, c});
    upsample_bilinear2d(xl.view, yl.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNHWC});
    upsample_bilinear2d_backward(gl.view, {n, h, w, c}, gil.view, {{oh, ow}, false, 0.0, 0.0, Layout::kNHWC});
    EXPECT_EQ(yl.storage, to_nhwc(y, oh, ow).storage);
    EXPECT_EQ(gil.storage, to_nhwc(gi, h, w).storage);
  }
}

TEST(UpsampleBilinear2d, StridedAndNegativeStrideTensors) {
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    auto x = random_tensor<double>({2, 3, 7, 5}, 17);
    const std::vector<int64_t> size{10, 9};
    const std::vector<int64_t> out_shape =
        upsample_bilinear2d_output_shape(x.view.sizes(), {size, false, 0.0, 0.0, layout});
    OwnedTensor<double> y(out_shape);
    upsample_bilinear2d(x.view, y.view, {size, false, 0.0, 0.0, layout});
    for (int64_t dim = 0; dim < 4; ++dim) {
      auto flipped = testing::flipped_copy(x, dim);
      OwnedTensor<double> y2(out_shape);
      upsample_bilinear2d(flipped.view, y2.view, {size, false, 0.0, 0.0, layout});
      EXPECT_EQ(y2.storage, y.storage) << "flipped dim " << dim;
    }
    // Output written through strides: every other element of a larger buffer.
    std::vector<double> wide(static_cast<size_t>(y.numel() * 2), -7.0);
    std::vector<int64_t> strides = contiguous_strides(out_shape);
    for (auto& st : strides) st *= 2;
    upsample_bilinear2d(x.view, TensorView(wide.data(), DType::kFloat64, out_shape, strides),
                        {size, false, 0.0, 0.0, layout});
    for (int64_t i = 0; i < y.numel(); ++i) {
      ASSERT_EQ(wide[static_cast<size_t>(2 * i)], y[i]);
      ASSERT_EQ(wide[static_cast<size_t>(2 * i + 1)], -7.0);
    }
    // Backward from flipped grad_output, into a strided grad_input.
    auto g = random_tensor<double>(out_shape, 18);
    OwnedTensor<double> gi(x.view.sizes());
    upsample_bilinear2d_backward(g.view, x.view.sizes(), gi.view, {size, true, 0.0, 0.0, layout});
    for (int64_t dim = 0; dim < 4; ++dim) {
      auto gf = testing::flipped_copy(g, dim);
      std::vector<double> wide_gi(static_cast<size_t>(gi.numel() * 2), -7.0);
      std::vector<int64_t> gi_strides = contiguous_strides(x.view.sizes());
      for (auto& st : gi_strides) st *= 2;
      upsample_bilinear2d_backward(gf.view, x.view.sizes(),
                                   TensorView(wide_gi.data(), DType::kFloat64, x.view.sizes(), gi_strides),
                                   {size, true, 0.0, 0.0, layout});
      for (int64_t i = 0; i < gi.numel(); ++i) {
        ASSERT_EQ(wide_gi[static_cast<size_t>(2 * i)], gi[i]) << "flipped dim " << dim;
        ASSERT_EQ(wide_gi[static_cast<size_t>(2 * i + 1)], -7.0);
      }
    }
  }
}

TEST(UpsampleBilinear2d, DownsamplingLeavesUnreadInputsWithZeroGradient) {
  // 10 -> 2 without align_corners reads rows/columns 2, 3 and 7, 8 only; every other gradient is 0
  // and must be written as 0 (grad_input starts as garbage here).
  auto g = random_tensor<double>({1, 1, 2, 2}, 5);
  OwnedTensor<double> gi({1, 1, 10, 10}, 99.0);
  upsample_bilinear2d_backward(g.view, {1, 1, 10, 10}, gi.view, {{2, 2}, false, 0.0, 0.0, Layout::kNCHW});
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < 10; ++j) {
      const bool read = (i == 2 || i == 3 || i == 7 || i == 8) && (j == 2 || j == 3 || j == 7 || j == 8);
      if (!read) EXPECT_EQ(gi[i * 10 + j], 0.0) << i << "," << j;
    }
  check_against_naive(Problem{1, 2, 10, 10, 2, 3, false, 0.0, 0.0, Layout::kNHWC});
}

TEST(UpsampleBilinear2d, ExtremeScalesStayInBounds) {
  // A tiny scale gives a huge (or infinite) ratio: every source clamps to the last input index.
  auto x = random_tensor<float>({1, 2, 4, 3}, 6);
  for (double scale : {1e-300, 5e-324, std::numeric_limits<double>::infinity(), 1e300}) {
    OwnedTensor<float> y({1, 2, 7, 8}), gi({1, 2, 4, 3});
    upsample_bilinear2d(x.view, y.view, {{7, 8}, false, scale, scale, Layout::kNCHW});
    upsample_bilinear2d_backward(y.view, {1, 2, 4, 3}, gi.view, {{7, 8}, false, scale, scale, Layout::kNCHW});
    for (float v : y.storage) EXPECT_TRUE(std::isfinite(v));
    for (float v : gi.storage) EXPECT_TRUE(std::isfinite(v));
    if (scale < 1e-200) {  // ratio -> +Inf: all outputs read input (3, 2)
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t i = 0; i < 56; ++i) EXPECT_EQ(y[c * 56 + i], x[c * 12 + 11]);
    }
  }
}

TEST(UpsampleBilinear2d, EmptyBatchOrChannelsGiveShapedResults) {
  const std::vector<std::tuple<Layout, std::vector<int64_t>, std::vector<int64_t>>> cases{
      {Layout::kNCHW, {0, 3, 4, 4}, {0, 3, 6, 5}},
      {Layout::kNCHW, {2, 0, 4, 4}, {2, 0, 6, 5}},
      {Layout::kNHWC, {0, 4, 4, 3}, {0, 6, 5, 3}},
      {Layout::kNHWC, {2, 4, 4, 0}, {2, 6, 5, 0}},
  };
  for (const auto& [layout, shape, expected] : cases) {
    EXPECT_EQ(upsample_bilinear2d_output_shape(shape, {{6, 5}, false, 0.0, 0.0, layout}), expected);
    OwnedTensor<float> x(shape), y(expected), gi(shape);
    upsample_bilinear2d(x.view, y.view, {{6, 5}, false, 0.0, 0.0, layout});
    upsample_bilinear2d_backward(y.view, shape, gi.view, {{6, 5}, true, 2.0, 0.0, layout});
  }
}

TEST(UpsampleBilinear2d, ThreadCountDoesNotChangeBits) {
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    auto x = random_tensor<float>({2, 9, 37, 29}, 21);
    const std::vector<int64_t> out_shape =
        upsample_bilinear2d_output_shape(x.view.sizes(), {{61, 47}, false, 0.0, 0.0, layout});
    auto g = random_tensor<float>(out_shape, 22);
    std::vector<std::vector<float>> outs, grads;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      OwnedTensor<float> y(out_shape), gi(x.view.sizes());
      upsample_bilinear2d(x.view, y.view, {{61, 47}, false, 0.0, 0.0, layout});
      upsample_bilinear2d_backward(g.view, x.view.sizes(), gi.view, {{61, 47}, false, 0.0, 0.0, layout});
      outs.push_back(y.storage);
      grads.push_back(gi.storage);
    }
    set_num_threads(0);
    for (size_t i = 1; i < outs.size(); ++i) {
      EXPECT_EQ(std::memcmp(outs[i].data(), outs[0].data(), outs[0].size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(grads[i].data(), grads[0].data(), grads[0].size() * sizeof(float)), 0);
    }
  }
}

// ---- issue 31's strategies: every path against float loops in the same order, and against each other -------

using detail::UpsampleBilinear2dStrategy;

// The forward and backward as float loops with the kernels' operations in their order: per output value
// a0 * (l0 * x00 + l1 * x01) + a1 * (l0 * x10 + l1 * x11); per input value the sum over its W sources (in
// order) of w * (the sum over its H sources, in order, of w * g). Any strategy must give these bits.
struct OrderedLoops {
  Problem p;
  detail::LinearAxis<float> h, w;
  explicit OrderedLoops(const Problem& problem)
      : p(problem),
        h(detail::make_linear_axis<float>(p.h, p.oh, p.align_corners, p.scales_h)),
        w(detail::make_linear_axis<float>(p.w, p.ow, p.align_corners, p.scales_w)) {}

  std::vector<float> forward(const std::vector<float>& x) const {
    std::vector<float> y(static_cast<size_t>(p.n * p.c * p.oh * p.ow));
    for (int64_t b = 0; b < p.n; ++b)
      for (int64_t c = 0; c < p.c; ++c)
        for (int64_t oy = 0; oy < p.oh; ++oy)
          for (int64_t ox = 0; ox < p.ow; ++ox) {
            auto in = [&](int64_t iy, int64_t ix) { return x[p.index(b, c, iy, ix, p.h, p.w)]; };
            const float top = w.l0[ox] * in(h.i0[oy], w.i0[ox]) + w.l1[ox] * in(h.i0[oy], w.i1[ox]);
            const float bottom = w.l0[ox] * in(h.i1[oy], w.i0[ox]) + w.l1[ox] * in(h.i1[oy], w.i1[ox]);
            y[p.index(b, c, oy, ox, p.oh, p.ow)] = h.l0[oy] * top + h.l1[oy] * bottom;
          }
    return y;
  }

  std::vector<float> backward(const std::vector<float>& g) const {
    std::vector<float> gi(static_cast<size_t>(p.n * p.c * p.h * p.w));
    for (int64_t b = 0; b < p.n; ++b)
      for (int64_t c = 0; c < p.c; ++c)
        for (int64_t iy = 0; iy < p.h; ++iy)
          for (int64_t ix = 0; ix < p.w; ++ix) {
            float sum = 0;
            for (int64_t ew = w.start[ix]; ew < w.start[ix + 1]; ++ew) {
              float column = 0;
              for (int64_t eh = h.start[iy]; eh < h.start[iy + 1]; ++eh) {
                const float term = h.weight[eh] * g[p.index(b, c, h.source[eh], w.source[ew], p.oh, p.ow)];
                column = eh == h.start[iy] ? term : column + term;
              }
              const float term = w.weight[ew] * column;
              sum = ew == w.start[ix] ? term : sum + term;
            }
            gi[p.index(b, c, iy, ix, p.h, p.w)] = sum;
          }
    return gi;
  }
};

// Shapes that take every strategy: up and down, odd ratios, tiny and wide rows (several column chunks),
// one plane and many, NHWC channels below and above the channel-vector crossover.
std::vector<Problem> strategy_problems() {
  std::vector<Problem> problems;
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    for (int64_t c : {1, 3, 8, 17}) {
      problems.push_back({2, c, 9, 13, 20, 27, false, 0.0, 0.0, layout});    // up ~x2
      problems.push_back({2, c, 24, 30, 12, 15, false, 0.0, 0.0, layout});   // down /2
      problems.push_back({1, c, 30, 41, 10, 13, true, 0.0, 0.0, layout});    // down ~/3, align_corners
      problems.push_back({3, c, 30, 40, 11, 17, false, 0.0, 0.0, layout});   // odd ratios (600x800 -> 224)
      problems.push_back({2, c, 7, 7, 14, 14, false, 0.0, 0.0, layout});     // FPN-like tiny planes
      problems.push_back({1, c, 5, 9, 12, 9, false, 0.6, 0.0, layout});      // W copied, scale given
    }
    problems.push_back({1, 1, 6, 3000, 4, 1900, false, 0.0, 0.0, layout});   // wide rows: several chunks
    problems.push_back({1, 1, 3, 900, 5, 2500, true, 0.0, 0.0, layout});
    problems.push_back({1, 2, 1, 1, 3, 4, false, 0.0, 0.0, layout});        // 1x1 input
  }
  return problems;
}

TEST(UpsampleStrategies, EveryPathGivesTheBitsOfTheOrderedLoops) {
  for (const Problem& p : strategy_problems()) {
    const OrderedLoops loops(p);
    auto x = random_tensor<float>(p.shape(p.h, p.w), 51);
    auto g = random_tensor<float>(p.shape(p.oh, p.ow), 52);
    const std::vector<float> y_ref = loops.forward(x.storage), gi_ref = loops.backward(g.storage);
    for (UpsampleBilinear2dStrategy path : {UpsampleBilinear2dStrategy::kAuto, UpsampleBilinear2dStrategy::kLanes,
                                            UpsampleBilinear2dStrategy::kDirect, UpsampleBilinear2dStrategy::kRows,
                                            UpsampleBilinear2dStrategy::kNarrow}) {
      SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path) << " layout " << static_cast<int>(p.layout)
                                        << " c=" << p.c << " " << p.h << "x" << p.w << " -> " << p.oh << "x" << p.ow);
      const detail::StrategyForTesting forced(path);
      OwnedTensor<float> y(p.shape(p.oh, p.ow), 7.0f), gi(p.shape(p.h, p.w), 7.0f);
      upsample_bilinear2d(x.view, y.view, {{p.oh, p.ow}, p.align_corners, p.scales_h, p.scales_w, p.layout});
      upsample_bilinear2d_backward(g.view, p.shape(p.h, p.w), gi.view,
                                   {{p.oh, p.ow}, p.align_corners, p.scales_h, p.scales_w, p.layout});
      ASSERT_EQ(y.storage, y_ref);
      ASSERT_EQ(gi.storage, gi_ref);
    }
  }
}

TEST(UpsampleStrategies, EveryPathIsIndependentOfTheThreadCount) {
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    for (const auto& shape : std::vector<std::array<int64_t, 4>>{{37, 29, 61, 47}, {60, 80, 22, 23}}) {
      const int64_t h = shape[0], w = shape[1], oh = shape[2], ow = shape[3];  // (clang 14: no lambda captures
                                                                               // of structured bindings)
      auto x = random_tensor<float>(layout == Layout::kNCHW ? std::vector<int64_t>{2, 3, h, w}
                                                             : std::vector<int64_t>{2, h, w, 3}, 61);
      const std::vector<int64_t> out_shape =
          upsample_bilinear2d_output_shape(x.view.sizes(), {{oh, ow}, false, 0.0, 0.0, layout});
      auto g = random_tensor<float>(out_shape, 62);
      for (UpsampleBilinear2dStrategy path : {UpsampleBilinear2dStrategy::kLanes, UpsampleBilinear2dStrategy::kDirect,
                                              UpsampleBilinear2dStrategy::kRows, UpsampleBilinear2dStrategy::kNarrow}) {
        const detail::StrategyForTesting forced(path);
        testing::expect_same_bits_for_thread_counts({1, 2, 3}, [&] {
          OwnedTensor<float> y(out_shape), gi(x.view.sizes());
          upsample_bilinear2d(x.view, y.view, {{oh, ow}, false, 0.0, 0.0, layout});
          upsample_bilinear2d_backward(g.view, x.view.sizes(), gi.view, {{oh, ow}, false, 0.0, 0.0, layout});
          return testing::concatenated<float>({&y, &gi});
        });
      }
    }
  }
}

// The narrow forward and backward (input rows of at most 32 values, output rows of at most 64 for the backward)
// at every instruction level, pinned: rows of 1 to 32 values, outputs narrower and wider than a vector (the last
// vector overlapping), output rows past 32 values (the backward's second lookup) and past 64 (the cost model's),
// up and down, align_corners, input rows no output row reads, the tables of the last rows copied (they would pass
// the tensor's end), a view with row gaps: the bits of the ordered loops; a row of 33 values leaves the pin to
// the cost model.
TEST(UpsampleStrategies, NarrowRowsAtEveryLevelGiveTheBitsOfTheOrderedLoops) {
  std::vector<Problem> problems;
  for (int64_t w : {1, 7, 13, 16, 17, 31, 32, 33}) {
    problems.push_back({2, 3, 5, w, 11, 2 * w + 1, false, 0.0, 0.0, Layout::kNCHW});
    problems.push_back({1, 2, 9, w, 4, std::max<int64_t>(1, w / 2), true, 0.0, 0.0, Layout::kNCHW});
  }
  problems.push_back({1, 1, 3, 21, 6, 700, false, 0.0, 0.0, Layout::kNCHW});  // many vectors a row
  problems.push_back({2, 4, 13, 21, 25, 42, false, 0.0, 0.0, Layout::kNCHW});  // FPN's 13x21 -> 25x42
  problems.push_back({1, 2, 4, 9, 8, 15, false, 0.5, 0.6, Layout::kNCHW});     // scales given
  problems.push_back({1, 2, 30, 11, 7, 5, false, 0.0, 0.0, Layout::kNCHW});    // rows and columns no output reads
  problems.push_back({2, 1, 3, 5, 4, 40, true, 0.0, 0.0, Layout::kNCHW});      // many sources per column
  problems.push_back({1, 1, 2, 32, 3, 64, false, 0.0, 0.0, Layout::kNCHW});
  const detail::StrategyForTesting forced(UpsampleBilinear2dStrategy::kNarrow);
  for (const Problem& p : problems) {
    SCOPED_TRACE(::testing::Message() << p.h << "x" << p.w << " -> " << p.oh << "x" << p.ow << " align "
                                      << p.align_corners);
    const OrderedLoops loops(p);
    auto x = random_tensor<float>(p.shape(p.h, p.w), 81);
    auto g = random_tensor<float>(p.shape(p.oh, p.ow), 83);
    const std::vector<float> y_ref = loops.forward(x.storage), gi_ref = loops.backward(g.storage);
    const UpsampleBilinear2dParams params{{p.oh, p.ow}, p.align_corners, p.scales_h, p.scales_w, p.layout};
    testing::for_each_simd_level([&] {
      OwnedTensor<float> y(p.shape(p.oh, p.ow), 7.0f), gi(p.shape(p.h, p.w), 7.0f);
      upsample_bilinear2d(x.view, y.view, params);
      upsample_bilinear2d_backward(g.view, p.shape(p.h, p.w), gi.view, params);
      // Bits, not values: +0 and -0 differ (an input value no output reads is +0, as the lanes give).
      ASSERT_EQ(std::memcmp(y.storage.data(), y_ref.data(), y_ref.size() * sizeof(float)), 0);
      ASSERT_EQ(std::memcmp(gi.storage.data(), gi_ref.data(), gi_ref.size() * sizeof(float)), 0);
    });
  }
  // Rows 40 values apart (a view of a wider tensor): a row's table reads into the gap after it, never selected.
  const Problem p{1, 2, 6, 10, 12, 19, false, 0.0, 0.0, Layout::kNCHW};
  auto x = random_tensor<float>(p.shape(p.h, p.w), 82);
  OwnedTensor<float> wide({1, 2, 6, 40}, -5.0f);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t q = 0; q < 10; ++q) wide.storage[(c * 6 + r) * 40 + q] = x.storage[(c * 6 + r) * 10 + q];
  const TensorView gapped(wide.storage.data(), DType::kFloat32, {1, 2, 6, 10}, {480, 240, 40, 1});
  const std::vector<float> y_ref = OrderedLoops(p).forward(x.storage);
  testing::for_each_simd_level([&] {
    OwnedTensor<float> y(p.shape(p.oh, p.ow), 7.0f);
    upsample_bilinear2d(gapped, y.view, {{p.oh, p.ow}, false, 0.0, 0.0, Layout::kNCHW});
    ASSERT_EQ(std::memcmp(y.storage.data(), y_ref.data(), y_ref.size() * sizeof(float)), 0);
  });
}

// Strided and reversed views take the paths' gap-handling branches (NHWC pixels with gaps, NCHW rows of
// stride 2 that the direct forward leaves to the lanes): the same bits as a contiguous copy.
TEST(UpsampleStrategies, RowsWithGapsGiveTheBitsOfContiguousRows) {
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    for (int64_t c : {2, 9}) {
      const Problem p{2, c, 20, 18, 9, 31, false, 0.0, 0.0, layout};
      auto x = random_tensor<float>(p.shape(p.h, p.w), 71);
      auto g = random_tensor<float>(p.shape(p.oh, p.ow), 72);
      for (UpsampleBilinear2dStrategy path : {UpsampleBilinear2dStrategy::kLanes, UpsampleBilinear2dStrategy::kDirect,
                                              UpsampleBilinear2dStrategy::kRows, UpsampleBilinear2dStrategy::kNarrow}) {
        const detail::StrategyForTesting forced(path);
        OwnedTensor<float> y(p.shape(p.oh, p.ow)), gi(p.shape(p.h, p.w));
        upsample_bilinear2d(x.view, y.view, {{p.oh, p.ow}, false, 0.0, 0.0, layout});
        upsample_bilinear2d_backward(g.view, p.shape(p.h, p.w), gi.view, {{p.oh, p.ow}, false, 0.0, 0.0, layout});
        for (int dim = 0; dim < 4; ++dim) {
          SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path) << " flipped dim " << dim);
          auto xf = testing::flipped_copy(x, dim), gf = testing::flipped_copy(g, dim);
          auto yf = testing::flipped_copy(OwnedTensor<float>(p.shape(p.oh, p.ow), -7.0f), dim);
          auto gif = testing::flipped_copy(OwnedTensor<float>(p.shape(p.h, p.w), -7.0f), dim);
          upsample_bilinear2d(xf.view, yf.view, {{p.oh, p.ow}, false, 0.0, 0.0, layout});
          upsample_bilinear2d_backward(gf.view, p.shape(p.h, p.w), gif.view, {{p.oh, p.ow}, false, 0.0, 0.0, layout});
          // Written through the reversed views: the storage of y, reversed along dim.
          EXPECT_EQ(yf.storage, testing::flipped_copy(y, dim).storage);
          EXPECT_EQ(gif.storage, testing::flipped_copy(gi, dim).storage);
        }
      }
    }
  }
}

TEST(UpsampleBilinear2d, OutputSizeFromScales) {
  EXPECT_EQ(upsample_bilinear2d_output_size({1, 2, 5, 7}, 2.5, 0.5, Layout::kNCHW), (std::vector<int64_t>{12, 3}));
  EXPECT_EQ(upsample_bilinear2d_output_size({1, 5, 7, 2}, 2.5, 0.5, Layout::kNHWC), (std::vector<int64_t>{12, 3}));
  expect_error([] { upsample_bilinear2d_output_size({1, 2, 5, 7}, 0.1, 1.0, Layout::kNCHW); },
               ErrorKind::kInvalidArgument,
               "upsample_bilinear2d(): expected output sizes floor(input size * scale factor) >= 1, but got floor(5 * 0.1) = 0 for H");
  for (double bad : {0.0, -2.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    expect_error([&] { upsample_bilinear2d_output_size({1, 2, 5, 7}, 1.0, bad, Layout::kNCHW); },
                 ErrorKind::kInvalidArgument, "expected scale factors that are finite and > 0 when no output_size is given");
  }
  expect_error([] { upsample_bilinear2d_output_size({1, 2, 5, 7}, 1e300, 1.0, Layout::kNCHW); }, ErrorKind::kOverflow,
               "expected an output size that fits in int64");
  expect_error([] { upsample_bilinear2d_output_size({5, 7}, 1.0, 1.0, Layout::kNCHW); }, ErrorKind::kInvalidArgument,
               "expected input to be 4-D (N, C, H, W), but got 2-D");
}

TEST(UpsampleBilinear2d, LayoutNames) {
  EXPECT_EQ(parse_layout("op", "NCHW"), Layout::kNCHW);
  EXPECT_EQ(parse_layout("op", "nhwc"), Layout::kNHWC);
  EXPECT_EQ(parse_layout("op", "Nhwc"), Layout::kNHWC);
  EXPECT_STREQ(layout_name(Layout::kNHWC), "NHWC");
  expect_error([] { parse_layout("upsample_bilinear2d", "NWHC"); }, ErrorKind::kInvalidArgument,
               "upsample_bilinear2d(): expected layout \"NCHW\" or \"NHWC\", but got \"NWHC\"");
  expect_error([] { parse_layout("upsample_bilinear2d", ""); }, ErrorKind::kInvalidArgument, "but got \"\"");
}

TEST(UpsampleBilinear2d, ForwardValidationErrors) {
  OwnedTensor<float> x({1, 2, 4, 4}), y({1, 2, 8, 8});
  const char* kOp = "upsample_bilinear2d(): ";
  auto forward = [&](const TensorView& in, std::vector<int64_t> size, const TensorView& out, Layout layout) {
    return [=] { upsample_bilinear2d(in, out, {size, false, 0.0, 0.0, layout}); };
  };
  expect_error(forward(x.view, {8, 8}, y.view, static_cast<Layout>(7)), ErrorKind::kInvalidArgument,
               std::string(kOp) + "expected layout NCHW (0) or NHWC (1), but got 7");
  OwnedTensor<float> x3({2, 4, 4});
  expect_error(forward(x3.view, {8, 8}, y.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               std::string(kOp) + "expected input to be 4-D (N, C, H, W), but got 3-D tensor of shape (2, 4, 4)");
  expect_error(forward(x.view, {8}, y.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               std::string(kOp) + "expected output_size to have 2 entries (H, W), but got 1 ([8])");
  expect_error(forward(x.view, {8, 8, 8}, y.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               "expected output_size to have 2 entries (H, W), but got 3");
  expect_error(forward(x.view, {0, 8}, y.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               std::string(kOp) + "expected output_size entries >= 1, but got [0, 8]");
  expect_error(forward(x.view, {8, -2}, y.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               "expected output_size entries >= 1, but got [8, -2]");
  OwnedTensor<float> x_h0({1, 2, 0, 4});
  expect_error(forward(x_h0.view, {8, 8}, y.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               std::string(kOp) + "expected input (N, C, H, W) with N, C >= 0 and H, W >= 1, but got [1, 2, 0, 4]");
  expect_error(forward(x.view, {8, 8}, y.view, Layout::kNHWC), ErrorKind::kInvalidArgument,
               "expected output of shape (1, 8, 8, 4), but got (1, 2, 8, 8)");
  OwnedTensor<float> y_wrong({1, 2, 8, 7});
  expect_error(forward(x.view, {8, 8}, y_wrong.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               std::string(kOp) + "expected output of shape (1, 2, 8, 8), but got (1, 2, 8, 7)");
  OwnedTensor<double> yd({1, 2, 8, 8});
  expect_error(forward(x.view, {8, 8}, yd.view, Layout::kNCHW), ErrorKind::kType,
               std::string(kOp) + "expected output to have the dtype of input (float32), but got float64");
  OwnedTensor<int32_t> xi({1, 2, 4, 4}), yi({1, 2, 8, 8});
  expect_error(forward(xi.view, {8, 8}, yi.view, Layout::kNCHW), ErrorKind::kType,
               std::string(kOp) + "expected input to be float16, bfloat16, float32 or float64, but got int32");
}

TEST(UpsampleBilinear2d, BackwardValidationErrors) {
  OwnedTensor<float> g({1, 2, 8, 8}), gi({1, 2, 4, 4});
  const std::string op = "upsample_bilinear2d_backward(): ";
  auto backward = [&](const TensorView& go, std::vector<int64_t> out_size, std::vector<int64_t> in_size,
                      const TensorView& grad_in, Layout layout) {
    return [=] { upsample_bilinear2d_backward(go, in_size, grad_in, {out_size, false, 0.0, 0.0, layout}); };
  };
  expect_error(backward(g.view, {8, 8}, {1, 2, 4, 4}, gi.view, static_cast<Layout>(-1)), ErrorKind::kInvalidArgument,
               op + "expected layout NCHW (0) or NHWC (1), but got -1");
  OwnedTensor<float> g3({2, 8, 8});
  expect_error(backward(g3.view, {8, 8}, {1, 2, 4, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected grad_output to be 4-D, but got 3-D tensor of shape (2, 8, 8)");
  expect_error(backward(g.view, {8, 8}, {2, 4, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected input_size to have 4 entries (N, C, H, W), but got 3 ([2, 4, 4])");
  expect_error(backward(g.view, {8, 8}, {1, 4, 4, 2, 1}, gi.view, Layout::kNHWC), ErrorKind::kInvalidArgument,
               op + "expected input_size to have 4 entries (N, H, W, C), but got 5");
  expect_error(backward(g.view, {8}, {1, 2, 4, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected output_size to have 2 entries (H, W), but got 1 ([8])");
  expect_error(backward(g.view, {8, 0}, {1, 2, 4, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected output_size entries >= 1, but got [8, 0]");
  expect_error(backward(g.view, {8, 8}, {1, 2, 0, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected input_size (N, C, H, W) with N, C >= 0 and H, W >= 1, but got [1, 2, 0, 4]");
  expect_error(backward(g.view, {8, 8}, {-1, 2, 4, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               "with N, C >= 0 and H, W >= 1, but got [-1, 2, 4, 4]");
  expect_error(backward(g.view, {8, 8}, {1, 4, 0, 2}, gi.view, Layout::kNHWC), ErrorKind::kInvalidArgument,
               op + "expected input_size (N, H, W, C) with N, C >= 0 and H, W >= 1, but got [1, 4, 0, 2]");
  expect_error(backward(g.view, {8, 7}, {1, 2, 4, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected grad_output of shape (1, 2, 8, 7), but got (1, 2, 8, 8)");
  expect_error(backward(g.view, {8, 8}, {1, 3, 4, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected grad_output of shape (1, 3, 8, 8), but got (1, 2, 8, 8)");
  expect_error(backward(g.view, {8, 8}, {1, 4, 4, 2}, gi.view, Layout::kNHWC), ErrorKind::kInvalidArgument,
               op + "expected grad_output of shape (1, 8, 8, 2), but got (1, 2, 8, 8)");
  expect_error(backward(g.view, {8, 8}, {1, 2, 5, 4}, gi.view, Layout::kNCHW), ErrorKind::kInvalidArgument,
               op + "expected grad_input of shape (1, 2, 5, 4), but got (1, 2, 4, 4)");
  OwnedTensor<double> gid({1, 2, 4, 4});
  expect_error(backward(g.view, {8, 8}, {1, 2, 4, 4}, gid.view, Layout::kNCHW), ErrorKind::kType,
               op + "expected grad_input to have the dtype of grad_output (float32), but got float64");
  OwnedTensor<int64_t> gl({1, 2, 8, 8}), gil({1, 2, 4, 4});
  expect_error(backward(gl.view, {8, 8}, {1, 2, 4, 4}, gil.view, Layout::kNCHW), ErrorKind::kType,
               op + "expected grad_output to be float16, bfloat16, float32 or float64, but got int64");
}

}  // namespace
}  // namespace spatialgrad

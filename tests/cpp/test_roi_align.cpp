#include "spatialgrad/roi_align.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

#include "detail/roi_align_geometry.h"
#include "detail/strategy.h"
#include "spatialgrad/parallel.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::OwnedTensor;
using testing::expect_error;
using testing::random_tensor;

// Straight from docs/operators.md (RoIAlign), one sample at a time, in double: calls visit(h, w, weight) for every corner of
// every contributing sample of bin (ph, pw) of `box`, weight already divided by the sample count.
template <class Visit>
void naive_bin(const double* box, int64_t H, int64_t W, int64_t ph, int64_t pw, const RoiAlignParams& p, Visit visit) {
  const double off = p.aligned ? 0.5 : 0.0, s = p.spatial_scale;
  const double x1 = box[1] * s - off, y1 = box[2] * s - off, x2 = box[3] * s - off, y2 = box[4] * s - off;
  double rw = x2 - x1, rh = y2 - y1;
  if (!p.aligned) {
    rw = std::max(rw, 1.0);
    rh = std::max(rh, 1.0);
  }
  const double bin_h = rh / static_cast<double>(p.pooled_height), bin_w = rw / static_cast<double>(p.pooled_width);
  const int64_t gh = p.sampling_ratio > 0 ? p.sampling_ratio : static_cast<int64_t>(std::ceil(bin_h));
  const int64_t gw = p.sampling_ratio > 0 ? p.sampling_ratio : static_cast<int64_t>(std::ceil(bin_w));
  const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
  for (int64_t iy = 0; iy < gh; ++iy) {
    for (int64_t ix = 0; ix < gw; ++ix) {
      double y = y1 + static_cast<double>(ph) * bin_h + (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(gh);
      double x = x1 + static_cast<double>(pw) * bin_w + (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(gw);
      if (y < -1 || y > static_cast<double>(H) || x < -1 || x > static_cast<double>(W)) continue;
      y = std::max(y, 0.0);
      x = std::max(x, 0.0);
      int64_t yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x), yh, xh;
      if (yl >= H - 1) {
        yh = yl = H - 1;
        y = static_cast<double>(yl);
      } else {
        yh = yl + 1;
      }
      if (xl >= W - 1) {
        xh = xl = W - 1;
        x = static_cast<double>(xl);
      } else {
        xh = xl + 1;
      }
      const double ly = y - static_cast<double>(yl), lx = x - static_cast<double>(xl), hy = 1 - ly, hx = 1 - lx;
      visit(yl, xl, hy * hx / count);
      visit(yl, xh, hy * lx / count);
      visit(yh, xl, ly * hx / count);
      visit(yh, xh, ly * lx / count);
    }
  }
}

// Copies values into a tensor's existing storage (assigning a new vector would leave the view dangling).
template <class T>
void set_values(OwnedTensor<T>& t, const std::vector<T>& values) {
  ASSERT_EQ(values.size(), t.storage.size());
  std::copy(values.begin(), values.end(), t.storage.begin());
}

// Boxes of every kind: inside, partly outside, tiny, empty, inverted.
std::vector<double> make_boxes(int64_t K, int64_t B, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> pos(-6.0, 26.0), size(0.0, 14.0);
  std::vector<double> boxes;
  for (int64_t k = 0; k < K; ++k) {
    double x1 = pos(gen), y1 = pos(gen), w = size(gen), h = size(gen);
    if (k % 7 == 3) w = h = 0;          // empty
    if (k % 7 == 5) w = 0.3, h = 0.2;   // tiny
    if (k % 11 == 6) w = -w;            // inverted
    boxes.insert(boxes.end(), {static_cast<double>(k % B) + 0.25 * static_cast<double>(k % 3), x1, y1, x1 + w, y1 + h});
  }
  return boxes;
}

class RoiAlignSweep : public ::testing::TestWithParam<std::tuple<bool, int, double>> {};

TEST_P(RoiAlignSweep, ForwardAndBackwardMatchNaiveLoops) {
  const auto [aligned, sampling_ratio, scale] = GetParam();
  const int64_t B = 2, C = 19, H = 11, W = 17, K = 23;  // C is not a multiple of the lane width
  for (auto pooled : {std::pair<int64_t, int64_t>{3, 4}, {1, 1}, {7, 7}}) {
    const int64_t PH = pooled.first, PW = pooled.second;  // (lambdas cannot capture structured bindings in C++17)
    RoiAlignParams p;
    p.pooled_height = PH;
    p.pooled_width = PW;
    p.spatial_scale = scale;
    p.sampling_ratio = sampling_ratio;
    p.aligned = aligned;
    auto x = random_tensor<double>({B, C, H, W}, 5);
    OwnedTensor<double> boxes({K, 5});
    set_values(boxes, make_boxes(K, B, 9));
    auto g = random_tensor<double>({K, C, PH, PW}, 6);
    OwnedTensor<double> y({K, C, PH, PW}, 99.0), gi({B, C, H, W}, 99.0);
    ASSERT_EQ(roi_align_output_shape(x.view.sizes(), boxes.view.sizes(), p), y.view.sizes());
    roi_align(x.view, boxes.view, y.view, p);
    roi_align_backward(g.view, boxes.view, {B, C, H, W}, gi.view, p);
    // Each kernel (and the backward's bands of 1 and 3 rows, which cut samples between two tasks) gives the
    // bits of the automatic choice.
    for (auto path : {detail::RoiAlignStrategy::kDirect, detail::RoiAlignStrategy::kPacked,
                      detail::RoiAlignStrategy::kPackedNarrow}) {
      for (int64_t band_rows : {0, 1, 3}) {
        detail::set_strategy_for_testing(path, band_rows);
        OwnedTensor<double> y2({K, C, PH, PW}, 99.0), gi2({B, C, H, W}, 99.0);
        roi_align(x.view, boxes.view, y2.view, p);
        roi_align_backward(g.view, boxes.view, {B, C, H, W}, gi2.view, p);
        detail::set_strategy_for_testing(detail::RoiAlignStrategy::kAuto);
        EXPECT_EQ(0, std::memcmp(y2.data(), y.data(), y.storage.size() * sizeof(double)));
        EXPECT_EQ(0, std::memcmp(gi2.data(), gi.data(), gi.storage.size() * sizeof(double)));
      }
    }
    std::vector<double> y_ref(y.storage.size(), 0.0), gi_ref(gi.storage.size(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double* box = boxes.data() + k * 5;
      const int64_t b = static_cast<int64_t>(std::floor(box[0]));
      for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw)
          naive_bin(box, H, W, ph, pw, p, [&](int64_t h, int64_t w, double weight) {
            for (int64_t c = 0; c < C; ++c) {
              const int64_t o = ((k * C + c) * PH + ph) * PW + pw, i = ((b * C + c) * H + h) * W + w;
              y_ref[o] += weight * x[i];
              gi_ref[i] += weight * g[o];
            }
          });
    }
    SCOPED_TRACE(::testing::Message() << "PH=" << PH << " PW=" << PW);
    testing::expect_all_near(y.storage, y_ref, 1e-12);
    testing::expect_all_near(gi.storage, gi_ref, 1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(Params, RoiAlignSweep,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(1.0, 0.5, 0.25)));

TEST(RoiAlign, AscendWorkedExample) {
  OwnedTensor<float> g({1, 1, 3, 3}), boxes({1, 5}), gi({1, 1, 6, 6});
  set_values(g, std::vector<float>{4.5f, 6.5f, 8.5f, 16.5f, 18.5f, 20.5f, 28.5f, 30.5f, 32.5f});
  set_values(boxes, std::vector<float>{0, -2, -2, 22, 22});
  RoiAlignParams p;
  p.pooled_height = p.pooled_width = 3;
  p.sampling_ratio = 2;
  p.spatial_scale = 0.25;
  p.aligned = false;
  roi_align_backward(g.view, boxes.view, {1, 1, 6, 6}, gi.view, p);
  const float row_pairs[3][3] = {{1.125f, 1.625f, 2.125f}, {4.125f, 4.625f, 5.125f}, {7.125f, 7.625f, 8.125f}};
  for (int64_t h = 0; h < 6; ++h)
    for (int64_t w = 0; w < 6; ++w) EXPECT_EQ(gi[h * 6 + w], row_pairs[h / 2][w / 2]) << h << "," << w;
}

// Runs `check` with every kernel forced (and the automatic choice), restoring the cost model afterwards.
template <class Check>
void for_each_path(Check&& check) {
  for (auto path : {detail::RoiAlignStrategy::kAuto, detail::RoiAlignStrategy::kDirect,
                    detail::RoiAlignStrategy::kPacked, detail::RoiAlignStrategy::kPackedNarrow}) {
    SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path));
    detail::set_strategy_for_testing(path);
    check();
  }
  detail::set_strategy_for_testing(detail::RoiAlignStrategy::kAuto);
}

// Every kernel at every thread count gives the bits of the direct kernel at one thread: the kernels sum each
// element in one order with the same operations, whatever the split (ROI chunks, shared or private patches,
// bands of rows) the thread count gives. Channel counts cover one direct group, a partial one, one lane
// block, partial blocks.
TEST(RoiAlign, ThreadCountAndKernelDoNotChangeBits) {
  const int64_t B = 2, H = 40, W = 33, K = 300;
  OwnedTensor<float> boxes({K, 5});
  const std::vector<double> b = make_boxes(K, B, 2);
  for (size_t i = 0; i < b.size(); ++i) boxes.storage[i] = static_cast<float>(b[i] * (i % 5 == 0 ? 1.0 : 1.5));
  RoiAlignParams p;
  p.pooled_height = 5;
  p.pooled_width = 6;
  for (int64_t C : {1, 3, 5, 16, 70}) {
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    auto x = random_tensor<float>({B, C, H, W}, 1);
    auto g = random_tensor<float>({K, C, 5, 6}, 3);
    std::vector<std::vector<float>> outs, grads;
    for_each_path([&] {
      for (int threads : {1, 2, 3, 7}) {
        set_num_threads(threads);
        OwnedTensor<float> y({K, C, 5, 6}), gi({B, C, H, W});
        roi_align(x.view, boxes.view, y.view, p);
        roi_align_backward(g.view, boxes.view, {B, C, H, W}, gi.view, p);
        outs.push_back(y.storage);
        grads.push_back(gi.storage);
      }
      set_num_threads(0);
    });
    for (size_t i = 1; i < outs.size(); ++i) {
      EXPECT_EQ(std::memcmp(outs[i].data(), outs[0].data(), outs[0].size() * sizeof(float)), 0) << "run " << i;
      EXPECT_EQ(std::memcmp(grads[i].data(), grads[0].data(), grads[0].size() * sizeof(float)), 0) << "run " << i;
    }
  }
}

// The kernels on shapes at their edges: a 1x1 plane, one row, one column, a box on the last row and column
// (its samples' two corner rows coincide), many images with few ROIs, ROIs of one image only. Each forced
// kernel, with the backward's bands of 1 row, against the naive loops.
TEST(RoiAlign, EdgeShapesMatchNaiveLoopsInEveryKernel) {
  struct Shape {
    int64_t B, C, H, W;
    std::vector<double> boxes;
  };
  const std::vector<Shape> shapes = {
      {1, 3, 1, 1, {0, -1, -1, 2, 2, 0, 0, 0, 0.5, 0.5}},
      {2, 17, 1, 9, {1, 0, 0, 8, 1, 1, 2, -1, 9, 3, 0, 4, 0, 4.5, 0.7}},
      {1, 5, 9, 1, {0, 0, 0, 1, 8, 0, -2, 3, 2, 12}},
      {1, 4, 6, 7, {0, 5, 4, 7.5, 6.5, 0, 6, 5, 6, 5, 0, 0, 0, 7, 6}},
      {5, 20, 8, 8, {3, 1, 1, 6, 6, 3, 0, 2, 7, 5}},
  };
  RoiAlignParams p;
  p.pooled_height = 3;
  p.pooled_width = 2;
  p.sampling_ratio = 0;
  for (const Shape& sh : shapes) {
    const int64_t K = static_cast<int64_t>(sh.boxes.size() / 5), B = sh.B, C = sh.C, H = sh.H, W = sh.W;
    SCOPED_TRACE(::testing::Message() << B << "x" << C << "x" << H << "x" << W);
    auto x = random_tensor<double>({B, C, H, W}, 11);
    auto g = random_tensor<double>({K, C, 3, 2}, 12);
    OwnedTensor<double> boxes({K, 5});
    set_values(boxes, sh.boxes);
    std::vector<double> y_ref(static_cast<size_t>(K * C * 6), 0.0), gi_ref(static_cast<size_t>(B * C * H * W), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double* box = boxes.data() + k * 5;
      const int64_t b = static_cast<int64_t>(std::floor(box[0]));
      for (int64_t ph = 0; ph < 3; ++ph)
        for (int64_t pw = 0; pw < 2; ++pw)
          naive_bin(box, H, W, ph, pw, p, [&](int64_t h, int64_t w, double weight) {
            for (int64_t c = 0; c < C; ++c) {
              const int64_t o = ((k * C + c) * 3 + ph) * 2 + pw, i = ((b * C + c) * H + h) * W + w;
              y_ref[o] += weight * x[i];
              gi_ref[i] += weight * g[o];
            }
          });
    }
    for (auto path : {detail::RoiAlignStrategy::kDirect, detail::RoiAlignStrategy::kPacked,
                      detail::RoiAlignStrategy::kPackedNarrow}) {
      detail::set_strategy_for_testing(path, 1);
      OwnedTensor<double> y({K, C, 3, 2}, 99.0), gi({B, C, H, W}, 99.0);
      roi_align(x.view, boxes.view, y.view, p);
      roi_align_backward(g.view, boxes.view, {B, C, H, W}, gi.view, p);
      detail::set_strategy_for_testing(detail::RoiAlignStrategy::kAuto);
      testing::expect_all_near(y.storage, y_ref, 1e-12);
      testing::expect_all_near(gi.storage, gi_ref, 1e-12);
    }
  }
}

TEST(RoiAlign, NonFiniteBoxesContributeNothing) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  auto x = random_tensor<double>({1, 3, 8, 8}, 4);
  OwnedTensor<double> boxes({6, 5});
  set_values(boxes, std::vector<double>{0, nan, 1, 4, 4, 0, 1, 1, inf, 4, 0, -inf, 1, 4, 4, 0, 1, 1, 4, nan, 0, 1e30, -1e30, 1e30, 1e30,
                   0, 1, 1, 5, 6});
  RoiAlignParams p;
  p.pooled_height = p.pooled_width = 2;
  for (bool aligned : {true, false}) {
    p.aligned = aligned;
    OwnedTensor<double> y({6, 3, 2, 2}, 99.0), gi({1, 3, 8, 8}, 99.0);
    roi_align(x.view, boxes.view, y.view, p);
    auto g = random_tensor<double>({6, 3, 2, 2}, 8);
    for (int64_t i = 5 * 12; i < 6 * 12; ++i) g[i] = 0;  // only the non-finite ROIs pass gradient
    roi_align_backward(g.view, boxes.view, {1, 3, 8, 8}, gi.view, p);
    for (int64_t i = 0; i < 4 * 12; ++i) EXPECT_EQ(y[i], 0.0) << i;
    for (double v : gi.storage) EXPECT_EQ(v, 0.0);
    // The huge box's samples far outside the image contribute nothing; the last box is ordinary.
    for (int64_t i = 5 * 12; i < 6 * 12; ++i) EXPECT_NE(y[i], 0.0);
  }
}

TEST(RoiAlign, HugeAdaptiveBoxCostsOnlyItsSamplesNearTheImage) {
  // ceil(2e6 / 2) = 1e6 samples per bin and axis: the naive 1e12 samples would never finish.
  auto x = random_tensor<double>({1, 2, 8, 8}, 4);
  OwnedTensor<double> boxes({1, 5}), y({1, 2, 2, 2});
  set_values(boxes, std::vector<double>{0, -1e6, -1e6, 1e6, 1e6});
  RoiAlignParams p;
  p.pooled_height = p.pooled_width = 2;
  roi_align(x.view, boxes.view, y.view, p);
  // Bin (1, 1) starts at 0: about 9 x 9 of its 1e12 samples land in [-1, 8]^2.
  EXPECT_GT(std::fabs(y[3]), 0.0);
  EXPECT_LT(std::fabs(y[3]), 1e-9);
}

// A sampling_ratio in the billions (found by the aclnn fuzzer: it allocated gigabytes of taps) is a
// clear error, as is a zero-size bin whose samples would all sit at one place; a large but sane grid runs.
TEST(RoiAlign, SampleGridsBeyondTheLimitsAreErrors) {
  auto x = random_tensor<double>({1, 2, 8, 8}, 4);
  OwnedTensor<double> boxes({1, 5}), y({1, 2, 2, 2}), g({1, 2, 2, 2}, 1.0), gi({1, 2, 8, 8});
  RoiAlignParams p;
  p.pooled_height = p.pooled_width = 2;
  for (std::vector<double> box : {std::vector<double>{0, 1, 1, 6, 6}, std::vector<double>{0, 3, 3, 3, 3}}) {
    set_values(boxes, box);
    p.sampling_ratio = int64_t(1) << 31;
    expect_error([&] { roi_align(x.view, boxes.view, y.view, p); }, ErrorKind::kInvalidArgument,
                 "roi_align(): expected a sampling grid of at most 2^24 samples per axis and 2^36 sample points");
    expect_error([&] { roi_align_backward(g.view, boxes.view, {1, 2, 8, 8}, gi.view, p); },
                 ErrorKind::kInvalidArgument, "roi_align_backward(): expected a sampling grid");
    p.sampling_ratio = 4096;  // 8192 samples per axis, 6.7e7 points: allowed
    roi_align(x.view, boxes.view, y.view, p);
  }
}

TEST(RoiAlign, NoRoisGiveZerosWhateverThePooledSize) {
  // The per-thread bin scratch is pooled_h * pooled_w lanes: 2^40 of them raised MemoryError before.
  RoiAlignParams p;
  p.pooled_height = p.pooled_width = int64_t(1) << 20;
  OwnedTensor<float> boxes({0, 5}), g({0, 3, 1, 1}), gi({2, 3, 5, 5}, 7.0f);
  TensorView g_view(g.data(), DType::kFloat32, {0, 3, p.pooled_height, p.pooled_width});
  roi_align_backward(g_view, boxes.view, {2, 3, 5, 5}, gi.view, p);
  for (float v : gi.storage) EXPECT_EQ(v, 0.0f);
  OwnedTensor<Half> boxes_h({0, 5}, Half{}), gi_h({2, 3, 5, 5}, to_half(7.0f));
  TensorView g_h(gi_h.data(), DType::kFloat16, {0, 3, p.pooled_height, p.pooled_width});
  roi_align_backward(g_h, boxes_h.view, {2, 3, 5, 5}, gi_h.view, p);
  for (Half v : gi_h.storage) EXPECT_EQ(to_float(v), 0.0f);
}

TEST(RoiAlign, EmptyInputsGiveShapedZeros) {
  RoiAlignParams p;
  p.pooled_height = p.pooled_width = 2;
  OwnedTensor<float> x({2, 3, 5, 5}), boxes({0, 5}), y({0, 3, 2, 2}), g({0, 3, 2, 2}), gi({2, 3, 5, 5}, 7.0f);
  roi_align(x.view, boxes.view, y.view, p);
  roi_align_backward(g.view, boxes.view, {2, 3, 5, 5}, gi.view, p);
  for (float v : gi.storage) EXPECT_EQ(v, 0.0f);
  // An image without pixels: every sample is outside it.
  OwnedTensor<float> x0({1, 2, 0, 4}), box({1, 5}), y0({1, 2, 2, 2}, 7.0f), gi0({1, 2, 0, 4});
  set_values(box, std::vector<float>{0, 0, 0, 2, 2});
  roi_align(x0.view, box.view, y0.view, p);
  for (float v : y0.storage) EXPECT_EQ(v, 0.0f);
  roi_align_backward(y0.view, box.view, {1, 2, 0, 4}, gi0.view, p);
}

TEST(RoiAlign, StridedInputsAndOutputs) {
  for_each_path([] {
  auto x = random_tensor<double>({2, 5, 9, 10}, 7);
  OwnedTensor<double> boxes({4, 5});
  set_values(boxes, std::vector<double>{1, 0.5, 1, 7, 8, 0, -2, 3, 4, 12, 1, 3, 3, 3.5, 3.2, 0, 1, 1, 9, 9});
  RoiAlignParams p;
  p.pooled_height = 3;
  p.pooled_width = 2;
  OwnedTensor<double> y({4, 5, 3, 2});
  roi_align(x.view, boxes.view, y.view, p);
  for (int64_t dim : {1, 3}) {
    auto xf = testing::flipped_copy(x, dim);
    OwnedTensor<double> y2({4, 5, 3, 2});
    roi_align(xf.view, boxes.view, y2.view, p);
    EXPECT_EQ(y2.storage, y.storage);
  }
  // Boxes as a column-major view, output every other element of a larger buffer.
  std::vector<double> boxes_t(20);
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t j = 0; j < 5; ++j) boxes_t[static_cast<size_t>(j * 4 + k)] = boxes[k * 5 + j];
  TensorView boxes_view(boxes_t.data(), DType::kFloat64, {4, 5}, {1, 4});
  std::vector<double> wide(static_cast<size_t>(y.numel() * 2), -7.0);
  std::vector<int64_t> strides = contiguous_strides({4, 5, 3, 2});
  for (auto& s : strides) s *= 2;
  TensorView y_strided(wide.data(), DType::kFloat64, {4, 5, 3, 2}, strides);
  roi_align(x.view, boxes_view, y_strided, p);
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_EQ(wide[static_cast<size_t>(2 * i)], y[i]);
    EXPECT_EQ(wide[static_cast<size_t>(2 * i + 1)], -7.0);
  }
  // Output rows of bins padded (bins not one run per channel: the packed forward stores row by row).
  std::vector<double> gapped(static_cast<size_t>(4 * 5 * 3 * 3), -7.0);
  TensorView y_gapped(gapped.data(), DType::kFloat64, {4, 5, 3, 2}, {5 * 3 * 3, 3 * 3, 3, 1});
  roi_align(x.view, boxes_view, y_gapped, p);
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_EQ(gapped[static_cast<size_t>(i / 2 * 3 + i % 2)], y[i]);
    EXPECT_EQ(gapped[static_cast<size_t>(i / 2 * 3 + 2)], -7.0);
  }
  auto g = random_tensor<double>({4, 5, 3, 2}, 9);
  auto gf = testing::flipped_copy(g, 2);
  OwnedTensor<double> gi({2, 5, 9, 10}), gi2({2, 5, 9, 10});
  roi_align_backward(g.view, boxes.view, {2, 5, 9, 10}, gi.view, p);
  roi_align_backward(gf.view, boxes_view, {2, 5, 9, 10}, gi2.view, p);
  EXPECT_EQ(gi.storage, gi2.storage);
  // grad_input with padded rows and reversed columns (each kernel zero-fills and writes through the strides).
  std::vector<double> padded(static_cast<size_t>(2 * 5 * 9 * 12), -7.0);
  TensorView gi_strided(padded.data() + 10, DType::kFloat64, {2, 5, 9, 10}, {5 * 9 * 12, 9 * 12, 12, -1});
  roi_align_backward(g.view, boxes.view, {2, 5, 9, 10}, gi_strided, p);
  for (int64_t i = 0; i < gi.numel(); ++i) {
    const int64_t w = i % 10, row = i / 10;
    EXPECT_EQ(padded[static_cast<size_t>(row * 12 + 10 - w)], gi[i]);
  }
  for (int64_t row = 0; row < 2 * 5 * 9; ++row) EXPECT_EQ(padded[static_cast<size_t>(row * 12 + 11)], -7.0);
  });
}

TEST(RoiAlign, ValidationErrors) {
  OwnedTensor<float> x({2, 3, 8, 8}), boxes({4, 5}), y({4, 3, 2, 2}), g({4, 3, 2, 2}), gi({2, 3, 8, 8});
  RoiAlignParams base;
  base.pooled_height = base.pooled_width = 2;
  const std::vector<int64_t> shape{2, 3, 8, 8};
  auto both = [&](const RoiAlignParams& p, ErrorKind kind, const std::string& text) {
    expect_error([&] { roi_align(x.view, boxes.view, y.view, p); }, kind, "roi_align(): " + text);
    expect_error([&] { roi_align_backward(g.view, boxes.view, shape, gi.view, p); }, kind,
                 "roi_align_backward(): " + text);
  };
  RoiAlignParams p = base;
  p.sampling_ratio = -1;
  both(p, ErrorKind::kInvalidArgument, "expected sampling_ratio >= 0, but got -1");
  for (double s : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    p = base;
    p.spatial_scale = s;
    both(p, ErrorKind::kInvalidArgument, "expected spatial_scale to be finite and > 0");
  }
  p = base;
  p.pooled_width = -2;
  expect_error([&] { roi_align_output_shape(shape, {4, 5}, p); }, ErrorKind::kInvalidArgument,
               "expected pooled_height and pooled_width >= 0, but got 2 and -2");

  // Batch indices: outside [0, B) in both directions, NaN.
  for (float bad : {2.0f, -0.5f, std::nanf(""), 1e30f}) {
    boxes[2 * 5] = bad;
    both(base, ErrorKind::kIndex, "expected the batch index of ROI 2 (boxes[2, 0]) to be in [0, 2), but got ");
  }
  boxes[2 * 5] = 1.9f;  // floor -> 1: fine
  roi_align(x.view, boxes.view, y.view, base);

  expect_error([&] { roi_align_output_shape({3, 8, 8}, {4, 5}, base); }, ErrorKind::kInvalidArgument,
               "roi_align(): expected input to be 4-D (B, C, H, W), but got 3-D shape (3, 8, 8)");
  OwnedTensor<float> boxes4({4, 4}), boxes3d({1, 4, 5});
  expect_error([&] { roi_align(x.view, boxes4.view, y.view, base); }, ErrorKind::kInvalidArgument,
               "roi_align(): expected boxes of shape (K, 5) with rows (batch_index, x1, y1, x2, y2), but got (4, 4)");
  expect_error([&] { roi_align_backward(g.view, boxes3d.view, shape, gi.view, base); }, ErrorKind::kInvalidArgument,
               "roi_align_backward(): expected boxes of shape (K, 5)");
  OwnedTensor<float> y_wrong({4, 3, 2, 3});
  expect_error([&] { roi_align(x.view, boxes.view, y_wrong.view, base); }, ErrorKind::kInvalidArgument,
               "roi_align(): expected output of shape (4, 3, 2, 2), but got (4, 3, 2, 3)");
  OwnedTensor<double> boxes_d({4, 5});
  expect_error([&] { roi_align(x.view, boxes_d.view, y.view, base); }, ErrorKind::kType,
               "roi_align(): expected boxes to have the dtype of input (float32), but got float64");
  OwnedTensor<int32_t> xi({2, 3, 8, 8}), boxes_i({4, 5}), yi({4, 3, 2, 2});
  expect_error([&] { roi_align(xi.view, boxes_i.view, yi.view, base); }, ErrorKind::kType,
               "roi_align(): expected input to be float16, bfloat16, float32 or float64, but got int32");

  OwnedTensor<float> g3({4, 3, 2});
  expect_error([&] { roi_align_backward(g3.view, boxes.view, shape, gi.view, base); }, ErrorKind::kInvalidArgument,
               "roi_align_backward(): expected grad_output to be 4-D, but got 3-D");
  expect_error([&] { roi_align_backward(g.view, boxes.view, {2, 3, 8}, gi.view, base); }, ErrorKind::kInvalidArgument,
               "expected input_shape to have 4 entries (B, C, H, W), but got 3 ([2, 3, 8])");
  expect_error([&] { roi_align_backward(g.view, boxes.view, {2, 3, -8, 8}, gi.view, base); },
               ErrorKind::kInvalidArgument, "expected input_shape entries >= 0, but got [2, 3, -8, 8]");
  OwnedTensor<float> boxes5({5, 5});
  expect_error([&] { roi_align_backward(g.view, boxes5.view, shape, gi.view, base); }, ErrorKind::kInvalidArgument,
               "expected boxes to have one row per ROI of grad_output (4), but got 5 rows");
  p = base;
  p.pooled_width = 3;
  expect_error([&] { roi_align_backward(g.view, boxes.view, shape, gi.view, p); }, ErrorKind::kInvalidArgument,
               "expected grad_output of pooled size (pooled_height, pooled_width) = (2, 3), but got 2x2");
  expect_error([&] { roi_align_backward(g.view, boxes.view, {2, 4, 8, 8}, gi.view, base); },
               ErrorKind::kInvalidArgument, "expected grad_output to have the 4 channels of input_shape (2, 4, 8, 8), but got 3");
  OwnedTensor<float> gi_wrong({2, 3, 8, 7});
  expect_error([&] { roi_align_backward(g.view, boxes.view, shape, gi_wrong.view, base); }, ErrorKind::kInvalidArgument,
               "expected grad_input of shape (2, 3, 8, 8), but got (2, 3, 8, 7)");
  expect_error([&] { roi_align_backward(g.view, boxes_d.view, shape, gi.view, base); }, ErrorKind::kType,
               "expected boxes to have the dtype of grad_output (float32), but got float64");
  OwnedTensor<double> gi_d({2, 3, 8, 8});
  expect_error([&] { roi_align_backward(g.view, boxes.view, shape, gi_d.view, base); }, ErrorKind::kType,
               "expected grad_input to have the dtype of grad_output (float32), but got float64");
}

}  // namespace
}  // namespace spatialgrad

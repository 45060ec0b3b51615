#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "detail/convert.h"
#include "detail/lanes.h"
#include "detail/strategy.h"
#include "spatialgrad/avg_pool2d.h"
#include "spatialgrad/parallel.h"
#include "simd_levels.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::expect_error;
using testing::OwnedTensor;
using testing::random_tensor;

using testing::NaivePool;  // test_util.h

AvgPool2dParams params_of(const NaivePool& n);

// Forward and backward of an (N, C, H, W) float64 problem against the naive loops.
void expect_naive_results(const NaivePool& ref, int64_t N, int64_t C, int64_t H, int64_t W, double tol) {
  const int64_t OH = NaivePool::out_size(H, ref.kh, ref.sh, ref.ph, ref.ceil_mode);
  const int64_t OW = NaivePool::out_size(W, ref.kw, ref.sw, ref.pw, ref.ceil_mode);
  auto x = random_tensor<double>({N, C, H, W}, 11);
  auto g = random_tensor<double>({N, C, OH, OW}, 12);
  OwnedTensor<double> y({N, C, OH, OW}), gi({N, C, H, W});
  const AvgPool2dParams params = params_of(ref);
  ASSERT_EQ(avg_pool2d_output_shape(x.view.sizes(), params), y.view.sizes());
  avg_pool2d(x.view, y.view, params);
  avg_pool2d_backward(g.view, x.view, gi.view, params);
  std::vector<double> y_ref(y.storage.size(), 0.0), gi_ref(gi.storage.size(), 0.0);
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        ref.window(H, W, oh, ow, [&](int64_t h, int64_t w, double inv) {
          y_ref[(nc * OH + oh) * OW + ow] += x[(nc * H + h) * W + w] * inv;
          gi_ref[(nc * H + h) * W + w] += g[(nc * OH + oh) * OW + ow] * inv;
        });
  testing::expect_all_near(y.storage, y_ref, tol);
  testing::expect_all_near(gi.storage, gi_ref, tol);
}

AvgPool2dParams params_of(const NaivePool& n) {
  AvgPool2dParams p;
  p.kernel_size = {n.kh, n.kw};
  p.stride = {n.sh, n.sw};
  p.padding = {n.ph, n.pw};
  p.ceil_mode = n.ceil_mode;
  p.count_include_pad = n.count_include_pad;
  p.divisor_override = n.divisor_override;
  return p;
}

class AvgPoolSweep : public ::testing::TestWithParam<std::tuple<int, int, bool, bool, int>> {};

TEST_P(AvgPoolSweep, ForwardAndBackwardMatchNaiveLoops) {
  const auto [k, s, ceil, cip, div] = GetParam();
  for (int64_t H : {1, 2, 5, 8, 11}) {
    for (int64_t W : {1, 3, 6, 13, 37}) {
      for (int64_t p = 0; p <= k / 2; ++p) {
        // Width kernels and strides differ from the height's (width strides 2, 3, 1 for s = 1, 2, 3),
        // so that kernels narrower than the stride (uncovered columns) occur too.
        NaivePool ref{
            k, k + 1 - (k > 1), s, s == 3 ? 1 : s + 1, p, std::min<int64_t>(p, (k + 1 - (k > 1)) / 2), ceil, cip, div};
        const int64_t OH = NaivePool::out_size(H, ref.kh, ref.sh, ref.ph, ceil);
        const int64_t OW = NaivePool::out_size(W, ref.kw, ref.sw, ref.pw, ceil);
        if (OH < 1 || OW < 1) continue;
        SCOPED_TRACE(::testing::Message() << "H=" << H << " W=" << W << " p=" << p);
        expect_naive_results(ref, 2, 3, H, W, 1e-12);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Params, AvgPoolSweep,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2, 3),
                                            ::testing::Bool(), ::testing::Bool(), ::testing::Values(0, -3)));

// Kernel sizes and strides far beyond the input: the work and the scratch follow the data (before, 2^24
// took seconds and hundreds of MB, larger sizes aborted on bad_alloc / length_error, and the output-size
// formula overflowed int64 for stride 2^63 - 1).
TEST(AvgPool2d, HugeKernelsAndStridesCostTheDataNotTheParameters) {
  const int64_t k24 = int64_t(1) << 24, k33 = int64_t(1) << 33, k62 = int64_t(1) << 62;
  struct Case {
    int64_t H, W, k, s, p;
    bool ceil;
  };
  const Case cases[] = {{1, 1, k24, k24, k24 / 2, false}, {1, 1, k33, k33, k33 / 2, false},
                        {1, 1, k62, k62, k62 / 2, false}, {8, 8, 2, int64_t(1) << 40, 0, false},
                        {8, 8, 2, INT64_MAX, 0, true},    {8, 7, k24, 1, k24 / 2, false},
                        {6, 9, 3, k24, 1, true}};
  for (const Case& c : cases) {
    for (bool count_include_pad : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "H=" << c.H << " k=" << c.k << " s=" << c.s << " p=" << c.p
                                        << " ceil=" << c.ceil << " cip=" << count_include_pad);
      const NaivePool ref{c.k, c.k, c.s, c.s, c.p, c.p, c.ceil, count_include_pad, 0};
      expect_naive_results(ref, 1, 2, c.H, c.W, 1e-12);
    }
  }
}

TEST(AvgPool2d, APaddedInputBeyondInt64IsAnOverflowError) {
  AvgPool2dParams p;
  p.kernel_size = {int64_t(1) << 62, 1};
  p.padding = {int64_t(1) << 61, 0};
  expect_error(
      [&] {
        avg_pool2d_output_shape({1, 1, int64_t(1) << 62, 1}, p);
      },
      ErrorKind::kOverflow, "avg_pool2d(): expected an output size and padded input that fit in int64");
}

// A divisor whose float32 product of factors would round twice is formed exactly and rounded once,
// as PyTorch converts its int64 divisor: here (2^24 + 1) * 3 is not a float.
TEST(AvgPool2d, HugeDivisorsAreRoundedOnce) {
  AvgPool2dParams p;
  const int64_t k = (int64_t(1) << 24) + 1;
  p.kernel_size = {k, 3};
  p.padding = {k / 2, 1};
  p.stride = {k, 3};
  OwnedTensor<float> x({1, 1, 1, 2}, 3.0f), y({1, 1, 1, 1});
  avg_pool2d(x.view, y.view, p);
  // rows: [-2^23, 2^23 + 1) of the padded axis, pool 2^24 + 1 (not a float); columns: [-1, 2), pool 3.
  const int64_t divisor = k * 3;
  EXPECT_EQ(y[0], 6.0f / static_cast<float>(divisor));
  EXPECT_NE(y[0], 6.0f / (static_cast<float>(k) * 3.0f));  // the two roundings differ here
}

TEST(AvgPool2d, ThreeDimensionalInputEqualsBatchOfOne) {
  auto x3 = random_tensor<float>({4, 9, 7}, 3);
  OwnedTensor<float> x4({1, 4, 9, 7});
  x4.storage = x3.storage;
  AvgPool2dParams p;
  p.kernel_size = {3};
  p.stride = {2};
  p.padding = {1};
  OwnedTensor<float> y3(avg_pool2d_output_shape(x3.view.sizes(), p));
  OwnedTensor<float> y4(avg_pool2d_output_shape(x4.view.sizes(), p));
  ASSERT_EQ(y3.view.sizes(), (std::vector<int64_t>{4, 5, 4}));
  avg_pool2d(x3.view, y3.view, p);
  avg_pool2d(x4.view, y4.view, p);
  EXPECT_EQ(y3.storage, y4.storage);
  OwnedTensor<float> g3 = random_tensor<float>(y3.view.sizes(), 5), gi3(x3.view.sizes()), gi4(x4.view.sizes());
  OwnedTensor<float> g4(y4.view.sizes());
  g4.storage = g3.storage;
  avg_pool2d_backward(g3.view, x3.view, gi3.view, p);
  avg_pool2d_backward(g4.view, x4.view, gi4.view, p);
  EXPECT_EQ(gi3.storage, gi4.storage);
}

// (..., C, H, W) data copied into (..., H, W, C) order.
OwnedTensor<float> to_nhwc(const OwnedTensor<float>& t) {
  std::vector<int64_t> sizes = t.view.sizes();
  const int64_t C = sizes[sizes.size() - 3], H = sizes[sizes.size() - 2], W = sizes.back();
  std::rotate(sizes.end() - 3, sizes.end() - 2, sizes.end());
  OwnedTensor<float> out(sizes);
  for (int64_t b = 0; b < t.view.numel() / (C * H * W); ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) out.storage[(b * H * W + i) * C + c] = t.storage[(b * C + c) * H * W + i];
  return out;
}

// Layout::kNHWC reads (N, H, W, C) / (H, W, C) tensors: the kNCHW results of the same values, bit for bit,
// in the same order.
TEST(AvgPool2d, NhwcLayoutMatchesNchw) {
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{2, 5, 9, 7}, std::vector<int64_t>{12, 6, 8}}) {
    const auto x = random_tensor<float>(sizes, 11);
    AvgPool2dParams p;
    p.kernel_size = {3, 2};
    p.stride = {2, 1};
    p.padding = {1, 0};
    OwnedTensor<float> y(avg_pool2d_output_shape(x.view.sizes(), p));
    avg_pool2d(x.view, y.view, p);
    const auto g = random_tensor<float>(y.view.sizes(), 12);
    OwnedTensor<float> gi(x.view.sizes());
    avg_pool2d_backward(g.view, x.view, gi.view, p);

    AvgPool2dParams q = p;
    q.layout = Layout::kNHWC;
    const auto x_nhwc = to_nhwc(x), g_nhwc = to_nhwc(g);
    ASSERT_EQ(avg_pool2d_output_shape(x_nhwc.view.sizes(), q), to_nhwc(y).view.sizes());
    OwnedTensor<float> y_nhwc(to_nhwc(y).view.sizes(), -1.f), gi_nhwc(x_nhwc.view.sizes(), -1.f);
    avg_pool2d(x_nhwc.view, y_nhwc.view, q);
    avg_pool2d_backward(g_nhwc.view, x_nhwc.view, gi_nhwc.view, q);
    EXPECT_EQ(y_nhwc.storage, to_nhwc(y).storage);
    EXPECT_EQ(gi_nhwc.storage, to_nhwc(gi).storage);
  }
  AvgPool2dParams q;
  q.kernel_size = {2};
  q.layout = static_cast<Layout>(7);
  expect_error(
      [&] {
        avg_pool2d_output_shape({1, 4, 4, 2}, q);
      },
      ErrorKind::kInvalidArgument, "avg_pool2d(): expected layout NCHW (0) or NHWC (1), but got 7");
  q.layout = Layout::kNHWC;
  expect_error(
      [&] {
        avg_pool2d_output_shape({4, 4}, q);
      },
      ErrorKind::kInvalidArgument,
      "avg_pool2d(): expected a 3-D (H, W, C) or 4-D (N, H, W, C) input, but got 2-D shape (4, 4)");
}

TEST(AvgPool2d, StridedAndNegativeStrideInputsAndOutputs) {
  auto x = random_tensor<double>({2, 3, 8, 10}, 7);
  AvgPool2dParams p;
  p.kernel_size = {3, 2};
  p.padding = {1, 1};
  p.ceil_mode = true;
  const auto out_shape = avg_pool2d_output_shape(x.view.sizes(), p);
  OwnedTensor<double> y(out_shape);
  avg_pool2d(x.view, y.view, p);

  // The same values, flipped in memory along W (negative stride) and along C.
  auto xw = testing::flipped_copy(x, 3);
  auto xc = testing::flipped_copy(x, 1);
  for (const auto* xv : {&xw, &xc}) {
    OwnedTensor<double> y2(out_shape);
    avg_pool2d(xv->view, y2.view, p);
    EXPECT_EQ(y2.storage, y.storage);
  }
  // A strided output: every other element of a larger buffer.
  std::vector<double> wide(static_cast<size_t>(y.numel() * 2), -7.0);
  std::vector<int64_t> strides = contiguous_strides(out_shape);
  for (auto& st : strides) st *= 2;
  TensorView y_strided(wide.data(), DType::kFloat64, out_shape, strides);
  avg_pool2d(x.view, y_strided, p);
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_EQ(wide[static_cast<size_t>(2 * i)], y[i]);
    EXPECT_EQ(wide[static_cast<size_t>(2 * i + 1)], -7.0);
  }
  // Backward from a negative-stride grad_output equals the contiguous one.
  auto g = random_tensor<double>(out_shape, 9);
  auto gw = testing::flipped_copy(g, 2);
  OwnedTensor<double> gi(x.view.sizes()), gi2(x.view.sizes());
  avg_pool2d_backward(g.view, x.view, gi.view, p);
  avg_pool2d_backward(gw.view, xw.view, gi2.view, p);
  EXPECT_EQ(gi.storage, gi2.storage);
}

TEST(AvgPool2d, EmptyTensorsGiveShapedResults) {
  AvgPool2dParams p;
  p.kernel_size = {2};
  OwnedTensor<float> x({0, 3, 4, 4}), y(avg_pool2d_output_shape({0, 3, 4, 4}, p));
  EXPECT_EQ(y.view.sizes(), (std::vector<int64_t>{0, 3, 2, 2}));
  avg_pool2d(x.view, y.view, p);
  OwnedTensor<float> gi({0, 3, 4, 4});
  avg_pool2d_backward(y.view, x.view, gi.view, p);
  // An empty plane with padding still has windows: they cover nothing and output zeros.
  p.padding = {1};
  OwnedTensor<float> x0({2, 0, 5}), y0(avg_pool2d_output_shape({2, 0, 5}, p), 99.0f);
  EXPECT_EQ(y0.view.sizes(), (std::vector<int64_t>{2, 1, 3}));
  avg_pool2d(x0.view, y0.view, p);
  for (float v : y0.storage) EXPECT_EQ(v, 0.0f);
}

// Channels-last inputs run a kernel of their own (all channels of a row at once); it must give the
// bits of the plane kernel on the same values: dense NHWC, a channel slice of a wider NHWC buffer
// (pixels not back to back), 3-D (H, W, C) storage, and every parameter family.
template <class T>
void expect_channels_last_matches_planes() {
  const int64_t N = 2, C = 5, H = 11, W = 13, wide_c = 8;
  for (bool batched : {true, false}) {
    const int64_t n = batched ? N : 1;
    const auto values = random_tensor<float>({n, C, H, W}, 31);
    std::vector<T> x(values.storage.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = store_as<T>(values.storage[i]);
    std::vector<T> nhwc(static_cast<size_t>(n * H * W * wide_c), store_as<T>(0.0f));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w)
            nhwc[static_cast<size_t>(((b * H + h) * W + w) * wide_c + c)] =
                x[static_cast<size_t>(((b * C + c) * H + h) * W + w)];
    for (int64_t pixel_step : {C, wide_c}) {  // dense pixels, then a channel slice of 8-channel pixels
      std::vector<T> storage(nhwc.size());
      for (int64_t i = 0; i < n * H * W; ++i)
        for (int64_t c = 0; c < C; ++c)
          storage[static_cast<size_t>(i * pixel_step + c)] = nhwc[static_cast<size_t>(i * wide_c + c)];
      std::vector<int64_t> sizes{C, H, W}, strides{1, W * pixel_step, pixel_step};
      if (batched) {
        sizes.insert(sizes.begin(), N);
        strides.insert(strides.begin(), H * W * pixel_step);
      }
      const TensorView x_last(storage.data(), dtype_of<T>(), sizes, strides);
      const std::vector<int64_t> dense_sizes = sizes;
      const TensorView x_dense(x.data(), dtype_of<T>(), dense_sizes);
      for (auto [k, s, pad, ceil, include_pad, divisor] :
           {std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t>{3, 2, 1, false, true, 0},
            {2, 2, 0, false, true, 0},
            {3, 1, 1, true, false, 0},
            {4, 3, 2, true, true, 0},
            {3, 2, 1, true, false, -5},
            {1, 2, 0, false, true, 0}}) {
        AvgPool2dParams p;
        p.kernel_size = {k};
        p.stride = {s};
        p.padding = {pad};
        p.ceil_mode = ceil;
        p.count_include_pad = include_pad;
        p.divisor_override = divisor;
        const std::vector<int64_t> out_shape = avg_pool2d_output_shape(sizes, p);
        std::vector<T> y_last(static_cast<size_t>(checked_numel(out_shape))), y_dense(y_last.size());
        avg_pool2d(x_last, TensorView(y_last.data(), dtype_of<T>(), out_shape), p);
        avg_pool2d(x_dense, TensorView(y_dense.data(), dtype_of<T>(), out_shape), p);
        ASSERT_EQ(std::memcmp(y_last.data(), y_dense.data(), y_dense.size() * sizeof(T)), 0)
            << "k" << k << " s" << s << " p" << pad << " ceil " << ceil << " batched " << batched << " pixel step "
            << pixel_step;
      }
    }
  }
}

TEST(AvgPool2d, ChannelsLastInputGivesThePlaneKernelsBits) {
  expect_channels_last_matches_planes<float>();
  expect_channels_last_matches_planes<double>();
  expect_channels_last_matches_planes<Half>();
  expect_channels_last_matches_planes<BFloat16>();
}

// PyTorch's sums start from +0, so windows of -0 inputs (or gradients) give +0, not -0.
TEST(AvgPool2d, NegativeZerosGivePositiveZeros) {
  for (auto [k, s, pad] : {std::tuple<int64_t, int64_t, int64_t>{3, 2, 1}, {1, 1, 0}, {2, 3, 1}}) {
    AvgPool2dParams p;
    p.kernel_size = {k};
    p.stride = {s};
    p.padding = {pad};
    OwnedTensor<float> x({2, 3, 9, 20}, -0.0f), y(avg_pool2d_output_shape({2, 3, 9, 20}, p), 5.0f);
    avg_pool2d(x.view, y.view, p);
    for (float v : y.storage) ASSERT_FALSE(std::signbit(v)) << "forward k" << k << " s" << s;
    OwnedTensor<float> g(y.view.sizes(), -0.0f), gi({2, 3, 9, 20}, 5.0f);
    avg_pool2d_backward(g.view, x.view, gi.view, p);
    for (float v : gi.storage) ASSERT_FALSE(std::signbit(v)) << "backward k" << k << " s" << s;
    for (float v : gi.storage) ASSERT_EQ(v, 0.0f);
  }
}

TEST(AvgPool2d, ThreadCountDoesNotChangeBits) {
  auto x = random_tensor<float>({2, 5, 37, 29}, 21);
  AvgPool2dParams p;
  p.kernel_size = {3};
  p.stride = {2};
  p.padding = {1};
  const auto shape = avg_pool2d_output_shape(x.view.sizes(), p);
  auto g = random_tensor<float>(shape, 22);
  testing::expect_same_bits_for_thread_counts({1, 2, 3}, [&] {
    OwnedTensor<float> y(shape), gi(x.view.sizes());
    avg_pool2d(x.view, y.view, p);
    avg_pool2d_backward(g.view, x.view, gi.view, p);
    return testing::concatenated({&y, &gi});
  });
}

// ---- issue 31's strategies: planes, plane tiles and channels-last lanes give the same bits ------------------

using detail::AvgPool2dStrategy;

// Memory layouts of a 3-D or 4-D tensor: NCHW, channels-last, the first C channels of a 2C-channel NCHW
// tensor (its planes are not evenly strided across the batch), every other column of a wider one.
enum class Strides { kContiguous, kChannelsLast, kChannelSlice, kEveryOtherColumn };
constexpr Strides kLayouts[] = {Strides::kContiguous, Strides::kChannelsLast, Strides::kChannelSlice,
                                Strides::kEveryOtherColumn};

// A tensor of `sizes` in `layout`, with the values of `values` (contiguous, same sizes) if given.
template <class T>
struct LaidOut {
  LaidOut(const std::vector<int64_t>& sizes, Strides layout, const std::vector<T>* values = nullptr) {
    const bool batched = sizes.size() == 4;
    const int64_t N = batched ? sizes[0] : 1, C = sizes[sizes.size() - 3], H = sizes[sizes.size() - 2],
                  W = sizes.back();
    std::vector<int64_t> nchw{C * H * W, H * W, W, 1};  // batch, channel, row, column
    if (layout == Strides::kChannelsLast) nchw = {H * W * C, 1, W * C, C};
    if (layout == Strides::kChannelSlice) nchw = {2 * C * H * W, H * W, W, 1};
    if (layout == Strides::kEveryOtherColumn) nchw = {C * H * 2 * W, H * 2 * W, 2 * W, 2};
    storage.assign(static_cast<size_t>(N * nchw[0] * (layout == Strides::kContiguous ? 1 : 2) + 1), store_as<T>(-9.f));
    view = TensorView(storage.data(), dtype_of<T>(), sizes,
                      batched ? nchw : std::vector<int64_t>(nchw.begin() + 1, nchw.end()));
    if (values == nullptr) return;
    for (int64_t i = 0; i < view.numel(); ++i) element(i) = (*values)[static_cast<size_t>(i)];
  }
  // Element i of the logical (contiguous) order.
  T& element(int64_t i) {
    int64_t offset = 0;
    for (int64_t d = view.dim() - 1; d >= 0; --d) {
      offset += i % view.size(d) * view.stride(d);
      i /= view.size(d);
    }
    return view.data<T>()[offset];
  }
  std::vector<T> logical() {
    std::vector<T> out(static_cast<size_t>(view.numel()));
    for (int64_t i = 0; i < view.numel(); ++i) out[static_cast<size_t>(i)] = element(i);
    return out;
  }
  std::vector<T> storage;
  TensorView view;
};

template <class T>
std::vector<T> random_values(const std::vector<int64_t>& sizes, uint32_t seed) {
  const auto values = random_tensor<float>(sizes, seed);
  std::vector<T> out(values.storage.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = store_as<T>(values.storage[i]);
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Forward and backward of `sizes` under `strategy`, input and grad_output in `in_layout`, output and
// grad_input in `out_layout`: the results in logical order.
template <class T>
std::pair<std::vector<T>, std::vector<T>> pool_with(AvgPool2dStrategy strategy, const std::vector<int64_t>& sizes,
                                                    const AvgPool2dParams& p, Strides in_layout, Strides out_layout) {
  const detail::StrategyForTesting pinned(strategy);
  const std::vector<int64_t> out_sizes = avg_pool2d_output_shape(sizes, p);
  const std::vector<T> x_values = random_values<T>(sizes, 41), g_values = random_values<T>(out_sizes, 42);
  LaidOut<T> x(sizes, in_layout, &x_values), g(out_sizes, in_layout, &g_values);
  LaidOut<T> y(out_sizes, out_layout), gi(sizes, out_layout);
  avg_pool2d(x.view, y.view, p);
  avg_pool2d_backward(g.view, x.view, gi.view, p);
  return {y.logical(), gi.logical()};
}

AvgPool2dParams pool_params(int64_t k, int64_t s, int64_t pad, bool ceil = false, bool include_pad = true,
                            int64_t divisor = 0) {
  AvgPool2dParams p;
  p.kernel_size = {k};
  p.stride = {s};
  p.padding = {pad};
  p.ceil_mode = ceil;
  p.count_include_pad = include_pad;
  p.divisor_override = divisor;
  return p;
}

struct StrategyCase {
  std::vector<int64_t> sizes;
  AvgPool2dParams params;
};

// Global pooling of a ResNet head (planes not a multiple of the tile's lanes), odd sizes with ceil_mode
// and excluded padding, a divisor override, uncovered columns (kernel 2, stride 3), windows far beyond the
// plane (the direct width passes), 1x1 planes, planes wider than the tiles' crossover, and 3-D inputs.
std::vector<StrategyCase> strategy_cases() {
  const int64_t huge = int64_t(1) << 20;
  return {{{2, 11, 7, 7}, pool_params(7, 7, 0)},
          {{3, 5, 9, 13}, pool_params(3, 2, 1, true, false)},
          {{2, 3, 6, 5}, pool_params(4, 3, 2, true, true, -5)},
          {{1, 20, 5, 6}, pool_params(2, 1, 0)},
          {{2, 9, 8, 10}, pool_params(2, 3, 1, true)},
          {{2, 4, 8, 8}, pool_params(huge, 1, huge / 2)},
          {{2, 3, 1, 1}, pool_params(1, 1, 0)},
          {{2, 17, 6, 45}, pool_params(3, 1, 1, false, false)},
          {{9, 7, 7}, pool_params(3, 2, 1)},
          {{70, 3, 4}, pool_params(2, 2, 1, true)},
          // The direct kernels' crossover (kDirectMaxWork): the per-call tiny shape, one just past it (the
          // backward), padding excluded, ceil_mode with a divisor, and axes of the tables' full length.
          {{1, 2, 8, 8}, pool_params(2, 2, 0)},
          {{1, 8, 8, 8}, pool_params(2, 2, 0)},
          {{1, 2, 8, 8}, pool_params(3, 1, 1, false, false)},
          {{1, 3, 9, 7}, pool_params(3, 2, 1, true, false)},
          {{2, 2, 7, 9}, pool_params(2, 3, 1, true, true, 3)},
          {{1, 1, 32, 32}, pool_params(2, 1, 1, true)}};
}

// Every family, on every layout of input and output, gives the bits of the plane kernels on contiguous
// tensors.
template <class T>
void expect_strategies_give_the_same_bits() {
  for (const StrategyCase& c : strategy_cases()) {
    const auto reference =
        pool_with<T>(AvgPool2dStrategy::kPlanes, c.sizes, c.params, Strides::kContiguous, Strides::kContiguous);
    for (AvgPool2dStrategy strategy :
         {AvgPool2dStrategy::kPlanes, AvgPool2dStrategy::kPlaneTiles, AvgPool2dStrategy::kChannelsLast,
          AvgPool2dStrategy::kDirect, AvgPool2dStrategy::kNarrow, AvgPool2dStrategy::kAuto}) {
      for (Strides in_layout : kLayouts) {
        for (Strides out_layout : {Strides::kContiguous, in_layout}) {
          const auto result = pool_with<T>(strategy, c.sizes, c.params, in_layout, out_layout);
          ASSERT_TRUE(same_bits(result.first, reference.first) && same_bits(result.second, reference.second))
              << "sizes " << format_list(c.sizes) << " kernel " << c.params.kernel_size[0] << " strategy "
              << static_cast<int>(strategy) << " layouts " << static_cast<int>(in_layout) << " -> "
              << static_cast<int>(out_layout) << (same_bits(result.first, reference.first) ? " (backward)" : "");
        }
      }
    }
  }
}

TEST(AvgPool2dStrategies, EveryFamilyGivesThePlaneKernelsBits) {
  expect_strategies_give_the_same_bits<float>();
  expect_strategies_give_the_same_bits<double>();
  expect_strategies_give_the_same_bits<Half>();
  expect_strategies_give_the_same_bits<BFloat16>();
}

// Channels-last planes too wide for one block of all channels run in channel blocks (here 48 + 16); the
// padding's zeros must be where each block's lane count puts them.
TEST(AvgPool2dStrategies, ChannelBlocksGiveThePlaneKernelsBits) {
  for (const AvgPool2dParams& p : {pool_params(3, 1, 1), pool_params(2, 2, 0, true), pool_params(5, 3, 2, true)}) {
    const std::vector<int64_t> sizes{2, 64, 5, 300};
    const auto planes =
        pool_with<float>(AvgPool2dStrategy::kPlanes, sizes, p, Strides::kContiguous, Strides::kContiguous);
    const auto lanes =
        pool_with<float>(AvgPool2dStrategy::kAuto, sizes, p, Strides::kChannelsLast, Strides::kContiguous);
    EXPECT_TRUE(same_bits(planes.first, lanes.first)) << "forward k" << p.kernel_size[0];
    EXPECT_TRUE(same_bits(planes.second, lanes.second)) << "backward k" << p.kernel_size[0];
  }
}

// The narrow forward (rows of at most 32 values held in registers) pinned at every instruction level: the
// planes' bits for rows of 1 to 32 values, outputs narrower and wider than a vector (the last one overlapping),
// padding, ceil_mode, excluded padding, a divisor override, divisors beyond float's exact products (formed per
// row), 3-D input, the last rows' tables copied (they would pass the tensor's end).
TEST(AvgPool2dStrategies, NarrowRowsAtEveryLevelGiveThePlaneKernelsBits) {
  std::vector<StrategyCase> cases = {
      {{2, 3, 32, 32}, pool_params(2, 2, 0)},
      {{1, 4, 30, 31}, pool_params(3, 2, 1, true, false)},
      {{2, 2, 9, 17}, pool_params(5, 1, 2, false, true, 7)},
      {{1, 2, 6, 32}, pool_params(4, 4, 0)},
      {{1, 1, 5, 1}, pool_params(1, 1, 0)},
      {{3, 16, 16}, pool_params(3, 1, 1)},
      {{2, 3, 8, 25}, pool_params(2, 1, 1, true, true, (int64_t{1} << 25) + 1)},
      {{1, 2, 40, 20}, pool_params(3, 3, 1, true)},
      // Rows wider than a table under stride-2 windows (narrow_wide_forward_rows): one vector past a table, ceil
      // tails, excluded padding, a divisor override, one-column windows, the widest rows it takes.
      {{2, 3, 56, 56}, pool_params(2, 2, 0)},
      {{1, 2, 7, 33}, pool_params(2, 2, 1, true)},
      {{1, 4, 45, 113}, pool_params(3, 2, 1, true, false)},
      {{1, 2, 9, 256}, pool_params(5, 2, 2, false, true, 7)},
      {{1, 1, 3, 40}, pool_params(1, 2, 0)},
      {{3, 9, 250}, pool_params(4, 2, 2, true, false)},
      // 16 MiB of input: rows of up to 512 values, each output row's next input rows prefetched.
      {{4, 8, 440, 300}, pool_params(3, 2, 1, true)}};
  // Windows 2^25 + 3 rows high (padding included) by 3: a row factor float cannot hold, the divisors formed
  // exactly per row (Windows::divisor_row) and rounded once.
  AvgPool2dParams tall = pool_params(3, 1, 1);
  tall.kernel_size = {(int64_t{1} << 25) + 3, 3};
  tall.padding = {(int64_t{1} << 24) + 1, 1};
  cases.push_back({{1, 2, 5, 19}, tall});
  tall.stride = {1, 2};
  cases.push_back({{1, 2, 5, 70}, tall});
  for (const StrategyCase& c : cases) {
    const auto reference =
        pool_with<float>(AvgPool2dStrategy::kPlanes, c.sizes, c.params, Strides::kContiguous, Strides::kContiguous);
    testing::for_each_simd_level([&] {
      const auto result =
          pool_with<float>(AvgPool2dStrategy::kNarrow, c.sizes, c.params, Strides::kContiguous, Strides::kContiguous);
      ASSERT_TRUE(same_bits(result.first, reference.first)) << "sizes " << format_list(c.sizes);
    });
  }
}

// A view reversed along H and C (negative strides: its data pointer is not its lowest address, and its last
// rows' tables end at the storage's end): the planes' bits on the same logical values, for rows of a table and
// wider ones.
void expect_narrow_on_reversed_view(int64_t W) {
  const std::vector<int64_t> sizes{2, 3, 7, W};
  const int64_t C = 3, H = 7;
  const AvgPool2dParams p = pool_params(3, 2, 1, true);
  const std::vector<float> logical = random_values<float>(sizes, 43);
  std::vector<float> storage(logical.size());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          storage[static_cast<size_t>(((n * C + (C - 1 - c)) * H + (H - 1 - h)) * W + w)] =
              logical[static_cast<size_t>(((n * C + c) * H + h) * W + w)];
  const TensorView reversed(storage.data() + ((C - 1) * H + (H - 1)) * W, DType::kFloat32, sizes,
                            {C * H * W, -H * W, -W, 1});
  std::vector<float> contiguous_storage = logical;
  const TensorView contiguous(contiguous_storage.data(), DType::kFloat32, sizes);
  const std::vector<int64_t> out_sizes = avg_pool2d_output_shape(sizes, p);
  OwnedTensor<float> expected(out_sizes);
  {
    const detail::StrategyForTesting planes(AvgPool2dStrategy::kPlanes);
    avg_pool2d(contiguous, expected.view, p);
  }
  const detail::StrategyForTesting narrow(AvgPool2dStrategy::kNarrow);
  testing::for_each_simd_level([&] {
    OwnedTensor<float> y(out_sizes, 7.0f);
    avg_pool2d(reversed, y.view, p);
    ASSERT_EQ(std::memcmp(y.storage.data(), expected.storage.data(), y.storage.size() * sizeof(float)), 0);
  });
}

TEST(AvgPool2dStrategies, NarrowOnAReversedViewGivesThePlanesBits) {
  for (int64_t W : {20, 100}) {
    SCOPED_TRACE(::testing::Message() << "width " << W);
    expect_narrow_on_reversed_view(W);
  }
}

TEST(AvgPool2dStrategies, ThreadCountDoesNotChangeBits) {
  const std::vector<int64_t> sizes{4, 37, 9, 9};
  const AvgPool2dParams p = pool_params(3, 2, 1, true);
  for (AvgPool2dStrategy strategy :
       {AvgPool2dStrategy::kPlaneTiles, AvgPool2dStrategy::kChannelsLast, AvgPool2dStrategy::kNarrow,
        AvgPool2dStrategy::kAuto}) {
    for (Strides layout : {Strides::kContiguous, Strides::kChannelsLast}) {
      testing::expect_same_bits_for_thread_counts({1, 2, 3}, [&] {
        auto [y, gi] = pool_with<float>(strategy, sizes, p, layout, Strides::kContiguous);
        y.insert(y.end(), gi.begin(), gi.end());
        return y;
      });
    }
  }
}

TEST(AvgPool2d, ValidationErrors) {
  OwnedTensor<float> x({1, 2, 6, 6}), y({1, 2, 3, 3});
  auto expect_param_error = [&](AvgPool2dParams p, const std::string& text) {
    expect_error([&] { avg_pool2d_output_shape(x.view.sizes(), p); }, ErrorKind::kInvalidArgument, text);
  };
  AvgPool2dParams base;
  base.kernel_size = {2};
  AvgPool2dParams p = base;
  p.kernel_size = {};
  expect_param_error(p, "avg_pool2d(): expected kernel_size to have 1 or 2 entries, but got 0");
  p.kernel_size = {2, 2, 2};
  expect_param_error(p, "kernel_size to have 1 or 2 entries, but got 3");
  p.kernel_size = {0, 2};
  expect_param_error(p, "expected kernel_size entries > 0");
  p = base;
  p.stride = {1, 1, 1};
  expect_param_error(p, "expected stride to have 0, 1 or 2 entries, but got 3");
  p.stride = {0};
  expect_param_error(p, "expected stride entries > 0");
  p = base;
  p.padding = {};
  expect_param_error(p, "expected padding to have 1 or 2 entries, but got 0");
  p.padding = {-1};
  expect_param_error(p, "expected padding entries >= 0");
  p.padding = {2};
  expect_param_error(p, "expected padding to be at most half the kernel size");
  p = base;
  p.kernel_size = {7};
  expect_param_error(p, "expected an output of at least 1x1");

  expect_error(
      [&] {
        avg_pool2d_output_shape({6, 6}, base);
      },
      ErrorKind::kInvalidArgument, "expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, but got 2-D");
  OwnedTensor<float> wrong({1, 2, 2, 3});
  expect_error([&] { avg_pool2d(x.view, wrong.view, base); }, ErrorKind::kInvalidArgument,
               "avg_pool2d(): expected output of shape (1, 2, 3, 3), but got (1, 2, 2, 3)");
  OwnedTensor<double> yd({1, 2, 3, 3});
  expect_error([&] { avg_pool2d(x.view, yd.view, base); }, ErrorKind::kType,
               "expected output to have the dtype of input (float32), but got float64");
  OwnedTensor<int32_t> xi({1, 2, 6, 6}), yi({1, 2, 3, 3});
  expect_error([&] { avg_pool2d(xi.view, yi.view, base); }, ErrorKind::kType,
               "avg_pool2d(): expected input to be float16, bfloat16, float32 or float64, but got int32");

  OwnedTensor<float> gi({1, 2, 6, 6});
  expect_error([&] { avg_pool2d_backward(wrong.view, x.view, gi.view, base); }, ErrorKind::kInvalidArgument,
               "avg_pool2d_backward(): expected grad_output of shape (1, 2, 3, 3), but got (1, 2, 2, 3)");
  OwnedTensor<float> gi3({2, 6, 6});
  expect_error([&] { avg_pool2d_backward(y.view, x.view, gi3.view, base); }, ErrorKind::kInvalidArgument,
               "expected grad_output and grad_input to be both 3-D or both 4-D, but got 4-D and 3-D");
  OwnedTensor<float> gi_wrong({1, 2, 6, 5});
  expect_error([&] { avg_pool2d_backward(y.view, x.view, gi_wrong.view, base); }, ErrorKind::kInvalidArgument,
               "expected grad_input of shape (1, 2, 6, 6), but got (1, 2, 6, 5)");
  OwnedTensor<double> gid({1, 2, 6, 6});
  expect_error([&] { avg_pool2d_backward(y.view, x.view, gid.view, base); }, ErrorKind::kType,
               "expected grad_input to have the dtype of grad_output (float32), but got float64");
}

}  // namespace
}  // namespace spatialgrad

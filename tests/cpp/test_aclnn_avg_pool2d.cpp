// aclnnAvgPool2dBackward through the C API: results against a naive docs/operators.md (Average pooling) loop, every
// dtype, 3-D (NCL) input, strided/offset outputs, empty tensors, and every validation rule's status and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn_core_util.h"
#include "aclnn_test_util.h"
#include "aclnnop/aclnn_avgpool2d_backward.h"
#include "spatialgrad/avg_pool2d.h"
#include "test_util.h"

namespace aclnn_testing {
namespace {

struct Pool {
  std::vector<int64_t> kernel{3, 3}, stride{2, 2}, padding{1, 1};
  bool ceil_mode = false, count_include_pad = true;
  int64_t divisor_override = 0;
  int8_t cube_math_type = 0;
};

// The reference of test_util.h for the pooling of `p` (an empty stride is the kernel size).
spatialgrad::testing::NaivePool naive_of(const Pool& p) {
  const int64_t kh = p.kernel[0], kw = p.kernel.size() == 1 ? p.kernel[0] : p.kernel[1];
  const int64_t sh = p.stride.empty() ? kh : p.stride[0];
  const int64_t sw = p.stride.empty() ? kw : (p.stride.size() == 1 ? p.stride[0] : p.stride[1]);
  const int64_t ph = p.padding[0], pw = p.padding.size() == 1 ? p.padding[0] : p.padding[1];
  return {kh, kw, sh, sw, ph, pw, p.ceil_mode, p.count_include_pad, p.divisor_override};
}

aclnnStatus run(const aclTensor* go, const aclTensor* self, const Pool& p, aclTensor* gi, bool null_stride = false) {
  IntArray kernel(p.kernel), stride(p.stride), padding(p.padding);
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  aclnnStatus status = aclnnAvgPool2dBackwardGetWorkspaceSize(
      go, self, kernel.array, null_stride ? nullptr : stride.array, padding.array, p.ceil_mode, p.count_include_pad,
      p.divisor_override, p.cube_math_type, gi, &workspace, &executor);
  if (status != ACLNN_SUCCESS) return status;
  EXPECT_EQ(workspace, 0u);
  return aclnnAvgPool2dBackward(nullptr, workspace, executor, nullptr);
}

template <class T>
void check_against_naive(const std::vector<int64_t>& in_shape, const Pool& p, aclDataType dtype, double tol,
                         bool null_stride = false) {
  const int64_t H = in_shape[in_shape.size() - 2], W = in_shape.back();
  const spatialgrad::testing::NaivePool naive = naive_of(p);
  const int64_t OH = naive.out_h(H), OW = naive.out_w(W);
  std::vector<int64_t> out_shape(in_shape.begin(), in_shape.end() - 2);
  out_shape.push_back(OH);
  out_shape.push_back(OW);
  const int64_t planes = numel(in_shape) / (H * W);
  const std::vector<T> g = random_values<T>(numel(out_shape), 7);
  HostTensor<T> go(out_shape, dtype, g), self(in_shape, dtype),
      gi(in_shape, dtype, std::vector<T>(numel(in_shape), T(9)));
  ASSERT_EQ(run(go.tensor, self.tensor, p, gi.tensor, null_stride), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  const std::vector<double> expected = naive.backward(std::vector<double>(g.begin(), g.end()), planes, H, W);
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(static_cast<double>(gi.storage[i]), expected[i], tol) << "at " << i;
  }
}

TEST(AclnnAvgPool2dBackward, MatchesNaiveLoopAcrossParameters) {
  for (bool ceil : {false, true}) {
    for (bool cip : {false, true}) {
      for (int64_t div : {0, 3, -2}) {
        for (std::vector<int64_t> k : {std::vector<int64_t>{3}, std::vector<int64_t>{2, 3}}) {
          Pool p;
          p.kernel = k;
          p.stride = {2, 1};
          p.padding = {1};
          p.ceil_mode = ceil;
          p.count_include_pad = cip;
          p.divisor_override = div;
          SCOPED_TRACE(testing::Message() << "ceil " << ceil << " cip " << cip << " div " << div << " k " << k[0]);
          check_against_naive<float>({2, 3, 7, 6}, p, ACL_FLOAT, 1e-5);
          check_against_naive<double>({2, 3, 7, 6}, p, ACL_DOUBLE, 1e-12);
        }
      }
    }
  }
}

TEST(AclnnAvgPool2dBackward, StrideNullOrEmptyMeansKernelSize) {
  Pool p;
  p.kernel = {2};
  p.stride = {};
  p.padding = {0};
  check_against_naive<float>({1, 2, 6, 4}, p, ACL_FLOAT, 1e-6);
  check_against_naive<float>({1, 2, 6, 4}, p, ACL_FLOAT, 1e-6, /*null_stride=*/true);
  p.stride = {1};  // one entry: both dims
  check_against_naive<float>({1, 2, 6, 4}, p, ACL_FLOAT, 1e-6);
}

TEST(AclnnAvgPool2dBackward, ThreeDimensionalNclInput) {
  Pool p;
  check_against_naive<float>({3, 5, 8}, p, ACL_FLOAT, 1e-6);
  check_against_naive<double>({3, 5, 8}, p, ACL_DOUBLE, 1e-12);
  // Also with the NCL / NCHW format tags.
  HostTensor<float> go({3, 3, 4}, ACL_FLOAT, std::vector<float>(36, 1.0f), ACL_FORMAT_NCL);
  HostTensor<float> self({3, 5, 8}, ACL_FLOAT, {}, ACL_FORMAT_NCL), gi({3, 5, 8}, ACL_FLOAT, {}, ACL_FORMAT_NCL);
  EXPECT_ACL_STATUS(run(go.tensor, self.tensor, p, gi.tensor), ACLNN_SUCCESS, "");
  HostTensor<float> go4({1, 3, 3, 4}, ACL_FLOAT, std::vector<float>(36, 1.0f), ACL_FORMAT_NCHW);
  HostTensor<float> self4({1, 3, 5, 8}, ACL_FLOAT, {}, ACL_FORMAT_NCHW),
      gi4({1, 3, 5, 8}, ACL_FLOAT, {}, ACL_FORMAT_NCHW);
  EXPECT_ACL_STATUS(run(go4.tensor, self4.tensor, p, gi4.tensor), ACLNN_SUCCESS, "");
  EXPECT_EQ(gi.storage, gi4.storage);
}

TEST(AclnnAvgPool2dBackward, CubeMathTypeDoesNotChangeResults) {
  Pool p;
  std::vector<float> first;
  for (int8_t cube = 0; cube <= 3; ++cube) {
    p.cube_math_type = cube;
    HostTensor<float> go({1, 2, 3, 3}, ACL_FLOAT, random_values<float>(18, 3)), self({1, 2, 5, 5}, ACL_FLOAT),
        gi({1, 2, 5, 5}, ACL_FLOAT);
    ASSERT_EQ(run(go.tensor, self.tensor, p, gi.tensor), ACLNN_SUCCESS);
    if (cube == 0) first = gi.storage;
    EXPECT_EQ(gi.storage, first);
  }
}

// gradInput as a strided view with an offset into a larger buffer: only the view's elements change.
TEST(AclnnAvgPool2dBackward, WritesNonContiguousOutputThroughStrides) {
  Pool p;
  const std::vector<int64_t> shape{2, 3, 5, 4};
  HostTensor<double> go({2, 3, 3, 2}, ACL_DOUBLE, random_values<double>(36, 5)), self(shape, ACL_DOUBLE);
  HostTensor<double> dense(shape, ACL_DOUBLE);
  ASSERT_EQ(run(go.tensor, self.tensor, p, dense.tensor), ACLNN_SUCCESS);

  // Channels-last-like permuted strides, every other element, offset 5.
  const std::vector<int64_t> strides{2 * 60, 2 * 1, 2 * 12, 2 * 3};
  const double sentinel = -123.0;
  HostTensor<double> strided(shape, strides, 5, 5 + 2 * 120, ACL_DOUBLE, sentinel);
  ASSERT_EQ(run(go.tensor, self.tensor, p, strided.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  std::vector<bool> touched(strided.storage.size(), false);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 4; ++w) {
          EXPECT_EQ(strided.at({n, c, h, w}), dense.at({n, c, h, w}));
          touched[static_cast<size_t>(5 + n * strides[0] + c * strides[1] + h * strides[2] + w * strides[3])] = true;
        }
  for (size_t i = 0; i < touched.size(); ++i) {
    if (!touched[i]) ASSERT_EQ(strided.storage[i], sentinel) << "wrote outside the view at " << i;
  }
}

// gradOutput as a transposed view (non-contiguous input), negative strides, and an offset.
TEST(AclnnAvgPool2dBackward, ReadsNonContiguousGradOutput) {
  Pool p;
  const std::vector<float> g = random_values<float>(2 * 3 * 2, 11);  // logical (1, 2, 3, 2)
  HostTensor<float> dense_go({1, 2, 3, 2}, ACL_FLOAT, g), self({1, 2, 5, 4}, ACL_FLOAT),
      expected({1, 2, 5, 4}, ACL_FLOAT);
  ASSERT_EQ(run(dense_go.tensor, self.tensor, p, expected.tensor), ACLNN_SUCCESS);

  // Stored as (1, 2, 2, 3) memory, viewed with H and W swapped.
  HostTensor<float> transposed({1, 2, 3, 2}, {12, 6, 1, 3}, 0, 12, ACL_FLOAT, 0.0f);
  // Stored reversed along W (negative stride), starting at offset 1 + last element.
  HostTensor<float> reversed({1, 2, 3, 2}, {6, 3, 1, -1}, 0, 0, ACL_FLOAT, 0.0f);
  reversed.storage.assign(13, 0.0f);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 2; ++w) {
        const float v = g[static_cast<size_t>((c * 3 + h) * 2 + w)];
        transposed.at({0, c, h, w}) = v;
        reversed.storage[static_cast<size_t>(1 + c * 6 + h * 2 + (1 - w))] = v;
      }
  aclDestroyTensor(reversed.tensor);
  const std::vector<int64_t> rev_strides{12, 6, 2, -1}, storage{13};
  reversed.tensor = aclCreateTensor(reversed.shape.data(), 4, ACL_FLOAT, rev_strides.data(), 2, ACL_FORMAT_ND,
                                    storage.data(), 1, reversed.storage.data());
  for (aclTensor* go : {transposed.tensor, reversed.tensor}) {
    HostTensor<float> gi({1, 2, 5, 4}, ACL_FLOAT);
    ASSERT_EQ(run(go, self.tensor, p, gi.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(gi.storage, expected.storage);
  }
}

TEST(AclnnAvgPool2dBackward, EmptyTensorsSucceed) {
  Pool p;
  // N = 0: nothing to write; data may be null.
  HostTensor<float> go({0, 2, 3, 2}, ACL_FLOAT), self({0, 2, 5, 4}, ACL_FLOAT), gi({0, 2, 5, 4}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, self.tensor, p, gi.tensor), ACLNN_SUCCESS, "");
  // C = 0 in 3-D.
  HostTensor<double> go3({0, 3, 2}, ACL_DOUBLE), self3({0, 5, 4}, ACL_DOUBLE), gi3({0, 5, 4}, ACL_DOUBLE);
  EXPECT_ACL_STATUS(run(go3.tensor, self3.tensor, p, gi3.tensor), ACLNN_SUCCESS, "");
}

// float16 / bfloat16: accepted, and bit-identical to the core.
TEST(AclnnAvgPool2dBackward, HalfDtypesMatchTheCore) {
  using namespace aclnn_testing;
  Pool p;
  p.count_include_pad = false;
  for (const HalfCase& half : kHalfCases) {
    SCOPED_TRACE(half.name);
    HostTensor<uint16_t> go({1, 2, 3, 2}, half.acl, half_bits(exact_half_values(12, 61), half.acl)),
        self({1, 2, 5, 4}, half.acl), gi({1, 2, 5, 4}, half.acl, std::vector<uint16_t>(40, 0x7777));
    EXPECT_ACL_STATUS(run(go.tensor, self.tensor, p, gi.tensor), ACLNN_SUCCESS, "");
    HostTensor<uint16_t> expected({1, 2, 5, 4}, half.acl, std::vector<uint16_t>(40, 0x1111));
    spatialgrad::AvgPool2dParams params;
    params.kernel_size = p.kernel;
    params.stride = p.stride;
    params.padding = p.padding;
    params.count_include_pad = false;
    spatialgrad::avg_pool2d_backward(core_view(go, half.core), core_view(self, half.core),
                                     core_view(expected, half.core), params);
    EXPECT_EQ(gi.storage, expected.storage);
    EXPECT_GT(count_nonzero(gi.storage), 0u);
  }
}

// ---- validation: one test per validation rule of docs/operators.md, checking the status and the message ----

struct Args {
  HostTensor<float> go{{1, 2, 3, 2}, ACL_FLOAT};
  HostTensor<float> self{{1, 2, 5, 4}, ACL_FLOAT};
  HostTensor<float> gi{{1, 2, 5, 4}, ACL_FLOAT};
  Pool p;
};

TEST(AclnnAvgPool2dBackwardErrors, NullPointers) {
  Args a;
  IntArray k({3}), s({2}), pad({1});
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  auto call = [&](const aclTensor* go, const aclTensor* self, const aclIntArray* kernel, const aclIntArray* padding,
                  aclTensor* gi) {
    return aclnnAvgPool2dBackwardGetWorkspaceSize(go, self, kernel, s.array, padding, false, true, 0, 0, gi, &ws, &ex);
  };
  EXPECT_ACL_STATUS(call(nullptr, a.self.tensor, k.array, pad.array, a.gi.tensor), kNull,
                    "aclnnAvgPool2dBackwardGetWorkspaceSize(): expected gradOutput to be non-null, but got null");
  EXPECT_ACL_STATUS(call(a.go.tensor, nullptr, k.array, pad.array, a.gi.tensor), kNull, "expected self to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.self.tensor, nullptr, pad.array, a.gi.tensor), kNull,
                    "expected kernelSize to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.self.tensor, k.array, nullptr, a.gi.tensor), kNull,
                    "expected padding to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.self.tensor, k.array, pad.array, nullptr), kNull,
                    "expected gradInput to be non-null");
  // A non-empty tensor without data is a null pointer too.
  const std::vector<int64_t> shape{1, 2, 5, 4};
  aclTensor* no_data = aclCreateTensor(shape.data(), 4, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, shape.data(), 4, nullptr);
  EXPECT_ACL_STATUS(call(a.go.tensor, a.self.tensor, k.array, pad.array, no_data), kNull,
                    "expected gradInput to have a data address (it has 40 elements), but got null");
  aclDestroyTensor(no_data);
}

TEST(AclnnAvgPool2dBackwardErrors, DimsMustBeBoth3dOrBoth4d) {
  Args a;
  HostTensor<float> go3({2, 3, 2}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go3.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "expected grad_output and grad_input to be both 3-D or both 4-D, but got 3-D and 4-D");
  HostTensor<float> go5({1, 1, 2, 3, 2}, ACL_FLOAT), self5({1, 1, 2, 5, 4}, ACL_FLOAT), gi5({1, 1, 2, 5, 4}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go5.tensor, self5.tensor, a.p, gi5.tensor), kInvalid, "but got 5-D and 5-D");
}

TEST(AclnnAvgPool2dBackwardErrors, KernelSize) {
  Args a;
  for (auto k : {std::vector<int64_t>{}, std::vector<int64_t>{3, 3, 3}}) {
    a.p.kernel = k;
    EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                      "expected kernel_size to have 1 or 2 entries, but got " + std::to_string(k.size()));
  }
  a.p.kernel = {3, 0};
  a.p.padding = {0};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "expected kernel_size entries > 0, but got [3, 0]");
}

TEST(AclnnAvgPool2dBackwardErrors, Stride) {
  Args a;
  a.p.stride = {2, 2, 2};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "expected stride to have 0, 1 or 2 entries, but got 3");
  a.p.stride = {2, -1};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "expected stride entries > 0, but got [2, -1]");
}

TEST(AclnnAvgPool2dBackwardErrors, Padding) {
  Args a;
  for (auto pad : {std::vector<int64_t>{}, std::vector<int64_t>{1, 1, 1}}) {
    a.p.padding = pad;
    EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                      "expected padding to have 1 or 2 entries, but got " + std::to_string(pad.size()));
  }
  a.p.padding = {-1};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "expected padding entries >= 0, but got [-1]");
  a.p.padding = {2};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "expected padding to be at most half the kernel size, but got padding [2] for kernel_size [3, 3]");
}

TEST(AclnnAvgPool2dBackwardErrors, CubeMathType) {
  Args a;
  for (int8_t cube : {int8_t{-1}, int8_t{4}}) {
    a.p.cube_math_type = cube;
    EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                      "expected cube_math_type in {0, 1, 2, 3}, but got " + std::to_string(cube));
  }
}

TEST(AclnnAvgPool2dBackwardErrors, SelfShapeMustEqualGradInputShape) {
  Args a;
  HostTensor<float> gi({1, 2, 5, 5}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, gi.tensor), kInvalid,
                    "expected grad_input of shape (1, 2, 5, 4), but got (1, 2, 5, 5)");
}

TEST(AclnnAvgPool2dBackwardErrors, GradOutputShapeMustMatchOutputSize) {
  Args a;
  HostTensor<float> go({1, 2, 3, 3}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "expected grad_output of shape (1, 2, 3, 2), but got (1, 2, 3, 3)");
  // Input smaller than the kernel: no valid output size at all.
  a.p.kernel = {7};
  a.p.padding = {0};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid,
                    "the input is smaller than the kernel");
}

TEST(AclnnAvgPool2dBackwardErrors, Dtypes) {
  Args a;
  // Mixed supported dtypes.
  HostTensor<double> gi64({1, 2, 5, 4}, ACL_DOUBLE);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, gi64.tensor), kInvalid,
                    "expected grad_input to have the dtype of grad_output (float32), but got float64");
  HostTensor<int32_t> gi32({1, 2, 5, 4}, ACL_INT32);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, gi32.tensor), kInvalid,
                    "expected gradInput to have dtype " + aclnn_testing::accepted_floating() + ", but got ACL_INT32");
}

TEST(AclnnAvgPool2dBackwardErrors, Format) {
  Args a;
  HostTensor<float> gi({1, 2, 5, 4}, ACL_FLOAT, {}, ACL_FORMAT_NHWC);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, gi.tensor), kInvalid,
                    "expected gradInput to have format ACL_FORMAT_ND, ACL_FORMAT_NCHW, ACL_FORMAT_NCL, but got "
                    "ACL_FORMAT_NHWC");
}

TEST(AclnnAvgPool2dBackwardErrors, ViewMustLieInsideStorage) {
  Args a;
  // 40 elements viewed over a 39-element storage.
  HostTensor<float> gi({1, 2, 5, 4}, {40, 20, 4, 1}, 0, 39, ACL_FLOAT, 0.0f);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, gi.tensor), kInvalid,
                    "expected gradInput to lie inside its storage, but its view (shape (1, 2, 5, 4), strides (40, 20, "
                    "4, 1), offset 0) reaches elements 0..39 of a storage of shape (39,) (39 elements)");
  // A negative stride reaching before the storage start.
  HostTensor<float> go({1, 2, 3, 2}, {12, 6, 2, -1}, 0, 12, ACL_FLOAT, 0.0f);
  EXPECT_ACL_STATUS(run(go.tensor, a.self.tensor, a.p, a.gi.tensor), kInvalid, "reaches elements -1..");
}

TEST(AclnnAvgPool2dBackwardErrors, OutputElementsMustNotOverlap) {
  Args a;
  HostTensor<float> gi({1, 2, 5, 4}, {0, 0, 4, 1}, 0, 20, ACL_FLOAT, 0.0f);  // both channels on the same memory
  EXPECT_ACL_STATUS(run(a.go.tensor, a.self.tensor, a.p, gi.tensor), kInvalid,
                    "expected gradInput to have no two elements at the same address");
}

}  // namespace
}  // namespace aclnn_testing

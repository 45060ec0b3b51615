// aclnnUpsampleBilinear2dBackwardV2 through the C API: results equal the core's
// upsample_bilinear2d_backward, NCHW/NHWC from the tensor format, scales, every dtype, strided outputs,
// empty tensors, and every validation rule's status and message.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn_core_util.h"
#include "aclnn_test_util.h"
#include "aclnnop/aclnn_upsample_bilinear_2d_backward_v2.h"
#include "spatialgrad/upsample_bilinear2d.h"

namespace aclnn_testing {
namespace {

using spatialgrad::DType;
using spatialgrad::Layout;

struct Up {
  std::vector<int64_t> output_size{4, 5}, input_size{1, 2, 2, 3};
  bool align_corners = false;
  double scales_h = 0, scales_w = 0;
};

aclnnStatus run(const aclTensor* go, const Up& u, aclTensor* out) {
  IntArray output_size(u.output_size), input_size(u.input_size);
  uint64_t workspace = 1;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize(
      go, output_size.array, input_size.array, u.align_corners, u.scales_h, u.scales_w, out, &workspace, &executor);
  if (status != ACLNN_SUCCESS) return status;
  EXPECT_EQ(workspace, 0u);
  return aclnnUpsampleBilinear2dBackwardV2(nullptr, 0, executor, nullptr);
}

// (N, C, H, W) sizes in the order of `format`.
std::vector<int64_t> in_order(aclFormat format, int64_t n, int64_t c, int64_t h, int64_t w) {
  return format == ACL_FORMAT_NHWC ? std::vector<int64_t>{n, h, w, c} : std::vector<int64_t>{n, c, h, w};
}

template <class T>
void check_against_core(aclDataType acl, DType dtype, aclFormat format, const Up& base, int64_t in_h, int64_t in_w) {
  Up u = base;
  u.input_size = in_order(format, 2, 3, in_h, in_w);
  const std::vector<int64_t> go_shape = in_order(format, 2, 3, u.output_size[0], u.output_size[1]);
  HostTensor<T> go(go_shape, acl, random_values<T>(numel(go_shape), 4), format);
  HostTensor<T> out(u.input_size, acl, std::vector<T>(static_cast<size_t>(numel(u.input_size)), T(5)), format);
  ASSERT_EQ(run(go.tensor, u, out.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  HostTensor<T> expected(u.input_size, acl, std::vector<T>(static_cast<size_t>(numel(u.input_size)), T(-5)));
  spatialgrad::upsample_bilinear2d_backward(core_view(go, dtype), u.input_size, core_view(expected, dtype),
                                            {u.output_size, u.align_corners, u.scales_h, u.scales_w,
                                             format == ACL_FORMAT_NHWC ? Layout::kNHWC : Layout::kNCHW});
  EXPECT_EQ(out.storage, expected.storage);
}

TEST(AclnnUpsampleBilinear2dBackwardV2, EqualsCoreForEveryLayoutAndParameter) {
  for (aclFormat format : {ACL_FORMAT_NCHW, ACL_FORMAT_ND, ACL_FORMAT_NHWC}) {
    for (bool align : {false, true}) {
      for (double scale : {0.0, 1.7}) {
        for (std::vector<int64_t> in_hw : {std::vector<int64_t>{3, 2}, std::vector<int64_t>{7, 9},
                                           std::vector<int64_t>{4, 5}}) {
          Up u;
          u.output_size = {4, 5};
          u.align_corners = align;
          u.scales_h = scale;
          u.scales_w = scale / 2;
          SCOPED_TRACE(testing::Message() << "format " << format << " align " << align << " scale " << scale
                                          << " in " << in_hw[0] << "x" << in_hw[1]);
          check_against_core<float>(ACL_FLOAT, DType::kFloat32, format, u, in_hw[0], in_hw[1]);
          check_against_core<double>(ACL_DOUBLE, DType::kFloat64, format, u, in_hw[0], in_hw[1]);
        }
      }
    }
  }
}

// The format decides the layout: the same values as NHWC tensors give the NCHW result transposed.
TEST(AclnnUpsampleBilinear2dBackwardV2, NhwcFormatIsChannelsLast) {
  Up u;
  u.input_size = {2, 3, 3, 4};
  u.output_size = {5, 7};
  const std::vector<double> g = random_values<double>(2 * 3 * 5 * 7, 6);
  HostTensor<double> go_nchw({2, 3, 5, 7}, ACL_DOUBLE, g, ACL_FORMAT_NCHW), out_nchw({2, 3, 3, 4}, ACL_DOUBLE, {},
                                                                                     ACL_FORMAT_NCHW);
  ASSERT_EQ(run(go_nchw.tensor, u, out_nchw.tensor), ACLNN_SUCCESS);
  HostTensor<double> go_nhwc({2, 5, 7, 3}, ACL_DOUBLE, {}, ACL_FORMAT_NHWC), out_nhwc({2, 3, 4, 3}, ACL_DOUBLE, {},
                                                                                     ACL_FORMAT_NHWC);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 7; ++w) go_nhwc.at({n, h, w, c}) = go_nchw.at({n, c, h, w});
  u.input_size = {2, 3, 4, 3};  // (N, H, W, C)
  ASSERT_EQ(run(go_nhwc.tensor, u, out_nhwc.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t w = 0; w < 4; ++w) EXPECT_DOUBLE_EQ(out_nhwc.at({n, h, w, c}), out_nchw.at({n, c, h, w}));
}

// A 1x1 -> 2x2 upsampling passes the whole gradient to the one pixel; align_corners = true with
// output 3 over input 2 halves the middle row/column.
TEST(AclnnUpsampleBilinear2dBackwardV2, HandValues) {
  Up u;
  u.input_size = {1, 1, 1, 1};
  u.output_size = {2, 2};
  HostTensor<float> go({1, 1, 2, 2}, ACL_FLOAT, {1, 2, 3, 4}), out({1, 1, 1, 1}, ACL_FLOAT);
  ASSERT_EQ(run(go.tensor, u, out.tensor), ACLNN_SUCCESS);
  EXPECT_FLOAT_EQ(out.storage[0], 10.0f);
  u.input_size = {1, 1, 2, 1};
  u.output_size = {3, 1};
  u.align_corners = true;
  HostTensor<float> go3({1, 1, 3, 1}, ACL_FLOAT, {1, 2, 4}), out2({1, 1, 2, 1}, ACL_FLOAT);
  ASSERT_EQ(run(go3.tensor, u, out2.tensor), ACLNN_SUCCESS);
  EXPECT_FLOAT_EQ(out2.storage[0], 2.0f);
  EXPECT_FLOAT_EQ(out2.storage[1], 5.0f);
}

// out as a strided view with an offset (NCHW and NHWC); nothing outside the view changes.
TEST(AclnnUpsampleBilinear2dBackwardV2, WritesNonContiguousOutputThroughStrides) {
  for (aclFormat format : {ACL_FORMAT_NCHW, ACL_FORMAT_NHWC}) {
    SCOPED_TRACE(format);
    Up u;
    u.input_size = in_order(format, 2, 3, 4, 5);
    u.output_size = {7, 9};
    const std::vector<int64_t> go_shape = in_order(format, 2, 3, 7, 9);
    HostTensor<float> go(go_shape, ACL_FLOAT, random_values<float>(numel(go_shape), 7), format),
        dense(u.input_size, ACL_FLOAT, {}, format);
    ASSERT_EQ(run(go.tensor, u, dense.tensor), ACLNN_SUCCESS);
    // Reversed dimension order, every third element, offset 2.
    const std::vector<int64_t> s = u.input_size;
    const std::vector<int64_t> strides{3, 3 * s[0], 3 * s[0] * s[1], 3 * s[0] * s[1] * s[2]};
    const float sentinel = -9.0f;
    HostTensor<float> strided(s, strides, 2, 2 + 3 * 120, ACL_FLOAT, sentinel, format);
    ASSERT_EQ(run(go.tensor, u, strided.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    std::vector<bool> touched(strided.storage.size(), false);
    for (int64_t a = 0; a < s[0]; ++a)
      for (int64_t b = 0; b < s[1]; ++b)
        for (int64_t c = 0; c < s[2]; ++c)
          for (int64_t d = 0; d < s[3]; ++d) {
            EXPECT_EQ(strided.at({a, b, c, d}), dense.at({a, b, c, d}));
            touched[static_cast<size_t>(2 + a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3])] = true;
          }
    for (size_t i = 0; i < touched.size(); ++i) {
      if (!touched[i]) ASSERT_EQ(strided.storage[i], sentinel) << "wrote outside the view at " << i;
    }
  }
}

// gradOut read through negative strides (flipped along W) and an offset.
TEST(AclnnUpsampleBilinear2dBackwardV2, ReadsNonContiguousGradOut) {
  Up u;
  const std::vector<float> g = random_values<float>(40, 8);
  HostTensor<float> go({1, 2, 4, 5}, ACL_FLOAT, g), expected({1, 2, 2, 3}, ACL_FLOAT);
  ASSERT_EQ(run(go.tensor, u, expected.tensor), ACLNN_SUCCESS);
  HostTensor<float> flipped({1, 2, 4, 5}, {40, 20, 5, -1}, 4, 40, ACL_FLOAT, 0.0f);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t w = 0; w < 5; ++w) flipped.at({0, c, h, w}) = go.at({0, c, h, w});
  HostTensor<float> out({1, 2, 2, 3}, ACL_FLOAT);
  ASSERT_EQ(run(flipped.tensor, u, out.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(out.storage, expected.storage);
}

TEST(AclnnUpsampleBilinear2dBackwardV2, EmptyTensors) {
  Up u;
  for (std::vector<int64_t> in : {std::vector<int64_t>{0, 2, 2, 3}, std::vector<int64_t>{2, 0, 2, 3}}) {
    u.input_size = in;
    HostTensor<float> go({in[0], in[1], 4, 5}, ACL_FLOAT), out(in, ACL_FLOAT);
    EXPECT_ACL_STATUS(run(go.tensor, u, out.tensor), ACLNN_SUCCESS, "");
  }
}

// float16 / bfloat16: accepted, and bit-identical to the core.
TEST(AclnnUpsampleBilinear2dBackwardV2, HalfDtypesMatchTheCore) {
  using namespace aclnn_testing;
  Up u;
  u.input_size = {1, 3, 3, 4};
  u.output_size = {5, 7};
  for (aclFormat format : {ACL_FORMAT_NCHW, ACL_FORMAT_NHWC}) {
    for (const HalfCase& half : kHalfCases) {
      SCOPED_TRACE(testing::Message() << half.name << " format " << format);
      u.input_size = in_order(format, 1, 3, 3, 4);
      const std::vector<int64_t> go_shape = in_order(format, 1, 3, 5, 7);
      HostTensor<uint16_t> go(go_shape, half.acl, half_bits(exact_half_values(105, 41), half.acl), format);
      HostTensor<uint16_t> out(u.input_size, half.acl, std::vector<uint16_t>(36, 0x7777), format);
      EXPECT_ACL_STATUS(run(go.tensor, u, out.tensor), ACLNN_SUCCESS, "");
      HostTensor<uint16_t> expected(u.input_size, half.acl, std::vector<uint16_t>(36, 0x1111));
      spatialgrad::upsample_bilinear2d_backward(
          core_view(go, half.core), u.input_size, core_view(expected, half.core),
          {u.output_size, false, 0, 0, format == ACL_FORMAT_NHWC ? Layout::kNHWC : Layout::kNCHW});
      EXPECT_EQ(out.storage, expected.storage);
      EXPECT_GT(count_nonzero(out.storage), 0u);
    }
  }
}

// ---- validation: one test per validation rule of docs/operators.md, checking the status and the message ----

struct Args {
  HostTensor<float> go{{1, 2, 4, 5}, ACL_FLOAT};
  HostTensor<float> out{{1, 2, 2, 3}, ACL_FLOAT};
  Up u;
  aclnnStatus call() { return run(go.tensor, u, out.tensor); }
};

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, NullPointers) {
  Args a;
  IntArray output_size(a.u.output_size), input_size(a.u.input_size);
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  auto call = [&](const aclTensor* go, const aclIntArray* os, const aclIntArray* is, aclTensor* out) {
    return aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize(go, os, is, false, 0, 0, out, &ws, &ex);
  };
  EXPECT_ACL_STATUS(call(nullptr, output_size.array, input_size.array, a.out.tensor), kNull,
                    "aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize(): expected gradOut to be non-null, but got null");
  EXPECT_ACL_STATUS(call(a.go.tensor, nullptr, input_size.array, a.out.tensor), kNull,
                    "expected outputSize to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, output_size.array, nullptr, a.out.tensor), kNull,
                    "expected inputSize to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, output_size.array, input_size.array, nullptr), kNull,
                    "expected out to be non-null");
}

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, GradOutIs4d) {
  Args a;
  HostTensor<float> go({2, 4, 5}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, a.u, a.out.tensor), kInvalid,
                    "expected grad_output to be 4-D, but got 3-D tensor of shape (2, 4, 5)");
}

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, InputSizeHas4Entries) {
  Args a;
  a.u.input_size = {2, 2, 3};
  EXPECT_ACL_STATUS(a.call(), kInvalid, "expected input_size to have 4 entries (N, C, H, W), but got 3 ([2, 2, 3])");
}

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, OutputSizeHas2Entries) {
  Args a;
  a.u.output_size = {4};
  EXPECT_ACL_STATUS(a.call(), kInvalid, "expected output_size to have 2 entries (H, W), but got 1 ([4])");
}

// Every size >= 1 (N and C may be 0: an empty result, docs/operators.md (Common rules)).
TEST(AclnnUpsampleBilinear2dBackwardV2Errors, SizesPositive) {
  Args a;
  a.u.output_size = {0, 5};
  EXPECT_ACL_STATUS(a.call(), kInvalid, "expected output_size entries >= 1, but got [0, 5]");
  a.u.output_size = {4, 5};
  a.u.input_size = {1, 2, 0, 3};
  HostTensor<float> out({1, 2, 0, 3}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.u, out.tensor), kInvalid,
                    "expected input_size (N, C, H, W) with N, C >= 0 and H, W >= 1, but got [1, 2, 0, 3]");
  a.u.input_size = {1, -2, 2, 3};
  EXPECT_ACL_STATUS(a.call(), kInvalid, "with N, C >= 0 and H, W >= 1, but got [1, -2, 2, 3]");
}

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, GradOutShapeIsNCOutputSize) {
  Args a;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 2, 4, 6}, std::vector<int64_t>{1, 3, 4, 5},
                                     std::vector<int64_t>{2, 2, 4, 5}}) {
    HostTensor<float> go(shape, ACL_FLOAT);
    EXPECT_ACL_STATUS(run(go.tensor, a.u, a.out.tensor), kInvalid, "expected grad_output of shape (1, 2, 4, 5), but got");
  }
  // NHWC: (N, oH, oW, C).
  HostTensor<float> go({1, 2, 4, 5}, ACL_FLOAT, {}, ACL_FORMAT_NHWC), out({1, 2, 3, 2}, ACL_FLOAT, {}, ACL_FORMAT_NHWC);
  a.u.input_size = {1, 2, 3, 2};
  EXPECT_ACL_STATUS(run(go.tensor, a.u, out.tensor), kInvalid,
                    "expected grad_output of shape (1, 4, 5, 2), but got (1, 2, 4, 5)");
}

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, OutShapeIsInputSize) {
  Args a;
  HostTensor<float> out({1, 2, 3, 3}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.u, out.tensor), kInvalid,
                    "expected grad_input of shape (1, 2, 2, 3), but got (1, 2, 3, 3)");
}

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, DtypesEqualAndSupported) {
  Args a;
  HostTensor<double> out({1, 2, 2, 3}, ACL_DOUBLE);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.u, out.tensor), kInvalid,
                    "expected grad_input to have the dtype of grad_output (float32), but got float64");
  HostTensor<int64_t> go({1, 2, 4, 5}, ACL_INT64);
  EXPECT_ACL_STATUS(run(go.tensor, a.u, a.out.tensor), kInvalid,
                    "expected gradOut to have dtype " + aclnn_testing::accepted_floating() + ", but got ACL_INT64");
}

// The doc: out keeps gradOut's format; only ND, NCHW, NHWC exist for this operator.
TEST(AclnnUpsampleBilinear2dBackwardV2Errors, Formats) {
  Args a;
  HostTensor<float> out({1, 2, 2, 3}, ACL_FLOAT, {}, ACL_FORMAT_NHWC);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.u, out.tensor), kInvalid,
                    "expected out to have the layout of gradOut (NCHW, format ACL_FORMAT_ND), but got format "
                    "ACL_FORMAT_NHWC");
  HostTensor<float> out_nc1hwc0({1, 2, 2, 3}, ACL_FLOAT, {}, ACL_FORMAT_NC1HWC0);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.u, out_nc1hwc0.tensor), kInvalid,
                    "expected out to have format ACL_FORMAT_ND, ACL_FORMAT_NCHW, ACL_FORMAT_NHWC, but got "
                    "ACL_FORMAT_NC1HWC0");
  // ND and NCHW are one layout.
  HostTensor<float> out_nchw({1, 2, 2, 3}, ACL_FLOAT, {}, ACL_FORMAT_NCHW);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.u, out_nchw.tensor), ACLNN_SUCCESS, "");
}

TEST(AclnnUpsampleBilinear2dBackwardV2Errors, OutputElementsMustNotOverlap) {
  Args a;
  HostTensor<float> out({1, 2, 2, 3}, {6, 0, 3, 1}, 0, 6, ACL_FLOAT, 0.0f);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.u, out.tensor), kInvalid,
                    "expected out to have no two elements at the same address");
}

}  // namespace
}  // namespace aclnn_testing

// SPATIALGRAD_ASCEND_CHIP: phase one returns the NPU's status (161002, with its reason) for what the named
// chip rejects, and behaves as without the variable otherwise (spatialgrad/ascend.h, docs/ascend.md).
// The library reads the variable once per process, so each call runs in a fresh process (gtest's
// "threadsafe" death tests re-execute this binary) with the variable set (or unset) before it.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn_test_util.h"
#include "aclnnop/aclnn_avgpool2d_backward.h"
#include "aclnnop/aclnn_grid_sampler2d_backward.h"
#include "aclnnop/aclnn_multi_scale_deformable_attention_grad.h"
#include "aclnnop/aclnn_roi_align_v2_backward.h"
#include "aclnnop/aclnn_upsample_bilinear_2d_backward_v2.h"

namespace aclnn_testing {
namespace {

// In a fresh process: sets SPATIALGRAD_ASCEND_CHIP (nullptr: unsets it), makes the call and exits 0 when its
// status is `code` and its recorded message contains `text` (printing both otherwise).
#define EXPECT_STATUS_ON_CHIP(chip, call, code, text)                                                \
  do {                                                                                               \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                                                   \
    EXPECT_EXIT(exit_with_verdict(chip, [&] { return (call); }, (code), (text)),                      \
                ::testing::ExitedWithCode(0), "")                                                    \
        << "chip " << ((chip) ? (chip) : "unset") << ": " #call;                                     \
  } while (0)

template <class Call>
[[noreturn]] void exit_with_verdict(const char* chip, Call call, int code, const std::string& text) {
  if (chip == nullptr) {
    unsetenv("SPATIALGRAD_ASCEND_CHIP");
  } else {
    setenv("SPATIALGRAD_ASCEND_CHIP", chip, 1);
  }
  aclGetRecentErrMsg();
  const int status = call();
  const std::string message = aclnn_testing::take_error_message();
  const bool ok = status == code && (code == kOk ? message.empty() : message.find(text) != std::string::npos);
  if (!ok) std::fprintf(stderr, "status %d, message: %s\n", status, message.c_str());
  std::_Exit(ok ? 0 : 1);
}

// Phase one, then (when it succeeds) phase two: the status of the first that fails. executor is read after
// phase one has set it (a reference: arguments are evaluated in no set order).
template <class PhaseTwo>
aclnnStatus both_phases(aclnnStatus planned, aclOpExecutor* const& executor, PhaseTwo phase_two) {
  return planned == kOk ? phase_two(nullptr, 0, executor, nullptr) : planned;
}

aclnnStatus grid_sampler(int64_t mode, std::vector<bool> mask, aclDataType dtype = ACL_FLOAT) {
  HostTensor<double> go({1, 2, 3, 3}, dtype), input({1, 2, 4, 4}, dtype), grid({1, 3, 3, 2}, dtype);
  HostTensor<double> gi({1, 2, 4, 4}, dtype), gg({1, 3, 3, 2}, dtype);
  bool raw[2] = {mask[0], mask[1]};
  aclBoolArray* m = aclCreateBoolArray(raw, 2);
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  const aclnnStatus s = both_phases(aclnnGridSampler2DBackwardGetWorkspaceSize(go.tensor, input.tensor, grid.tensor,
                                                                                mode, 0, false, m, gi.tensor,
                                                                                gg.tensor, &ws, &ex),
                                    ex, aclnnGridSampler2DBackward);
  aclDestroyBoolArray(m);
  return s;
}

aclnnStatus deformable_attention(int64_t channels) {
  const int64_t bs = 1, heads = 2, levels = 1, queries = 3, points = 2, spatial = 4 * 4;
  HostTensor<float> value({bs, spatial, heads, channels}, ACL_FLOAT), loc({bs, queries, heads, levels, points, 2},
                                                                           ACL_FLOAT, std::vector<float>(24, 0.5f));
  HostTensor<float> weight({bs, queries, heads, levels, points}, ACL_FLOAT);
  HostTensor<float> go({bs, queries, heads * channels}, ACL_FLOAT), gv({bs, spatial, heads, channels}, ACL_FLOAT);
  HostTensor<float> gl({bs, queries, heads, levels, points, 2}, ACL_FLOAT), gw({bs, queries, heads, levels, points},
                                                                               ACL_FLOAT);
  HostTensor<int64_t> shapes({levels, 2}, ACL_INT64, {4, 4}), starts({levels}, ACL_INT64, {0});
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  return both_phases(aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize(value.tensor, shapes.tensor, starts.tensor,
                                                                            loc.tensor, weight.tensor, go.tensor,
                                                                            gv.tensor, gl.tensor, gw.tensor, &ws, &ex),
                     ex, aclnnMultiScaleDeformableAttentionGrad);
}

template <class T = float>
aclnnStatus roi_align(float spatial_scale, aclDataType dtype = ACL_FLOAT) {
  HostTensor<T> go({1, 2, 2, 2}, dtype), gi({1, 2, 6, 6}, dtype);
  HostTensor<T> boxes({1, 5}, dtype, {0, 0.5, 0.5, 4, 4});
  IntArray shape({1, 2, 6, 6});
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  return both_phases(aclnnRoiAlignV2BackwardGetWorkspaceSize(go.tensor, boxes.tensor, shape.array, 2, 2, spatial_scale,
                                                             0, true, gi.tensor, &ws, &ex),
                     ex, aclnnRoiAlignV2Backward);
}

aclnnStatus upsample(aclDataType dtype, int64_t out_size = 6) {
  HostTensor<double> go({1, 1, out_size, out_size}, dtype), out({1, 1, 3, 3}, dtype);
  IntArray output_size({out_size, out_size}), input_size({1, 1, 3, 3});
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  return both_phases(aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize(go.tensor, output_size.array, input_size.array,
                                                                       false, 0.0, 0.0, out.tensor, &ws, &ex),
                     ex, aclnnUpsampleBilinear2dBackwardV2);
}

aclnnStatus avg_pool(int64_t divisor_override, aclDataType dtype = ACL_FLOAT) {
  HostTensor<double> go({1, 1, 2, 2}, dtype), self({1, 1, 4, 4}, dtype), gi({1, 1, 4, 4}, dtype);
  IntArray kernel({2, 2}), stride({2, 2}), padding({0, 0});
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  return both_phases(aclnnAvgPool2dBackwardGetWorkspaceSize(go.tensor, self.tensor, kernel.array, stride.array,
                                                            padding.array, false, true, divisor_override, 0,
                                                            gi.tensor, &ws, &ex),
                     ex, aclnnAvgPool2dBackward);
}

TEST(AclnnAscend, GridSamplerBicubicRunsWithoutTheVariableAndIsRejectedOnEveryChipWithTheBackward) {
  EXPECT_STATUS_ON_CHIP(nullptr, grid_sampler(2, {true, true}), kOk, "");
  EXPECT_STATUS_ON_CHIP("", grid_sampler(2, {true, true}), kOk, "");  // an empty value is no chip
  for (const char* chip : {"910", "910B", "910_93", "950"}) {
    EXPECT_STATUS_ON_CHIP(chip, grid_sampler(1, {true, true}), kOk, "");  // nearest: the last accepted mode
    EXPECT_STATUS_ON_CHIP(chip, grid_sampler(2, {true, true}), kInvalid,
                          "grid_sampler_2d_backward(): on Ascend " + std::string(chip) +
                              " the NPU rejects this call (161002): expected interpolationMode 0 (bilinear) or 1");
  }
  // No gradient asked for: the op_api returns success before checking anything.
  EXPECT_STATUS_ON_CHIP("910B", grid_sampler(2, {false, false}), kOk, "");
  EXPECT_STATUS_ON_CHIP("310P", grid_sampler(0, {true, true}), kInvalid, "the operator does not exist there");
}

TEST(AclnnAscend, GridSamplerBFloat16OnlyOn910B) {
  EXPECT_STATUS_ON_CHIP("910B", grid_sampler(0, {true, true}, ACL_BF16), kOk, "");
  EXPECT_STATUS_ON_CHIP("910", grid_sampler(0, {true, true}, ACL_BF16), kInvalid, "but got dtype = bfloat16");
}

TEST(AclnnAscend, DeformableAttentionChannels) {
  EXPECT_STATUS_ON_CHIP(nullptr, deformable_attention(12), kOk, "");
  EXPECT_STATUS_ON_CHIP("910B", deformable_attention(8), kOk, "");
  EXPECT_STATUS_ON_CHIP("910B", deformable_attention(12), kInvalid,
                        "expected channels % 8 == 0, but got channels = 12");
  EXPECT_STATUS_ON_CHIP("910", deformable_attention(8), kInvalid, "the operator does not exist there");
}

TEST(AclnnAscend, RoiAlignFloat32AndSpatialScale) {
  const float above_min = std::nextafter(FLT_MIN, 1.0f);
  EXPECT_STATUS_ON_CHIP(nullptr, roi_align(FLT_MIN), kOk, "");
  EXPECT_STATUS_ON_CHIP(nullptr, roi_align<double>(1.0f, ACL_DOUBLE), kOk, "");
  EXPECT_STATUS_ON_CHIP("910_93", roi_align(above_min), kOk, "");
  EXPECT_STATUS_ON_CHIP("910_93", roi_align(FLT_MIN), kInvalid,
                        "expected spatialScale > FLT_MIN, but got spatialScale = 1.1754");
  EXPECT_STATUS_ON_CHIP("910_93", roi_align<double>(1.0f, ACL_DOUBLE), kInvalid,
                        "expected dtype float32, but got dtype = float64");
}

TEST(AclnnAscend, UpsampleRejectsFloat64AndNotItsComputesDifferentlyRule) {
  EXPECT_STATUS_ON_CHIP(nullptr, upsample(ACL_DOUBLE), kOk, "");
  EXPECT_STATUS_ON_CHIP("310P", upsample(ACL_FLOAT), kOk, "");
  EXPECT_STATUS_ON_CHIP("310P", upsample(ACL_DOUBLE, 3), kOk, "");  // nothing resized: the op_api checks no dtype
  EXPECT_STATUS_ON_CHIP("310P", upsample(ACL_DOUBLE), kInvalid,
                        "expected dtype float16 or float32, but got dtype = float64");
}

TEST(AclnnAscend, AvgPoolDivisorOverrideBoundOn910Only) {
  EXPECT_STATUS_ON_CHIP(nullptr, avg_pool(256), kOk, "");
  EXPECT_STATUS_ON_CHIP("910", avg_pool(255), kOk, "");
  EXPECT_STATUS_ON_CHIP("910", avg_pool(-255), kOk, "");
  EXPECT_STATUS_ON_CHIP("910", avg_pool(256), kInvalid,
                        "expected divisorOverride in [-255, 255], but got divisorOverride = 256");
  EXPECT_STATUS_ON_CHIP("910", avg_pool(0, ACL_DOUBLE), kInvalid, "but got dtype = float64");
  EXPECT_STATUS_ON_CHIP("910B", avg_pool(256), kOk, "");
}

TEST(AclnnAscend, UnknownChipListsTheKnownOnes) {
  EXPECT_STATUS_ON_CHIP("910C", avg_pool(0), kInvalid,
                        "expected chip to be one of '910', '910B', '910_93', '310P', '950', but got '910C'");
}

}  // namespace
}  // namespace aclnn_testing

// aclnnMultiScaleDeformableAttentionGrad (docs/operators.md, Multi-scale deformable attention) over spatialgrad::ms_deform_attn_backward.
#include "aclnnop/aclnn_multi_scale_deformable_attention_grad.h"

#include <memory>
#include <vector>

#include "common.h"
#include "spatialgrad/ms_deform_attn.h"

namespace spatialgrad::aclnn {
namespace {

constexpr const char* kPlanApi = "aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize";
constexpr const char* kRunApi = "aclnnMultiScaleDeformableAttentionGrad";

struct MultiScaleDeformableAttentionGradPlan final : Plan {
  TensorView value, spatial_shapes, level_start_index, location, attn_weight, grad_output;
  TensorView grad_value, grad_location, grad_attn_weight;
  void run() override {
    ms_deform_attn_backward(value, spatial_shapes, level_start_index, location, attn_weight, grad_output, grad_value,
                            grad_location, grad_attn_weight);
  }
};

// gradOutput as the core's (bs, Q, nH*C): docs/operators.md (Multi-scale deformable attention) writes it 3-D, the CANN doc (bs, Q, nH, C), which is
// the same memory when its last two dimensions merge. Other ranks pass through for the core to reject.
TensorView as_bs_q_hc(const TensorView& t) {
  if (t.dim() != 4) return t;
  const int64_t heads = t.size(2), channels = t.size(3);
  int64_t stride = t.stride(3);
  if (channels == 1) {
    stride = t.stride(2);
  } else if (heads > 1 && channels > 1) {  // (with nH*C == 0 there is nothing to address)
    SG_CHECK(t.stride(2) == channels * t.stride(3), kPlanApi,
             "(): expected gradOutput (bs, Q, nH, C) whose nH and C dimensions merge into one of nH*C elements "
             "(stride(2) == C * stride(3)), but got shape ",
             t.shape_string(), " with strides ", format_list(t.strides()));
  }
  int64_t merged;
  SG_CHECK_KIND(!__builtin_mul_overflow(heads, channels, &merged), kOverflow, kPlanApi,
                "(): expected nH * C to fit in int64, but got gradOutput of shape ", t.shape_string());
  return TensorView(t.raw_data(), t.dtype(), {t.size(0), t.size(1), merged}, {t.stride(0), t.stride(1), stride});
}

}  // namespace
}  // namespace spatialgrad::aclnn

extern "C" aclnnStatus aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize(
    const aclTensor* value, const aclTensor* spatialShape, const aclTensor* levelStartIndex, const aclTensor* location,
    const aclTensor* attnWeight, const aclTensor* gradOutput, aclTensor* gradValue, aclTensor* gradLocation,
    aclTensor* gradAttnWeight, uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace spatialgrad::aclnn;
  return plan(kPlanApi, kRunApi, workspaceSize, executor, [&] {
    // Null pointers first (161001), in argument order.
    check_not_null(kPlanApi, "value", value, "spatialShape", spatialShape, "levelStartIndex", levelStartIndex,
                   "location", location, "attnWeight", attnWeight, "gradOutput", gradOutput, "gradValue", gradValue,
                   "gradLocation", gradLocation, "gradAttnWeight", gradAttnWeight);
    const TensorArguments tensors(kPlanApi, {ACL_FORMAT_ND});
    auto p = std::make_unique<MultiScaleDeformableAttentionGradPlan>();
    p->value = tensors.in("value", value);
    p->spatial_shapes = tensors.in("spatialShape", spatialShape, Dtypes::kIndex);
    p->level_start_index = tensors.in("levelStartIndex", levelStartIndex, Dtypes::kIndex);
    p->location = tensors.in("location", location);
    p->attn_weight = tensors.in("attnWeight", attnWeight);
    p->grad_output = as_bs_q_hc(tensors.in("gradOutput", gradOutput));
    p->grad_value = tensors.out("gradValue", gradValue);
    p->grad_location = tensors.out("gradLocation", gradLocation);
    p->grad_attn_weight = tensors.out("gradAttnWeight", gradAttnWeight);
    // Reads spatialShape and levelStartIndex (host memory here); the run checks them again.
    spatialgrad::check_ms_deform_attn_backward(p->value, p->spatial_shapes, p->level_start_index, p->location,
                                               p->attn_weight, p->grad_output, p->grad_value, p->grad_location,
                                               p->grad_attn_weight);
    check_ascend("ms_deform_attn_backward", [&] {
      return spatialgrad::ascend::Facts{{"dtype", static_cast<double>(p->value.dtype())},
                                        {"channels", p->value.size(3)},
                                        {"num_heads", p->value.size(2)},
                                        {"num_levels", p->spatial_shapes.size(0)},
                                        {"num_queries", p->location.size(1)},
                                        {"num_points", p->location.size(4)}};
    });
    check_disjoint(kPlanApi,
                   {{"gradValue", p->grad_value}, {"gradLocation", p->grad_location},
                    {"gradAttnWeight", p->grad_attn_weight}},
                   {{"value", p->value}, {"spatialShape", p->spatial_shapes}, {"levelStartIndex", p->level_start_index},
                    {"location", p->location}, {"attnWeight", p->attn_weight}, {"gradOutput", p->grad_output}});
    return p;
  });
}

extern "C" aclnnStatus aclnnMultiScaleDeformableAttentionGrad(void* workspace, uint64_t workspaceSize,
                                                              aclOpExecutor* executor, aclrtStream stream) {
  return spatialgrad::aclnn::execute(spatialgrad::aclnn::kRunApi, workspace, workspaceSize, executor, stream);
}

// aclnnAvgPool2dBackward (docs/operators.md, Average pooling) over spatialgrad::avg_pool2d_backward.
#include "aclnnop/aclnn_avgpool2d_backward.h"

#include <memory>

#include "common.h"
#include "spatialgrad/avg_pool2d.h"

namespace spatialgrad::aclnn {
namespace {

constexpr const char* kPlanApi = "aclnnAvgPool2dBackwardGetWorkspaceSize";
constexpr const char* kRunApi = "aclnnAvgPool2dBackward";

struct AvgPool2dBackwardPlan final : Plan {
  TensorView grad_output, self, grad_input;
  AvgPool2dParams params;
  void run() override { avg_pool2d_backward(grad_output, self, grad_input, params); }
};

}  // namespace
}  // namespace spatialgrad::aclnn

extern "C" aclnnStatus aclnnAvgPool2dBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* self, const aclIntArray* kernelSize, const aclIntArray* stride,
    const aclIntArray* padding, bool ceilMode, bool countIncludePad, int64_t divisorOverride, int8_t cubeMathType,
    aclTensor* gradInput, uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace spatialgrad::aclnn;
  return plan(kPlanApi, kRunApi, workspaceSize, executor, [&] {
    // Null pointers first (161001), in argument order; stride may be null (= kernelSize).
    check_not_null(kPlanApi, "gradOutput", gradOutput, "self", self, "kernelSize", kernelSize, "padding", padding,
                   "gradInput", gradInput);
    // 4-D NCHW or 3-D (C, H, W) "NCL"; ND is what the CANN samples pass.
    const TensorArguments tensors(kPlanApi, {ACL_FORMAT_ND, ACL_FORMAT_NCHW, ACL_FORMAT_NCL});
    auto p = std::make_unique<AvgPool2dBackwardPlan>();
    p->grad_output = tensors.in("gradOutput", gradOutput);
    p->self = tensors.in("self", self);
    p->grad_input = tensors.out("gradInput", gradInput);
    p->params.kernel_size = int_list(kPlanApi, "kernelSize", kernelSize);
    p->params.stride = int_list(kPlanApi, "stride", stride, /*optional=*/true);
    p->params.padding = int_list(kPlanApi, "padding", padding);
    p->params.ceil_mode = ceilMode;
    p->params.count_include_pad = countIncludePad;
    p->params.divisor_override = divisorOverride;
    // cubeMathType picks the NPU's matrix-unit precision; the CPU has one precision, so it is only validated.
    SG_CHECK(cubeMathType >= 0 && cubeMathType <= 3, kPlanApi, "(): expected cube_math_type in {0, 1, 2, 3}, but got ",
             static_cast<int>(cubeMathType));
    spatialgrad::check_avg_pool2d_backward(p->grad_output, p->self, p->grad_input, p->params);
    check_ascend("avg_pool2d_backward", [&] {
      const auto& k = p->params.kernel_size;
      const auto& pad = p->params.padding;
      spatialgrad::ascend::Facts facts = {{"dtype", static_cast<double>(p->self.dtype())},
                                          {"kernelSize[0]", k.front()}, {"kernelSize[1]", k.back()},
                                          {"padding[0]", pad.front()}, {"padding[1]", pad.back()}};
      if (divisorOverride != 0) facts.emplace_back("divisorOverride", divisorOverride);
      return facts;
    });
    // self lends only its shape: sharing its memory changes nothing.
    check_disjoint(kPlanApi, {{"gradInput", p->grad_input}}, {{"gradOutput", p->grad_output}});
    return p;
  });
}

extern "C" aclnnStatus aclnnAvgPool2dBackward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                              aclrtStream stream) {
  return spatialgrad::aclnn::execute(spatialgrad::aclnn::kRunApi, workspace, workspaceSize, executor, stream);
}

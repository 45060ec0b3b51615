// aclnnRoiAlignV2Backward (docs/operators.md, RoIAlign) over spatialgrad::roi_align_backward.
#include "aclnnop/aclnn_roi_align_v2_backward.h"

#include <memory>
#include <vector>

#include "common.h"
#include "spatialgrad/roi_align.h"

namespace spatialgrad::aclnn {
namespace {

constexpr const char* kPlanApi = "aclnnRoiAlignV2BackwardGetWorkspaceSize";
constexpr const char* kRunApi = "aclnnRoiAlignV2Backward";

struct RoiAlignV2BackwardPlan final : Plan {
  TensorView grad_output, boxes, grad_input;
  std::vector<int64_t> input_shape;
  RoiAlignParams params;
  // The batch indices live in boxes' data, so they are checked here, when the data is read.
  void run() override { roi_align_backward(grad_output, boxes, input_shape, grad_input, params); }
};

}  // namespace
}  // namespace spatialgrad::aclnn

extern "C" aclnnStatus aclnnRoiAlignV2BackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* boxes, const aclIntArray* inputShape, int64_t pooledHeight,
    int64_t pooledWidth, float spatialScale, int64_t samplingRatio, bool aligned, aclTensor* gradInput,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace spatialgrad::aclnn;
  return plan(kPlanApi, kRunApi, workspaceSize, executor, [&] {
    // Null pointers first (161001), in argument order.
    check_not_null(kPlanApi, "gradOutput", gradOutput, "boxes", boxes, "inputShape", inputShape, "gradInput",
                   gradInput);
    // The doc names NCHW for the images and ND for boxes; the CANN samples pass one format for all.
    const TensorArguments tensors(kPlanApi, {ACL_FORMAT_ND, ACL_FORMAT_NCHW});
    auto p = std::make_unique<RoiAlignV2BackwardPlan>();
    p->grad_output = tensors.in("gradOutput", gradOutput);
    p->boxes = tensors.in("boxes", boxes);
    p->grad_input = tensors.out("gradInput", gradInput);
    p->input_shape = int_list(kPlanApi, "inputShape", inputShape);
    p->params.pooled_height = pooledHeight;
    p->params.pooled_width = pooledWidth;
    p->params.spatial_scale = static_cast<double>(spatialScale);
    p->params.sampling_ratio = samplingRatio;
    p->params.aligned = aligned;
    spatialgrad::check_roi_align_backward(p->grad_output, p->boxes, p->input_shape, p->grad_input, p->params);
    check_ascend("roi_align_backward", [&] {
      return spatialgrad::ascend::Facts{{"dtype", static_cast<double>(p->grad_output.dtype())},
                                        {"samplingRatio", samplingRatio},
                                        {"spatialScale", spatialScale}};
    });
    check_disjoint(kPlanApi, {{"gradInput", p->grad_input}}, {{"gradOutput", p->grad_output}, {"boxes", p->boxes}});
    return p;
  });
}

extern "C" aclnnStatus aclnnRoiAlignV2Backward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                               aclrtStream stream) {
  return spatialgrad::aclnn::execute(spatialgrad::aclnn::kRunApi, workspace, workspaceSize, executor, stream);
}

// aclnnUpsampleBilinear2dBackwardV2 (docs/operators.md, Bilinear upsampling) over spatialgrad::upsample_bilinear2d_backward.
#include "aclnnop/aclnn_upsample_bilinear_2d_backward_v2.h"

#include <memory>
#include <vector>

#include "common.h"
#include "spatialgrad/upsample_bilinear2d.h"

namespace spatialgrad::aclnn {
namespace {

constexpr const char* kPlanApi = "aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize";
constexpr const char* kRunApi = "aclnnUpsampleBilinear2dBackwardV2";

struct UpsampleBilinear2dBackwardPlan final : Plan {
  TensorView grad_output, grad_input;
  std::vector<int64_t> input_size;
  UpsampleBilinear2dParams params;
  void run() override { upsample_bilinear2d_backward(grad_output, input_size, grad_input, params); }
};

// ND carries no layout; a 4-D ND tensor is NCHW, as in CANN.
Layout layout_of(int32_t format) { return format == ACL_FORMAT_NHWC ? Layout::kNHWC : Layout::kNCHW; }

}  // namespace
}  // namespace spatialgrad::aclnn

extern "C" aclnnStatus aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize(
    const aclTensor* gradOut, const aclIntArray* outputSize, const aclIntArray* inputSize, bool alignCorners,
    double scalesH, double scalesW, aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace spatialgrad::aclnn;
  return plan(kPlanApi, kRunApi, workspaceSize, executor, [&] {
    // Null pointers first (161001), in argument order.
    check_not_null(kPlanApi, "gradOut", gradOut, "outputSize", outputSize, "inputSize", inputSize, "out", out);
    const TensorArguments tensors(kPlanApi, {ACL_FORMAT_ND, ACL_FORMAT_NCHW, ACL_FORMAT_NHWC});
    auto p = std::make_unique<UpsampleBilinear2dBackwardPlan>();
    p->grad_output = tensors.in("gradOut", gradOut);
    p->grad_input = tensors.out("out", out);
    p->params.layout = layout_of(gradOut->format);
    // The doc: out keeps gradOut's format (ND and NCHW are the same layout).
    SG_CHECK(layout_of(out->format) == p->params.layout, kPlanApi, "(): expected out to have the layout of gradOut (",
             spatialgrad::layout_name(p->params.layout), ", format ", format_name(gradOut->format),
             "), but got format ", format_name(out->format));
    p->params.output_size = int_list(kPlanApi, "outputSize", outputSize);
    p->input_size = int_list(kPlanApi, "inputSize", inputSize);
    p->params.align_corners = alignCorners;
    p->params.scales_h = scalesH;
    p->params.scales_w = scalesW;
    spatialgrad::check_upsample_bilinear2d_backward(p->grad_output, p->input_size, p->grad_input, p->params);
    // Only rules that reject act here: the outputSize/scales rule (another kernel, not an error) does not.
    check_ascend("upsample_bilinear2d_backward", [&] {
      // The op_api checks the dtype only when gradOut's shape differs from inputSize.
      if (p->grad_output.sizes() == p->input_size) return spatialgrad::ascend::Facts{};
      return spatialgrad::ascend::Facts{{"dtype", static_cast<double>(p->grad_output.dtype())}};
    });
    check_disjoint(kPlanApi, {{"out", p->grad_input}}, {{"gradOut", p->grad_output}});
    return p;
  });
}

extern "C" aclnnStatus aclnnUpsampleBilinear2dBackwardV2(void* workspace, uint64_t workspace_size,
                                                         aclOpExecutor* executor, aclrtStream stream) {
  return spatialgrad::aclnn::execute(spatialgrad::aclnn::kRunApi, workspace, workspace_size, executor, stream);
}

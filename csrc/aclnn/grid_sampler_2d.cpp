// aclnnGridSampler2DBackward (docs/operators.md, Grid sampling) over spatialgrad::grid_sampler_2d_backward.
#include "aclnnop/aclnn_grid_sampler2d_backward.h"

#include <memory>
#include <vector>

#include "common.h"
#include "spatialgrad/grid_sampler_2d.h"

namespace spatialgrad::aclnn {
namespace {

constexpr const char* kPlanApi = "aclnnGridSampler2DBackwardGetWorkspaceSize";
constexpr const char* kRunApi = "aclnnGridSampler2DBackward";

struct GridSampler2DBackwardPlan final : Plan {
  TensorView grad_output, input, grid, grad_input, grad_grid;
  GridSampler2dParams params;
  std::vector<bool> output_mask;
  void run() override {
    // The caller allocated both outputs (on the NPU: uninitialised memory); one it did not ask for
    // reads as zeros rather than garbage.
    if (!output_mask[0]) fill_zeros(grad_input);
    if (!output_mask[1]) fill_zeros(grad_grid);
    grid_sampler_2d_backward(grad_output, input, grid, grad_input, grad_grid, params, output_mask);
  }
};

}  // namespace
}  // namespace spatialgrad::aclnn

extern "C" aclnnStatus aclnnGridSampler2DBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* input, const aclTensor* grid, int64_t interpolationMode,
    int64_t paddingMode, bool alignCorners, const aclBoolArray* outputMask, aclTensor* inputGrad, aclTensor* gridGrad,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace spatialgrad::aclnn;
  return plan(kPlanApi, kRunApi, workspaceSize, executor, [&] {
    // Null pointers first (161001), in argument order: both outputs are required whatever the mask says.
    check_not_null(kPlanApi, "gradOutput", gradOutput, "input", input, "grid", grid, "outputMask", outputMask,
                   "inputGrad", inputGrad, "gridGrad", gridGrad);
    // The doc names ND; a format tag changes nothing here, and samples often tag 4-D tensors NCHW.
    const TensorArguments tensors(kPlanApi, {ACL_FORMAT_ND, ACL_FORMAT_NCHW});
    auto p = std::make_unique<GridSampler2DBackwardPlan>();
    p->grad_output = tensors.in("gradOutput", gradOutput);
    p->input = tensors.in("input", input);
    p->grid = tensors.in("grid", grid);
    p->grad_input = tensors.out("inputGrad", inputGrad);
    p->grad_grid = tensors.out("gridGrad", gridGrad);
    p->params.interpolation_mode = static_cast<spatialgrad::GridSamplerInterpolation>(interpolationMode);
    p->params.padding_mode = static_cast<spatialgrad::GridSamplerPadding>(paddingMode);
    p->params.align_corners = alignCorners;
    p->output_mask = bool_list(kPlanApi, "outputMask", outputMask);
    // The mask as given (2 entries), then both outputs: the doc checks their shapes and dtypes
    // whatever the mask, and an unwanted one is zero-filled.
    spatialgrad::check_grid_sampler_2d_backward(p->grad_output, p->input, p->grid, p->grad_input, p->grad_grid,
                                                p->params, p->output_mask);
    spatialgrad::check_grid_sampler_2d_backward(p->grad_output, p->input, p->grid, p->grad_input, p->grad_grid,
                                                p->params, {true, true});
    check_ascend("grid_sampler_2d_backward", [&] {
      // The op_api returns success before any check when no gradient is asked for.
      if (!p->output_mask[0] && !p->output_mask[1]) return spatialgrad::ascend::Facts{};
      return spatialgrad::ascend::Facts{{"dtype", static_cast<double>(p->input.dtype())},
                                        {"interpolationMode", interpolationMode}};
    });
    check_disjoint(kPlanApi, {{"inputGrad", p->grad_input}, {"gridGrad", p->grad_grid}},
                   {{"gradOutput", p->grad_output}, {"input", p->input}, {"grid", p->grid}});
    return p;
  });
}

extern "C" aclnnStatus aclnnGridSampler2DBackward(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                                  aclrtStream stream) {
  return spatialgrad::aclnn::execute(spatialgrad::aclnn::kRunApi, workspace, workspaceSize, executor, stream);
}

/* spatialgrad: aclnnGridSampler2DBackward (CANN aclnnop/aclnn_grid_sampler2d_backward.h) on the CPU.
 *
 * Gradients of PyTorch grid_sampler_2d (docs/operators.md, Grid sampling): inputGrad (shaped like input (N, C, H, W)) and gridGrad
 * (shaped like grid (N, Ho, Wo, 2)) for gradOutput (N, C, Ho, Wo). interpolationMode 0 bilinear,
 * 1 nearest, 2 bicubic; paddingMode 0 zeros, 1 border, 2 reflection. outputMask has 2 entries
 * {inputGrad wanted, gridGrad wanted}; both output tensors are required and validated either way, and
 * an output that is not wanted is filled with zeros (never left uninitialised). Nearest interpolation
 * has a zero gridGrad. H, W >= 1. Formats ND or NCHW. dtypes: ACL_FLOAT, ACL_DOUBLE. */
#ifndef SPATIALGRAD_ACLNNOP_ACLNN_GRID_SAMPLER2D_BACKWARD_H_
#define SPATIALGRAD_ACLNNOP_ACLNN_GRID_SAMPLER2D_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnGridSampler2DBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* input, const aclTensor* grid, int64_t interpolationMode,
    int64_t paddingMode, bool alignCorners, const aclBoolArray* outputMask, aclTensor* inputGrad,
    aclTensor* gridGrad, uint64_t* workspaceSize, aclOpExecutor** executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnGridSampler2DBackward(void* workspace, uint64_t workspaceSize,
                                                           aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SPATIALGRAD_ACLNNOP_ACLNN_GRID_SAMPLER2D_BACKWARD_H_ */

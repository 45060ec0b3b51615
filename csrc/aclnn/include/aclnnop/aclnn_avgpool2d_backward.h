/* spatialgrad: aclnnAvgPool2dBackward (CANN aclnnop/aclnn_avgpool2d_backward.h) on the CPU.
 *
 * gradInput (shaped like self, NCHW or 3-D NCL) = gradient of 2-D average pooling; see docs/operators.md (Average pooling).
 * kernelSize: 1 or 2 entries > 0; stride: NULL or 0, 1 or 2 entries > 0 (empty = kernelSize);
 * padding: 1 or 2 entries, 0 <= p <= k/2; divisorOverride 0 = unset; cubeMathType in {0,1,2,3}
 * (validated, no effect on the CPU). dtypes: ACL_FLOAT, ACL_DOUBLE. */
#ifndef SPATIALGRAD_ACLNNOP_ACLNN_AVGPOOL2D_BACKWARD_H_
#define SPATIALGRAD_ACLNNOP_ACLNN_AVGPOOL2D_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnAvgPool2dBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* self, const aclIntArray* kernelSize, const aclIntArray* stride,
    const aclIntArray* padding, bool ceilMode, bool countIncludePad, int64_t divisorOverride, int8_t cubeMathType,
    aclTensor* gradInput, uint64_t* workspaceSize, aclOpExecutor** executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnAvgPool2dBackward(void* workspace, uint64_t workspaceSize,
                                                       aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SPATIALGRAD_ACLNNOP_ACLNN_AVGPOOL2D_BACKWARD_H_ */

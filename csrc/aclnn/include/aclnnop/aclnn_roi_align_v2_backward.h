/* spatialgrad: aclnnRoiAlignV2Backward (CANN aclnnop/aclnn_roi_align_v2_backward.h) on the CPU.
 *
 * gradInput (B, C, H, W) = gradient of torchvision-style RoIAlign (average of bilinear samples) with
 * respect to its input; see docs/operators.md (RoIAlign). gradOutput (K, C, pooledHeight, pooledWidth); boxes (K, 5) rows
 * (batch_index, x1, y1, x2, y2), of gradOutput's dtype; inputShape = (B, C, H, W), 4 entries >= 0;
 * spatialScale finite and > 0; samplingRatio >= 0 (0 = adaptive). Formats ND or NCHW.
 * dtypes: ACL_FLOAT, ACL_DOUBLE.
 * A batch index outside [0, B) is reported by aclnnRoiAlignV2Backward (the phase that reads boxes) with
 * ACLNN_ERR_PARAM_INVALID and a message naming the ROI; gradInput is then not written. */
#ifndef SPATIALGRAD_ACLNNOP_ACLNN_ROI_ALIGN_V2_BACKWARD_H_
#define SPATIALGRAD_ACLNNOP_ACLNN_ROI_ALIGN_V2_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnRoiAlignV2BackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* boxes, const aclIntArray* inputShape, int64_t pooledHeight,
    int64_t pooledWidth, float spatialScale, int64_t samplingRatio, bool aligned, aclTensor* gradInput,
    uint64_t* workspaceSize, aclOpExecutor** executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnRoiAlignV2Backward(void* workspace, uint64_t workspaceSize,
                                                        aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SPATIALGRAD_ACLNNOP_ACLNN_ROI_ALIGN_V2_BACKWARD_H_ */

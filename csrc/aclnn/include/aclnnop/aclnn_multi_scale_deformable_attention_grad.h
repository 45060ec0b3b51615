/* spatialgrad: aclnnMultiScaleDeformableAttentionGrad (CANN
 * aclnnop/aclnn_multi_scale_deformable_attention_grad.h) on the CPU.
 *
 * Gradients of mmcv multi-scale deformable attention (docs/operators.md, Multi-scale deformable attention) with respect to value, location and
 * attnWeight. value (bs, S, nH, C); spatialShape (L, 2) rows (H, W) >= 1 and levelStartIndex (L), both
 * ACL_INT32 or ACL_INT64, with S = sum of H*W and levelStartIndex the running sum of H*W (checked: the
 * values are read in phase one and again when the executor runs); location (bs, Q, nH, L, P, 2), [..., 0]
 * = x; attnWeight (bs, Q, nH, L, P); gradOutput (bs, Q, nH*C) or, as the CANN documentation writes it,
 * (bs, Q, nH, C). gradValue, gradLocation, gradAttnWeight are shaped like value, location, attnWeight and
 * fully written. Format ND. dtypes (floating tensors, all equal): ACL_FLOAT, ACL_DOUBLE. The NPU's limits
 * (C % 8 == 0, C <= 256, ...) do not apply on the CPU. */
#ifndef SPATIALGRAD_ACLNNOP_ACLNN_MULTI_SCALE_DEFORMABLE_ATTENTION_GRAD_H_
#define SPATIALGRAD_ACLNNOP_ACLNN_MULTI_SCALE_DEFORMABLE_ATTENTION_GRAD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize(
    const aclTensor* value, const aclTensor* spatialShape, const aclTensor* levelStartIndex,
    const aclTensor* location, const aclTensor* attnWeight, const aclTensor* gradOutput, aclTensor* gradValue,
    aclTensor* gradLocation, aclTensor* gradAttnWeight, uint64_t* workspaceSize, aclOpExecutor** executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnMultiScaleDeformableAttentionGrad(void* workspace, uint64_t workspaceSize,
                                                                       aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SPATIALGRAD_ACLNNOP_ACLNN_MULTI_SCALE_DEFORMABLE_ATTENTION_GRAD_H_ */

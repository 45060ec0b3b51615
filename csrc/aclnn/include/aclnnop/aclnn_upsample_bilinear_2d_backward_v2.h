/* spatialgrad: aclnnUpsampleBilinear2dBackwardV2 (CANN aclnnop/aclnn_upsample_bilinear_2d_backward_v2.h)
 * on the CPU.
 *
 * out = gradient of bilinear upsampling (PyTorch upsample_bilinear2d) with respect to its input; see
 * docs/operators.md (Bilinear upsampling). The layout comes from gradOut's format: ACL_FORMAT_NCHW or ACL_FORMAT_ND -> NCHW, gradOut
 * (N, C, oH, oW), inputSize = (N, C, H, W); ACL_FORMAT_NHWC -> gradOut (N, oH, oW, C), inputSize read as
 * (N, H, W, C). out has gradOut's layout and dtype and the shape inputSize. outputSize = (oH, oW), each
 * >= 1; H, W >= 1 (N, C may be 0: empty result). scalesH/scalesW > 0 set the coordinate ratio
 * (1 / scale); <= 0 means not given (ratio in / out). They never change sizes.
 * dtypes: ACL_FLOAT, ACL_DOUBLE. */
#ifndef SPATIALGRAD_ACLNNOP_ACLNN_UPSAMPLE_BILINEAR_2D_BACKWARD_V2_H_
#define SPATIALGRAD_ACLNNOP_ACLNN_UPSAMPLE_BILINEAR_2D_BACKWARD_V2_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize(
    const aclTensor* gradOut, const aclIntArray* outputSize, const aclIntArray* inputSize, bool alignCorners,
    double scalesH, double scalesW, aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnUpsampleBilinear2dBackwardV2(void* workspace, uint64_t workspace_size,
                                                                  aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SPATIALGRAD_ACLNNOP_ACLNN_UPSAMPLE_BILINEAR_2D_BACKWARD_V2_H_ */

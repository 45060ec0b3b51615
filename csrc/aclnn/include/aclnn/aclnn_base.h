/* spatialgrad: aclnn status codes and executor control (CANN aclnn/aclnn_base.h) on the CPU.
 *
 * Every operator is two-phase: aclnnXxxGetWorkspaceSize(..., &workspaceSize, &executor) validates
 * and plans (the workspace size is always 0 here), aclnnXxx(workspace, workspaceSize, executor, stream)
 * runs the plan and, unless the executor was made repeatable, frees it. */
#ifndef SPATIALGRAD_ACLNN_ACLNN_BASE_H_
#define SPATIALGRAD_ACLNN_ACLNN_BASE_H_

#include "aclnn/acl_meta.h"

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001 /* a required pointer is NULL */
#define ACLNN_ERR_PARAM_INVALID 161002 /* dtype, format, shape or attribute invalid */
#define ACLNN_ERR_RUNTIME_ERROR 361001 /* execution failed (e.g. out of memory) */
#define ACLNN_ERR_INNER 561000         /* internal error */

#ifdef __cplusplus
extern "C" {
#endif

/* Keeps the executor after aclnnXxx runs, so it can run again; free it with aclDestroyAclOpExecutor. */
ACL_FUNC_VISIBILITY aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor);

#ifdef __cplusplus
}
#endif

#endif /* SPATIALGRAD_ACLNN_ACLNN_BASE_H_ */

/* spatialgrad: the CANN "acl/acl.h" umbrella header on the CPU. Includes the runtime emulation and
 * the aclnn tensor/array objects and status codes, so "acl/acl.h" + one "aclnnop/..." header is all a
 * CANN sample includes. */
#ifndef SPATIALGRAD_ACL_ACL_H_
#define SPATIALGRAD_ACL_ACL_H_

#include "acl/acl_base.h"
#include "acl/acl_rt.h"
#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* configPath (a CANN JSON config) is accepted and ignored. A second aclInit without aclFinalize
 * returns ACL_ERROR_REPEAT_INITIALIZE, aclFinalize without aclInit ACL_ERROR_REPEAT_FINALIZE. */
ACL_FUNC_VISIBILITY aclError aclInit(const char* configPath);
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* SPATIALGRAD_ACL_ACL_H_ */

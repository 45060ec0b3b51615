// Internals of the aclnn layer shared by every operator file: the objects behind the opaque C
// handles, status codes from exceptions, the two-phase executor and aclTensor -> TensorView.
//
// An operator file (csrc/aclnn/<op>.cpp) defines a Plan subclass holding the views and parameters,
// builds it in phase one inside plan() (validating with the core's check function) and runs it in
// phase two with execute() (docs/design.md, "Adding an operator").
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "acl/acl.h"
#include "spatialgrad/ascend.h"
#include "spatialgrad/error.h"
#include "spatialgrad/tensor.h"

struct aclTensor {
  std::vector<int64_t> view_shape;
  std::vector<int64_t> strides;  // elements
  int64_t offset = 0;            // elements from data
  // The aclDataType / aclFormat as given, kept as integers: a caller may pass any int (999), and
  // loading such a value as the enum type is undefined behaviour; operators compare the codes.
  int32_t dtype = ACL_DT_UNDEFINED;
  int32_t format = ACL_FORMAT_UNDEFINED;
  std::vector<int64_t> storage_shape;
  void* data = nullptr;
};

struct aclIntArray {
  std::vector<int64_t> values;
};
struct aclFloatArray {
  std::vector<float> values;
};
struct aclBoolArray {
  std::vector<bool> values;
};

namespace spatialgrad::aclnn {

// What phase one planned for one operator call; phase two calls run().
class Plan {
 public:
  virtual ~Plan() = default;
  virtual void run() = 0;
};

}  // namespace spatialgrad::aclnn

// Fields are read and written under the executor registry's lock (common.cpp), except the plan, which
// only the thread that claimed the executor for a run touches.
struct aclOpExecutor {
  const char* api = nullptr;  // the phase-two function this executor belongs to
  std::unique_ptr<spatialgrad::aclnn::Plan> plan;
  bool repeatable = false;
  bool running = false;  // a repeatable executor claimed by a phase two in progress
};

namespace spatialgrad::aclnn {

// Appends a message for aclGetRecentErrMsg() on this thread.
void record_error(const std::string& message);

// Runs fn() (returning void) for the C function `api`; maps spatialgrad::Error kNullPointer -> 161001,
// other Error kinds -> 161002, other exceptions -> 361001 (561000 for non-std ones) and records the
// message, prefixed with "api(): " unless it already starts with api (core messages name the core op).
template <class Fn>
aclnnStatus guarded(const char* api, Fn&& fn);

// Phase one (the C function `api`, e.g. aclnnXxxGetWorkspaceSize): clears the out-parameters,
// checks them, calls build() (validate, return a std::unique_ptr<Plan>) and hands out an executor
// for the phase-two function `run_api` (aclnnXxx).
template <class Build>
aclnnStatus plan(const char* api, const char* run_api, uint64_t* workspace_size, aclOpExecutor** executor,
                 Build&& build);

// Phase two (the C function `api`, aclnnXxx): runs the executor's plan and frees it unless it is
// repeatable. The stream is not used: work runs before this returns.
aclnnStatus execute(const char* api, void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                    aclrtStream stream);

// Throws a kNullPointer error naming the argument if p is null.
void check_not_null(const char* api, const char* name, const void* p);

// check_not_null for each (name, pointer) pair in turn, given in the C function's order: phase one reports
// the first null pointer (161001) before it checks anything else.
template <class... More>
void check_not_null(const char* api, const char* name, const void* p, const char* next, const void* next_p,
                    More... more) {
  check_not_null(api, name, p);
  check_not_null(api, next, next_p, more...);
}

// Which dtypes an operator accepts for a tensor argument.
enum class Dtypes {
  kFloating,  // those with core kernels (dispatch_floating): float32, float64 (+ float16/bfloat16 later)
  kIndex,     // int32, int64
};

// A view of `tensor` for the core: checks it is non-null, its dtype and format (empty list: any),
// that the view lies inside its storage and has data; offset applied to the data pointer.
TensorView input_view(const char* api, const char* name, const aclTensor* tensor, Dtypes dtypes,
                      const std::vector<aclFormat>& formats = {});
// The same for a tensor the operator writes: additionally no two elements may share memory.
TensorView output_view(const char* api, const char* name, const aclTensor* tensor, Dtypes dtypes,
                       const std::vector<aclFormat>& formats = {});

// input_view / output_view for the tensor arguments of one C function, which accepts the same formats for
// all of them (dtype kFloating unless given).
class TensorArguments {
 public:
  TensorArguments(const char* api, std::vector<aclFormat> formats) : api_(api), formats_(std::move(formats)) {}
  TensorView in(const char* name, const aclTensor* tensor, Dtypes dtypes = Dtypes::kFloating) const {
    return input_view(api_, name, tensor, dtypes, formats_);
  }
  TensorView out(const char* name, const aclTensor* tensor, Dtypes dtypes = Dtypes::kFloating) const {
    return output_view(api_, name, tensor, dtypes, formats_);
  }

 private:
  const char* api_;
  std::vector<aclFormat> formats_;
};

// Values of an array argument; a null array is an error unless `optional` (then: empty).
std::vector<int64_t> int_list(const char* api, const char* name, const aclIntArray* array, bool optional = false);
std::vector<float> float_list(const char* api, const char* name, const aclFloatArray* array, bool optional = false);
std::vector<bool> bool_list(const char* api, const char* name, const aclBoolArray* array, bool optional = false);

// A tensor argument for check_disjoint.
struct Operand {
  const char* name;
  const TensorView& view;
};

// Refuses (161002) an output whose memory span (the bytes from its first to its last element) meets
// another output's, or that of an input the operator reads: the kernels read inputs while they write
// outputs, and write outputs in parallel, so any sharing gives wrong results. The spans make the test
// conservative: two outputs interleaved in one buffer (disjoint elements, overlapping spans) are refused too.
void check_disjoint(const char* api, std::initializer_list<Operand> outputs, std::initializer_list<Operand> inputs);

// With SPATIALGRAD_ASCEND_CHIP naming a chip (read once per process), refuses (161002) a call that chip's NPU
// rejects, with the NPU's reason (spatialgrad/ascend.h); make_facts() describes the call for the core op `op`
// and runs only then.
void refuse_if_ascend_rejects(const char* op, ascend::Chip chip, const ascend::Facts& facts);
template <class MakeFacts>
void check_ascend(const char* op, MakeFacts&& make_facts) {
  const uint8_t chip = ascend::chip_from_environment();
  if (chip != 0) refuse_if_ascend_rejects(op, static_cast<ascend::Chip>(chip), make_facts());
}

// Names of aclDataType / aclFormat codes (any int32: unknown codes are named as such).
const char* dtype_name(int32_t dtype);
const char* format_name(int32_t format);

// The value of an enum argument as an integer, without loading it as the enum type (a C caller may pass
// any int; such a load is undefined behaviour).
template <class Enum>
int32_t enum_code(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "aclnn enums are 32-bit");
  int32_t code;
  std::memcpy(&code, &value, sizeof(code));
  return code;
}

// ---- implementation of the templates ----

namespace detail {
aclnnStatus status_of_current_exception(const char* api);
aclOpExecutor* new_executor(const char* api, std::unique_ptr<Plan> plan);
}  // namespace detail

template <class Fn>
aclnnStatus guarded(const char* api, Fn&& fn) {
  try {
    fn();
    return ACLNN_SUCCESS;
  } catch (...) {
    return detail::status_of_current_exception(api);
  }
}

template <class Build>
aclnnStatus plan(const char* api, const char* run_api, uint64_t* workspace_size, aclOpExecutor** executor,
                 Build&& build) {
  // On failure the caller sees no executor (a later phase two then fails cleanly with 161001).
  if (executor != nullptr) *executor = nullptr;
  if (workspace_size != nullptr) *workspace_size = 0;
  return guarded(api, [&] {
    check_not_null(api, "workspaceSize", workspace_size);
    check_not_null(api, "executor", executor);
    std::unique_ptr<Plan> planned = build();
    *executor = detail::new_executor(run_api, std::move(planned));
    *workspace_size = 0;  // the CPU kernels need no workspace
  });
}

}  // namespace spatialgrad::aclnn

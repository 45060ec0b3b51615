#include "common.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <unordered_set>

#include "spatialgrad/dtype.h"

namespace spatialgrad::aclnn {
namespace {

// CANN keeps failure messages per thread until aclGetRecentErrMsg() collects them; keep a bounded
// number so a program that never reads them does not grow without limit.
constexpr size_t kMaxMessages = 32;
thread_local std::deque<std::string> pending_messages;  // newest first
thread_local std::string returned_message;              // owns the string last returned

// Executors that phase one handed out and that are not freed yet: phase two refuses anything else
// (a second run of a single-use executor is a use-after-free on the NPU). Every test of an executor
// and what follows from it (taking a single-use one out, marking a repeatable one running) happens in
// one locked step, so two threads racing on one executor cannot both run or free it.
std::mutex executors_mutex;
std::unordered_set<const aclOpExecutor*> live_executors;

enum class Claim { kSingleUse, kRepeatable, kUnknown, kRunning, kOtherApi };

// For phase two of `api`: a live executor planned for it is claimed (single-use: out of the registry, the
// caller owns it; repeatable: marked running). Otherwise nothing changes; *planned_for names its api.
Claim claim_executor(aclOpExecutor* executor, const char* api, std::string* planned_for) {
  std::lock_guard<std::mutex> lock(executors_mutex);
  auto it = live_executors.find(executor);
  if (it == live_executors.end()) return Claim::kUnknown;
  if (std::string(executor->api) != api) {
    *planned_for = executor->api;
    return Claim::kOtherApi;
  }
  if (executor->running) return Claim::kRunning;
  if (executor->repeatable) {
    executor->running = true;
    return Claim::kRepeatable;
  }
  live_executors.erase(it);
  return Claim::kSingleUse;
}

void end_repeatable_run(aclOpExecutor* executor) {
  std::lock_guard<std::mutex> lock(executors_mutex);
  executor->running = false;
}

// Takes a live executor that is not running out of the registry (the caller frees it: kSingleUse) or
// marks it repeatable (kRepeatable); otherwise kUnknown or kRunning and nothing changes.
Claim destroy_or_mark_repeatable(aclOpExecutor* executor, bool destroy) {
  std::lock_guard<std::mutex> lock(executors_mutex);
  auto it = live_executors.find(executor);
  if (it == live_executors.end()) return Claim::kUnknown;
  if (executor->running) return Claim::kRunning;
  if (destroy) {
    live_executors.erase(it);
    return Claim::kSingleUse;
  }
  executor->repeatable = true;
  return Claim::kRepeatable;
}

void check_settled(const char* api, Claim claim, const char* unknown_text) {
  SG_CHECK(claim != Claim::kUnknown, api, "(): expected a live executor, but got ", unknown_text);
  SG_CHECK(claim != Claim::kRunning, api,
           "(): expected an executor that is not running, but got a repeatable one that another thread is running");
}

// aclDestroyAclOpExecutor (destroy) and aclSetAclOpExecutorRepeatable (not): the executor must be live
// and not running (else an error saying `unknown_text`).
aclnnStatus settle_executor(const char* api, aclOpExecutor* executor, bool destroy, const char* unknown_text) {
  return guarded(api, [&] {
    check_not_null(api, "executor", executor);
    check_settled(api, destroy_or_mark_repeatable(executor, destroy), unknown_text);
    if (destroy) delete executor;
  });
}

// [first, last + 1) bytes of a non-empty view.
std::pair<uintptr_t, uintptr_t> byte_span(const TensorView& v) {
  int64_t lowest = 0, highest = 0;
  for (int64_t d = 0; d < v.dim(); ++d) {
    const int64_t reach = (v.size(d) - 1) * v.stride(d);  // bounded by view_of
    (reach < 0 ? lowest : highest) += reach;
  }
  const auto base = reinterpret_cast<uintptr_t>(v.raw_data());
  const int64_t size = dtype_size(v.dtype());
  return {base + static_cast<uintptr_t>(lowest * size), base + static_cast<uintptr_t>((highest + 1) * size)};
}

std::string with_prefix(const char* api, const char* message) {
  const std::string text(message);
  if (text.rfind(api, 0) == 0) return text;
  return std::string(api) + "(): " + text;
}

// DType for an aclDataType code, if spatialgrad has one.
bool to_dtype(int32_t acl, DType* out) {
  switch (acl) {
    case ACL_FLOAT: *out = DType::kFloat32; return true;
    case ACL_DOUBLE: *out = DType::kFloat64; return true;
    case ACL_FLOAT16: *out = DType::kFloat16; return true;
    case ACL_BF16: *out = DType::kBFloat16; return true;
    case ACL_INT32: *out = DType::kInt32; return true;
    case ACL_INT64: *out = DType::kInt64; return true;
    default: return false;
  }
}

bool accepts(Dtypes dtypes, int32_t acl) {
  DType dtype;
  if (!to_dtype(acl, &dtype)) return false;
  if (dtypes == Dtypes::kIndex) return dtype == DType::kInt32 || dtype == DType::kInt64;
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

std::string accepted_names(Dtypes dtypes) {
  std::string names;
  for (aclDataType acl : {ACL_FLOAT16, ACL_BF16, ACL_FLOAT, ACL_DOUBLE, ACL_INT32, ACL_INT64}) {
    if (!accepts(dtypes, acl)) continue;
    names += names.empty() ? "" : ", ";
    names += dtype_name(acl);
  }
  return names;
}

// Checks a tensor argument and returns its view (no overlap check).
TensorView view_of(const char* api, const char* name, const aclTensor* t, Dtypes dtypes,
                   const std::vector<aclFormat>& formats) {
  check_not_null(api, name, t);
  SG_CHECK_KIND(accepts(dtypes, t->dtype), kType, api, "(): expected ", name, " to have dtype ",
                accepted_names(dtypes), ", but got ", dtype_name(t->dtype));
  if (!formats.empty()) {
    std::string allowed;
    bool known = false;
    for (aclFormat f : formats) {
      allowed += std::string(allowed.empty() ? "" : ", ") + format_name(f);
      known = known || t->format == f;
    }
    SG_CHECK(known, api, "(): expected ", name, " to have format ", allowed, ", but got ", format_name(t->format));
  }
  for (int64_t s : t->view_shape) {
    SG_CHECK(s >= 0, api, "(): expected ", name, " to have non-negative sizes, but got ", format_list(t->view_shape));
  }
  for (int64_t s : t->storage_shape) {
    SG_CHECK(s >= 0, api, "(): expected ", name, " to have a non-negative storage shape, but got ",
             format_list(t->storage_shape));
  }
  const int64_t numel = checked_numel(t->view_shape);
  DType dtype = DType::kFloat32;
  to_dtype(t->dtype, &dtype);
  if (numel == 0) return TensorView(t->data, dtype, t->view_shape, t->strides);
  SG_CHECK_KIND(t->data != nullptr, kNullPointer, api, "(): expected ", name,
                " to have a data address (it has ", numel, " elements), but got null");
  // The elements the view reaches, [lowest, highest], must lie inside the storage.
  int64_t lowest = t->offset, highest = t->offset;
  for (size_t d = 0; d < t->view_shape.size(); ++d) {
    int64_t reach;
    SG_CHECK_KIND(!__builtin_mul_overflow(t->view_shape[d] - 1, t->strides[d], &reach), kOverflow, api,
                  "(): expected ", name, " strides whose extent fits in int64, but got strides ",
                  format_list(t->strides), " for shape ", format_list(t->view_shape));
    SG_CHECK_KIND(!__builtin_add_overflow(reach < 0 ? lowest : highest, reach, reach < 0 ? &lowest : &highest),
                  kOverflow, api, "(): expected ", name, " strides whose extent fits in int64, but got strides ",
                  format_list(t->strides), " for shape ", format_list(t->view_shape));
  }
  const int64_t storage = checked_numel(t->storage_shape);
  SG_CHECK(lowest >= 0 && highest < storage, api, "(): expected ", name,
           " to lie inside its storage, but its view (shape ", format_list(t->view_shape), ", strides ",
           format_list(t->strides), ", offset ", t->offset, ") reaches elements ", lowest, "..", highest,
           " of a storage of shape ", format_list(t->storage_shape), " (", storage, " elements)");
  char* base = static_cast<char*>(t->data) + t->offset * dtype_size(dtype);
  return TensorView(base, dtype, t->view_shape, t->strides);
}

}  // namespace

void record_error(const std::string& message) {
  pending_messages.push_front(message);
  if (pending_messages.size() > kMaxMessages) pending_messages.pop_back();
}

void check_not_null(const char* api, const char* name, const void* p) {
  SG_CHECK_KIND(p != nullptr, kNullPointer, api, "(): expected ", name, " to be non-null, but got null");
}

TensorView input_view(const char* api, const char* name, const aclTensor* tensor, Dtypes dtypes,
                      const std::vector<aclFormat>& formats) {
  return view_of(api, name, tensor, dtypes, formats);
}

TensorView output_view(const char* api, const char* name, const aclTensor* tensor, Dtypes dtypes,
                       const std::vector<aclFormat>& formats) {
  TensorView view = view_of(api, name, tensor, dtypes, formats);
  if (view.is_empty()) return view;
  // Sufficient for no overlap: sorted by |stride|, each dimension steps past everything the
  // smaller ones reach. (Parallel kernels writing one element twice would race.)
  std::vector<std::pair<int64_t, int64_t>> dims;  // (|stride|, size)
  for (int64_t d = 0; d < view.dim(); ++d) {
    if (view.size(d) > 1) dims.emplace_back(std::abs(view.stride(d)), view.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;
  for (const auto& [stride, size] : dims) {
    SG_CHECK(stride > reach, api, "(): expected ", name,
             " to have no two elements at the same address, but got strides ", format_list(view.strides()),
             " for shape ", view.shape_string());
    reach += stride * (size - 1);  // cannot overflow: view_of bounded the extent
  }
  return view;
}

void check_disjoint(const char* api, std::initializer_list<Operand> outputs, std::initializer_list<Operand> inputs) {
  auto meet = [](const TensorView& a, const TensorView& b) {
    if (a.is_empty() || b.is_empty()) return false;
    const auto sa = byte_span(a), sb = byte_span(b);
    return sa.first < sb.second && sb.first < sa.second;
  };
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (auto other = outputs.begin(); other != out; ++other) {
      SG_CHECK(!meet(out->view, other->view), api, "(): expected ", out->name, " and ", other->name,
               " to occupy separate memory, but their spans overlap");
    }
    for (const Operand& in : inputs) {
      SG_CHECK(!meet(out->view, in.view), api, "(): expected ", out->name, " not to overlap the input ", in.name,
               " (the operator reads it while writing ", out->name, "), but their memory spans overlap");
    }
  }
}

template <class T, class Array>
std::vector<T> values_of(const char* api, const char* name, const Array* array, bool optional) {
  if (array == nullptr && optional) return {};
  check_not_null(api, name, array);
  return std::vector<T>(array->values.begin(), array->values.end());
}

std::vector<int64_t> int_list(const char* api, const char* name, const aclIntArray* array, bool optional) {
  return values_of<int64_t>(api, name, array, optional);
}
std::vector<float> float_list(const char* api, const char* name, const aclFloatArray* array, bool optional) {
  return values_of<float>(api, name, array, optional);
}
std::vector<bool> bool_list(const char* api, const char* name, const aclBoolArray* array, bool optional) {
  return values_of<bool>(api, name, array, optional);
}

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case ACL_DT_UNDEFINED: return "ACL_DT_UNDEFINED";
    case ACL_FLOAT: return "ACL_FLOAT";
    case ACL_FLOAT16: return "ACL_FLOAT16";
    case ACL_INT8: return "ACL_INT8";
    case ACL_INT32: return "ACL_INT32";
    case ACL_UINT8: return "ACL_UINT8";
    case ACL_INT16: return "ACL_INT16";
    case ACL_UINT16: return "ACL_UINT16";
    case ACL_UINT32: return "ACL_UINT32";
    case ACL_INT64: return "ACL_INT64";
    case ACL_UINT64: return "ACL_UINT64";
    case ACL_DOUBLE: return "ACL_DOUBLE";
    case ACL_BOOL: return "ACL_BOOL";
    case ACL_STRING: return "ACL_STRING";
    case ACL_COMPLEX64: return "ACL_COMPLEX64";
    case ACL_COMPLEX128: return "ACL_COMPLEX128";
    case ACL_BF16: return "ACL_BF16";
    case ACL_INT4: return "ACL_INT4";
    case ACL_UINT1: return "ACL_UINT1";
    case ACL_COMPLEX32: return "ACL_COMPLEX32";
  }
  return "an unknown aclDataType code";
}

const char* format_name(int32_t format) {
  switch (format) {
    case ACL_FORMAT_UNDEFINED: return "ACL_FORMAT_UNDEFINED";
    case ACL_FORMAT_NCHW: return "ACL_FORMAT_NCHW";
    case ACL_FORMAT_NHWC: return "ACL_FORMAT_NHWC";
    case ACL_FORMAT_ND: return "ACL_FORMAT_ND";
    case ACL_FORMAT_NC1HWC0: return "ACL_FORMAT_NC1HWC0";
    case ACL_FORMAT_FRACTAL_Z: return "ACL_FORMAT_FRACTAL_Z";
    case ACL_FORMAT_NC1HWC0_C04: return "ACL_FORMAT_NC1HWC0_C04";
    case ACL_FORMAT_HWCN: return "ACL_FORMAT_HWCN";
    case ACL_FORMAT_NDHWC: return "ACL_FORMAT_NDHWC";
    case ACL_FORMAT_FRACTAL_NZ: return "ACL_FORMAT_FRACTAL_NZ";
    case ACL_FORMAT_NCDHW: return "ACL_FORMAT_NCDHW";
    case ACL_FORMAT_NDC1HWC0: return "ACL_FORMAT_NDC1HWC0";
    case ACL_FRACTAL_Z_3D: return "ACL_FRACTAL_Z_3D";
    case ACL_FORMAT_NC: return "ACL_FORMAT_NC";
    case ACL_FORMAT_NCL: return "ACL_FORMAT_NCL";
  }
  return "an unknown aclFormat code";
}

namespace detail {

aclnnStatus status_of_current_exception(const char* api) {
  try {
    throw;
  } catch (const Error& e) {
    record_error(with_prefix(api, e.what()));
    return e.kind() == ErrorKind::kNullPointer ? ACLNN_ERR_PARAM_NULLPTR : ACLNN_ERR_PARAM_INVALID;
  } catch (const std::bad_alloc&) {
    record_error(std::string(api) + "(): out of memory");
    return ACLNN_ERR_RUNTIME_ERROR;
  } catch (const std::exception& e) {
    record_error(with_prefix(api, e.what()));
    return ACLNN_ERR_RUNTIME_ERROR;
  } catch (...) {
    record_error(std::string(api) + "(): unknown internal error");
    return ACLNN_ERR_INNER;
  }
}

aclOpExecutor* new_executor(const char* api, std::unique_ptr<Plan> plan) {
  auto executor = std::make_unique<aclOpExecutor>();
  executor->api = api;
  executor->plan = std::move(plan);
  std::lock_guard<std::mutex> lock(executors_mutex);
  live_executors.insert(executor.get());
  return executor.release();
}

}  // namespace detail

aclnnStatus execute(const char* api, void* /*workspace*/, uint64_t /*workspace_size*/, aclOpExecutor* executor,
                    aclrtStream /*stream*/) {
  return guarded(api, [&] {
    check_not_null(api, "executor", executor);
    std::string planned_for;
    const Claim claim = claim_executor(executor, api, &planned_for);
    SG_CHECK(claim != Claim::kUnknown, api,
             "(): expected an executor from a GetWorkspaceSize call that has not run yet (or a repeatable one), "
             "but got an unknown or already used executor");
    SG_CHECK(claim != Claim::kOtherApi, api, "(): expected an executor planned for ", api,
             ", but got one planned for ", planned_for);
    SG_CHECK(claim != Claim::kRunning, api,
             "(): expected an executor that is not running, but got a repeatable one that another thread is running");
    if (claim == Claim::kSingleUse) {
      const std::unique_ptr<aclOpExecutor> owned(executor);  // single-use, ours now: freed however the run ends
      owned->plan->run();
      return;
    }
    struct EndRun {
      aclOpExecutor* executor;
      ~EndRun() { end_repeatable_run(executor); }
    } end_run{executor};
    executor->plan->run();
  });
}

void refuse_if_ascend_rejects(const char* op, ascend::Chip chip, const ascend::Facts& facts) {
  // The NPU stops at its first failed check; the table lists the rules in the order the op_api checks them.
  for (const ascend::Finding& finding : ascend::check(op, chip, facts)) {
    if (finding.rule->rejects) throw Error(ErrorKind::kInvalidArgument, ascend::message(finding, chip));
  }
}

}  // namespace spatialgrad::aclnn

using spatialgrad::aclnn::guarded;

extern "C" {

const char* aclGetRecentErrMsg(void) {
  using spatialgrad::aclnn::pending_messages;
  using spatialgrad::aclnn::returned_message;
  if (pending_messages.empty()) return nullptr;
  returned_message.clear();
  for (const std::string& m : pending_messages) returned_message += (returned_message.empty() ? "" : "\n") + m;
  pending_messages.clear();
  return returned_message.c_str();
}

aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor) {
  return spatialgrad::aclnn::settle_executor("aclSetAclOpExecutorRepeatable", executor, false,
                                             "an unknown or already used one");
}

aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  return spatialgrad::aclnn::settle_executor("aclDestroyAclOpExecutor", executor, true,
                                             "an unknown or already freed one");
}

}  // extern "C"

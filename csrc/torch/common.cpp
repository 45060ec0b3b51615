#include "common.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/version.h>
#include <pthread.h>

#include <atomic>
#include <cstring>
#include <string>
#include <utility>

namespace spatialgrad::torch_ops {

namespace {

// The DType of each PyTorch dtype the kernels take.
constexpr std::pair<at::ScalarType, DType> kDTypes[] = {
    {at::kHalf, DType::kFloat16},   {at::kBFloat16, DType::kBFloat16}, {at::kFloat, DType::kFloat32},
    {at::kDouble, DType::kFloat64}, {at::kInt, DType::kInt32},         {at::kLong, DType::kInt64}};

// NumPy's names of the dtypes the kernels do not take where PyTorch's differ, as the NumPy path's message gives them.
constexpr std::pair<at::ScalarType, const char*> kNumpyNames[] = {
    {at::kByte, "uint8"}, {at::kChar, "int8"},         {at::kShort, "int16"},
    {at::kBool, "bool"},  {at::kComplexFloat, "complex64"}, {at::kComplexDouble, "complex128"}};

std::string numpy_name(at::ScalarType type) {
  for (const auto& [scalar_type, name] : kNumpyNames) {
    if (scalar_type == type) return name;
  }
  return c10::toString(type);
}

// The DType of a PyTorch dtype, or a TypeError in the words the NumPy path uses for the same tensor.
DType dtype_of_scalar_type(at::ScalarType type, const char* op, const char* arg) {
  for (const auto& [scalar_type, dtype] : kDTypes) {
    if (scalar_type == type) return dtype;
  }
  detail::fail(ErrorKind::kType, op, "(): expected ", arg,
               " to be a tensor of float16, bfloat16, float32 or float64, but got dtype ", numpy_name(type));
}

std::atomic<bool> g_forked_child{false};

void note_forked_child() { g_forked_child.store(true, std::memory_order_relaxed); }

// Registered when the library loads: from then on a forked child is known as one.
const int g_fork_handler = pthread_atfork(nullptr, nullptr, &note_forked_child);

}  // namespace

TensorView view_of(const at::Tensor& t, const char* op, const char* arg) {
  const DType dtype = dtype_of_scalar_type(t.scalar_type(), op, arg);
  return TensorView(t.data_ptr(), dtype, t.sizes().vec(), t.strides().vec());
}

bool is_plain(const at::Tensor& t) {
  // A CPU tensor's keys (an inference tensor has fewer: no autograd keys), written out rather than read off a
  // tensor made at first use, which inference mode could have stripped.
  static const c10::DispatchKeySet kPlainCpu({c10::DispatchKey::CPU, c10::DispatchKey::AutogradCPU,
                                              c10::DispatchKey::ADInplaceOrView, c10::DispatchKey::AutocastCPU});
  return t.layout() == at::kStrided && kPlainCpu.isSupersetOf(t.key_set()) && !t._fw_grad(/*level=*/0).defined();
}

bool dispatch_mode_active() { return c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python); }

bool is_channels_last(const at::Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

TensorView nhwc_view_of(const at::Tensor& t, const char* op, const char* arg) {
  const TensorView nchw = view_of(t, op, arg);
  const auto nhwc = [](const std::vector<int64_t>& v) { return std::vector<int64_t>{v[0], v[2], v[3], v[1]}; };
  return TensorView(nchw.raw_data(), nchw.dtype(), nhwc(nchw.sizes()), nhwc(nchw.strides()));
}

TensorView view_of(const c10::optional<at::Tensor>& t, const char* op, const char* arg) {
  return t.has_value() && t->defined() ? view_of(*t, op, arg) : TensorView();
}

Output new_output(const at::Tensor& like, at::IntArrayRef shape, at::MemoryFormat format) {
  // The CPU kernels' outputs are CPU tensors: allocated as aten's CPU kernel of empty does, without the trip
  // through the dispatcher (perf, a two-input (1,2,8,8) call's fwd+bwd, 3 outputs: at::empty 4.9% of the call,
  // the allocation it reaches 4.0%; docs/design.md names the operator).
  at::Tensor tensor = at::detail::empty_cpu(shape, like.scalar_type(), /*pin_memory=*/false, format);
  TensorView view = view_of(tensor, "spatialgrad", "an output");
  return Output{std::move(tensor), std::move(view)};
}

Output new_output_if(bool wanted, const at::Tensor& like, at::IntArrayRef shape) {
  return wanted ? new_output(like, shape) : Output{};
}

std::vector<int64_t> sizes_of(const at::Tensor& t) {
#if TORCH_VERSION_MAJOR >= 2
  std::vector<int64_t> sizes;
  for (const c10::SymInt& size : t.sym_sizes()) sizes.push_back(size.guard_int(__FILE__, __LINE__));
  return sizes;
#else
  return t.sizes().vec();
#endif
}

void raise_no_tangent(const char* schema) {
  TORCH_CHECK(false, "spatialgrad::", name_in(schema),
              ": forward-mode differentiation (torch.func.jvp, torch.autograd.forward_ad) is not implemented; "
              "reverse mode (backward, torch.func.grad, vjp, jacrev) is");
}

void raise_no_third_order(const char* kernel, const char* forward) {
  // The words of the Python path (spatialgrad._registry.pullback_call).
  TORCH_CHECK(false, "spatialgrad.torch: spatialgrad: ", kernel,
              " has no derivative (it is already a second-order gradient; third-order gradients of ", forward,
              " are not implemented)");
}

void rethrow_as_c10(const Error& error) {
  const c10::SourceLocation where{"spatialgrad", __FILE__, static_cast<uint32_t>(__LINE__)};
  switch (error.kind()) {
    case ErrorKind::kType:
      throw c10::TypeError(where, error.what());
    case ErrorKind::kIndex:
      throw c10::IndexError(where, error.what());
    case ErrorKind::kOverflow:
      throw c10::Error(where, error.what());
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kNullPointer:
      break;
  }
  throw c10::ValueError(where, error.what());
}

std::string name_in(const char* schema) { return std::string(schema, std::strchr(schema, '(')); }

void define_kernel(torch::Library& m, Vmap vmap, Kernel kernel) {
  m.def(kernel.schema);
  const std::string name = name_in(kernel.schema);
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CPU, std::move(kernel.cpu)));
  // Autograd (every backend), not AutogradCPU: meta tensors (shape inference) are recorded too.
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::Autograd, std::move(kernel.autograd)));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::FuncTorchBatched, batching_kernel(vmap)));
}

namespace {

// Under autocast, a float16 or bfloat16 tensor argument in float32 (autograd records the cast: its gradient comes
// back in its own dtype); any other argument as it is, as aten's cached_cast leaves float64 and integers.
c10::IValue in_float32(const c10::IValue& argument) {
  if (!argument.isTensor()) return argument;
  const at::Tensor& t = argument.toTensor();
  const bool lower_precision = t.defined() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
  return lower_precision ? c10::IValue(t.to(at::kFloat)) : argument;
}

template <Autocast kPolicy>
void autocast_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  const size_t arguments = op.schema().arguments().size();
  c10::optional<at::ScalarType> input_dtype;
  for (size_t i = stack->size() - arguments; i < stack->size(); ++i) {
    c10::IValue& argument = (*stack)[i];
    if (!input_dtype && argument.isTensor()) input_dtype = argument.toTensor().scalar_type();
    argument = in_float32(argument);
  }
  op.callBoxed(stack);
  if constexpr (kPolicy == Autocast::kFloat32ToInputDtype) {
    c10::IValue& out = stack->back();
    out = out.toTensor().to(*input_dtype);
  }
}

}  // namespace

void define_autocast(torch::Library& m, const char* name, Autocast policy) {
  if (policy == Autocast::kNone) return;
  torch::CppFunction kernel = policy == Autocast::kFloat32
                                  ? torch::CppFunction::makeFromBoxedFunction<&autocast_kernel<Autocast::kFloat32>>()
                                  : torch::CppFunction::makeFromBoxedFunction<
                                        &autocast_kernel<Autocast::kFloat32ToInputDtype>>();
  m.impl(name, torch::dispatch(c10::DispatchKey::AutocastCPU, std::move(kernel)));
}

Executor& torch_pool_executor() {
  static Executor& torch_pool = *new TorchPoolExecutor();  // never freed: calls may run on it at exit
  return torch_pool;
}

Executor& torch_executor() {
  (void)g_fork_handler;
  return g_forked_child.load(std::memory_order_relaxed) ? get_executor() : torch_pool_executor();
}

}  // namespace spatialgrad::torch_ops

// The library's namespace, spatialgrad (torch.ops.spatialgrad.<name>): each operator's file defines its schemas in
// a TORCH_LIBRARY_FRAGMENT, with arguments as in the operators users know (aten's, torchvision's, mmcv's).
TORCH_LIBRARY(spatialgrad, m) { static_cast<void>(m); }

#include "common.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
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

void save_options(AutogradContext* ctx, std::vector<c10::IValue> options) {
  ctx->saved_data["options"] = c10::ivalue::Tuple::create(std::move(options));
}

const c10::IValue& saved_option(AutogradContext* ctx, size_t index) {
  return ctx->saved_data["options"].toTupleRef().elements()[index];
}

variable_list computed_only(const variable_list& outputs) {
  variable_list computed;
  for (const at::Tensor& output : outputs) {
    if (output.defined()) computed.push_back(output);
  }
  return computed;
}

variable_list in_places(const variable_list& values, c10::ArrayRef<bool> computed) {
  variable_list placed(computed.size());
  size_t next = 0;
  for (size_t i = 0; i < computed.size(); ++i) {
    if (computed[i] && next < values.size()) placed[i] = values[next++];
  }
  return placed;
}

variable_list gradient_of_first(at::Tensor grad, size_t arguments) {
  variable_list grads(arguments);
  grads.at(0) = std::move(grad);
  return grads;
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
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::AutogradCPU, std::move(kernel.autograd)));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::FuncTorchBatched, batching_kernel(vmap)));
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

// The PyTorch operator layer's shared machinery (libspatialgrad_torch): at::Tensor -> TensorView without
// copies, outputs, error translation, the executor on PyTorch's intra-op pool, and calls of the
// registered operators through the dispatcher, and their definition with their kernels. Each operator's file
// (csrc/torch/<op>.cpp) holds its schemas, its CPU kernels and its autograd::Functions.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "spatialgrad/error.h"
#include "spatialgrad/parallel.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::torch_ops {

using torch::autograd::variable_list;

// A view of `t` through its sizes and strides (no copy; only CPU tensors reach the CPU kernels). A dtype
// without a TensorView counterpart raises a TypeError-kind error naming op() and the argument.
TensorView view_of(const at::Tensor& t, const char* op, const char* arg);
// Whether a 4-D tensor is laid out channels_last (and not also contiguous): the kernels then run in NHWC.
bool is_channels_last(const at::Tensor& t);
// The (N, H, W, C) view of a 4-D (N, C, H, W) tensor: sizes and strides permuted, no copy.
TensorView nhwc_view_of(const at::Tensor& t, const char* op, const char* arg);
// An absent (or undefined) optional tensor is TensorView(): "zeros" for the kernels' cotangents.
TensorView view_of(const c10::optional<at::Tensor>& t, const char* op, const char* arg);

// A new tensor of `like`'s dtype and device, in `format`, and its view. The kernels write every element.
struct Output {
  at::Tensor tensor;
  TensorView view;
};
Output new_output(const at::Tensor& like, at::IntArrayRef shape,
                  at::MemoryFormat format = at::MemoryFormat::Contiguous);
// An output that is computed only when `wanted`; otherwise an undefined tensor and TensorView().
Output new_output_if(bool wanted, const at::Tensor& like, at::IntArrayRef shape);

// `t`'s sizes, for a gradient's options. Symbolic sizes (torch.compile(dynamic=True), torch.export) are
// specialized: PyTorch guards on their values (the schemas take int, not SymInt, as PyTorch 1.13's did).
std::vector<int64_t> sizes_of(const at::Tensor& t);

// Whether `arg` is a tensor argument (a defined tensor, or a present and defined optional one) for which
// `test` holds; never for the other arguments.
template <class Test, class T>
bool tensor_holds(const Test& test, const T& arg) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return arg.defined() && test(arg);
  } else if constexpr (std::is_same_v<T, c10::optional<at::Tensor>>) {
    return arg.has_value() && arg->defined() && test(*arg);
  } else {
    return false;
  }
}
template <class Test, class... Args>
bool any_tensor_holds(const Test& test, const Args&... args) {
  return (tensor_holds(test, args) || ...);
}

// Whether the CPU kernels may read `t` as it is: a dense CPU tensor and nothing more (no dispatch key beyond a fresh
// CPU tensor's) and no tangent. Anything else reaches its handling through the dispatcher, which the autograd
// kernels call below autograd: functorch's wrappers (vmap's BatchedTensor, the TensorWrapper of grad and
// vjp), autograd's own batched gradients (gradcheck's check_batched_grad), Python subclasses (FakeTensor,
// FunctionalTensor: torch.compile, torch.export), functionalization, and tensors whose memory is not their value (a
// ZeroTensor has no data, a negative or conjugate view is read through its bit). A dual tensor (forward-mode AD)
// raises (check_no_tangent) rather than drop its tangent. A whitelist: a wrapper PyTorch adds
// later is dispatched too, rather than read as memory it does not have.
bool is_plain(const at::Tensor& t);
inline bool needs_dispatch(const at::Tensor& t) { return !is_plain(t); }

// Whether a Python dispatch mode is active on this thread (make_fx, FakeTensorMode, torch.export's tracing): it sees
// the operators only where they go through the dispatcher, so no kernel is called directly while one is.
bool dispatch_mode_active();

// Whether a call with these arguments records an autograd graph: grad mode on and a tensor argument requiring grad.
template <class... Args>
bool records_graph(const Args&... args) {
  const auto requires_grad = [](const at::Tensor& t) { return t.requires_grad(); };
  return at::GradMode::is_enabled() && any_tensor_holds(requires_grad, args...);
}

// Whether a kernel may be called directly on these arguments: plain tensors, no dispatch mode.
template <class... Args>
bool computes_directly(const Args&... args) {
  return !dispatch_mode_active() && !any_tensor_holds(needs_dispatch, args...);
}

// Whether a backward may call a CPU kernel directly: no graph to record (create_graph) and plain tensors.
template <class... Args>
bool computes_without_graph(const Args&... args) {
  return !records_graph(args...) && computes_directly(args...);
}

// `op` (an operator's CPU kernel, through the dispatcher) called below autograd: on to functorch's batching
// kernels and levels, Python modes and subclasses, functionalization.
template <class Sig, class... Args>
auto call_below_autograd(const c10::TypedOperatorHandle<Sig>& op, const Args&... args) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(args...);
}

// The name in an operator's schema (up to its argument list).
std::string name_in(const char* schema);

// The typed handle of the operator of schema kSchema (spatialgrad::<name>), whose kernels have the signature Sig.
template <const char* kSchema, class Sig>
const c10::TypedOperatorHandle<Sig>& operator_of() {
  static const auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow(("spatialgrad::" + name_in(kSchema)).c_str(), "").typed<Sig>();
  return handle;
}

// ---- autograd: each recorded call is a node ------------------------------------------------------------------
//
// The autograd kernels record their calls as PyTorch's generated code records aten's: a Node holding the next edges,
// the tensor arguments its gradients read (SavedVariables) and a `Call` (the options), whose backward computes the
// gradients by calling other operators: a CPU kernel directly for plain tensors without create_graph, else through
// the dispatcher, where create_graph records them in turn (a linear operator's backward calls its forward: any
// order) and functorch, FakeTensor and the tracers see them. torch::autograd::Function did this before; it cost
// 1.3 us more per call (a two-input (1,2,8,8) call, graph recorded minus not: 2.7 vs 1.3 us: its AutogradContext,
// the VariableInfo of every input, a second trip through the dispatcher), and PyTorch 2 refuses it under functorch
// transforms ("cannot use C++ torch::autograd::Function with functorch transforms").
//
// Call: a copyable struct with
//   static constexpr const char* kName;                    the node's name, "spatialgrad::<Kernel>"
//   static Call of(const R& out, const Args&... args);     the options the gradients need
//   static variable_list saved(const Args&... args);       the tensors they read, saved with the node, or
//   static constexpr bool kSavesNoTensors = true;          for a backward that reads none (a linear one's)
//   variable_list backward(const variable_list& grads, const variable_list& saved,
//                          const std::vector<bool>& wanted) const;
// `grads` has one cotangent per output (undefined: none reached it, zeros; never all undefined), `wanted` one entry
// per tensor argument of the call (optional ones included), and backward returns one gradient (or an undefined
// tensor) per tensor argument.
template <class Call>
class RecordedNode final : public torch::autograd::Node {
 public:
  explicit RecordedNode(Call call) : call_(std::move(call)) {}

  // Saves the tensors once the next edges hold their gradient accumulators: a SavedVariable of a leaf keeps only a
  // weak reference to its accumulator, which unpacking under saved-tensor hooks needs alive.
  void save(const variable_list& tensors) {
    saved_.reserve(tensors.size());
    for (const at::Tensor& t : tensors) saved_.emplace_back(t, /*is_output=*/false);
  }

  variable_list apply(variable_list&& grads) override {
    // Node's mutex, as PyTorch's generated nodes take it: two threads' backward passes over one graph (one
    // retaining it, one releasing) must not unpack and reset the saved tensors at once.
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto defined = [](const at::Tensor& g) { return g.defined(); };
    if (std::none_of(grads.begin(), grads.end(), defined)) return variable_list(num_outputs());
    variable_list saved;
    saved.reserve(saved_.size());
    for (const torch::autograd::SavedVariable& s : saved_) saved.push_back(s.unpack());
    std::vector<bool> wanted(num_outputs());
    for (size_t i = 0; i < wanted.size(); ++i) wanted[i] = task_should_compute_output(i);
    return call_.backward(grads, saved, wanted);
  }

  std::string name() const override { return Call::kName; }

  void release_variables() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (torch::autograd::SavedVariable& s : saved_) s.reset_data();
  }

 private:
  Call call_;
  std::vector<torch::autograd::SavedVariable> saved_;
};

// The tensor arguments of a call, in order, an absent optional one as an undefined tensor (a node's inputs).
template <class... Args>
variable_list tensor_arguments(const Args&... args) {
  variable_list tensors;
  const auto add = [&tensors](const auto& arg) {
    using T = std::decay_t<decltype(arg)>;
    if constexpr (std::is_same_v<T, at::Tensor>) tensors.push_back(arg);
    if constexpr (std::is_same_v<T, c10::optional<at::Tensor>>) tensors.push_back(arg.value_or(at::Tensor()));
  };
  (add(args), ...);
  return tensors;
}

// A kernel's outputs as a list (an output_mask leaves some undefined).
inline variable_list outputs_of(const at::Tensor& out) { return {out}; }
template <class... Ts>
variable_list outputs_of(const std::tuple<Ts...>& out) {
  return std::apply([](const auto&... t) { return variable_list{t...}; }, out);
}

// Raises where a tensor argument carries a tangent (forward-mode AD: torch.func.jvp, torch.autograd.forward_ad),
// which the kernels have no formula for, rather than drop it.
[[noreturn]] void raise_no_tangent(const char* schema);
template <class... Args>
void check_no_tangent(const char* schema, const Args&... args) {
  const auto has_tangent = [](const at::Tensor& t) { return t._fw_grad(/*level=*/0).defined(); };
  if (any_tensor_holds(has_tangent, args...)) raise_no_tangent(schema);
}

// `outputs` of a call with tensor arguments `inputs` recorded as the outputs of a RecordedNode<Call>.
template <class Call>
void record_call(Call call, variable_list outputs, const variable_list& inputs, const variable_list& saved) {
  const std::shared_ptr<RecordedNode<Call>> node(new RecordedNode<Call>(std::move(call)), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  node->save(saved);
  torch::autograd::set_history(outputs, node);
}

// Whether a Call declares kSavesNoTensors (true) instead of saved().
template <class Call, class = void>
struct SavesNoTensors : std::false_type {};
template <class Call>
struct SavesNoTensors<Call, std::void_t<decltype(Call::kSavesNoTensors)>>
    : std::bool_constant<Call::kSavesNoTensors> {};

// The tensors a call's node saves: Call::saved(args...), none for a Call marked kSavesNoTensors.
template <class Call, class... Args>
variable_list saved_by(const Args&... args) {
  if constexpr (SavesNoTensors<Call>::value) {
    return {};
  } else {
    return Call::saved(args...);
  }
}

// The autograd kernel of the kernel kCpu (schema kSchema) whose calls RecordedNode<Call> records: plain tensors go
// to kCpu, anything else through the dispatcher below autograd; a call that records a graph gets its node.
template <class Call, auto kCpu, const char* kSchema>
struct RecordingKernel;
template <class Call, class R, class... Args, R (*kCpu)(Args...), const char* kSchema>
struct RecordingKernel<Call, kCpu, kSchema> {
  static R call(Args... args) {
    check_no_tangent(kSchema, args...);
    R out = computes_directly(args...) ? kCpu(args...) : call_below_autograd(operator_of<kSchema, R(Args...)>(), args...);
    if (records_graph(args...)) {
      record_call(Call::of(out, args...), outputs_of(out), tensor_arguments(args...), saved_by<Call>(args...));
    }
    return out;
  }
};

// How functorch.vmap batches an operator (batching.cpp): the vmapped dimension folded into the image batch (for
// operators whose image-like tensor arguments all lead with N and treat the images independently), or one call
// per sample.
enum class Vmap { kFoldIntoBatch, kPerSample };
torch::CppFunction batching_kernel(Vmap rule);

// One kernel of an operator, as the library defines it: its schema (spatialgrad::<schema>), its CPU kernel and its
// autograd kernel.
struct Kernel {
  const char* schema;
  torch::CppFunction cpu, autograd;
};

// The kernel kCpu of schema kSchema, whose calls RecordedNode<Call> records.
template <class Call, auto kCpu, const char* kSchema>
Kernel kernel() {
  return Kernel{kSchema, torch::CppFunction(TORCH_FN(kCpu)),
                torch::CppFunction(TORCH_FN((RecordingKernel<Call, kCpu, kSchema>::call)))};
}

void define_kernel(torch::Library& m, Vmap vmap, Kernel kernel);

// What a forward does under torch.autocast("cpu"), the policy of its PyTorch counterpart (measured on PyTorch 1.13
// and 2.6, torchvision 0.14 and 0.21; an operator's file says whose it follows): kNone runs in the dtypes it is
// given (an operator that registers no policy: aten's pooling and upsampling, mmcv's deformable attention);
// kFloat32 casts float16/bfloat16 tensors to float32 and returns float32; kFloat32ToInputDtype computes so, then
// casts the output to the first tensor argument's dtype.
enum class Autocast { kNone, kFloat32, kFloat32ToInputDtype };
// Registers `name`'s AutocastCPU kernel for `policy` (none for kNone: autocast falls through).
void define_autocast(torch::Library& m, const char* name, Autocast policy);

// Names. Each operator's file defines its kernels, schemas and Calls in an anonymous namespace inside a namespace of
// its own (spatialgrad::torch_ops::<op>_kernels): GCC 14 gives the instantiations of the templates above over them
// (RecordingKernel, RecordedNode, operator_of) vague linkage, under names the anonymous namespace alone leaves the
// same in every file (kBackwardSchema, forward_cpu, ...), and the linker kept one file's instantiation for all
// (one operator's third derivative raised another's message).
//
// Defines an operator's kernels (its forward, backward, ...) in the library, in a TORCH_LIBRARY_FRAGMENT of the
// operator's file, each with its CPU and autograd kernels and `vmap`'s batching rule.
template <class... Kernels>
void define_operator(torch::Library& m, Vmap vmap, Kernels... kernels) {
  (define_kernel(m, vmap, std::move(kernels)), ...);
}

// The RuntimeError of differentiating a second-order kernel (`kernel`, of the operator `forward`).
[[noreturn]] void raise_no_third_order(const char* kernel, const char* forward);

// The Call of a second-order kernel (schema kSchema, node name kName) of the operator kOperator: its derivative
// raises (third order is not implemented).
template <const char* kNodeName, const char* kSchema, const char* kOperator>
struct SecondOrderCall {
  static constexpr const char* kName = kNodeName;
  static constexpr bool kSavesNoTensors = true;
  template <class R, class... Args>
  static SecondOrderCall of(const R& /*out*/, const Args&... /*args*/) {
    return {};
  }
  variable_list backward(const variable_list& /*grads*/, const variable_list& /*saved*/,
                         const std::vector<bool>& /*wanted*/) const {
    raise_no_third_order(name_in(kSchema).c_str(), kOperator);
  }
};

// Raises a spatialgrad::Error as the c10 error PyTorch maps to the same Python exception (c10::ValueError,
// TypeError, IndexError; an OverflowError kind has no c10 type in PyTorch 1.13 and is a RuntimeError).
[[noreturn]] void rethrow_as_c10(const Error& error);

// Tasks of one call on PyTorch's intra-op pool: at::parallel_for gives each of its threads one index range,
// and each task takes chunks from the call's shared queue, so which thread runs which task never matters.
// (Also what spatialgrad.torch hands the NumPy bindings, through spatialgrad._torch_ops.pool_executor.)
class TorchPoolExecutor final : public Executor {
 public:
  void run(int tasks, const Job& job) noexcept override {
    try {
      at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) job(static_cast<int>(i));
      });
    } catch (...) {
      // A Job never throws, so this is at::parallel_for failing to run its region (none is known in 1.13):
      // any one task completes a call, and the caller runs task 0 itself when no task ran (parallel.h).
    }
  }
};

// PyTorch's intra-op pool: one TorchPoolExecutor for the native operators and the NumPy calls
// (spatialgrad._torch_ops.pool_executor hands it to _core).
Executor& torch_pool_executor();

// What runs the kernels' tasks inside PyTorch: torch_pool_executor(), except in a forked child, where
// spatialgrad's own pool does (OpenMP's threads do not survive fork()).
Executor& torch_executor();

// Runs one call into the core on torch_executor() with at::get_num_threads() tasks (torch.set_num_threads
// controls it; NumPy calls on other threads keep spatialgrad's pool and count), with spatialgrad's errors
// raised as c10 errors.
template <class Fn>
void run_kernel(const Fn& fn) {
  try {
    const ScopedExecutor scope(torch_executor(), at::get_num_threads());
    fn();
  } catch (const Error& error) {
    rethrow_as_c10(error);
  }
}

}  // namespace spatialgrad::torch_ops

// The typed handle of the registered operator spatialgrad::NAME with C++ signature SIG, looked up on the
// first call. Calls through it go through the dispatcher, autograd included: a backward that calls another
// operator this way is itself differentiable.
#define SG_OPERATOR(NAME, SIG)                                                                                        \
  ([]() -> const c10::TypedOperatorHandle<SIG>& {                                                                     \
    static const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("spatialgrad::" NAME, "").typed<SIG>(); \
    return handle;                                                                                                    \
  }())

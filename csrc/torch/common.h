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

using torch::autograd::AutogradContext;
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

// The non-tensor arguments of a call, kept in the autograd context for its backward, and read back.
void save_options(AutogradContext* ctx, std::vector<c10::IValue> options);
const c10::IValue& saved_option(AutogradContext* ctx, size_t index);

// PyTorch's C++ autograd cannot wrap an undefined output: a Function returns only the outputs its
// output_mask computed (computed_only), and in_places puts those outputs (in its autograd kernel) or their
// cotangents (in its backward) back at their positions, undefined elsewhere.
variable_list computed_only(const variable_list& outputs);
variable_list in_places(const variable_list& values, c10::ArrayRef<bool> computed);

// A backward's gradients when only the first of its function's `arguments` has one: `grad`, then none.
variable_list gradient_of_first(at::Tensor grad, size_t arguments);

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

// Tensors the CPU kernel cannot read: functorch's wrappers (vmap's BatchedTensor, the TensorWrapper of grad and
// vjp) and Python tensor subclasses reach their handling through the dispatcher, which the autograd Functions'
// forwards call below autograd.
inline bool needs_dispatch(const at::Tensor& t) {
  // Wrappers (functorch, Python subclasses), and tensors whose memory is not their value: a ZeroTensor has no
  // data, a negative or conjugate view is read through its bit. A dual tensor (forward-mode AD) goes through
  // Function::apply too, which raises rather than drop its tangent.
  const c10::DispatchKeySet special({c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper,
                                     c10::DispatchKey::Python, c10::DispatchKey::ZeroTensor, c10::DispatchKey::Negative,
                                     c10::DispatchKey::Conjugate});
  return t.key_set().has_any(special) || t._fw_grad(/*level=*/0).defined();
}

// Whether a call with these arguments records an autograd graph: grad mode on and a tensor argument requiring grad.
template <class... Args>
bool records_graph(const Args&... args) {
  const auto requires_grad = [](const at::Tensor& t) { return t.requires_grad(); };
  return at::GradMode::is_enabled() && any_tensor_holds(requires_grad, args...);
}

// Whether an autograd kernel may call the CPU kernel itself: no graph to record and plain tensors.
template <class... Args>
bool computes_directly(const Args&... args) {
  return !records_graph(args...) && !any_tensor_holds(needs_dispatch, args...);
}

// An autograd::Function's forward calling `op` (the operator's CPU kernel, through the dispatcher) below
// autograd: on to functorch's batching kernels under vmap.
template <class Sig, class... Args>
auto call_below_autograd(const c10::TypedOperatorHandle<Sig>& op, const Args&... args) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(args...);
}

template <class R, size_t... I>
R tuple_of(const variable_list& outputs, std::index_sequence<I...> /*positions*/) {
  return R(outputs.at(I)...);
}

// The outputs of a kernel returning the tuple R, from its Function's variable_list: a Function returns only the
// outputs its output_mask argument (the last one, when there is one) asks for; they go back to their places.
template <class R, class... Args>
R placed_outputs(const variable_list& computed, const Args&... args) {
  constexpr size_t kOutputs = std::tuple_size_v<R>;
  const auto arguments = std::tie(args...);
  const auto& last = std::get<sizeof...(Args) - 1>(arguments);
  if constexpr (std::is_same_v<std::decay_t<decltype(last)>, std::array<bool, kOutputs>>) {
    return tuple_of<R>(in_places(computed, last), std::make_index_sequence<kOutputs>());
  } else {
    return tuple_of<R>(computed, std::make_index_sequence<kOutputs>());
  }
}

// The autograd kernel of an operator whose CPU kernel is kCpu and whose autograd::Function is Function: the CPU
// kernel itself when it computes directly (no node, no saved options: a call without gradients costs what the
// CPU kernel costs), else Function::apply.
template <class Function, auto kCpu>
struct AutogradKernel;
template <class Function, class R, class... Args, R (*kCpu)(Args...)>
struct AutogradKernel<Function, kCpu> {
  static R call(Args... args) {
    if (computes_directly(args...)) return kCpu(args...);
    if constexpr (std::is_same_v<R, at::Tensor>) {
      return Function::apply(args...);
    } else {
      return placed_outputs<R>(Function::apply(args...), args...);
    }
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

// The kernel with schema `schema`, CPU kernel kCpu and autograd kernel Autograd::call (by default
// AutogradKernel<Function, kCpu>'s).
template <class Function, auto kCpu, class Autograd = AutogradKernel<Function, kCpu>>
Kernel kernel(const char* schema) {
  return Kernel{schema, torch::CppFunction(TORCH_FN(kCpu)), torch::CppFunction(TORCH_FN(Autograd::call))};
}

void define_kernel(torch::Library& m, Vmap vmap, Kernel kernel);

// Defines an operator's kernels (its forward, backward, ...) in the library, in a TORCH_LIBRARY_FRAGMENT of the
// operator's file, each with its CPU and autograd kernels and `vmap`'s batching rule.
template <class... Kernels>
void define_operator(torch::Library& m, Vmap vmap, Kernels... kernels) {
  (define_kernel(m, vmap, std::move(kernels)), ...);
}

// ---- plain calls recorded without torch::autograd::Function ----------------------------------------------
//
// Function::apply costs about 1.3 us more per call than PyTorch's generated nodes (measured on a two-input
// (1,2,8,8) call, graph recorded minus not: 2.7 vs 1.3 us): its AutogradContext (a hash map of IValues), the
// VariableInfo of every input, the general _wrap_outputs, and a second trip through the dispatcher. For plain
// tensors (records_plainly) an autograd kernel computes with its CPU kernel and records a RecordedNode, as the
// generated code does: the inputs' SavedVariables and a `Call` that holds the options and computes the
// gradients, with the CPU backward kernel for plain tensors without create_graph, else through the dispatcher
// (with create_graph the backward's own autograd kernel records it, through Function as before). Functorch's
// wrappers, subclasses and dual tensors keep Function::apply.
//
// Call: a copyable struct with `static constexpr const char* kName` and
//   variable_list backward(const at::Tensor& grad, const variable_list& saved, const std::vector<bool>& wanted)
// returning one gradient (or an undefined tensor) per tensor input; `wanted[i]`: input i's is needed.
template <class Call>
class RecordedNode final : public torch::autograd::Node {
 public:
  explicit RecordedNode(Call call) : call_(std::move(call)) {}

  // Saves the inputs once the next edges hold their gradient accumulators: a SavedVariable of a leaf keeps
  // only a weak reference to its accumulator, which unpacking under saved-tensor hooks needs alive.
  void save_inputs(const variable_list& inputs) {
    saved_.reserve(inputs.size());
    for (const at::Tensor& input : inputs) saved_.emplace_back(input, /*is_output=*/false);
  }

  variable_list apply(variable_list&& grads) override {
    // Node's mutex, as PyTorch's generated nodes take it: two threads' backward passes over one graph (one
    // retaining it, one releasing) must not unpack and reset the saved inputs at once.
    const std::lock_guard<std::mutex> lock(mutex_);
    // An absent cotangent is zeros, as Function materializes it.
    const at::Tensor grad = grads[0].defined() ? grads[0] : input_metadata(0).zeros_like();
    variable_list saved;
    saved.reserve(saved_.size());
    for (const torch::autograd::SavedVariable& s : saved_) saved.push_back(s.unpack());
    std::vector<bool> wanted(num_outputs());
    for (size_t i = 0; i < wanted.size(); ++i) wanted[i] = task_should_compute_output(i);
    return call_.backward(grad, saved, wanted);
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

// Whether an autograd kernel records its call with a RecordedNode: a graph to record, plain tensors.
template <class... Args>
bool records_plainly(const Args&... args) {
  return records_graph(args...) && !any_tensor_holds(needs_dispatch, args...);
}

// `output` (the CPU kernel's result for `inputs`) as the output of a RecordedNode<Call>.
template <class Call>
at::Tensor record_call(Call call, at::Tensor output, const variable_list& inputs) {
  const std::shared_ptr<RecordedNode<Call>> node(new RecordedNode<Call>(std::move(call)), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  node->save_inputs(inputs);
  torch::autograd::set_history(output, node);
  return output;
}

// The tensor arguments of a call, in order (a RecordedNode's inputs).
template <class... Args>
variable_list tensor_arguments(const Args&... args) {
  variable_list tensors;
  const auto add = [&tensors](const auto& arg) {
    if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, at::Tensor>) tensors.push_back(arg);
  };
  (add(args), ...);
  return tensors;
}

// The autograd kernel of a forward kCpu whose plain calls are recorded with RecordedNode<Call> (Call::of(args...)
// keeps the options); any other call is AutogradKernel<Function, kCpu>'s.
template <class Function, class Call, auto kCpu>
struct RecordingAutogradKernel;
template <class Function, class Call, class... Args, at::Tensor (*kCpu)(Args...)>
struct RecordingAutogradKernel<Function, Call, kCpu> {
  static at::Tensor call(Args... args) {
    if (records_plainly(args...)) return record_call(Call::of(args...), kCpu(args...), tensor_arguments(args...));
    return AutogradKernel<Function, kCpu>::call(args...);
  }
};

// kernel<Function, kCpu>(schema) with plain calls recorded by RecordedNode<Call>.
template <class Function, class Call, auto kCpu>
Kernel recorded_kernel(const char* schema) {
  return kernel<Function, kCpu, RecordingAutogradKernel<Function, Call, kCpu>>(schema);
}

// The RuntimeError of differentiating a second-order kernel (`kernel`, of the operator `forward`).
[[noreturn]] void raise_no_third_order(const char* kernel, const char* forward);

// The name in an operator's schema (up to its argument list).
std::string name_in(const char* schema);

// The autograd::Function of a second-order kernel (schema kSchema, C++ signature Sig) of the operator kOperator:
// its forward calls the kernel below autograd and returns the outputs it computed; its derivative raises (third
// order is not implemented).
template <const char* kSchema, class Sig, const char* kOperator>
struct SecondOrderFunction : torch::autograd::Function<SecondOrderFunction<kSchema, Sig, kOperator>> {
  template <class... Args>
  static variable_list forward(AutogradContext* /*ctx*/, const Args&... args) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow(("spatialgrad::" + name_in(kSchema)).c_str(), "")
                               .template typed<Sig>();
    const auto outputs = call_below_autograd(op, args...);
    return computed_only(std::apply([](const auto&... output) { return variable_list{output...}; }, outputs));
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list /*grads*/) {
    raise_no_third_order(name_in(kSchema).c_str(), kOperator);
  }
};

// The kernel of a second-order kernel kCpu (schema kSchema) of the operator kOperator, with SecondOrderFunction
// as its autograd::Function.
template <auto kCpu, const char* kSchema, const char* kOperator>
Kernel second_order_kernel() {
  return kernel<SecondOrderFunction<kSchema, std::remove_pointer_t<decltype(kCpu)>, kOperator>, kCpu>(kSchema);
}

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

// The C++ signatures of the forwards' schemas (each operator's file), for typed calls through the dispatcher: the
// linear operators' backwards call their forward, and spatialgrad._torch_ops (python.cpp) calls all five.
namespace signature {
using AvgPool2d = at::Tensor(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, bool,
                             c10::optional<int64_t>);
using RoiAlign = at::Tensor(const at::Tensor&, const at::Tensor&, double, int64_t, int64_t, int64_t, bool);
using UpsampleBilinear2d = at::Tensor(const at::Tensor&, c10::optional<at::IntArrayRef>, bool,
                                      c10::optional<c10::ArrayRef<double>>);
using GridSampler2d = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, int64_t, bool);
using MsDeformAttn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, int64_t);
}  // namespace signature

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

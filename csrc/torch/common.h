// The PyTorch operator layer's shared machinery (libspatialgrad_torch): at::Tensor -> TensorView without
// copies, outputs, error translation, the executor on PyTorch's intra-op pool, and calls of the
// registered operators through the dispatcher. Each operator's file (csrc/torch/<op>.cpp) holds its CPU
// kernels and its autograd kernel; library.cpp holds the schemas.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <cstdint>
#include <memory>
#include <string>
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

// Whether a call with these arguments records an autograd graph: grad mode on and a tensor argument requiring grad.
inline bool requires_grad_of(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool requires_grad_of(const c10::optional<at::Tensor>& t) { return t.has_value() && requires_grad_of(*t); }
template <class T>
bool requires_grad_of(const T& /*not a tensor*/) {
  return false;
}
template <class... Args>
bool records_graph(const Args&... args) {
  return at::GradMode::is_enabled() && (requires_grad_of(args) || ...);
}

// Tensors the CPU kernel cannot read: functorch's wrappers (vmap's BatchedTensor, the TensorWrapper of grad and
// vjp) and Python tensor subclasses reach their handling through the dispatcher, which the autograd Functions'
// forwards call below autograd.
inline bool needs_dispatch_of(const at::Tensor& t) {
  // Wrappers (functorch, Python subclasses), and tensors whose memory is not their value: a ZeroTensor has no
  // data, a negative or conjugate view is read through its bit. A dual tensor (forward-mode AD) goes through
  // Function::apply too, which raises rather than drop its tangent.
  const c10::DispatchKeySet special({c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper,
                                     c10::DispatchKey::Python, c10::DispatchKey::ZeroTensor,
                                     c10::DispatchKey::Negative, c10::DispatchKey::Conjugate});
  return t.defined() && (t.key_set().has_any(special) || t._fw_grad(/*level=*/0).defined());
}
inline bool needs_dispatch_of(const c10::optional<at::Tensor>& t) { return t.has_value() && needs_dispatch_of(*t); }
template <class T>
bool needs_dispatch_of(const T& /*not a tensor*/) {
  return false;
}

// Whether an autograd kernel may call the CPU kernel itself: no graph to record and plain tensors.
template <class... Args>
bool computes_directly(const Args&... args) {
  return !records_graph(args...) && !(needs_dispatch_of(args) || ...);
}

// An autograd kernel's call: the CPU kernel itself when it computes directly (no node, no saved options: a call
// without gradients costs what the CPU kernel costs), else Function::apply.
template <class Function, class Kernel, class... Args>
at::Tensor apply_or_compute(const Kernel& kernel, const Args&... args) {
  return computes_directly(args...) ? kernel(args...) : Function::apply(args...);
}

// ---- plain calls recorded without torch::autograd::Function ----------------------------------------------
//
// Function::apply costs about 1.3 us more per call than PyTorch's generated nodes (measured on (1,2,8,8)
// grid_sample, graph recorded minus not: 2.7 vs 1.3 us): its AutogradContext (a hash map of IValues), the
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
    for (torch::autograd::SavedVariable& s : saved_) s.reset_data();
  }

 private:
  Call call_;
  std::vector<torch::autograd::SavedVariable> saved_;
};

// Whether an autograd kernel records its call with a RecordedNode: a graph to record, plain tensors.
template <class... Args>
bool records_plainly(const Args&... args) {
  return records_graph(args...) && !(needs_dispatch_of(args) || ...);
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

// The RuntimeError of differentiating a second-order kernel (`kernel`, of the operator `forward`).
[[noreturn]] void raise_no_third_order(const char* kernel, const char* forward);

// Raises a spatialgrad::Error as the c10 error PyTorch maps to the same Python exception (c10::ValueError,
// TypeError, IndexError; an OverflowError kind has no c10 type in PyTorch 1.13 and is a RuntimeError).
[[noreturn]] void rethrow_as_c10(const Error& error);

// Tasks of one call on PyTorch's intra-op pool: at::parallel_for gives each of its threads one index range,
// and each task takes chunks from the call's shared queue, so which thread runs which task never matters.
// (Also what spatialgrad.torch hands the NumPy bindings, through spatialgrad._torch_ops.pool_executor.)
class TorchPoolExecutor final : public Executor {
 public:
  void run(int tasks, const Job& job) noexcept override {
    // at::parallel_for rethrows only what its function throws, and a Job never throws.
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) job(static_cast<int>(i));
    });
  }
};

// What runs the kernels' tasks inside PyTorch: its intra-op pool (at::parallel_for), except in a forked
// child, where spatialgrad's own pool does (OpenMP's threads do not survive fork()).
Executor& torch_executor();

// The C++ signatures of the forwards' schemas (library.cpp), for typed calls through the dispatcher: the
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
#define SG_OPERATOR(NAME, SIG)                                                                   \
  ([]() -> const c10::TypedOperatorHandle<SIG>& {                                                \
    static const auto handle =                                                                   \
        c10::Dispatcher::singleton().findSchemaOrThrow("spatialgrad::" NAME, "").typed<SIG>(); \
    return handle;                                                                               \
  }())

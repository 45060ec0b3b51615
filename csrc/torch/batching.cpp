// functorch.vmap over spatialgrad's operators: the kernels for the FuncTorchBatched dispatch key (each operator
// picks its rule where it is defined: define_operator in common.h).
//
// Without one, functorch runs its per-sample fallback, which works but logs "There is a performance drop
// because we have not yet implemented the batching rule for spatialgrad::..." on every call (through glog,
// to stderr: Python's warning filters do not see it). Two rules instead:
// - Vmap::kFoldIntoBatch: the operators whose every image-like tensor argument leads with the image batch (N)
//   and treats the images independently get the vmapped dimension folded into N: one call of B * N images (an
//   input_size argument says B * N too), whose result is unfolded. Arguments not batched at this level are
//   expanded to the B samples; shared arguments (spatial_shapes, level_start_index) stay as they are, and if
//   they are batched the call loops instead.
// - Vmap::kPerSample: the others (boxes that carry batch indices, say) call the operator once per sample and
//   stack the results, as functorch's fallback does, without the log line.
// Each image is computed by the same kernel either way, so the bits match per-sample calls.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/functorch/DynamicLayer.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common.h"

namespace spatialgrad::torch_ops {

namespace {

// One call's arguments at the current vmap level: batched tensors unwrapped, their vmapped dimension first.
struct Unwrapped {
  torch::jit::Stack arguments;
  std::vector<bool> batched;  // per argument
  int64_t batch_size = -1;    // -1: no argument is batched at this level
  int64_t level = 0;
};

// The tensor under `t`'s batching at `level`, or nullptr if `t` is not batched at that level (the
// functorch helpers that do this are not exported by libtorch 1.13).
const at::functorch::BatchedTensorImpl* batched_at(const at::Tensor& t, int64_t level) {
  const at::functorch::BatchedTensorImpl* impl = at::functorch::maybeGetBatchedImpl(t);
  return impl != nullptr && impl->level() == level ? impl : nullptr;
}

Unwrapped unwrap(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Unwrapped call;
  call.level = at::functorch::maybeCurrentDynamicLayer()->layerId();
  call.arguments = torch::jit::pop(*stack, op.schema().arguments().size());
  call.batched.assign(call.arguments.size(), false);
  for (size_t i = 0; i < call.arguments.size(); ++i) {
    c10::IValue& argument = call.arguments[i];
    TORCH_CHECK(!argument.isTensorList(), op.schema().name(),
                "(): expected tensor arguments under vmap, but got a "
                "tensor list");
    const auto* batched = argument.isTensor() ? batched_at(argument.toTensor(), call.level) : nullptr;
    if (batched == nullptr) {
      continue;
    }
    call.batch_size = batched->value().size(batched->bdim());
    argument = batched->value().movedim(batched->bdim(), 0);
    call.batched[i] = true;
  }
  return call;
}

bool is_undefined(const c10::IValue& value) {
  return value.isNone() || (value.isTensor() && !value.toTensor().defined());
}

// The per-sample results of one return, stacked and batched at `level` (undefined stays undefined).
c10::IValue rebatch(const std::vector<c10::IValue>& samples, int64_t level) {
  if (std::all_of(samples.begin(), samples.end(), is_undefined)) {
    return at::Tensor();
  }
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& sample : samples) {
    TORCH_CHECK(!is_undefined(sample), "vmap: a spatialgrad operator returned a gradient for some samples only");
    tensors.push_back(sample.toTensor());
  }
  return at::functorch::makeBatched(at::stack(tensors), 0, level);
}

// The operator on each sample in turn, the results stacked.
void loop_over_samples(const c10::OperatorHandle& op, Unwrapped& call, torch::jit::Stack* stack) {
  const size_t returns = op.schema().returns().size();
  std::vector<std::vector<c10::IValue>> results(returns);
  for (int64_t b = 0; b < call.batch_size; ++b) {
    torch::jit::Stack sample = call.arguments;
    for (size_t i = 0; i < sample.size(); ++i) {
      if (call.batched[i]) {
        sample[i] = call.arguments[i].toTensor().select(0, b);
      }
    }
    op.callBoxed(&sample);
    for (size_t r = 0; r < returns; ++r) {
      results[r].push_back(std::move(sample[r]));
    }
  }
  for (const auto& samples : results) {
    torch::jit::push(*stack, rebatch(samples, call.level));
  }
}

// Arguments that do not lead with the image batch: shared by every image of the call.
bool is_shared(const std::string& name) { return name == "spatial_shapes" || name == "level_start_index"; }

// An argument that is the shape of an image-batch tensor (an input_size: N first).
bool is_batch_shape(const c10::Argument& argument) { return argument.name() == "input_size"; }

// The shape with B * N images.
c10::IValue folded_shape(const c10::IValue& shape, int64_t batch_size) {
  std::vector<int64_t> sizes = shape.toIntVector();
  sizes.at(0) *= batch_size;
  return sizes;
}

// The vmapped dimension folded into the image batch (B * N images), or false if a shared argument is batched.
bool fold_into_batch(const c10::OperatorHandle& op, Unwrapped& call, torch::jit::Stack* stack) {
  const auto& schema = op.schema().arguments();
  torch::jit::Stack folded = call.arguments;
  for (size_t i = 0; i < folded.size(); ++i) {
    if (is_batch_shape(schema[i])) {
      folded[i] = folded_shape(folded[i], call.batch_size);
      continue;
    }
    if (!folded[i].isTensor() || !folded[i].toTensor().defined() || is_shared(schema[i].name())) {
      if (call.batched[i]) {
        return false;
      }
      continue;
    }
    at::Tensor t = folded[i].toTensor();
    if (!call.batched[i]) {
      std::vector<int64_t> sizes = t.sizes().vec();
      sizes.insert(sizes.begin(), call.batch_size);
      t = t.unsqueeze(0).expand(sizes);
    }
    folded[i] = t.flatten(0, 1);
  }
  op.callBoxed(&folded);
  for (c10::IValue& result : folded) {
    if (is_undefined(result)) {
      torch::jit::push(*stack, at::Tensor());
      continue;
    }
    const at::Tensor out = result.toTensor();
    // (The per-sample size spelled out: -1 cannot be inferred from an output of no images.)
    const int64_t per_sample = call.batch_size > 0 ? out.size(0) / call.batch_size : 0;
    torch::jit::push(*stack,
                     at::functorch::makeBatched(out.unflatten(0, {call.batch_size, per_sample}), 0, call.level));
  }
  return true;
}

template <bool kFold>
void batched_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  Unwrapped call = unwrap(op, stack);
  if (call.batch_size < 0) {  // nothing batched at this level: the operator as it is
    op.callBoxed(&call.arguments);
    for (c10::IValue& result : call.arguments) {
      torch::jit::push(*stack, std::move(result));
    }
    return;
  }
  if (!kFold || !fold_into_batch(op, call, stack)) {
    loop_over_samples(op, call, stack);
  }
}

}  // namespace

torch::CppFunction batching_kernel(Vmap rule) {
  return rule == Vmap::kFoldIntoBatch ? torch::CppFunction::makeFromBoxedFunction<&batched_kernel<true>>()
                                      : torch::CppFunction::makeFromBoxedFunction<&batched_kernel<false>>();
}

}  // namespace spatialgrad::torch_ops

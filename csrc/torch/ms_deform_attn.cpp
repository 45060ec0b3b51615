// spatialgrad::ms_deform_attn, ms_deform_attn_backward (mmcv's argument order) and ms_deform_attn_double_backward:
// CPU kernels over the core, and autograd kernels. The backward differentiates into the second-order kernel,
// whose own derivative raises (third order is not implemented). spatial_shapes and level_start_index are
// integer tables: no gradient.
#include "spatialgrad/ms_deform_attn.h"

#include <torch/library.h>

#include <tuple>

#include "common.h"
#include "operators.h"  // the forward's schema, from operators.toml

// (A namespace of this file's own, around its anonymous one: see "Names" in common.h.)
namespace spatialgrad::torch_ops::ms_deform_attn_kernels {

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Quadruple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using OptionalTensor = c10::optional<at::Tensor>;

// mmcv casts the points and weights to value's dtype (AMP: a float16 value, float32 locations), and so does the
// operator (a copy only where they differ): their gradients come back in value's dtype, which autograd casts to
// theirs. (In the operator rather than the adapter, so that traced graphs record the call alone.)
at::Tensor in_value_dtype(const at::Tensor& t, const at::Tensor& value) {
  if (t.scalar_type() == value.scalar_type() || !t.is_floating_point() || !value.is_floating_point()) return t;
  const at::AutoDispatchBelowADInplaceOrView below_autograd;  // the copy is the kernel's, not a graph node
  return t.to(value.scalar_type());
}

// The five inputs' views, named as the core's messages name them; the locations and weights in value's dtype.
struct Inputs {
  at::Tensor sampling_locations, attention_weights;  // (what the views below read)
  TensorView value, spatial_shapes, level_start_index, locations, weights;
};

Inputs view_inputs(const char* op, const at::Tensor& value, const at::Tensor& spatial_shapes,
                   const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                   const at::Tensor& attention_weights) {
  Inputs in;
  in.sampling_locations = in_value_dtype(sampling_locations, value);
  in.attention_weights = in_value_dtype(attention_weights, value);
  in.value = view_of(value, op, "value");
  in.spatial_shapes = view_of(spatial_shapes, op, "spatial_shapes");
  in.level_start_index = view_of(level_start_index, op, "level_start_index");
  in.locations = view_of(in.sampling_locations, op, "sampling_locations");
  in.weights = view_of(in.attention_weights, op, "attention_weights");
  return in;
}

// mmcv's argument order, and the second-order kernel's: the forward's schema is schema::kMsDeformAttn
// (operators.h, from operators.toml), the others below.

at::Tensor forward_cpu(const at::Tensor& value, const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
                       const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
                       int64_t /*im2col_step: the CPU kernel does not batch columns*/) {
  Output out;
  run_kernel([&] {
    const Inputs in =
        view_inputs("ms_deform_attn", value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
    out = new_output(value, ms_deform_attn_output_shape(in.value.sizes(), in.locations.sizes()));
    ms_deform_attn(in.value, in.spatial_shapes, in.level_start_index, in.locations, in.weights,
                   out.view);
  });
  return out.tensor;
}

// The backward kernels' common start: the five inputs' and grad_output's views, checked before anything is
// allocated, and the gradients of value, sampling_locations and attention_weights allocated.
struct BackwardCall {
  Inputs in;
  TensorView grad_output;
  Output grad_value, grad_locations, grad_weights;
};

BackwardCall start_backward(const char* op, const at::Tensor& value, const at::Tensor& spatial_shapes,
                            const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                            const at::Tensor& attention_weights, const at::Tensor& grad_output) {
  BackwardCall call;
  call.in = view_inputs(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
  call.grad_output = view_of(grad_output, op, "grad_output");
  const Inputs& in = call.in;
  check_ms_deform_attn_backward(in.value, in.spatial_shapes, in.level_start_index, in.locations,
                                in.weights, call.grad_output, in.value, in.locations,
                                in.weights);
  call.grad_value = new_output(value, value.sizes());
  call.grad_locations = new_output(in.sampling_locations, sampling_locations.sizes());
  call.grad_weights = new_output(in.attention_weights, attention_weights.sizes());
  return call;
}

constexpr char kBackwardSchema[] =
    "ms_deform_attn_backward(Tensor value, Tensor spatial_shapes, Tensor level_start_index, "
    "Tensor sampling_locations, Tensor attention_weights, Tensor grad_output, int im2col_step=64) "
    "-> (Tensor, Tensor, Tensor)";

Triple backward_cpu(const at::Tensor& value, const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
                    const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
                    const at::Tensor& grad_output, int64_t /*im2col_step*/) {
  BackwardCall call;
  run_kernel([&] {
    call = start_backward("ms_deform_attn_backward", value, spatial_shapes, level_start_index, sampling_locations,
                          attention_weights, grad_output);
    const Inputs& in = call.in;
    ms_deform_attn_backward(in.value, in.spatial_shapes, in.level_start_index, in.locations,
                            in.weights, call.grad_output, call.grad_value.view, call.grad_locations.view,
                            call.grad_weights.view);
  });
  return {call.grad_value.tensor, call.grad_locations.tensor, call.grad_weights.tensor};
}

constexpr char kDoubleBackwardSchema[] =
    "ms_deform_attn_double_backward(Tensor value, Tensor spatial_shapes, Tensor level_start_index, "
    "Tensor sampling_locations, Tensor attention_weights, Tensor grad_output, Tensor? grad_grad_value, "
    "Tensor? grad_grad_sampling_locations, Tensor? grad_grad_attention_weights) -> (Tensor, Tensor, Tensor, Tensor)";

// Its outputs: d(value), d(sampling_locations), d(attention_weights), d(grad_output).
Quadruple double_backward_cpu(const at::Tensor& value, const at::Tensor& spatial_shapes,
                              const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                              const at::Tensor& attention_weights, const at::Tensor& grad_output,
                              const OptionalTensor& grad_grad_value, const OptionalTensor& grad_grad_sampling_locations,
                              const OptionalTensor& grad_grad_attention_weights) {
  BackwardCall call;
  Output d_grad_output;
  run_kernel([&] {
    const char* op = "ms_deform_attn_double_backward";
    call = start_backward(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                          grad_output);
    d_grad_output = new_output(grad_output, grad_output.sizes());
    const Inputs& in = call.in;
    ms_deform_attn_double_backward(
        in.value, in.spatial_shapes, in.level_start_index, in.locations, in.weights,
        call.grad_output, view_of(grad_grad_value, op, "grad_grad_value"),
        view_of(grad_grad_sampling_locations, op, "grad_grad_sampling_locations"),
        view_of(grad_grad_attention_weights, op, "grad_grad_attention_weights"), call.grad_value.view,
        call.grad_locations.view, call.grad_weights.view, d_grad_output.view);
  });
  return {call.grad_value.tensor, call.grad_locations.tensor, call.grad_weights.tensor, d_grad_output.tensor};
}

// The kernels' C++ signatures, for typed calls through the dispatcher.
using BackwardSig = decltype(backward_cpu);
using DoubleBackwardSig = decltype(double_backward_cpu);

OptionalTensor cotangent(const at::Tensor& grad) { return grad.defined() ? OptionalTensor(grad) : c10::nullopt; }

// The forward's gradients: the backward kernel over the saved inputs (value, the two index tensors, locations and
// weights), which computes all three.
struct MsDeformAttnCall {
  static constexpr const char* kName = "spatialgrad::MsDeformAttn";

  template <class... Arguments>
  static MsDeformAttnCall of(const at::Tensor& /*out*/, const Arguments&... /*arguments*/) {
    return {};
  }
  static variable_list saved(const at::Tensor& value, const at::Tensor& spatial_shapes,
                             const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                             const at::Tensor& attention_weights, int64_t /*im2col_step*/) {
    return {value, spatial_shapes, level_start_index, sampling_locations, attention_weights};
  }

  variable_list backward(const variable_list& grads, const variable_list& s, const std::vector<bool>& /*wanted*/) const {
    const Triple g = operator_of<kBackwardSchema, BackwardSig>().call(s[0], s[1], s[2], s[3], s[4], grads[0], 64);
    return {std::get<0>(g), {}, {}, std::get<1>(g), std::get<2>(g)};
  }
};

// The backward's gradients: the second-order kernel, with the cotangents of its three gradients.
struct MsDeformAttnBackwardCall {
  static constexpr const char* kName = "spatialgrad::MsDeformAttnBackward";

  template <class... Arguments>
  static MsDeformAttnBackwardCall of(const Triple& /*out*/, const Arguments&... /*arguments*/) {
    return {};
  }
  static variable_list saved(const at::Tensor& value, const at::Tensor& spatial_shapes,
                             const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                             const at::Tensor& attention_weights, const at::Tensor& grad_output,
                             int64_t /*im2col_step*/) {
    return {value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_output};
  }

  variable_list backward(const variable_list& grads, const variable_list& s, const std::vector<bool>& /*wanted*/) const {
    const Quadruple d = operator_of<kDoubleBackwardSchema, DoubleBackwardSig>().call(
        s[0], s[1], s[2], s[3], s[4], s[5], cotangent(grads[0]), cotangent(grads[1]), cotangent(grads[2]));
    return {std::get<0>(d), {}, {}, std::get<1>(d), std::get<2>(d), std::get<3>(d)};
  }
};

using MsDeformAttnDoubleBackwardCall =
    SecondOrderCall<name::kMsDeformAttnDoubleBackwardNode, kDoubleBackwardSchema, name::kMsDeformAttn>;

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  // spatial_shapes and level_start_index are shared by the images of a call (batching.cpp).
  define_operator(m, Vmap::kFoldIntoBatch, kernel<MsDeformAttnCall, &forward_cpu, schema::kMsDeformAttn>(),
                  kernel<MsDeformAttnBackwardCall, &backward_cpu, kBackwardSchema>(),
                  kernel<MsDeformAttnDoubleBackwardCall, &double_backward_cpu, kDoubleBackwardSchema>());
  // No autocast policy (Autocast::kNone): it runs in the dtypes it is given, as mmcv's.
}

}  // namespace spatialgrad::torch_ops::ms_deform_attn_kernels

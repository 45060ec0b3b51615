// spatialgrad::ms_deform_attn, ms_deform_attn_backward (mmcv's argument order) and ms_deform_attn_double_backward:
// CPU kernels over the core, and autograd kernels. The backward differentiates into the second-order kernel,
// whose own derivative raises (third order is not implemented). spatial_shapes and level_start_index are
// integer tables: no gradient.
#include "spatialgrad/ms_deform_attn.h"

#include <torch/library.h>

#include <tuple>

#include "common.h"

namespace spatialgrad::torch_ops {

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Quadruple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using OptionalTensor = c10::optional<at::Tensor>;

// The five inputs' views, named as the core's messages name them.
struct Inputs {
  TensorView value, spatial_shapes, level_start_index, sampling_locations, attention_weights;
};

Inputs view_inputs(const char* op, const at::Tensor& value, const at::Tensor& spatial_shapes,
                   const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                   const at::Tensor& attention_weights) {
  return {view_of(value, op, "value"), view_of(spatial_shapes, op, "spatial_shapes"),
          view_of(level_start_index, op, "level_start_index"), view_of(sampling_locations, op, "sampling_locations"),
          view_of(attention_weights, op, "attention_weights")};
}

at::Tensor forward_cpu(const at::Tensor& value, const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
                       const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
                       int64_t /*im2col_step: the CPU kernel does not batch columns*/) {
  Output out;
  run_kernel([&] {
    const Inputs in =
        view_inputs("ms_deform_attn", value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
    out = new_output(value, ms_deform_attn_output_shape(in.value.sizes(), in.sampling_locations.sizes()));
    ms_deform_attn(in.value, in.spatial_shapes, in.level_start_index, in.sampling_locations, in.attention_weights,
                   out.view);
  });
  return out.tensor;
}

Triple backward_cpu(const at::Tensor& value, const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
                    const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
                    const at::Tensor& grad_output, int64_t /*im2col_step*/) {
  Output grad_value, grad_locations, grad_weights;
  run_kernel([&] {
    const char* op = "ms_deform_attn_backward";
    const Inputs in = view_inputs(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
    const TensorView go = view_of(grad_output, op, "grad_output");
    check_ms_deform_attn_backward(in.value, in.spatial_shapes, in.level_start_index, in.sampling_locations,
                                  in.attention_weights, go, in.value, in.sampling_locations, in.attention_weights);
    grad_value = new_output(value, value.sizes());
    grad_locations = new_output(sampling_locations, sampling_locations.sizes());
    grad_weights = new_output(attention_weights, attention_weights.sizes());
    ms_deform_attn_backward(in.value, in.spatial_shapes, in.level_start_index, in.sampling_locations,
                            in.attention_weights, go, grad_value.view, grad_locations.view, grad_weights.view);
  });
  return {grad_value.tensor, grad_locations.tensor, grad_weights.tensor};
}

Quadruple double_backward_cpu(const at::Tensor& value, const at::Tensor& spatial_shapes,
                              const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                              const at::Tensor& attention_weights, const at::Tensor& grad_output,
                              const OptionalTensor& grad_grad_value, const OptionalTensor& grad_grad_sampling_locations,
                              const OptionalTensor& grad_grad_attention_weights) {
  Output d_value, d_locations, d_weights, d_grad_output;
  run_kernel([&] {
    const char* op = "ms_deform_attn_double_backward";
    const Inputs in = view_inputs(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
    const TensorView go = view_of(grad_output, op, "grad_output");
    check_ms_deform_attn_backward(in.value, in.spatial_shapes, in.level_start_index, in.sampling_locations,
                                  in.attention_weights, go, in.value, in.sampling_locations, in.attention_weights);
    d_value = new_output(value, value.sizes());
    d_locations = new_output(sampling_locations, sampling_locations.sizes());
    d_weights = new_output(attention_weights, attention_weights.sizes());
    d_grad_output = new_output(grad_output, grad_output.sizes());
    ms_deform_attn_double_backward(
        in.value, in.spatial_shapes, in.level_start_index, in.sampling_locations, in.attention_weights, go,
        view_of(grad_grad_value, op, "grad_grad_value"),
        view_of(grad_grad_sampling_locations, op, "grad_grad_sampling_locations"),
        view_of(grad_grad_attention_weights, op, "grad_grad_attention_weights"), d_value.view, d_locations.view,
        d_weights.view, d_grad_output.view);
  });
  return {d_value.tensor, d_locations.tensor, d_weights.tensor, d_grad_output.tensor};
}

using BackwardSig = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, const at::Tensor&, int64_t);
using DoubleBackwardSig = Quadruple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const at::Tensor&, const at::Tensor&, const OptionalTensor&,
                                    const OptionalTensor&, const OptionalTensor&);

OptionalTensor cotangent(const at::Tensor& grad) { return grad.defined() ? OptionalTensor(grad) : c10::nullopt; }

struct MsDeformAttn : torch::autograd::Function<MsDeformAttn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& value, const at::Tensor& spatial_shapes,
                            const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                            const at::Tensor& attention_weights, int64_t im2col_step) {
    ctx->save_for_backward({value, spatial_shapes, level_start_index, sampling_locations, attention_weights});
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // on to functorch's batching kernels (vmap)
    return SG_OPERATOR("ms_deform_attn", signature::MsDeformAttn)
        .call(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, im2col_step);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const Triple g = SG_OPERATOR("ms_deform_attn_backward", BackwardSig).call(s[0], s[1], s[2], s[3], s[4], grads[0], 64);
    return {std::get<0>(g), {}, {}, std::get<1>(g), std::get<2>(g), {}};
  }
};

struct MsDeformAttnBackward : torch::autograd::Function<MsDeformAttnBackward> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& value, const at::Tensor& spatial_shapes,
                               const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                               const at::Tensor& attention_weights, const at::Tensor& grad_output,
                               int64_t im2col_step) {
    ctx->save_for_backward(
        {value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_output});
    ctx->set_materialize_grads(false);  // an absent cotangent stays absent (zeros) down to the kernel
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // on to functorch's batching kernels (vmap)
    const Triple g = SG_OPERATOR("ms_deform_attn_backward", BackwardSig)
                         .call(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                               grad_output, im2col_step);
    return {std::get<0>(g), std::get<1>(g), std::get<2>(g)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined() && !grads[1].defined() && !grads[2].defined()) return variable_list(7);
    const variable_list s = ctx->get_saved_variables();
    const Quadruple d = SG_OPERATOR("ms_deform_attn_double_backward", DoubleBackwardSig)
                            .call(s[0], s[1], s[2], s[3], s[4], s[5], cotangent(grads[0]), cotangent(grads[1]),
                                  cotangent(grads[2]));
    return {std::get<0>(d), {}, {}, std::get<1>(d), std::get<2>(d), std::get<3>(d), {}};
  }
};

struct MsDeformAttnDoubleBackward : torch::autograd::Function<MsDeformAttnDoubleBackward> {
  static variable_list forward(AutogradContext* /*ctx*/, const at::Tensor& value, const at::Tensor& spatial_shapes,
                               const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                               const at::Tensor& attention_weights, const at::Tensor& grad_output,
                               const OptionalTensor& grad_grad_value, const OptionalTensor& grad_grad_sampling_locations,
                               const OptionalTensor& grad_grad_attention_weights) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // on to functorch's batching kernels (vmap)
    const Quadruple d = SG_OPERATOR("ms_deform_attn_double_backward", DoubleBackwardSig)
                            .call(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                                  grad_output, grad_grad_value, grad_grad_sampling_locations,
                                  grad_grad_attention_weights);
    return {std::get<0>(d), std::get<1>(d), std::get<2>(d), std::get<3>(d)};
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list /*grads*/) {
    raise_no_third_order("ms_deform_attn_double_backward", "ms_deform_attn");
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(spatialgrad, CPU, m) {
  m.impl("ms_deform_attn", &forward_cpu);
  m.impl("ms_deform_attn_backward", &backward_cpu);
  m.impl("ms_deform_attn_double_backward", &double_backward_cpu);
}

TORCH_LIBRARY_IMPL(spatialgrad, AutogradCPU, m) {
  m.impl("ms_deform_attn", [](const at::Tensor& value, const at::Tensor& spatial_shapes,
                              const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                              const at::Tensor& attention_weights, int64_t im2col_step) {
    return apply_or_compute<MsDeformAttn>(forward_cpu, value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                          im2col_step);
  });
  m.impl("ms_deform_attn_backward",
         [](const at::Tensor& value, const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
            const at::Tensor& sampling_locations, const at::Tensor& attention_weights, const at::Tensor& grad_output,
            int64_t im2col_step) {
           if (computes_directly(value, sampling_locations, attention_weights, grad_output)) {
             return backward_cpu(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                                 grad_output, im2col_step);
           }
           const variable_list g = MsDeformAttnBackward::apply(value, spatial_shapes, level_start_index, sampling_locations,
                                                   attention_weights, grad_output, im2col_step);
           return Triple(g[0], g[1], g[2]);
         });
  m.impl("ms_deform_attn_double_backward",
         [](const at::Tensor& value, const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
            const at::Tensor& sampling_locations, const at::Tensor& attention_weights, const at::Tensor& grad_output,
            const OptionalTensor& grad_grad_value, const OptionalTensor& grad_grad_sampling_locations,
            const OptionalTensor& grad_grad_attention_weights) {
           if (computes_directly(value, sampling_locations, attention_weights, grad_output, grad_grad_value,
                              grad_grad_sampling_locations, grad_grad_attention_weights)) {
             return double_backward_cpu(value, spatial_shapes, level_start_index, sampling_locations,
                                        attention_weights, grad_output, grad_grad_value, grad_grad_sampling_locations,
                                        grad_grad_attention_weights);
           }
           const variable_list d = MsDeformAttnDoubleBackward::apply(value, spatial_shapes, level_start_index, sampling_locations,
                                                         attention_weights, grad_output, grad_grad_value,
                                                         grad_grad_sampling_locations, grad_grad_attention_weights);
           return Quadruple(d[0], d[1], d[2], d[3]);
         });
}

}  // namespace spatialgrad::torch_ops

// spatialgrad::grid_sampler_2d, grid_sampler_2d_backward (aten's schemas) and grid_sampler_2d_double_backward:
// CPU kernels over the core, and autograd kernels. The backward differentiates into the second-order kernel,
// whose own derivative raises (third order is not implemented). Only requested gradients are computed.
#include "spatialgrad/grid_sampler_2d.h"

#include <torch/library.h>

#include <array>
#include <tuple>

#include "common.h"

namespace spatialgrad::torch_ops {

namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using OptionalTensor = c10::optional<at::Tensor>;

at::Tensor forward_cpu(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                       int64_t padding_mode, bool align_corners) {
  Output out;
  run_kernel([&] {
    const GridSampler2dParams params = grid_sampler_2d_params(interpolation_mode, padding_mode, align_corners);
    const TensorView in = view_of(input, "grid_sampler_2d", "input");
    const TensorView gr = view_of(grid, "grid_sampler_2d", "grid");
    out = new_output(input, grid_sampler_2d_output_shape(in.sizes(), gr.sizes()));
    grid_sampler_2d(in, gr, out.view, params);
  });
  return out.tensor;
}

Pair backward_cpu(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
                  int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                  std::array<bool, 2> output_mask) {
  Output grad_input, grad_grid;
  run_kernel([&] {
    const GridSampler2dParams params = grid_sampler_2d_params(interpolation_mode, padding_mode, align_corners);
    const char* op = "grid_sampler_2d_backward";
    const TensorView go = view_of(grad_output, op, "grad_output");
    const TensorView in = view_of(input, op, "input");
    const TensorView gr = view_of(grid, op, "grid");
    // Arguments checked before anything is allocated; the kernel checks everything again.
    check_grid_sampler_2d_backward(go, in, gr, TensorView(), TensorView(), params, {false, false});
    grad_input = new_output_if(output_mask[0], input, input.sizes());
    grad_grid = new_output_if(output_mask[1], grid, grid.sizes());
    grid_sampler_2d_backward(go, in, gr, grad_input.view, grad_grid.view, params, {output_mask[0], output_mask[1]});
  });
  return {grad_input.tensor, grad_grid.tensor};
}

Triple double_backward_cpu(const OptionalTensor& grad_grad_input, const OptionalTensor& grad_grad_grid,
                           const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
                           int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                           std::array<bool, 3> output_mask) {
  Output d_grad_output, d_input, d_grid;
  run_kernel([&] {
    const GridSampler2dParams params = grid_sampler_2d_params(interpolation_mode, padding_mode, align_corners);
    const char* op = "grid_sampler_2d_double_backward";
    const TensorView ggi = view_of(grad_grad_input, op, "grad_grad_input");
    const TensorView ggg = view_of(grad_grad_grid, op, "grad_grad_grid");
    const TensorView go = view_of(grad_output, op, "grad_output");
    const TensorView in = view_of(input, op, "input");
    const TensorView gr = view_of(grid, op, "grid");
    grid_sampler_2d_output_shape(in.sizes(), gr.sizes());  // shapes checked before allocating
    d_grad_output = new_output_if(output_mask[0], grad_output, grad_output.sizes());
    d_input = new_output_if(output_mask[1], input, input.sizes());
    d_grid = new_output_if(output_mask[2], grid, grid.sizes());
    grid_sampler_2d_double_backward(ggi, ggg, go, in, gr, d_grad_output.view, d_input.view, d_grid.view, params,
                                    {output_mask[0], output_mask[1], output_mask[2]});
  });
  return {d_grad_output.tensor, d_input.tensor, d_grid.tensor};
}

using BackwardSig = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t, bool,
                         std::array<bool, 2>);
using DoubleBackwardSig = Triple(const OptionalTensor&, const OptionalTensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&, int64_t, int64_t, bool, std::array<bool, 3>);

void save_modes(AutogradContext* ctx, int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
  save_options(ctx, {interpolation_mode, padding_mode, align_corners});
}

// A plain call's node (RecordedNode): the modes, and the gradients through the backward operator.
struct GridSampler2dCall {
  static constexpr const char* kName = "spatialgrad::GridSampler2d";
  int64_t interpolation_mode, padding_mode;
  bool align_corners;

  variable_list backward(const at::Tensor& grad, const variable_list& saved, const std::vector<bool>& wanted) const {
    if (!wanted[0] && !wanted[1]) return {{}, {}};
    const std::array<bool, 2> mask{wanted[0], wanted[1]};
    // Without create_graph, plain tensors go straight to the CPU kernel (what the dispatcher would reach).
    const Pair g = computes_directly(grad, saved[0], saved[1])
                       ? backward_cpu(grad, saved[0], saved[1], interpolation_mode, padding_mode, align_corners, mask)
                       : SG_OPERATOR("grid_sampler_2d_backward", BackwardSig)
                             .call(grad, saved[0], saved[1], interpolation_mode, padding_mode, align_corners, mask);
    return {std::get<0>(g), std::get<1>(g)};
  }
};

struct GridSampler2d : torch::autograd::Function<GridSampler2d> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& grid,
                            int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
    save_modes(ctx, interpolation_mode, padding_mode, align_corners);
    ctx->save_for_backward({input, grid});
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // on to functorch's batching kernels (vmap)
    return SG_OPERATOR("grid_sampler_2d", signature::GridSampler2d)
        .call(input, grid, interpolation_mode, padding_mode, align_corners);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Pair grad = SG_OPERATOR("grid_sampler_2d_backward", BackwardSig)
                          .call(grads[0], saved[0], saved[1], saved_option(ctx, 0).toInt(),
                                saved_option(ctx, 1).toInt(), saved_option(ctx, 2).toBool(),
                                {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
    return {std::get<0>(grad), std::get<1>(grad), {}, {}, {}};
  }
};

struct GridSampler2dBackward : torch::autograd::Function<GridSampler2dBackward> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad_output, const at::Tensor& input,
                               const at::Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
                               bool align_corners, std::array<bool, 2> output_mask) {
    save_modes(ctx, interpolation_mode, padding_mode, align_corners);
    ctx->saved_data["output_mask"] = c10::List<bool>({output_mask[0], output_mask[1]});
    ctx->save_for_backward({grad_output, input, grid});
    ctx->set_materialize_grads(false);  // an absent cotangent stays absent (zeros) down to the kernel
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // on to functorch's batching kernels (vmap)
    const Pair grad = SG_OPERATOR("grid_sampler_2d_backward", BackwardSig)
                          .call(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
                                output_mask);
    return computed_only({std::get<0>(grad), std::get<1>(grad)});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const c10::List<bool> mask = ctx->saved_data["output_mask"].toBoolList();
    // A gradient the backward did not compute has no cotangent.
    const variable_list placed = in_places(grads, {mask[0], mask[1]});
    const auto cotangent = [](const at::Tensor& g) { return g.defined() ? OptionalTensor(g) : c10::nullopt; };
    const OptionalTensor u = cotangent(placed[0]);
    const OptionalTensor v = cotangent(placed[1]);
    if (!u && !v) return variable_list(7);
    const variable_list saved = ctx->get_saved_variables();
    const Triple d = SG_OPERATOR("grid_sampler_2d_double_backward", DoubleBackwardSig)
                         .call(u, v, saved[0], saved[1], saved[2], saved_option(ctx, 0).toInt(),
                               saved_option(ctx, 1).toInt(), saved_option(ctx, 2).toBool(),
                               {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)});
    return {std::get<0>(d), std::get<1>(d), std::get<2>(d), {}, {}, {}, {}};
  }
};

struct GridSampler2dDoubleBackward : torch::autograd::Function<GridSampler2dDoubleBackward> {
  static variable_list forward(AutogradContext* /*ctx*/, const OptionalTensor& grad_grad_input,
                               const OptionalTensor& grad_grad_grid, const at::Tensor& grad_output,
                               const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                               int64_t padding_mode, bool align_corners, std::array<bool, 3> output_mask) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // on to functorch's batching kernels (vmap)
    const Triple d = SG_OPERATOR("grid_sampler_2d_double_backward", DoubleBackwardSig)
                         .call(grad_grad_input, grad_grad_grid, grad_output, input, grid, interpolation_mode,
                               padding_mode, align_corners, output_mask);
    return computed_only({std::get<0>(d), std::get<1>(d), std::get<2>(d)});
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list /*grads*/) {
    raise_no_third_order("grid_sampler_2d_double_backward", "grid_sample");
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(spatialgrad, CPU, m) {
  m.impl("grid_sampler_2d", &forward_cpu);
  m.impl("grid_sampler_2d_backward", &backward_cpu);
  m.impl("grid_sampler_2d_double_backward", &double_backward_cpu);
}

TORCH_LIBRARY_IMPL(spatialgrad, AutogradCPU, m) {
  m.impl("grid_sampler_2d", [](const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                               int64_t padding_mode, bool align_corners) {
    if (records_plainly(input, grid)) {
      return record_call(GridSampler2dCall{interpolation_mode, padding_mode, align_corners},
                         forward_cpu(input, grid, interpolation_mode, padding_mode, align_corners), {input, grid});
    }
    return apply_or_compute<GridSampler2d>(forward_cpu, input, grid, interpolation_mode, padding_mode, align_corners);
  });
  m.impl("grid_sampler_2d_backward",
         [](const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
            int64_t interpolation_mode, int64_t padding_mode, bool align_corners, std::array<bool, 2> output_mask) {
           if (computes_directly(grad_output, input, grid)) {
             return backward_cpu(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask);
           }
           const variable_list grad = in_places(GridSampler2dBackward::apply(grad_output, input, grid, interpolation_mode,
                                                                padding_mode, align_corners, output_mask),
                                                output_mask);
           return Pair(grad[0], grad[1]);
         });
  m.impl("grid_sampler_2d_double_backward",
         [](const OptionalTensor& grad_grad_input, const OptionalTensor& grad_grad_grid, const at::Tensor& grad_output,
            const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
            bool align_corners, std::array<bool, 3> output_mask) {
           if (computes_directly(grad_grad_input, grad_grad_grid, grad_output, input, grid)) {
             return double_backward_cpu(grad_grad_input, grad_grad_grid, grad_output, input, grid, interpolation_mode,
                                        padding_mode, align_corners, output_mask);
           }
           const variable_list d =
               in_places(GridSampler2dDoubleBackward::apply(grad_grad_input, grad_grad_grid, grad_output, input, grid,
                                               interpolation_mode, padding_mode, align_corners, output_mask),
                         output_mask);
           return Triple(d[0], d[1], d[2]);
         });
}

}  // namespace spatialgrad::torch_ops

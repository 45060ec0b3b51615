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

// aten's schemas, and the second-order kernel's.
constexpr char kForwardSchema[] =
    "grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) "
    "-> Tensor";

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

// The backward kernels' tensors: grad_output, input and grid, viewed in `op`'s words.
struct BackwardViews {
  TensorView grad_output, input, grid;
};

BackwardViews view_backward_args(const char* op, const at::Tensor& grad_output, const at::Tensor& input,
                                 const at::Tensor& grid) {
  return {view_of(grad_output, op, "grad_output"), view_of(input, op, "input"), view_of(grid, op, "grid")};
}

constexpr char kBackwardSchema[] =
    "grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, "
    "int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)";

Pair backward_cpu(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
                  int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                  std::array<bool, 2> output_mask) {
  Output grad_input, grad_grid;
  run_kernel([&] {
    const GridSampler2dParams params = grid_sampler_2d_params(interpolation_mode, padding_mode, align_corners);
    const BackwardViews v = view_backward_args("grid_sampler_2d_backward", grad_output, input, grid);
    // Arguments checked before anything is allocated; the kernel checks everything again.
    check_grid_sampler_2d_backward(v.grad_output, v.input, v.grid, TensorView(), TensorView(), params, {false, false});
    grad_input = new_output_if(output_mask[0], input, input.sizes());
    grad_grid = new_output_if(output_mask[1], grid, grid.sizes());
    grid_sampler_2d_backward(v.grad_output, v.input, v.grid, grad_input.view, grad_grid.view, params,
                             {output_mask[0], output_mask[1]});
  });
  return {grad_input.tensor, grad_grid.tensor};
}

constexpr char kDoubleBackwardSchema[] =
    "grid_sampler_2d_double_backward(Tensor? grad_grad_input, Tensor? grad_grad_grid, Tensor grad_output, "
    "Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, bool[3] output_mask) "
    "-> (Tensor, Tensor, Tensor)";

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
    const BackwardViews v = view_backward_args(op, grad_output, input, grid);
    grid_sampler_2d_output_shape(v.input.sizes(), v.grid.sizes());  // shapes checked before allocating
    d_grad_output = new_output_if(output_mask[0], grad_output, grad_output.sizes());
    d_input = new_output_if(output_mask[1], input, input.sizes());
    d_grid = new_output_if(output_mask[2], grid, grid.sizes());
    grid_sampler_2d_double_backward(ggi, ggg, v.grad_output, v.input, v.grid, d_grad_output.view, d_input.view,
                                    d_grid.view, params, {output_mask[0], output_mask[1], output_mask[2]});
  });
  return {d_grad_output.tensor, d_input.tensor, d_grid.tensor};
}

// The kernels' C++ signatures, for typed calls through the dispatcher.
using BackwardSig = decltype(backward_cpu);
using DoubleBackwardSig = decltype(double_backward_cpu);

void save_modes(AutogradContext* ctx, int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
  save_options(ctx, {interpolation_mode, padding_mode, align_corners});
}

// A plain call's node (RecordedNode): the modes, and the gradients through the backward operator.
struct GridSampler2dCall {
  static constexpr const char* kName = "spatialgrad::GridSampler2d";
  int64_t interpolation_mode, padding_mode;
  bool align_corners;

  static GridSampler2dCall of(const at::Tensor& /*input*/, const at::Tensor& /*grid*/, int64_t interpolation_mode,
                              int64_t padding_mode, bool align_corners) {
    return {interpolation_mode, padding_mode, align_corners};
  }

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
    return call_below_autograd(SG_OPERATOR("grid_sampler_2d", signature::GridSampler2d), input, grid,
                               interpolation_mode, padding_mode, align_corners);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Pair grad =
        SG_OPERATOR("grid_sampler_2d_backward", BackwardSig)
            .call(grads[0], saved[0], saved[1], saved_option(ctx, 0).toInt(), saved_option(ctx, 1).toInt(),
                  saved_option(ctx, 2).toBool(), {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
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
    const Pair grad = call_below_autograd(SG_OPERATOR("grid_sampler_2d_backward", BackwardSig), grad_output, input,
                                          grid, interpolation_mode, padding_mode, align_corners, output_mask);
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

// The forward's name in spatialgrad.torch, for the message of a third derivative.
constexpr char kOperatorName[] = "grid_sample";

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  define_operator(m, Vmap::kFoldIntoBatch,
                  recorded_kernel<GridSampler2d, GridSampler2dCall, &forward_cpu>(kForwardSchema),
                  kernel<GridSampler2dBackward, &backward_cpu>(kBackwardSchema),
                  second_order_kernel<&double_backward_cpu, kDoubleBackwardSchema, kOperatorName>());
}

}  // namespace spatialgrad::torch_ops

// spatialgrad::grid_sampler_2d, grid_sampler_2d_backward (aten's schemas) and grid_sampler_2d_double_backward:
// CPU kernels over the core, and autograd kernels. The backward differentiates into the second-order kernel,
// whose own derivative raises (third order is not implemented). Only requested gradients are computed.
#include "spatialgrad/grid_sampler_2d.h"

#include <torch/library.h>

#include <array>
#include <tuple>

#include "common.h"
#include "operators.h"  // the forward's schema, from operators.toml

// (A namespace of this file's own, around its anonymous one: see "Names" in common.h.)
namespace spatialgrad::torch_ops::grid_sampler_2d_kernels {

namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using OptionalTensor = c10::optional<at::Tensor>;

// aten's schemas, and the second-order kernel's: the forward's is schema::kGridSampler2d (operators.h, from
// operators.toml), the others below.

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

using BackwardSig = decltype(backward_cpu);
using DoubleBackwardSig = decltype(double_backward_cpu);

// The sampling modes of a call, which every kernel's gradient passes on.
struct Modes {
  int64_t interpolation_mode, padding_mode;
  bool align_corners;
};

// The forward's gradients: the backward kernel over the saved input and grid, only those wanted.
struct GridSampler2dCall {
  static constexpr const char* kName = "spatialgrad::GridSampler2d";
  Modes modes;

  static GridSampler2dCall of(const at::Tensor& /*out*/, const at::Tensor& /*input*/, const at::Tensor& /*grid*/,
                              int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
    return {{interpolation_mode, padding_mode, align_corners}};
  }
  template <class... Options>
  static variable_list saved(const at::Tensor& input, const at::Tensor& grid, const Options&... /*options*/) {
    return {input, grid};
  }

  variable_list backward(const variable_list& grads, const variable_list& saved, const std::vector<bool>& wanted) const {
    const std::array<bool, 2> mask{wanted[0], wanted[1]};
    if (!mask[0] && !mask[1]) return {{}, {}};
    const Modes& m = modes;
    // Without create_graph, plain tensors go straight to the CPU kernel (what the dispatcher would reach).
    const Pair g = computes_without_graph(grads[0], saved[0], saved[1])
                       ? backward_cpu(grads[0], saved[0], saved[1], m.interpolation_mode, m.padding_mode,
                                      m.align_corners, mask)
                       : operator_of<kBackwardSchema, BackwardSig>().call(
                             grads[0], saved[0], saved[1], m.interpolation_mode, m.padding_mode, m.align_corners, mask);
    return {std::get<0>(g), std::get<1>(g)};
  }
};

// The backward's gradients: the second-order kernel, with the cotangents of the gradients it computed.
struct GridSampler2dBackwardCall {
  static constexpr const char* kName = "spatialgrad::GridSampler2dBackward";
  Modes modes;

  static GridSampler2dBackwardCall of(const Pair& /*out*/, const at::Tensor& /*grad_output*/,
                                      const at::Tensor& /*input*/, const at::Tensor& /*grid*/,
                                      int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                                      std::array<bool, 2> /*output_mask*/) {
    return {{interpolation_mode, padding_mode, align_corners}};
  }
  template <class... Options>
  static variable_list saved(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
                             const Options&... /*options*/) {
    return {grad_output, input, grid};
  }

  variable_list backward(const variable_list& grads, const variable_list& saved, const std::vector<bool>& wanted) const {
    // A gradient the backward did not compute (its output_mask) has no cotangent.
    const auto cotangent = [](const at::Tensor& g) { return g.defined() ? OptionalTensor(g) : c10::nullopt; };
    const Modes& m = modes;
    const Triple d = operator_of<kDoubleBackwardSchema, DoubleBackwardSig>().call(
        cotangent(grads[0]), cotangent(grads[1]), saved[0], saved[1], saved[2], m.interpolation_mode, m.padding_mode,
        m.align_corners, {wanted[0], wanted[1], wanted[2]});
    return {std::get<0>(d), std::get<1>(d), std::get<2>(d)};
  }
};

using GridSampler2dDoubleBackwardCall =
    SecondOrderCall<name::kGridSampler2dDoubleBackwardNode, kDoubleBackwardSchema, name::kGridSampler2d>;

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  define_operator(m, Vmap::kFoldIntoBatch, kernel<GridSampler2dCall, &forward_cpu, schema::kGridSampler2d>(),
                  kernel<GridSampler2dBackwardCall, &backward_cpu, kBackwardSchema>(),
                  kernel<GridSampler2dDoubleBackwardCall, &double_backward_cpu, kDoubleBackwardSchema>());
  define_autocast(m, "grid_sampler_2d", Autocast::kFloat32);  // as aten's grid_sampler
}

}  // namespace spatialgrad::torch_ops::grid_sampler_2d_kernels

// 2-D grid sampling (aclnnGridSampler2D / aclnnGridSampler2DBackward, PyTorch grid_sampler_2d semantics).
//
// Shapes: input (N, C, H, W), grid (N, Ho, Wo, 2), output / grad_output (N, C, Ho, Wo).
// grid[n, ho, wo, 0] is x (along W) and grid[..., 1] is y (along H), normalised so that -1 and +1 are
// the outer edges of the image (align_corners = false) or the centres of the corner pixels (true).
#pragma once

#include <cstdint>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad {

// The aclnn integers of the two mode arguments.
enum class GridSamplerInterpolation : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class GridSamplerPadding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

// The modes are typed; a value outside the enumerators (an aclnn integer cast in) is rejected by every entry.
struct GridSampler2dParams {
  GridSamplerInterpolation interpolation_mode = GridSamplerInterpolation::kBilinear;
  GridSamplerPadding padding_mode = GridSamplerPadding::kZeros;
  bool align_corners = false;
};

// Params from the modes as PyTorch's grid_sampler_2d passes them (integers 0, 1, 2 in the enumerators' order),
// for the bindings that receive them so; a value outside the enumerators is rejected by the kernels' checks.
inline GridSampler2dParams grid_sampler_2d_params(int64_t interpolation_mode, int64_t padding_mode,
                                                  bool align_corners) {
  return {static_cast<GridSamplerInterpolation>(interpolation_mode), static_cast<GridSamplerPadding>(padding_mode),
          align_corners};
}

// (N, C, Ho, Wo) for input (N, C, H, W) and grid (N, Ho, Wo, 2); validates ranks and sizes.
std::vector<int64_t> grid_sampler_2d_output_shape(const std::vector<int64_t>& input_shape,
                                                  const std::vector<int64_t>& grid_shape);

// output[n, c, ho, wo] = input[n, c] sampled at grid[n, ho, wo]. All views share one dtype.
void grid_sampler_2d(const TensorView& input, const TensorView& grid, const TensorView& output,
                     const GridSampler2dParams& params);

// Gradients of sum(grad_output * grid_sampler_2d(input, grid)) with respect to input (grad_input, shaped
// like input) and grid (grad_grid, shaped like grid). output_mask = {want grad_input, want grad_grid}
// (exactly 2 entries): an output that is not requested is neither validated nor written (pass TensorView()).
// Nearest interpolation has a zero grid gradient.
void grid_sampler_2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                              const TensorView& grad_input, const TensorView& grad_grid,
                              const GridSampler2dParams& params, const std::vector<bool>& output_mask = {true, true});

// Raises exactly what grid_sampler_2d_backward would for these arguments (modes, mask, shapes, dtypes),
// without reading or writing data: the aclnn layer validates with it in phase one.
void check_grid_sampler_2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                                    const TensorView& grad_input, const TensorView& grad_grid,
                                    const GridSampler2dParams& params,
                                    const std::vector<bool>& output_mask = {true, true});

// Second order. With (grad_input, grad_grid) = grid_sampler_2d_backward(grad_output, input, grid) and
// cotangents grad_grad_input (shaped like input) and grad_grad_grid (shaped like grid), the gradients of
//   sum(grad_grad_input * grad_input) + sum(grad_grad_grid * grad_grid)
// with respect to grad_output (d_grad_output), input (d_input) and grid (d_grid). An absent cotangent
// (TensorView()) counts as zeros. output_mask = {want d_grad_output, want d_input, want d_grid}; an output
// not requested is neither validated nor written. The weights are piecewise polynomials of the grid, so
// the second derivatives are exact away from pixel boundaries, where they are one-sided (as the first
// derivatives of the backward are).
void grid_sampler_2d_double_backward(const TensorView& grad_grad_input, const TensorView& grad_grad_grid,
                                     const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                                     const TensorView& d_grad_output, const TensorView& d_input,
                                     const TensorView& d_grid, const GridSampler2dParams& params,
                                     const std::vector<bool>& output_mask = {true, true, true});

}  // namespace spatialgrad

// Argument checks shared by the grid-sampler entry points (first and second order), so that their
// messages read the same and name the entry point that was called.
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "checks.h"
#include "spatialgrad/grid_sampler_2d.h"

namespace spatialgrad::detail {

// The modes are enumerators (an integer cast in may be any int64: the aclnn and Python arguments).
inline void check_grid_sampler_modes(const char* op, const GridSampler2dParams& p) {
  const auto interpolation = static_cast<int64_t>(p.interpolation_mode);
  const auto padding = static_cast<int64_t>(p.padding_mode);
  SG_CHECK(interpolation >= 0 && interpolation <= 2, op,
           "(): expected interpolation_mode in {0 (bilinear), 1 (nearest), 2 (bicubic)}, but got ", interpolation);
  SG_CHECK(padding >= 0 && padding <= 2, op,
           "(): expected padding_mode in {0 (zeros), 1 (border), 2 (reflection)}, but got ", padding);
}

// (N, C, Ho, Wo) for input (N, C, H, W) and grid (N, Ho, Wo, 2).
inline std::vector<int64_t> grid_sampler_output_shape(const char* op, const std::vector<int64_t>& in,
                                                      const std::vector<int64_t>& grid) {
  SG_CHECK(in.size() == 4, op, "(): expected input to be 4-D (N, C, H, W), but got ", in.size(), "-D shape ",
           format_list(in));
  SG_CHECK(grid.size() == 4, op, "(): expected grid to be 4-D (N, Ho, Wo, 2), but got ", grid.size(), "-D shape ",
           format_list(grid));
  SG_CHECK(grid[3] == 2, op, "(): expected grid's last dimension to be 2 (x, y), but got grid of shape ",
           format_list(grid));
  SG_CHECK(grid[0] == in[0], op, "(): expected grid to have the batch size of input (", in[0], "), but got ", grid[0],
           " (grid of shape ", format_list(grid), ")");
  // PyTorch rejects an empty input plane too (there is nothing to sample, not even a border pixel).
  SG_CHECK(in[2] != 0 && in[3] != 0, op,
           "(): expected input to have non-empty spatial dimensions (H, W), but got input of shape ", format_list(in));
  return {in[0], in[1], grid[1], grid[2]};
}

// The first-order kernels number the rows and columns of a plane in int32 (with room for a corner one
// past the edge). Checked with the arguments, before any allocation. (The channel tiles also number the
// pixels of a framed plane in int32; planes beyond that take the plane strategy: grid_sampler_2d.cpp.)
inline void check_grid_sampler_plane(const char* op, const std::vector<int64_t>& in) {
  const int64_t H = in[2], W = in[3], limit = int64_t{INT32_MAX} - 2;
  SG_CHECK_KIND(H <= limit && W <= limit, kOverflow, op, "(): expected input planes with H and W below 2^31 - 2 (the ",
                "CPU kernel's int32 rows and columns), but got H x W = ", H, " x ", W);
}

// grad_output must be shaped like the forward's output: (N, C) of input, (Ho, Wo) of grid.
inline void check_grid_sampler_grad_output(const char* op, const TensorView& grad_output,
                                           const std::vector<int64_t>& expected) {
  check_dim(op, "grad_output", grad_output, 4);
  SG_CHECK(grad_output.size(0) == expected[0], op, "(): expected grad_output to have the batch size of input (",
           expected[0], "), but got ", grad_output.size(0));
  SG_CHECK(grad_output.size(1) == expected[1], op, "(): expected grad_output to have the channels of input (",
           expected[1], "), but got ", grad_output.size(1));
  SG_CHECK(grad_output.size(2) == expected[2] && grad_output.size(3) == expected[3], op,
           "(): expected grad_output's spatial size to equal grid's (Ho, Wo) = (", expected[2], ", ", expected[3],
           "), but got (", grad_output.size(2), ", ", grad_output.size(3), ")");
}

}  // namespace spatialgrad::detail

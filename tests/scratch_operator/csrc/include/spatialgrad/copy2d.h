// copy2d: output = input, for a 4-D tensor of any floating dtype and strides (the scratch operator of
// scripts/scratch_operator.sh, which checks what adding an operator takes). Its backward is itself.
#pragma once

#include <cstdint>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad {

// The output's shape: the input's (which must be 4-D).
std::vector<int64_t> copy2d_output_shape(const std::vector<int64_t>& input_shape);

void copy2d(const TensorView& input, const TensorView& output);
void copy2d_backward(const TensorView& grad_output, const TensorView& grad_input);

}  // namespace spatialgrad

// 2-D average pooling (aclnnAvgPool2d / aclnnAvgPool2dBackward, PyTorch avg_pool2d semantics).
//
// Layouts: 4-D (N, C, H, W) or 3-D (C, H, W); with Layout::kNHWC, (N, H, W, C) or (H, W, C) and the
// output in the same order. Output (…, OH, OW) with, per dimension,
//   out = floor((in + 2p - k + (ceil_mode ? s - 1 : 0)) / s) + 1, and with ceil_mode the last
//   window dropped when it would start past the input and the left padding.
#pragma once

#include <cstdint>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad {

struct AvgPool2dParams {
  std::vector<int64_t> kernel_size;  // 1 entry (both dims) or 2 (kH, kW); each > 0
  std::vector<int64_t> stride;       // empty = kernel_size; 1 entry (both) or 2 (sH, sW); each > 0
  std::vector<int64_t> padding{0};   // 1 entry (both) or 2 (pH, pW); 0 <= p <= k / 2
  bool ceil_mode = false;
  bool count_include_pad = true;  // divide by the window clipped at the padded edge
  int64_t divisor_override = 0;   // 0 = unset; any other value (negative too) divides every window
  Layout layout = Layout::kNCHW;  // kNHWC: tensors (N, H, W, C) or (H, W, C)
};

// Output shape for an input shape ((C,H,W) or (N,C,H,W)); validates the parameters.
std::vector<int64_t> avg_pool2d_output_shape(const std::vector<int64_t>& input_shape, const AvgPool2dParams& params);

// output[..., oh, ow] = mean of input over window (oh, ow). `output` must have avg_pool2d_output_shape().
void avg_pool2d(const TensorView& input, const TensorView& output, const AvgPool2dParams& params);

// grad_input (shaped like input) = d(sum(grad_output * avg_pool2d(input))) / d(input).
// `input` supplies only the shape (aclnn's `self`); its data is not read.
void avg_pool2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grad_input,
                         const AvgPool2dParams& params);

// Raises exactly what avg_pool2d_backward would for these arguments (shapes, parameters, dtypes),
// without reading or writing data: the aclnn layer validates with it in phase one.
void check_avg_pool2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grad_input,
                               const AvgPool2dParams& params);

}  // namespace spatialgrad

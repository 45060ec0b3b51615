// Bilinear 2-D upsampling (aclnnUpsampleBilinear2d / aclnnUpsampleBilinear2dBackwardV2, PyTorch
// upsample_bilinear2d semantics), in NCHW or NHWC layout.
//
// Per spatial dimension, with in/out the input/output sizes and `scale` the optional user scale
// (<= 0 or NaN: not given):
//   ratio = align_corners ? (out > 1 ? (in - 1) / (out - 1) : 0)
//                         : (scale > 0 ? 1 / scale : in / out)
//   out == in: output d reads input d (identity); otherwise
//   src = align_corners ? ratio * d : max(0, ratio * (d + 0.5) - 0.5)
//   i0 = min(floor(src), in - 1), i1 = i0 + (i0 < in - 1), l1 = clamp(src - i0, 0, 1), l0 = 1 - l1.
// Scales change only the ratio, never the sizes. As in PyTorch's CPU kernels, the ratio is rounded to
// the accumulation type (float for float32) and src is evaluated in double, l1 rounded to the
// accumulation type; float32 results then match PyTorch to rounding. Unlike PyTorch 1.13, a source
// index past the last input (a user scale below out / in) is clamped as above, never read out of bounds.
#pragma once

#include <cstdint>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad {

struct UpsampleBilinear2dParams {
  std::vector<int64_t> output_size;  // (oH, oW), each >= 1
  bool align_corners = false;
  double scales_h = 0.0;  // the user's scale factors, used for the ratio only; <= 0 or NaN: not given
  double scales_w = 0.0;
  Layout layout = Layout::kNCHW;  // the dimension order of every tensor and size list (input_size too)
};

// Output (oH, oW) = (floor(H * scales_h), floor(W * scales_w)) for a 4-D input shape, as PyTorch's
// interpolate does when only scale factors are given. Each scale must be finite and > 0 and
// each resulting size >= 1.
std::vector<int64_t> upsample_bilinear2d_output_size(const std::vector<int64_t>& input_shape, double scales_h,
                                                     double scales_w, Layout layout);

// Output shape for a 4-D input shape, params.output_size = (oH, oW) in params.layout's order; validates
// the ranks and sizes as upsample_bilinear2d() does.
std::vector<int64_t> upsample_bilinear2d_output_shape(const std::vector<int64_t>& input_shape,
                                                      const UpsampleBilinear2dParams& params);

// output = bilinear resampling of input to params.output_size = (oH, oW).
// input: (N, C, H, W) (kNCHW) or (N, H, W, C) (kNHWC), any strides, H and W >= 1.
// output: (N, C, oH, oW) or (N, oH, oW, C), written through its strides.
void upsample_bilinear2d(const TensorView& input, const TensorView& output, const UpsampleBilinear2dParams& params);

// grad_input = d(sum(grad_output * upsample_bilinear2d(x))) / dx for x of shape input_size.
// grad_output: (N, C, oH, oW) or (N, oH, oW, C); input_size: (N, C, H, W) or (N, H, W, C) (aclnn's
// inputSize); grad_input: shaped like input_size.
void upsample_bilinear2d_backward(const TensorView& grad_output, const std::vector<int64_t>& input_size,
                                  const TensorView& grad_input, const UpsampleBilinear2dParams& params);

// Raises exactly what upsample_bilinear2d_backward would for these arguments (layout, sizes, shapes,
// dtypes), without reading or writing data: the aclnn layer validates with it in phase one.
void check_upsample_bilinear2d_backward(const TensorView& grad_output, const std::vector<int64_t>& input_size,
                                        const TensorView& grad_input, const UpsampleBilinear2dParams& params);

}  // namespace spatialgrad

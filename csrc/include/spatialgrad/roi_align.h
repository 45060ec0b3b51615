// RoIAlign, average mode (aclnnRoiAlignV2 / aclnnRoiAlignV2Backward, torchvision roi_align semantics).
//
// input (B, C, H, W); boxes (K, 5) rows (batch_index, x1, y1, x2, y2) in input-image coordinates,
// of the input's dtype; output (K, C, pooled_height, pooled_width). Bin (ph, pw) of ROI k averages
// gh x gw bilinear samples of image floor(boxes[k, 0]) (docs/operators.md, RoIAlign). A batch index outside [0, B)
// (NaN included) raises an IndexError-kind error naming the ROI, before any output is written. Boxes
// with NaN/Inf coordinates have no samples: their output is zero and they pass no gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad {

struct RoiAlignParams {
  int64_t pooled_height = 1;   // >= 0
  int64_t pooled_width = 1;    // >= 0
  double spatial_scale = 1.0;  // > 0 and finite: box coordinates are multiplied by it
  int64_t sampling_ratio = 0;  // >= 0; 0 = adaptive, ceil(roi_size / pooled_size) samples per bin and axis
  bool aligned = true;         // shift box corners by -0.5 pixel (torchvision's aligned=True)
};

// (K, C, pooled_height, pooled_width) for an input shape (B, C, H, W) and a boxes shape (K, 5);
// validates the shapes and the parameters.
std::vector<int64_t> roi_align_output_shape(const std::vector<int64_t>& input_shape,
                                            const std::vector<int64_t>& boxes_shape, const RoiAlignParams& params);

// output[k, c, ph, pw] = mean of the bilinear samples of bin (ph, pw) of ROI k in channel c.
void roi_align(const TensorView& input, const TensorView& boxes, const TensorView& output,
               const RoiAlignParams& params);

// grad_input (B, C, H, W) = d(sum(grad_output * roi_align(input))) / d(input), with
// input_shape = (B, C, H, W) (aclnn's inputShape) and grad_output (K, C, pooled_height, pooled_width).
void roi_align_backward(const TensorView& grad_output, const TensorView& boxes, const std::vector<int64_t>& input_shape,
                        const TensorView& grad_input, const RoiAlignParams& params);

// Raises exactly what roi_align_backward would for these arguments (shapes, parameters, dtypes),
// without reading or writing data (the batch indices in boxes are checked when it runs): the aclnn
// layer validates with it in phase one.
void check_roi_align_backward(const TensorView& grad_output, const TensorView& boxes,
                              const std::vector<int64_t>& input_shape, const TensorView& grad_input,
                              const RoiAlignParams& params);

// The argument checks of roi_align_backward() that do not involve grad_input (for callers that
// allocate grad_input from input_shape).
void check_roi_align_backward_args(const TensorView& grad_output, const TensorView& boxes,
                                   const std::vector<int64_t>& input_shape, const RoiAlignParams& params);

}  // namespace spatialgrad

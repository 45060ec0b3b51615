// Multi-scale deformable attention (mmcv MultiScaleDeformableAttnFunction;
// aclnnMultiScaleDeformableAttnFunction / aclnnMultiScaleDeformableAttentionGrad).
//
// Shapes (bs batch, S = sum of H*W over the levels, nH heads, C channels per head, Q queries,
// L levels, P points per level and head):
//   value               (bs, S, nH, C)         float32 or float64
//   spatial_shapes      (L, 2)                 (H, W) of each level, int32 or int64, H, W >= 1
//   level_start_index   (L)                    int32 or int64, the exclusive prefix sum of H*W
//   sampling_locations  (bs, Q, nH, L, P, 2)   [..., 0] = x (scaled by W), [..., 1] = y (scaled by H),
//                                              normalised so that [0, 1] spans the level
//   attention_weights   (bs, Q, nH, L, P)
//   output, grad_output (bs, Q, nH*C)          element [b, q, h*C + c]
// value, sampling_locations, attention_weights and grad_output share one floating dtype.
//
// output[b, q, h*C + c] = sum over (l, p) of A * bilinear(value[b, level l, h, c]) at
//   (w_im, h_im) = (x*W - 0.5, y*H - 0.5), with zero padding. A point contributes only if
//   -1 < h_im < H and -1 < w_im < W (strict; NaN or Inf locations never do), and then its
//   location and weight gradients are zero.
#pragma once

#include <cstdint>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad {

// (bs, Q, nH*C) for the shapes of value and sampling_locations; validates their ranks.
std::vector<int64_t> ms_deform_attn_output_shape(const std::vector<int64_t>& value_shape,
                                                 const std::vector<int64_t>& sampling_locations_shape);

// output (bs, Q, nH*C) = the attention-weighted sum of bilinear samples of value.
void ms_deform_attn(const TensorView& value, const TensorView& spatial_shapes, const TensorView& level_start_index,
                    const TensorView& sampling_locations, const TensorView& attention_weights,
                    const TensorView& output);

// Gradients of sum(grad_output * ms_deform_attn(...)) with respect to value, sampling_locations and
// attention_weights; each output is shaped like its input and every element is written.
void ms_deform_attn_backward(const TensorView& value, const TensorView& spatial_shapes,
                             const TensorView& level_start_index, const TensorView& sampling_locations,
                             const TensorView& attention_weights, const TensorView& grad_output,
                             const TensorView& grad_value, const TensorView& grad_sampling_locations,
                             const TensorView& grad_attention_weights);

// Raises exactly what ms_deform_attn_backward would for these arguments (ranks, shapes, dtypes, and the
// level table read from spatial_shapes / level_start_index), without writing: the aclnn layer
// validates with it in phase one.
void check_ms_deform_attn_backward(const TensorView& value, const TensorView& spatial_shapes,
                                   const TensorView& level_start_index, const TensorView& sampling_locations,
                                   const TensorView& attention_weights, const TensorView& grad_output,
                                   const TensorView& grad_value, const TensorView& grad_sampling_locations,
                                   const TensorView& grad_attention_weights);

// Second order. With (grad_value, grad_sampling_locations, grad_attention_weights) = ms_deform_attn_backward(...)
// and cotangents grad_grad_value, grad_grad_sampling_locations, grad_grad_attention_weights (shaped like
// value, sampling_locations, attention_weights; an absent one, TensorView(), counts as zeros), the
// gradients of the sum of the three cotangent-gradient products with respect to value (d_value),
// sampling_locations (d_sampling_locations), attention_weights (d_attention_weights) and grad_output
// (d_grad_output). Every output is written.
void ms_deform_attn_double_backward(const TensorView& value, const TensorView& spatial_shapes,
                                    const TensorView& level_start_index, const TensorView& sampling_locations,
                                    const TensorView& attention_weights, const TensorView& grad_output,
                                    const TensorView& grad_grad_value, const TensorView& grad_grad_sampling_locations,
                                    const TensorView& grad_grad_attention_weights, const TensorView& d_value,
                                    const TensorView& d_sampling_locations, const TensorView& d_attention_weights,
                                    const TensorView& d_grad_output);

}  // namespace spatialgrad

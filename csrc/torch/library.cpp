// The operators of libspatialgrad_torch: this layer's one list of schemas (torch.ops.spatialgrad.<name>).
// Arguments follow the operators users know: aten's avg_pool2d, upsample_bilinear2d.vec and grid_sampler_2d,
// torchvision's roi_align, mmcv's ms_deform_attn_forward (upsample_bilinear2d_backward adds the layout of grad_input:
// None follows grad_output, as PyTorch does; the autograd kernel passes the forward input's). Each operator's file registers its CPU and
// autograd kernels.
#include <torch/library.h>

TORCH_LIBRARY(spatialgrad, m) {
  m.def("avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, "
        "bool count_include_pad=True, int? divisor_override=None) -> Tensor");
  m.def("avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, "
        "bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor");
  m.def("roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int sampling_ratio, bool aligned) -> Tensor");
  m.def("roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
        "int batch_size, int channels, int height, int width, int sampling_ratio, bool aligned) -> Tensor");
  m.def("grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) "
        "-> Tensor");
  m.def("grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, "
        "int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)");
  m.def("grid_sampler_2d_double_backward(Tensor? grad_grad_input, Tensor? grad_grad_grid, Tensor grad_output, "
        "Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, "
        "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("ms_deform_attn(Tensor value, Tensor spatial_shapes, Tensor level_start_index, Tensor sampling_locations, "
        "Tensor attention_weights, int im2col_step=64) -> Tensor");
  m.def("ms_deform_attn_backward(Tensor value, Tensor spatial_shapes, Tensor level_start_index, "
        "Tensor sampling_locations, Tensor attention_weights, Tensor grad_output, int im2col_step=64) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("ms_deform_attn_double_backward(Tensor value, Tensor spatial_shapes, Tensor level_start_index, "
        "Tensor sampling_locations, Tensor attention_weights, Tensor grad_output, Tensor? grad_grad_value, "
        "Tensor? grad_grad_sampling_locations, Tensor? grad_grad_attention_weights) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("upsample_bilinear2d(Tensor input, int[]? output_size, bool align_corners, float[]? scale_factors) "
        "-> Tensor");
  m.def("upsample_bilinear2d_backward(Tensor grad_output, int[]? output_size, int[] input_size, bool align_corners, "
        "float[]? scale_factors, MemoryFormat? memory_format=None) -> Tensor");
}

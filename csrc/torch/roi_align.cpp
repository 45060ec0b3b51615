// spatialgrad::roi_align and roi_align_backward (torchvision's schemas, sampling_ratio <= 0 adaptive): CPU
// kernels over the core, and autograd kernels. Both are linear in their first argument, so each one's
// derivative is the other: any order. rois get no gradient.
#include "spatialgrad/roi_align.h"

#include <torch/library.h>

#include <algorithm>

#include "common.h"

namespace spatialgrad::torch_ops {

namespace {

RoiAlignParams make_params(double spatial_scale, int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio,
                           bool aligned) {
  // torchvision's sampling_ratio -1 (adaptive) is the core's 0.
  return RoiAlignParams{pooled_height, pooled_width, spatial_scale, std::max<int64_t>(sampling_ratio, 0), aligned};
}

// torchvision's schemas (sampling_ratio <= 0: adaptive).
constexpr char kForwardSchema[] =
    "roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor";

at::Tensor forward_cpu(const at::Tensor& input, const at::Tensor& rois, double spatial_scale, int64_t pooled_height,
                       int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
  Output out;
  run_kernel([&] {
    const RoiAlignParams params = make_params(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned);
    const TensorView in = view_of(input, "roi_align", "input");
    const TensorView boxes = view_of(rois, "roi_align", "boxes");
    out = new_output(input, roi_align_output_shape(in.sizes(), boxes.sizes(), params));
    roi_align(in, boxes, out.view, params);
  });
  return out.tensor;
}

constexpr char kBackwardSchema[] =
    "roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
    "int batch_size, int channels, int height, int width, int sampling_ratio, bool aligned) -> Tensor";

at::Tensor backward_cpu(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale, int64_t pooled_height,
                        int64_t pooled_width, int64_t batch_size, int64_t channels, int64_t height, int64_t width,
                        int64_t sampling_ratio, bool aligned) {
  Output grad_input;
  run_kernel([&] {
    const RoiAlignParams params = make_params(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned);
    const std::vector<int64_t> input_shape{batch_size, channels, height, width};
    const TensorView go = view_of(grad, "roi_align_backward", "grad_output");
    const TensorView boxes = view_of(rois, "roi_align_backward", "boxes");
    check_roi_align_backward_args(go, boxes, input_shape, params);  // before allocating input_shape
    grad_input = new_output(grad, input_shape);
    roi_align_backward(go, boxes, input_shape, grad_input.view, params);
  });
  return grad_input.tensor;
}

// The kernels' C++ signatures, for typed calls through the dispatcher.
using BackwardSig = decltype(backward_cpu);

// Options: spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned; then the input's shape.
void save_roi_options(AutogradContext* ctx, double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                      int64_t sampling_ratio, bool aligned, std::vector<int64_t> input_shape) {
  save_options(ctx, {spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, std::move(input_shape)});
}

struct RoiAlign : torch::autograd::Function<RoiAlign> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                            int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
    save_roi_options(ctx, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, input.sizes().vec());
    ctx->save_for_backward({rois});
    return call_below_autograd(SG_OPERATOR("roi_align", signature::RoiAlign), input, rois, spatial_scale, pooled_height,
                               pooled_width, sampling_ratio, aligned);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto option = [ctx](size_t i) { return saved_option(ctx, i); };
    const std::vector<int64_t> shape = option(5).toIntVector();
    return gradient_of_first(
        SG_OPERATOR("roi_align_backward", BackwardSig)
            .call(grads[0], ctx->get_saved_variables()[0], option(0).toDouble(), option(1).toInt(), option(2).toInt(),
                  shape[0], shape[1], shape[2], shape[3], option(3).toInt(), option(4).toBool()),
        /*arguments=*/7);
  }
};

struct RoiAlignBackward : torch::autograd::Function<RoiAlignBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                            int64_t pooled_height, int64_t pooled_width, int64_t batch_size, int64_t channels,
                            int64_t height, int64_t width, int64_t sampling_ratio, bool aligned) {
    save_roi_options(ctx, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, {});
    ctx->save_for_backward({rois});
    return call_below_autograd(SG_OPERATOR("roi_align_backward", BackwardSig), grad, rois, spatial_scale, pooled_height,
                               pooled_width, batch_size, channels, height, width, sampling_ratio, aligned);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto option = [ctx](size_t i) { return saved_option(ctx, i); };
    return gradient_of_first(SG_OPERATOR("roi_align", signature::RoiAlign)
                                 .call(grads[0], ctx->get_saved_variables()[0], option(0).toDouble(), option(1).toInt(),
                                       option(2).toInt(), option(3).toInt(), option(4).toBool()),
                             /*arguments=*/11);
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  // Boxes carry their image's index: vmap calls once per sample.
  define_operator(m, Vmap::kPerSample, kernel<RoiAlign, &forward_cpu>(kForwardSchema),
                  kernel<RoiAlignBackward, &backward_cpu>(kBackwardSchema));
}

}  // namespace spatialgrad::torch_ops

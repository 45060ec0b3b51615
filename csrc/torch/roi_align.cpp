// spatialgrad::roi_align and roi_align_backward (torchvision's schemas, sampling_ratio <= 0 adaptive): CPU
// kernels over the core, and autograd kernels. Both are linear in their first argument, so each one's
// derivative is the other: any order. rois get no gradient.
#include "spatialgrad/roi_align.h"

#include <torch/library.h>

#include <algorithm>

#include "common.h"
#include "operators.h"  // the forward's schema, from operators.toml

// (A namespace of this file's own, around its anonymous one: see "Names" in common.h.)
namespace spatialgrad::torch_ops::roi_align_kernels {

namespace {

RoiAlignParams make_params(double spatial_scale, int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio,
                           bool aligned) {
  // torchvision's sampling_ratio -1 (adaptive) is the core's 0 (Python's is functional/roi_align.py's
  // core_sampling_ratio).
  return RoiAlignParams{pooled_height, pooled_width, spatial_scale, std::max<int64_t>(sampling_ratio, 0), aligned};
}

// torchvision's schemas (sampling_ratio <= 0: adaptive): the forward's is schema::kRoiAlign (operators.h, from
// operators.toml), the backward's below.

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

// The options of a call, which both kernels' gradients pass on.
struct Pooling {
  double spatial_scale;
  int64_t pooled_height, pooled_width, sampling_ratio;
  bool aligned;
};

// What both kernels' nodes keep: the options and the rois (their second tensor; no gradient flows to it).
struct SavesRois {
  Pooling pooling;

  template <class... Options>
  static variable_list saved(const at::Tensor& /*input or grad*/, const at::Tensor& rois, const Options&... /*opts*/) {
    return {rois};
  }
};

// The forward's gradient (input's: rois get none): the backward kernel over the saved rois, to the input's shape.
struct RoiAlignCall : SavesRois {
  static constexpr const char* kName = "spatialgrad::RoiAlign";
  std::vector<int64_t> input_shape;

  static RoiAlignCall of(const at::Tensor& /*out*/, const at::Tensor& input, const at::Tensor& /*rois*/,
                         double spatial_scale, int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio,
                         bool aligned) {
    return {{{spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned}}, sizes_of(input)};
  }

  variable_list backward(const variable_list& grads, const variable_list& saved, const std::vector<bool>& wanted) const {
    if (!wanted[0]) return {at::Tensor(), at::Tensor()};
    const Pooling& p = pooling;
    const std::vector<int64_t>& shape = input_shape;
    return {operator_of<kBackwardSchema, BackwardSig>().call(grads[0], saved[0], p.spatial_scale, p.pooled_height,
                                                             p.pooled_width, shape[0], shape[1], shape[2], shape[3],
                                                             p.sampling_ratio, p.aligned),
            at::Tensor()};
  }
};

// The backward is linear in grad: its gradient is the forward (through the dispatcher: any order).
struct RoiAlignBackwardCall : SavesRois {
  static constexpr const char* kName = "spatialgrad::RoiAlignBackward";

  static RoiAlignBackwardCall of(const at::Tensor& /*out*/, const at::Tensor& /*grad*/, const at::Tensor& /*rois*/,
                                 double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                                 int64_t /*batch_size*/, int64_t /*channels*/, int64_t /*height*/, int64_t /*width*/,
                                 int64_t sampling_ratio, bool aligned) {
    return {{{spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned}}};
  }

  variable_list backward(const variable_list& grads, const variable_list& saved, const std::vector<bool>& wanted) const {
    if (!wanted[0]) return {at::Tensor(), at::Tensor()};
    const Pooling& p = pooling;
    return {operator_of<schema::kRoiAlign, decltype(forward_cpu)>().call(
                grads[0], saved[0], p.spatial_scale, p.pooled_height, p.pooled_width, p.sampling_ratio, p.aligned),
            at::Tensor()};
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  // Boxes carry their image's index: vmap calls once per sample.
  define_operator(m, Vmap::kPerSample, kernel<RoiAlignCall, &forward_cpu, schema::kRoiAlign>(),
                  kernel<RoiAlignBackwardCall, &backward_cpu, kBackwardSchema>());
  define_autocast(m, "roi_align", Autocast::kFloat32ToInputDtype);  // as torchvision 0.21's
}

}  // namespace spatialgrad::torch_ops::roi_align_kernels

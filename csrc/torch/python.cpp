// spatialgrad._torch_ops: spatialgrad.torch's entry into the five forwards. Typed calls through the dispatcher
// (autograd, tracing and functorch as for torch.ops.spatialgrad.*), without torch.ops' generic matching of
// Python arguments against the schema, which cost about 2 us of a 5 us call on tiny tensors. The operators are
// registered by libspatialgrad_torch, which spatialgrad.torch loads first.
#include <torch/extension.h>

#include <vector>

#include "common.h"
#include "numpy_view.h"  // without_gil

namespace spatialgrad::torch_ops {

namespace {

namespace py = pybind11;
using Ints = std::vector<int64_t>;

// op.call(args...) with the GIL released, as PyTorch's own bindings run their operators.
template <class Sig, class... Args>
at::Tensor call(const c10::TypedOperatorHandle<Sig>& op, const Args&... args) {
  at::Tensor out;
  python::without_gil([&] { out = op.call(args...); });
  return out;
}

}  // namespace

PYBIND11_MODULE(_torch_ops, m) {
  m.doc() = "spatialgrad.torch's calls of torch.ops.spatialgrad's forwards (internal)";
  // PyTorch's pool for spatialgrad._core._use_host_executor (NumPy calls in a process that runs PyTorch).
  m.def("pool_executor", [] { return py::capsule(&torch_pool_executor(), "spatialgrad.Executor"); });
  m.def("avg_pool2d", [](const at::Tensor& input, const Ints& kernel_size, const Ints& stride, const Ints& padding,
                         bool ceil_mode, bool count_include_pad, c10::optional<int64_t> divisor_override) {
    return call(SG_OPERATOR("avg_pool2d", signature::AvgPool2d), input, at::IntArrayRef(kernel_size),
                at::IntArrayRef(stride), at::IntArrayRef(padding), ceil_mode, count_include_pad, divisor_override);
  });
  m.def("roi_align", [](const at::Tensor& input, const at::Tensor& rois, double spatial_scale, int64_t pooled_height,
                        int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
    return call(SG_OPERATOR("roi_align", signature::RoiAlign), input, rois, spatial_scale, pooled_height,
                pooled_width, sampling_ratio, aligned);
  });
  m.def("upsample_bilinear2d", [](const at::Tensor& input, c10::optional<Ints> output_size, bool align_corners,
                                  c10::optional<std::vector<double>> scale_factors) {
    const auto size = output_size ? c10::optional<at::IntArrayRef>(*output_size) : c10::nullopt;
    const auto scales = scale_factors ? c10::optional<c10::ArrayRef<double>>(*scale_factors) : c10::nullopt;
    return call(SG_OPERATOR("upsample_bilinear2d", signature::UpsampleBilinear2d), input, size, align_corners, scales);
  });
  m.def("grid_sampler_2d", [](const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                              int64_t padding_mode, bool align_corners) {
    return call(SG_OPERATOR("grid_sampler_2d", signature::GridSampler2d), input, grid, interpolation_mode,
                padding_mode, align_corners);
  });
  m.def("ms_deform_attn", [](const at::Tensor& value, const at::Tensor& spatial_shapes,
                             const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                             const at::Tensor& attention_weights, int64_t im2col_step) {
    return call(SG_OPERATOR("ms_deform_attn", signature::MsDeformAttn), value, spatial_shapes, level_start_index,
                sampling_locations, attention_weights, im2col_step);
  });
}

}  // namespace spatialgrad::torch_ops

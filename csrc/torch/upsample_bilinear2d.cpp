// spatialgrad::upsample_bilinear2d and upsample_bilinear2d_backward (aten's .vec schemas): CPU kernels over the
// core, in NHWC for a channels_last tensor (which gives a channels_last result, as PyTorch does), and autograd
// kernels. Both are linear in their tensor argument, so each one's derivative is the other: any order.
#include "spatialgrad/upsample_bilinear2d.h"

#include <torch/library.h>

#include <utility>

#include "common.h"
#include "operators.h"  // the forward's schema, from operators.toml

// (A namespace of this file's own, around its anonymous one: see "Names" in common.h.)
namespace spatialgrad::torch_ops::upsample_bilinear2d_kernels {

namespace {

using Sizes = c10::optional<at::IntArrayRef>;
using Scales = c10::optional<c10::ArrayRef<double>>;

// (scales_h, scales_w); 0 means not given, as for the core.
std::pair<double, double> scale_pair(const char* op, Scales scale_factors) {
  if (!scale_factors) return {0.0, 0.0};
  SG_CHECK(scale_factors->size() == 1 || scale_factors->size() == 2, op,
           "(): expected scale_factors to have 1 or 2 entries (H, W), but got ", scale_factors->size());
  return {scale_factors->front(), scale_factors->back()};
}

// A shape in the layout's order as (N, C, H, W), the order at::empty takes with a memory format.
std::vector<int64_t> nchw_order(std::vector<int64_t> shape, Layout layout) {
  if (layout == Layout::kNHWC && shape.size() == 4) return {shape[0], shape[3], shape[1], shape[2]};
  return shape;
}

// A tensor's view and its output's memory format in the layout the kernel runs in.
struct Laid {
  Layout layout;
  TensorView view;
  at::MemoryFormat format;
};

// NHWC when `format` says so, else (no format) when `t` is channels_last.
Laid lay_out(const at::Tensor& t, const char* op, const char* arg,
             c10::optional<at::MemoryFormat> format = c10::nullopt) {
  // (A memory_format applies to 4-D tensors only: the core reports another rank as it does without one.)
  const bool nhwc = t.dim() == 4 && (format ? *format == at::MemoryFormat::ChannelsLast : is_channels_last(t));
  if (nhwc) return {Layout::kNHWC, nhwc_view_of(t, op, arg), at::MemoryFormat::ChannelsLast};
  return {Layout::kNCHW, view_of(t, op, arg), at::MemoryFormat::Contiguous};
}

Output new_laid_output(const at::Tensor& like, const std::vector<int64_t>& shape, const Laid& laid) {
  Output out = new_output(like, nchw_order(shape, laid.layout), laid.format);
  if (laid.layout == Layout::kNHWC) out.view = nhwc_view_of(out.tensor, "spatialgrad", "an output");
  return out;
}

// aten's upsample_bilinear2d.vec schemas: the forward's is schema::kUpsampleBilinear2d (operators.h, from
// operators.toml), the backward's below.

at::Tensor forward_cpu(const at::Tensor& input, Sizes output_size, bool align_corners, Scales scale_factors) {
  Output out;
  run_kernel([&] {
    const char* op = "upsample_bilinear2d";
    const auto [scales_h, scales_w] = scale_pair(op, scale_factors);
    const Laid in = lay_out(input, op, "input");
    // No output_size: the sizes follow from the scale factors (floor(in * scale)), as in PyTorch.
    const std::vector<int64_t> size =
        output_size ? output_size->vec()
                    : upsample_bilinear2d_output_size(in.view.sizes(), scales_h, scales_w, in.layout);
    const UpsampleBilinear2dParams params{size, align_corners, scales_h, scales_w, in.layout};
    out = new_laid_output(input, upsample_bilinear2d_output_shape(in.view.sizes(), params), in);
    upsample_bilinear2d(in.view, out.view, params);
  });
  return out.tensor;
}

// A grad_input of `shape` for checking the arguments before allocating it (the core checks grad_output,
// input_size and output_size first, and reads no data when checking); TensorView() when `shape` could not be one.
TensorView stand_in(DType dtype, const std::vector<int64_t>& shape) {
  static char nowhere;
  for (int64_t s : shape) {
    if (s < 0) return TensorView();
  }
  return TensorView(&nowhere, dtype, shape);
}

// aten's, plus the layout of grad_input (below).
constexpr char kBackwardSchema[] =
    "upsample_bilinear2d_backward(Tensor grad_output, int[]? output_size, int[] input_size, bool align_corners, "
    "float[]? scale_factors, MemoryFormat? memory_format=None) -> Tensor";

// grad_input in `memory_format` (the autograd kernel passes the forward input's), else laid out as grad_output
// (PyTorch's rule).
at::Tensor backward_cpu(const at::Tensor& grad_output, Sizes output_size, at::IntArrayRef input_size,
                        bool align_corners, Scales scale_factors, c10::optional<at::MemoryFormat> memory_format) {
  Output grad_input;
  run_kernel([&] {
    const char* op = "upsample_bilinear2d_backward";
    const auto [scales_h, scales_w] = scale_pair(op, scale_factors);
    const Laid go = lay_out(grad_output, op, "grad_output", memory_format);
    const std::vector<int64_t> out_hw =
        output_size ? output_size->vec() : std::vector<int64_t>{grad_output.size(-2), grad_output.size(-1)};
    const bool nhwc = go.layout == Layout::kNHWC && input_size.size() == 4;
    const std::vector<int64_t> size =
        nhwc ? std::vector<int64_t>{input_size[0], input_size[2], input_size[3], input_size[1]} : input_size.vec();
    const UpsampleBilinear2dParams params{out_hw, align_corners, scales_h, scales_w, go.layout};
    check_upsample_bilinear2d_backward(go.view, size, stand_in(go.view.dtype(), size), params);
    grad_input = new_laid_output(grad_output, size, go);
    upsample_bilinear2d_backward(go.view, size, grad_input.view, params);
  });
  return grad_input.tensor;
}

using Format = c10::optional<at::MemoryFormat>;
// The kernels' C++ signatures, for typed calls through the dispatcher.
using BackwardSig = decltype(backward_cpu);

// The sampling of a call, which both kernels' gradients pass on: the output's size (as computed), align_corners
// and the scale factors (if given).
struct Sampling {
  std::vector<int64_t> output_size;
  bool align_corners;
  c10::optional<std::vector<double>> scale_factors;

  static Sampling of(const at::Tensor& output, bool align_corners, Scales scale_factors) {
    const std::vector<int64_t> sizes = sizes_of(output);
    return {{sizes.at(sizes.size() - 2), sizes.back()},
            align_corners,
            scale_factors ? c10::optional<std::vector<double>>(scale_factors->vec()) : c10::nullopt};
  }
  Scales scales() const { return scale_factors ? Scales(*scale_factors) : c10::nullopt; }
};

// The forward's gradient: the backward kernel to the input's size, laid out as the input.
struct UpsampleBilinear2dCall {
  static constexpr const char* kName = "spatialgrad::UpsampleBilinear2d";
  Sampling sampling;
  std::vector<int64_t> input_size;
  bool channels_last;

  static UpsampleBilinear2dCall of(const at::Tensor& out, const at::Tensor& input, Sizes /*output_size*/,
                                   bool align_corners, Scales scale_factors) {
    return {Sampling::of(out, align_corners, scale_factors), sizes_of(input), is_channels_last(input)};
  }
  static constexpr bool kSavesNoTensors = true;  // the options alone make its gradient

  variable_list backward(const variable_list& grads, const variable_list& /*saved*/,
                         const std::vector<bool>& wanted) const {
    if (!wanted[0]) return {at::Tensor()};
    const Sampling& s = sampling;
    return {operator_of<kBackwardSchema, BackwardSig>().call(
        grads[0], s.output_size, input_size, s.align_corners, s.scales(),
        channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous)};
  }
};

// The backward is linear in grad_output: its gradient is the forward (through the dispatcher: any order).
struct UpsampleBilinear2dBackwardCall {
  static constexpr const char* kName = "spatialgrad::UpsampleBilinear2dBackward";
  Sampling sampling;

  static UpsampleBilinear2dBackwardCall of(const at::Tensor& /*out*/, const at::Tensor& grad_output,
                                           Sizes /*output_size*/, at::IntArrayRef /*input_size*/, bool align_corners,
                                           Scales scale_factors, Format /*memory_format*/) {
    return {Sampling::of(grad_output, align_corners, scale_factors)};
  }
  static constexpr bool kSavesNoTensors = true;  // the options alone make its gradient

  variable_list backward(const variable_list& grads, const variable_list& /*saved*/,
                         const std::vector<bool>& wanted) const {
    if (!wanted[0]) return {at::Tensor()};
    const Sampling& s = sampling;
    return {operator_of<schema::kUpsampleBilinear2d, decltype(forward_cpu)>().call(grads[0], s.output_size,
                                                                                   s.align_corners, s.scales())};
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  define_operator(m, Vmap::kFoldIntoBatch, kernel<UpsampleBilinear2dCall, &forward_cpu, schema::kUpsampleBilinear2d>(),
                  kernel<UpsampleBilinear2dBackwardCall, &backward_cpu, kBackwardSchema>());
  // No autocast policy (Autocast::kNone): it runs in the dtypes it is given, as aten's upsample_bilinear2d.
}

}  // namespace spatialgrad::torch_ops::upsample_bilinear2d_kernels

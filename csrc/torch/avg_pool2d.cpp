// spatialgrad::avg_pool2d and avg_pool2d_backward (aten's schemas): CPU kernels over the core, and autograd
// kernels. Both are linear in their tensor argument, so each one's derivative is the other: any order.
#include "spatialgrad/avg_pool2d.h"

#include <torch/library.h>

#include "common.h"

namespace spatialgrad::torch_ops {

namespace {

using Divisor = c10::optional<int64_t>;

AvgPool2dParams make_params(at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                            bool ceil_mode, bool count_include_pad, Divisor divisor_override) {
  // divisor_override 0: not set, as in spatialgrad.avg_pool2d.
  return AvgPool2dParams{kernel_size.vec(), stride.vec(), padding.vec(), ceil_mode, count_include_pad,
                         divisor_override.value_or(0)};
}

// The memory format of both outputs, as aten's avg_pool2d and avg_pool2d_backward choose it: the input's
// suggested format for a 4-D input (channels-last when its strides are, c10's rule for size-1 dimensions
// included), contiguous for a 3-D one.
at::MemoryFormat output_format(const at::Tensor& input) {
  return input.dim() == 4 ? input.suggest_memory_format() : at::MemoryFormat::Contiguous;
}

// aten's schemas.
constexpr char kForwardSchema[] =
    "avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, "
    "bool count_include_pad=True, int? divisor_override=None) -> Tensor";

at::Tensor forward_cpu(const at::Tensor& input, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                       at::IntArrayRef padding, bool ceil_mode, bool count_include_pad, Divisor divisor_override) {
  Output out;
  run_kernel([&] {
    const AvgPool2dParams params =
        make_params(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
    const TensorView in = view_of(input, "avg_pool2d", "input");
    out = new_output(input, avg_pool2d_output_shape(in.sizes(), params), output_format(input));
    avg_pool2d(in, out.view, params);
  });
  return out.tensor;
}

constexpr char kBackwardSchema[] =
    "avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, "
    "bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor";

at::Tensor backward_cpu(const at::Tensor& grad_output, const at::Tensor& input, at::IntArrayRef kernel_size,
                        at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                        Divisor divisor_override) {
  Output grad_input;
  run_kernel([&] {
    const AvgPool2dParams params =
        make_params(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
    const char* op = "avg_pool2d_backward";
    const TensorView go = view_of(grad_output, op, "grad_output");
    const TensorView in = view_of(input, op, "input");
    grad_input = new_output(grad_output, input.sizes(), output_format(input));
    avg_pool2d_backward(go, in, grad_input.view, params);
  });
  return grad_input.tensor;
}

// The kernels' C++ signatures, for typed calls through the dispatcher.
using BackwardSig = decltype(backward_cpu);

void save_pooling(AutogradContext* ctx, at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                  bool ceil_mode, bool count_include_pad, Divisor divisor_override) {
  save_options(ctx, {kernel_size.vec(), stride.vec(), padding.vec(), ceil_mode, count_include_pad, divisor_override});
}

// Calls `op` (the forward or the backward, through the dispatcher) with the saved options after `tensors`.
template <class Sig, class... Tensors>
at::Tensor call_with_pooling(const c10::TypedOperatorHandle<Sig>& op, AutogradContext* ctx, const Tensors&... tensors) {
  const auto option = [ctx](size_t i) { return saved_option(ctx, i); };
  return op.call(tensors..., option(0).toIntVector(), option(1).toIntVector(), option(2).toIntVector(),
                 option(3).toBool(), option(4).toBool(), option(5).template toOptional<int64_t>());
}

// A plain call's node (RecordedNode): the pooling options, and the gradient through the backward operator.
struct AvgPool2dCall {
  static constexpr const char* kName = "spatialgrad::AvgPool2d";
  std::vector<int64_t> kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  Divisor divisor_override;

  static AvgPool2dCall of(const at::Tensor& /*input*/, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                          at::IntArrayRef padding, bool ceil_mode, bool count_include_pad, Divisor divisor_override) {
    return {kernel_size.vec(), stride.vec(), padding.vec(), ceil_mode, count_include_pad, divisor_override};
  }

  variable_list backward(const at::Tensor& grad, const variable_list& saved, const std::vector<bool>& wanted) const {
    if (!wanted[0]) return {at::Tensor()};
    // Without create_graph, plain tensors go straight to the CPU kernel (what the dispatcher would reach).
    if (computes_directly(grad, saved[0])) {
      return {backward_cpu(grad, saved[0], kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)};
    }
    return {SG_OPERATOR("avg_pool2d_backward", BackwardSig)
                .call(grad, saved[0], kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)};
  }
};

struct AvgPool2d : torch::autograd::Function<AvgPool2d> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, at::IntArrayRef kernel_size,
                            at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                            Divisor divisor_override) {
    save_pooling(ctx, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
    ctx->save_for_backward({input});  // its shape and dtype
    return call_below_autograd(SG_OPERATOR("avg_pool2d", signature::AvgPool2d), input, kernel_size, stride, padding,
                               ceil_mode, count_include_pad, divisor_override);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor input = ctx->get_saved_variables()[0];
    return gradient_of_first(call_with_pooling(SG_OPERATOR("avg_pool2d_backward", BackwardSig), ctx, grads[0], input),
                             /*arguments=*/7);
  }
};

struct AvgPool2dBackward : torch::autograd::Function<AvgPool2dBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad_output, const at::Tensor& input,
                            at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                            bool ceil_mode, bool count_include_pad, Divisor divisor_override) {
    save_pooling(ctx, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
    return call_below_autograd(SG_OPERATOR("avg_pool2d_backward", BackwardSig), grad_output, input, kernel_size, stride,
                               padding, ceil_mode, count_include_pad, divisor_override);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return gradient_of_first(call_with_pooling(SG_OPERATOR("avg_pool2d", signature::AvgPool2d), ctx, grads[0]),
                             /*arguments=*/8);  // input lends only its shape: no gradient
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  define_operator(m, Vmap::kFoldIntoBatch, recorded_kernel<AvgPool2d, AvgPool2dCall, &forward_cpu>(kForwardSchema),
                  kernel<AvgPool2dBackward, &backward_cpu>(kBackwardSchema));
}

}  // namespace spatialgrad::torch_ops

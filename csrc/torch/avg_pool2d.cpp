// spatialgrad::avg_pool2d and avg_pool2d_backward (aten's schemas): CPU kernels over the core, and autograd
// kernels. Both are linear in their tensor argument, so each one's derivative is the other: any order.
#include "spatialgrad/avg_pool2d.h"

#include <torch/library.h>

#include "common.h"
#include "operators.h"  // the forward's schema, from operators.toml

// (A namespace of this file's own, around its anonymous one: see "Names" in common.h.)
namespace spatialgrad::torch_ops::avg_pool2d_kernels {

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

// aten's schemas: the forward's is schema::kAvgPool2d (operators.h, from operators.toml), the backward's below.

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

// The pooling options of a call, which both kernels' gradients pass on.
struct Pooling {
  std::vector<int64_t> kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  Divisor divisor_override;

  static Pooling of(at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                    bool count_include_pad, Divisor divisor_override) {
    return {kernel_size.vec(), stride.vec(), padding.vec(), ceil_mode, count_include_pad, divisor_override};
  }
};

// The forward's gradient: the backward kernel over the saved input (its shape and dtype).
struct AvgPool2dCall {
  static constexpr const char* kName = "spatialgrad::AvgPool2d";
  Pooling pooling;

  template <class... Options>
  static AvgPool2dCall of(const at::Tensor& /*out*/, const at::Tensor& /*input*/, const Options&... options) {
    return {Pooling::of(options...)};
  }
  template <class... Options>
  static variable_list saved(const at::Tensor& input, const Options&... /*options*/) {
    return {input};
  }

  variable_list backward(const variable_list& grads, const variable_list& saved, const std::vector<bool>& wanted) const {
    if (!wanted[0]) return {at::Tensor()};
    const Pooling& p = pooling;
    // Without create_graph, plain tensors go straight to the CPU kernel (what the dispatcher would reach).
    if (computes_without_graph(grads[0], saved[0])) {
      return {backward_cpu(grads[0], saved[0], p.kernel_size, p.stride, p.padding, p.ceil_mode, p.count_include_pad,
                           p.divisor_override)};
    }
    return {operator_of<kBackwardSchema, decltype(backward_cpu)>().call(
        grads[0], saved[0], p.kernel_size, p.stride, p.padding, p.ceil_mode, p.count_include_pad, p.divisor_override)};
  }
};

// The backward is linear in grad_output: its gradient is the forward (through the dispatcher: any order).
struct AvgPool2dBackwardCall {
  static constexpr const char* kName = "spatialgrad::AvgPool2dBackward";
  Pooling pooling;

  template <class... Options>
  static AvgPool2dBackwardCall of(const at::Tensor& /*out*/, const at::Tensor& /*grad_output*/,
                                  const at::Tensor& /*input*/, const Options&... options) {
    return {Pooling::of(options...)};
  }
  static constexpr bool kSavesNoTensors = true;  // the options alone make its gradient

  variable_list backward(const variable_list& grads, const variable_list& /*saved*/,
                         const std::vector<bool>& wanted) const {
    if (!wanted[0]) return {at::Tensor(), at::Tensor()};  // input lends only its shape: no gradient
    const Pooling& p = pooling;
    return {operator_of<schema::kAvgPool2d, decltype(forward_cpu)>().call(
                grads[0], p.kernel_size, p.stride, p.padding, p.ceil_mode, p.count_include_pad, p.divisor_override),
            at::Tensor()};
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(spatialgrad, m) {
  define_operator(m, Vmap::kFoldIntoBatch, kernel<AvgPool2dCall, &forward_cpu, schema::kAvgPool2d>(),
                  kernel<AvgPool2dBackwardCall, &backward_cpu, kBackwardSchema>());
  // No autocast policy (Autocast::kNone): it runs in the dtypes it is given, as aten's avg_pool2d.
}

}  // namespace spatialgrad::torch_ops::avg_pool2d_kernels

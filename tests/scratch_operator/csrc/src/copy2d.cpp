#include "spatialgrad/copy2d.h"

#include "detail/checks.h"
#include "detail/entry.h"
#include "detail/parallel_for.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "copy2d";
constexpr const char* kBackward = "copy2d_backward";

void check_copy(const char* op, const char* from_name, const TensorView& from, const char* to_name,
                const TensorView& to) {
  detail::check_dim(op, from_name, from, 4);
  detail::check_floating(op, from_name, from.dtype());
  detail::check_shape(op, to_name, to, from.sizes());
  detail::check_same_dtype(op, to_name, to, from_name, from);
}

// Each (n, c) plane on its own task: no two tasks write one element.
template <class T>
void copy_planes(const TensorView& from, const TensorView& to) {
  const int64_t channels = from.size(1), height = from.size(2), width = from.size(3);
  parallel_for(0, from.size(0) * channels, grain_for(static_cast<double>(height * width)), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const T* src = from.data<T>() + (p / channels) * from.stride(0) + (p % channels) * from.stride(1);
      T* dst = to.data<T>() + (p / channels) * to.stride(0) + (p % channels) * to.stride(1);
      for (int64_t h = 0; h < height; ++h) {
        for (int64_t w = 0; w < width; ++w) {
          dst[h * to.stride(2) + w * to.stride(3)] = src[h * from.stride(2) + w * from.stride(3)];
        }
      }
    }
  });
}

void run(const char* op, const char* from_name, const TensorView& from, const TensorView& to) {
  detail::run_entry(op, from_name, from.dtype(), [&](auto tag, auto&) {
    if (!to.is_empty()) copy_planes<typename decltype(tag)::type>(from, to);
  });
}

}  // namespace

std::vector<int64_t> copy2d_output_shape(const std::vector<int64_t>& input_shape) {
  detail::check_rank(kForward, "input", input_shape, 4);
  return input_shape;
}

void copy2d(const TensorView& input, const TensorView& output) {
  check_copy(kForward, "input", input, "output", output);
  run(kForward, "input", input, output);
}

void copy2d_backward(const TensorView& grad_output, const TensorView& grad_input) {
  check_copy(kBackward, "grad_output", grad_output, "grad_input", grad_input);
  run(kBackward, "grad_output", grad_output, grad_input);
}

}  // namespace spatialgrad

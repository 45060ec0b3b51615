#include "spatialgrad/avg_pool2d.h"

#include <pybind11/stl.h>

#include <utility>

#include "numpy_view.h"

namespace spatialgrad::python {

void bind_avg_pool2d(py::module_& m) {
  m.def(
      "avg_pool2d",
      [](const py::array& input, std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
         std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad, int64_t divisor_override) {
        const AvgPool2dParams params{std::move(kernel_size), std::move(stride), std::move(padding), ceil_mode,
                                     count_include_pad,      divisor_override};
        const TensorView in = view_of(input, "avg_pool2d", "input");
        Output out = new_output(input, avg_pool2d_output_shape(in.sizes(), params));
        without_gil([&] { avg_pool2d(in, out.view, params); });
        return out.array;
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"), py::arg("ceil_mode"),
      py::arg("count_include_pad"), py::arg("divisor_override"));

  m.def(
      "avg_pool2d_backward",
      [](const py::array& grad_output, const py::array& input, std::vector<int64_t> kernel_size,
         std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
         int64_t divisor_override) {
        const AvgPool2dParams params{std::move(kernel_size), std::move(stride), std::move(padding), ceil_mode,
                                     count_include_pad,      divisor_override};
        const TensorView go = view_of(grad_output, "avg_pool2d_backward", "grad_output");
        const TensorView in = view_of(input, "avg_pool2d_backward", "input");
        Output grad_input = new_output(grad_output, in.sizes());
        without_gil([&] { avg_pool2d_backward(go, in, grad_input.view, params); });
        return grad_input.array;
      },
      py::arg("grad_output"), py::arg("input"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"),
      py::arg("ceil_mode"), py::arg("count_include_pad"), py::arg("divisor_override"));
}

}  // namespace spatialgrad::python

#include "spatialgrad/copy2d.h"

#include "numpy_view.h"

namespace spatialgrad::python {

void bind_copy2d(py::module_& m) {
  m.def(
      "copy2d",
      [](const py::array& input) {
        const TensorView in = view_of(input, "copy2d", "input");
        Output out = new_output(input, copy2d_output_shape(in.sizes()));
        without_gil([&] { copy2d(in, out.view); });
        return out.array;
      },
      py::arg("input"));
  m.def(
      "copy2d_backward",
      [](const py::array& grad_output) {
        const TensorView go = view_of(grad_output, "copy2d_backward", "grad_output");
        Output grad_input = new_output(grad_output, copy2d_output_shape(go.sizes()));
        without_gil([&] { copy2d_backward(go, grad_input.view); });
        return grad_input.array;
      },
      py::arg("grad_output"));
}

}  // namespace spatialgrad::python

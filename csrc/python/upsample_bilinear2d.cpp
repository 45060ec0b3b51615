#include "spatialgrad/upsample_bilinear2d.h"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>

#include "numpy_view.h"

namespace spatialgrad::python {

void bind_upsample_bilinear2d(py::module_& m) {
  m.def(
      "upsample_bilinear2d",
      [](const py::array& input, std::optional<std::vector<int64_t>> output_size, bool align_corners, double scales_h,
         double scales_w, const std::string& layout_name) {
        const char* op = "upsample_bilinear2d";
        const Layout layout = parse_layout(op, layout_name);
        const TensorView in = view_of(input, op, "input");
        // No output_size: the sizes follow from the scale factors (floor(in * scale)), as in PyTorch.
        const UpsampleBilinear2dParams params{
            output_size ? *output_size : upsample_bilinear2d_output_size(in.sizes(), scales_h, scales_w, layout),
            align_corners, scales_h, scales_w, layout};
        Output out = new_output(input, upsample_bilinear2d_output_shape(in.sizes(), params));
        without_gil([&] { upsample_bilinear2d(in, out.view, params); });
        return out.array;
      },
      py::arg("input"), py::arg("output_size"), py::arg("align_corners"), py::arg("scales_h"), py::arg("scales_w"),
      py::arg("layout"));

  m.def(
      "upsample_bilinear2d_backward",
      [](const py::array& grad_output, std::vector<int64_t> output_size, std::vector<int64_t> input_size,
         bool align_corners, double scales_h, double scales_w, const std::string& layout_name) {
        const char* op = "upsample_bilinear2d_backward";
        const Layout layout = parse_layout(op, layout_name);
        const UpsampleBilinear2dParams params{std::move(output_size), align_corners, scales_h, scales_w, layout};
        const TensorView go = view_of(grad_output, op, "grad_output");
        // Allocate input_size only when it could be valid; otherwise the core reports the problem
        // (it checks grad_output, input_size and output_size before grad_input's shape).
        const int c_dim = layout == Layout::kNCHW ? 1 : 3;
        bool allocatable = input_size.size() == 4 && go.dim() == 4 && input_size[0] == go.size(0) &&
                           input_size[c_dim] == go.size(c_dim);
        for (int64_t s : input_size) allocatable = allocatable && s >= 0;
        Output grad_input = new_output(grad_output, allocatable ? input_size : std::vector<int64_t>{0});
        without_gil([&] { upsample_bilinear2d_backward(go, input_size, grad_input.view, params); });
        return grad_input.array;
      },
      py::arg("grad_output"), py::arg("output_size"), py::arg("input_size"), py::arg("align_corners"),
      py::arg("scales_h"), py::arg("scales_w"), py::arg("layout"));
}

}  // namespace spatialgrad::python

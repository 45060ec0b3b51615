#include "spatialgrad/grid_sampler_2d.h"

#include <pybind11/stl.h>

#include "bindings.h"
#include "numpy_view.h"

namespace spatialgrad::python {

namespace {

GridSampler2dParams make_params(int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
  GridSampler2dParams params;
  params.interpolation_mode = interpolation_mode;
  params.padding_mode = padding_mode;
  params.align_corners = align_corners;
  return params;
}

}  // namespace

void bind_grid_sampler_2d(py::module_& m) {
  m.def(
      "grid_sampler_2d",
      [](const py::array& input, const py::array& grid, int64_t interpolation_mode, int64_t padding_mode,
         bool align_corners) {
        const GridSampler2dParams params = make_params(interpolation_mode, padding_mode, align_corners);
        const TensorView in = view_of(input, "grid_sampler_2d", "input");
        const TensorView gr = view_of(grid, "grid_sampler_2d", "grid");
        Output out = new_output(input, grid_sampler_2d_output_shape(in.sizes(), gr.sizes()));
        without_gil([&] { grid_sampler_2d(in, gr, out.view, params); });
        return out.array;
      },
      py::arg("input"), py::arg("grid"), py::arg("interpolation_mode"), py::arg("padding_mode"),
      py::arg("align_corners"));

  m.def(
      "grid_sampler_2d_backward",
      [](const py::array& grad_output, const py::array& input, const py::array& grid, int64_t interpolation_mode,
         int64_t padding_mode, bool align_corners, const std::vector<bool>& output_mask) {
        const GridSampler2dParams params = make_params(interpolation_mode, padding_mode, align_corners);
        const char* op = "grid_sampler_2d_backward";
        const TensorView go = view_of(grad_output, op, "grad_output");
        const TensorView in = view_of(input, op, "input");
        const TensorView gr = view_of(grid, op, "grid");
        // Shapes are checked before anything is allocated; the kernel checks everything again.
        grid_sampler_2d_output_shape(in.sizes(), gr.sizes());
        const bool want_input = output_mask.size() == 2 && output_mask[0];
        const bool want_grid = output_mask.size() == 2 && output_mask[1];
        Output grad_input, grad_grid;
        if (want_input) grad_input = new_output(input, in.sizes());
        if (want_grid) grad_grid = new_output(grid, gr.sizes());
        without_gil([&] {
          grid_sampler_2d_backward(go, in, gr, grad_input.view, grad_grid.view, params, output_mask);
        });
        py::object gi = want_input ? py::object(grad_input.array) : py::none();
        py::object gg = want_grid ? py::object(grad_grid.array) : py::none();
        return py::make_tuple(gi, gg);
      },
      py::arg("grad_output"), py::arg("input"), py::arg("grid"), py::arg("interpolation_mode"),
      py::arg("padding_mode"), py::arg("align_corners"), py::arg("output_mask"));
}

}  // namespace spatialgrad::python

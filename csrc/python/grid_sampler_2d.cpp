#include "spatialgrad/grid_sampler_2d.h"

#include <pybind11/stl.h>

#include <optional>

#include "numpy_view.h"

namespace spatialgrad::python {

void bind_grid_sampler_2d(py::module_& m) {
  m.def(
      "grid_sampler_2d",
      [](const py::array& input, const py::array& grid, int64_t interpolation_mode, int64_t padding_mode,
         bool align_corners) {
        const GridSampler2dParams params = grid_sampler_2d_params(interpolation_mode, padding_mode, align_corners);
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
        const GridSampler2dParams params = grid_sampler_2d_params(interpolation_mode, padding_mode, align_corners);
        const char* op = "grid_sampler_2d_backward";
        const TensorView go = view_of(grad_output, op, "grad_output");
        const TensorView in = view_of(input, op, "input");
        const TensorView gr = view_of(grid, op, "grid");
        // Arguments are checked before anything is allocated (the outputs' own checks need them); the
        // kernel checks everything again.
        check_grid_sampler_2d_backward(go, in, gr, TensorView(), TensorView(), params, {false, false});
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

  m.def(
      "grid_sampler_2d_double_backward",
      [](const std::optional<py::array>& grad_grad_input, const std::optional<py::array>& grad_grad_grid,
         const py::array& grad_output, const py::array& input, const py::array& grid, int64_t interpolation_mode,
         int64_t padding_mode, bool align_corners, const std::vector<bool>& output_mask) {
        const GridSampler2dParams params = grid_sampler_2d_params(interpolation_mode, padding_mode, align_corners);
        const char* op = "grid_sampler_2d_double_backward";
        // None (an absent cotangent, zeros) is the only way to pass TensorView().
        const TensorView ggi = grad_grad_input ? view_of(*grad_grad_input, op, "grad_grad_input") : TensorView();
        const TensorView ggg = grad_grad_grid ? view_of(*grad_grad_grid, op, "grad_grad_grid") : TensorView();
        const TensorView go = view_of(grad_output, op, "grad_output");
        const TensorView in = view_of(input, op, "input");
        const TensorView gr = view_of(grid, op, "grid");
        grid_sampler_2d_output_shape(in.sizes(), gr.sizes());  // shapes checked before allocating
        const auto wants = [&](size_t i) { return output_mask.size() == 3 && output_mask[i]; };
        Output d_go, d_in, d_grid;
        if (wants(0)) d_go = new_output(grad_output, go.sizes());
        if (wants(1)) d_in = new_output(input, in.sizes());
        if (wants(2)) d_grid = new_output(grid, gr.sizes());
        without_gil([&] {
          grid_sampler_2d_double_backward(ggi, ggg, go, in, gr, d_go.view, d_in.view, d_grid.view, params,
                                          output_mask);
        });
        const auto result = [&](size_t i, const Output& o) { return wants(i) ? py::object(o.array) : py::none(); };
        return py::make_tuple(result(0, d_go), result(1, d_in), result(2, d_grid));
      },
      py::arg("grad_grad_input"), py::arg("grad_grad_grid"), py::arg("grad_output"), py::arg("input"),
      py::arg("grid"), py::arg("interpolation_mode"), py::arg("padding_mode"), py::arg("align_corners"),
      py::arg("output_mask"));
}

}  // namespace spatialgrad::python

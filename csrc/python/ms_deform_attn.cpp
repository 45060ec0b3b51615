#include "spatialgrad/ms_deform_attn.h"

#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "numpy_view.h"

namespace spatialgrad::python {

namespace {

constexpr const char* kForward = "ms_deform_attn";
constexpr const char* kBackward = "ms_deform_attn_backward";

// spatial_shapes and level_start_index hold integers: name the dtypes they accept rather than
// view_of's floating ones (the core repeats the check for C++ callers).
TensorView index_view_of(const py::array& array, const char* op, const char* arg) {
  const py::dtype dtype = array.dtype();
  if (!dtype.equal(py::dtype::of<int32_t>()) && !dtype.equal(py::dtype::of<int64_t>())) {
    detail::fail(ErrorKind::kType, op, "(): expected ", arg, " to be int32 or int64, but got ",
                 py::str(static_cast<const py::object&>(dtype)).cast<std::string>());
  }
  return view_of(array, op, arg);
}

// The five inputs every entry takes, viewed in argument order (so errors name the first bad one).
struct Inputs {
  TensorView v, shapes, starts, loc, attn;
};

Inputs inputs_of(const char* op, const py::array& value, const py::array& spatial_shapes,
                 const py::array& level_start_index, const py::array& sampling_locations,
                 const py::array& attention_weights) {
  Inputs in;
  in.v = view_of(value, op, "value");
  in.shapes = index_view_of(spatial_shapes, op, "spatial_shapes");
  in.starts = index_view_of(level_start_index, op, "level_start_index");
  in.loc = view_of(sampling_locations, op, "sampling_locations");
  in.attn = view_of(attention_weights, op, "attention_weights");
  return in;
}

}  // namespace

void bind_ms_deform_attn(py::module_& m) {
  m.def(
      "ms_deform_attn",
      [](const py::array& value, const py::array& spatial_shapes, const py::array& level_start_index,
         const py::array& sampling_locations, const py::array& attention_weights) {
        const Inputs in =
            inputs_of(kForward, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
        Output out = new_output(value, ms_deform_attn_output_shape(in.v.sizes(), in.loc.sizes()));
        without_gil([&] { ms_deform_attn(in.v, in.shapes, in.starts, in.loc, in.attn, out.view); });
        return out.array;
      },
      py::arg("value"), py::arg("spatial_shapes"), py::arg("level_start_index"), py::arg("sampling_locations"),
      py::arg("attention_weights"));

  m.def(
      "ms_deform_attn_backward",
      [](const py::array& value, const py::array& spatial_shapes, const py::array& level_start_index,
         const py::array& sampling_locations, const py::array& attention_weights, const py::array& grad_output) {
        const Inputs in =
            inputs_of(kBackward, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
        const TensorView go = view_of(grad_output, kBackward, "grad_output");
        Output grad_value = new_output(value, in.v.sizes());
        Output grad_loc = new_output(value, in.loc.sizes());
        Output grad_attn = new_output(value, in.attn.sizes());
        without_gil([&] {
          ms_deform_attn_backward(in.v, in.shapes, in.starts, in.loc, in.attn, go, grad_value.view, grad_loc.view,
                                  grad_attn.view);
        });
        return py::make_tuple(grad_value.array, grad_loc.array, grad_attn.array);
      },
      py::arg("value"), py::arg("spatial_shapes"), py::arg("level_start_index"), py::arg("sampling_locations"),
      py::arg("attention_weights"), py::arg("grad_output"));

  m.def(
      "ms_deform_attn_double_backward",
      [](const py::array& value, const py::array& spatial_shapes, const py::array& level_start_index,
         const py::array& sampling_locations, const py::array& attention_weights, const py::array& grad_output,
         const std::optional<py::array>& grad_grad_value, const std::optional<py::array>& grad_grad_locations,
         const std::optional<py::array>& grad_grad_weights) {
        const char* op = "ms_deform_attn_double_backward";
        const Inputs in =
            inputs_of(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
        const TensorView go = view_of(grad_output, op, "grad_output");
        // None (an absent cotangent, zeros) is the only way to pass TensorView().
        const auto optional_view = [&](const std::optional<py::array>& a, const char* name) {
          return a ? view_of(*a, op, name) : TensorView();
        };
        const TensorView ggv = optional_view(grad_grad_value, "grad_grad_value");
        const TensorView ggl = optional_view(grad_grad_locations, "grad_grad_sampling_locations");
        const TensorView gga = optional_view(grad_grad_weights, "grad_grad_attention_weights");
        ms_deform_attn_output_shape(in.v.sizes(), in.loc.sizes());  // ranks checked before allocating
        Output d_value = new_output(value, in.v.sizes()), d_loc = new_output(value, in.loc.sizes());
        Output d_attn = new_output(value, in.attn.sizes()), d_go = new_output(value, go.sizes());
        without_gil([&] {
          ms_deform_attn_double_backward(in.v, in.shapes, in.starts, in.loc, in.attn, go, ggv, ggl, gga, d_value.view,
                                         d_loc.view, d_attn.view, d_go.view);
        });
        return py::make_tuple(d_value.array, d_loc.array, d_attn.array, d_go.array);
      },
      py::arg("value"), py::arg("spatial_shapes"), py::arg("level_start_index"), py::arg("sampling_locations"),
      py::arg("attention_weights"), py::arg("grad_output"), py::arg("grad_grad_value"),
      py::arg("grad_grad_sampling_locations"), py::arg("grad_grad_attention_weights"));
}

}  // namespace spatialgrad::python

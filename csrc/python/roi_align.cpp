#include "spatialgrad/roi_align.h"

#include <pybind11/stl.h>

#include "numpy_view.h"
#include "spatialgrad/error.h"

namespace spatialgrad::python {

void bind_roi_align(py::module_& m) {
  m.def(
      "roi_align",
      [](const py::array& input, const py::array& boxes, const std::vector<int64_t>& output_size,
         double spatial_scale, int64_t sampling_ratio, bool aligned) {
        SG_CHECK(output_size.size() == 1 || output_size.size() == 2,
                 "roi_align(): expected output_size to have 1 or 2 entries, but got ", output_size.size(), " (",
                 format_list(output_size, "[", "]"), ")");
        const RoiAlignParams params{output_size[0], output_size.back(), spatial_scale, sampling_ratio, aligned};
        const TensorView in = view_of(input, "roi_align", "input");
        const TensorView rois = view_of(boxes, "roi_align", "boxes");
        Output out = new_output(input, roi_align_output_shape(in.sizes(), rois.sizes(), params));
        without_gil([&] { roi_align(in, rois, out.view, params); });
        return out.array;
      },
      py::arg("input"), py::arg("boxes"), py::arg("output_size"), py::arg("spatial_scale"),
      py::arg("sampling_ratio"), py::arg("aligned"));

  m.def(
      "roi_align_backward",
      [](const py::array& grad_output, const py::array& boxes, const std::vector<int64_t>& input_shape,
         int64_t pooled_height, int64_t pooled_width, double spatial_scale, int64_t sampling_ratio, bool aligned) {
        const RoiAlignParams params{pooled_height, pooled_width, spatial_scale, sampling_ratio, aligned};
        const TensorView go = view_of(grad_output, "roi_align_backward", "grad_output");
        const TensorView rois = view_of(boxes, "roi_align_backward", "boxes");
        check_roi_align_backward_args(go, rois, input_shape, params);  // before allocating input_shape
        Output grad_input = new_output(grad_output, input_shape);
        without_gil([&] { roi_align_backward(go, rois, input_shape, grad_input.view, params); });
        return grad_input.array;
      },
      py::arg("grad_output"), py::arg("boxes"), py::arg("input_shape"), py::arg("pooled_height"),
      py::arg("pooled_width"), py::arg("spatial_scale"), py::arg("sampling_ratio"), py::arg("aligned"));
}

}  // namespace spatialgrad::python

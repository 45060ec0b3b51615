// One bind_<op>() per operator, each defined in csrc/python/<op>.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace spatialgrad::python {

void bind_avg_pool2d(pybind11::module_& m);
void bind_upsample_bilinear2d(pybind11::module_& m);
void bind_grid_sampler_2d(pybind11::module_& m);
void bind_roi_align(pybind11::module_& m);
void bind_ms_deform_attn(pybind11::module_& m);
void bind_ascend(pybind11::module_& m);

}  // namespace spatialgrad::python

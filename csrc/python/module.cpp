// spatialgrad._core: the pybind11 module. Each operator binds itself in its own file.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "numpy_view.h"
#include "detail/block_cache.h"
#include "spatialgrad/parallel.h"

PYBIND11_MODULE(_core, m) {
  namespace sg = spatialgrad;
  m.doc() = "spatialgrad C++ kernels (use the functions re-exported by the spatialgrad package)";
  m.attr("__version__") = SPATIALGRAD_VERSION;  // from VERSION, through CMake
  sg::python::register_error_translator();
  m.def("set_num_threads", &sg::set_num_threads, pybind11::arg("n"),
        "Threads used by spatialgrad kernels (process-wide); n <= 0 restores the default.");
  m.def("get_num_threads", &sg::get_num_threads, "Threads used by spatialgrad kernels.");
  m.def("set_default_num_threads", &sg::set_default_num_threads, pybind11::arg("n"),
        "Threads used while set_num_threads has set none (spatialgrad.torch follows torch's count with it "
        "inside DataLoader workers); n <= 0 restores the environment's or machine's default.");
  m.def("clear_memory_cache", &sg::detail::clear_block_cache,
        "Frees the memory kept for reuse from large arrays and buffers that have died (see the README).");
  sg::python::bind_avg_pool2d(m);
  sg::python::bind_upsample_bilinear2d(m);
  sg::python::bind_grid_sampler_2d(m);
  sg::python::bind_roi_align(m);
  sg::python::bind_ms_deform_attn(m);
  sg::python::bind_ascend(m);
}

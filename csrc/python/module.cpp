// spatialgrad._core: the pybind11 module. Each operator of the table (operators.toml) binds itself in its own
// file, csrc/python/<op>.cpp, as bind_<op>(); CMake writes their list, spatialgrad_operators.inc, a line
// SG_TABLE_OPERATOR(<op>) per operator.
#include <pybind11/pybind11.h>

#include "numpy_view.h"
#include "spatialgrad/cpu.h"
#include "spatialgrad/memory.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad::python {
#define SG_TABLE_OPERATOR(op) void bind_##op(py::module_& m);
#include "spatialgrad_operators.inc"
#undef SG_TABLE_OPERATOR
void bind_ascend(py::module_& m);
void bind_host_executor(py::module_& m);  // not an operator: NumPy calls on a host framework's pool
}  // namespace spatialgrad::python

PYBIND11_MODULE(_core, m) {
  namespace sg = spatialgrad;
  m.doc() = "spatialgrad C++ kernels (use the functions re-exported by the spatialgrad package)";
  m.attr("__version__") = SPATIALGRAD_VERSION;  // from VERSION, through CMake
  sg::python::register_error_translator();
  m.def("set_num_threads", &sg::set_num_threads, pybind11::arg("n"),
        "Sets the threads spatialgrad's kernels use, process-wide; n <= 0 restores the default\n"
        "(SPATIALGRAD_NUM_THREADS, else OMP_NUM_THREADS, else the cores the process may run on).\n"
        "Results are bitwise identical for any count.\n\n"
        "Example::\n\n"
        "    spatialgrad.set_num_threads(2)  # for timing against PyTorch: also torch.set_num_threads(2)\n"
        "    assert spatialgrad.get_num_threads() == 2\n");
  m.def("get_num_threads", &sg::get_num_threads,
        "The number of threads spatialgrad's kernels use (what set_num_threads set, else the default).\n\n"
        "Example::\n\n"
        "    n = spatialgrad.get_num_threads()  # e.g. 2 on a 2-core machine\n"
        "    assert n >= 1\n");
  m.def("set_default_num_threads", &sg::set_default_num_threads, pybind11::arg("n"),
        "Threads used while set_num_threads has set none (spatialgrad.torch follows torch's count with it "
        "inside DataLoader workers); n <= 0 restores the environment's or machine's default.");
  m.def("simd_level", &sg::simd_level,
        "The instruction level spatialgrad's kernels run at: \"avx512\", \"avx2\" or \"baseline\" (SSE2), the best\n"
        "this CPU supports unless the environment variable SPATIALGRAD_SIMD_LEVEL (one of those names, read when\n"
        "the first kernel runs) caps it. Results are bitwise identical at every level.\n\n"
        "Example::\n\n"
        "    level = spatialgrad.simd_level()  # \"avx512\" on a CPU with AVX-512\n"
        "    assert level in (\"avx512\", \"avx2\", \"baseline\")\n");
  m.def("clear_memory_cache", &sg::clear_memory_cache,
        "Frees the memory spatialgrad keeps for reuse from large outputs and scratch buffers that have died\n"
        "(it is kept so that a training loop does not pay for fresh pages each step); arrays still alive stay.\n\n"
        "Example::\n\n"
        "    spatialgrad.clear_memory_cache()  # the pages of dead large results go back to the system\n");
#define SG_TABLE_OPERATOR(op) sg::python::bind_##op(m);
#include "spatialgrad_operators.inc"
#undef SG_TABLE_OPERATOR
  sg::python::bind_ascend(m);
  sg::python::bind_host_executor(m);
}

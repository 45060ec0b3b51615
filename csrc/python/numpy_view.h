// NumPy <-> TensorView conversion for the bindings. Inputs are viewed in place (any strides, also
// negative); outputs are new C-contiguous arrays that the kernels fill completely.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad::python {

namespace py = pybind11;

// The DType of a NumPy dtype, or a TypeError naming op() and the argument.
DType dtype_from_numpy(const py::dtype& dtype, const char* op, const char* arg);

// A view of `array` (no copy). Raises TypeError for dtypes spatialgrad has no kernels for.
TensorView view_of(const py::array& array, const char* op, const char* arg);

// A new C-contiguous array with the dtype of `like` (the very dtype object, so that a marked
// bfloat16 array gives a marked result), and a view of it.
struct Output {
  py::array array;
  TensorView view;
};
Output new_output(const py::array& like, const std::vector<int64_t>& shape);

// Installs the translation of spatialgrad::Error kinds to Python exceptions.
void register_error_translator();

// Runs fn() with the GIL released. The GIL is taken back in plain code, not in a destructor as
// py::gil_scoped_release does: a daemon thread that comes back while the interpreter shuts down is
// ended by pthread_exit inside PyEval_RestoreThread, and that unwind must not cross a noexcept
// frame (it would call std::terminate and abort the exiting process).
template <class Fn>
void without_gil(const Fn& fn) {
  PyThreadState* state = PyEval_SaveThread();
  try {
    fn();
  } catch (...) {
    PyEval_RestoreThread(state);
    throw;
  }
  PyEval_RestoreThread(state);
}

}  // namespace spatialgrad::python

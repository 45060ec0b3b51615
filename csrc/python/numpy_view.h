// NumPy <-> TensorView conversion for the bindings. Inputs are viewed in place (any strides, also
// negative); outputs are new C-contiguous arrays that the kernels fill completely.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cxxabi.h>
#include <unistd.h>

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

// Whether Python is finalizing (Py_IsFinalizing is public from Python 3.13 on).
inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Takes the GIL back after PyEval_SaveThread. A daemon thread that comes back while the interpreter finalizes
// never returns from it: it is parked for the rest of the process.
//
// Why: while the interpreter finalizes, PyEval_RestoreThread ends any other thread that asks for the GIL with
// pthread_exit (Python 3.13 and before; 3.14 parks it). pthread_exit unwinds the thread's stack, and the frames
// above this one own Python objects: the output array, pybind11's argument holders. Their destructors would drop
// them without the GIL (a data race with the finalizing interpreter) and, where an object dies, run its
// deallocator: with Python 3.13 and NumPy 2 freeing an array's data takes the GIL (PyTraceMalloc_Untrack calls
// PyGILState_Ensure), which calls pthread_exit again, inside a destructor, where the second unwind meets a
// noexcept frame: std::terminate, "terminate called without an active exception", and an aborted exit. So the
// unwind is stopped here, before any of those frames: the thread is parked (it never returns into Python) and the
// process exits around it, as Python 3.14 does for every such thread.
inline void take_gil_back(PyThreadState* state) {
  try {
    PyEval_RestoreThread(state);
  } catch (abi::__forced_unwind&) {
    if (!interpreter_finalizing()) throw;  // another end of the thread (pthread_cancel): let it unwind
    for (;;) pause();
  }
}

// Runs fn() with the GIL released. The GIL is taken back in plain code (take_gil_back), not in a destructor as
// py::gil_scoped_release does: a destructor could not stop the unwind of a thread that Python ends there.
template <class Fn>
void without_gil(const Fn& fn) {
  PyThreadState* state = PyEval_SaveThread();
  try {
    fn();
  } catch (...) {
    take_gil_back(state);
    throw;
  }
  take_gil_back(state);
}

}  // namespace spatialgrad::python

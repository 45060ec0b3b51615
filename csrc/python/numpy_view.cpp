#include "numpy_view.h"

#include <string>

#include "spatialgrad/memory.h"

#include "spatialgrad/error.h"

namespace spatialgrad::python {

namespace {

// bfloat16 arrives as an ml_dtypes.bfloat16 array, or as 16-bit integers marked by
// spatialgrad.bfloat16_bits() with the dtype metadata {"spatialgrad": "bfloat16"} (NumPy has no
// bfloat16 of its own).
bool is_bfloat16(const py::dtype& dtype) {
  if (dtype.itemsize() != 2) return false;
  const py::object metadata = dtype.attr("metadata");
  // The marker counts on the bit-pattern carriers only (native uint16/int16): a float16 array that
  // carries it (metadata survives astype and views) is float16.
  const bool carrier = dtype.equal(py::dtype::of<uint16_t>()) || dtype.equal(py::dtype::of<int16_t>());
  if (!metadata.is_none() && carrier) {
    const py::dict dict = metadata.cast<py::dict>();
    if (dict.contains("spatialgrad")) return py::str(dict["spatialgrad"]).cast<std::string>() == "bfloat16";
  }
  return py::str(dtype.attr("name")).cast<std::string>() == "bfloat16" && dtype.kind() == 'V';
}

}  // namespace

DType dtype_from_numpy(const py::dtype& dtype, const char* op, const char* arg) {
  // equal() is PyArray_EquivTypes: byte order counts, so a big-endian array is not mistaken for float32.
  if (dtype.equal(py::dtype::of<float>())) return DType::kFloat32;
  if (dtype.equal(py::dtype::of<double>())) return DType::kFloat64;
  if (dtype.equal(py::dtype("float16"))) return DType::kFloat16;
  if (is_bfloat16(dtype)) return DType::kBFloat16;
  if (dtype.equal(py::dtype::of<int32_t>())) return DType::kInt32;
  if (dtype.equal(py::dtype::of<int64_t>())) return DType::kInt64;
  detail::fail(ErrorKind::kType, op, "(): expected ", arg,
               " to be a NumPy array of float16, bfloat16, float32 or float64 (native byte order), but got dtype ",
               py::str(static_cast<const py::object&>(dtype)).cast<std::string>());
}

TensorView view_of(const py::array& array, const char* op, const char* arg) {
  const DType dtype = dtype_from_numpy(array.dtype(), op, arg);
  const int64_t itemsize = array.itemsize();
  const auto ndim = static_cast<size_t>(array.ndim());
  std::vector<int64_t> sizes(ndim), strides(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    sizes[d] = array.shape(d);
    const int64_t byte_stride = array.strides(d);
    SG_CHECK(byte_stride % itemsize == 0, op, "(): expected ", arg,
             " to have strides that are multiples of its item size, but got byte strides that are not");
    strides[d] = byte_stride / itemsize;
  }
  SG_CHECK((reinterpret_cast<uintptr_t>(array.data()) % static_cast<uintptr_t>(itemsize)) == 0 || array.size() == 0,
           op, "(): expected ", arg, " to be an aligned array, but got an unaligned one (copy it with numpy.array)");
  return TensorView(const_cast<void*>(array.data()), dtype, std::move(sizes), std::move(strides));
}

Output new_output(const py::array& like, const std::vector<int64_t>& shape) {
  const int64_t numel = checked_numel(shape);
  std::vector<py::ssize_t> py_shape(shape.begin(), shape.end());
  const size_t bytes = static_cast<size_t>(numel) * static_cast<size_t>(like.dtype().itemsize());
  py::array array;
  if (bytes >= kMinCachedBytes) {
    // The array owns its block through a capsule that hands it back to the cache (spatialgrad/memory.h).
    struct Block {
      void* data;
      size_t bytes;
    };
    auto* block = new Block{acquire_block(bytes), bytes};
    py::capsule owner(block, [](void* p) {
      auto* b = static_cast<Block*>(p);
      release_block(b->data, b->bytes);
      delete b;
    });
    array = py::array(like.dtype(), py_shape, block->data, owner);
  } else {
    array = py::array(like.dtype(), py_shape);
  }
  TensorView view(array.mutable_data(), dtype_from_numpy(like.dtype(), "spatialgrad", "an output"), shape);
  return Output{std::move(array), std::move(view)};
}

void register_error_translator() {
  py::register_exception_translator([](std::exception_ptr pointer) {
    if (!pointer) return;
    try {
      std::rethrow_exception(pointer);
    } catch (const Error& error) {
      PyObject* type = PyExc_ValueError;
      switch (error.kind()) {
        case ErrorKind::kType:
          type = PyExc_TypeError;
          break;
        case ErrorKind::kIndex:
          type = PyExc_IndexError;
          break;
        case ErrorKind::kOverflow:
          type = PyExc_OverflowError;
          break;
        case ErrorKind::kInvalidArgument:
        case ErrorKind::kNullPointer:
          break;
      }
      PyErr_SetString(type, error.what());
    }
  });
}

}  // namespace spatialgrad::python

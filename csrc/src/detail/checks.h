// Validation helpers shared by every operator, so that messages read the same everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "spatialgrad/dtype.h"
#include "spatialgrad/error.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail {

// 128-bit integers for size arithmetic that can overflow int64 before its result is clipped or checked
// (a GCC/Clang extension; __extension__ keeps -Wpedantic quiet).
__extension__ typedef __int128 Int128;

inline void check_dim(const char* op, const char* name, const TensorView& t, int64_t dim) {
  SG_CHECK(t.dim() == dim, op, "(): expected ", name, " to be ", dim, "-D, but got ", t.dim(), "-D tensor of shape ",
           t.shape_string());
}

// check_dim for a shape given as a list (the output-shape functions, which have no tensor yet).
inline void check_rank(const char* op, const char* name, const std::vector<int64_t>& shape, int64_t dim) {
  SG_CHECK(static_cast<int64_t>(shape.size()) == dim, op, "(): expected ", name, " to be ", dim, "-D, but got ",
           shape.size(), "-D tensor of shape ", format_list(shape));
}

// The dtype check of a kernel's entry (dispatch_floating's TypeError) where nothing is dispatched yet: a
// backward checks grad_output's dtype before comparing the other tensors with it.
inline void check_floating(const char* op, const char* name, DType dtype) {
  dispatch_floating(dtype, op, name, [](auto) {});
}

inline void check_same_dtype(const char* op, const char* name, const TensorView& t, const char* ref_name,
                             const TensorView& ref) {
  SG_CHECK_KIND(t.dtype() == ref.dtype(), kType, op, "(): expected ", name, " to have the dtype of ", ref_name, " (",
                dtype_name(ref.dtype()), "), but got ", dtype_name(t.dtype()));
}

inline void check_shape(const char* op, const char* name, const TensorView& t, const std::vector<int64_t>& shape) {
  SG_CHECK(t.sizes() == shape, op, "(): expected ", name, " of shape ", format_list(shape), ", but got ",
           t.shape_string());
}

// A Layout that is one of its enumerators (an aclnn integer cast in may not be).
inline void check_layout(const char* op, Layout layout) {
  SG_CHECK(layout == Layout::kNCHW || layout == Layout::kNHWC, op, "(): expected layout NCHW (0) or NHWC (1), but got ",
           static_cast<int>(layout));
}

// Multiplies sizes with overflow checks (OverflowError-kind on overflow).
inline int64_t checked_mul(const char* op, int64_t a, int64_t b) {
  int64_t out;
  SG_CHECK_KIND(!__builtin_mul_overflow(a, b, &out), kOverflow, op,
                "(): expected sizes whose product fits in int64, but got ", a, " * ", b);
  return out;
}

// Adds sizes with overflow checks (OverflowError-kind on overflow).
inline int64_t checked_add(const char* op, int64_t a, int64_t b) {
  int64_t out;
  SG_CHECK_KIND(!__builtin_add_overflow(a, b, &out), kOverflow, op,
                "(): expected sizes whose sum fits in int64, but got ", a, " + ", b);
  return out;
}

inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace spatialgrad::detail

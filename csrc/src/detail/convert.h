// Row conversions between the half-precision storage types and float: what the kernels use to
// read a row of float16/bfloat16 into float scratch and to write a float row back, so that the
// conversions run as vector loops (F16C where the CPU has it) instead of once per element inside
// a kernel's inner loop. Results are identical on every CPU: the portable conversions and the
// F16C instructions round alike (tests/cpp/test_half.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "spatialgrad/dtype.h"

namespace spatialgrad::detail {

// dst[i] = src[i * stride], widened exactly, for i < n.
void widen_row(const Half* src, int64_t stride, int64_t n, float* dst);
void widen_row(const BFloat16* src, int64_t stride, int64_t n, float* dst);
// dst[i * stride] = src[i], rounded to nearest even, for i < n.
void narrow_row(const float* src, int64_t n, Half* dst, int64_t stride);
void narrow_row(const float* src, int64_t n, BFloat16* dst, int64_t stride);

template <class T>
constexpr bool kIsHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

}  // namespace spatialgrad::detail

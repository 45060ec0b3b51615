// Row conversions between the half-precision storage types and float: what the kernels use to
// read a row of float16/bfloat16 into float scratch and to write a float row back, so that the
// conversions run as vector loops (F16C, AVX2 or AVX-512 BF16 where the CPU has them) instead of once
// per element inside a kernel's inner loop. Results are identical on every CPU: the portable
// conversions and the instructions round alike (tests/cpp/test_half.cpp checks every path).
#pragma once

#include <cstdint>
#include <type_traits>

#include "spatialgrad/dtype.h"

namespace spatialgrad {

// The kernels' element vocabulary (in namespace spatialgrad, as the kernels use it unqualified; private to
// the library like the rest of this folder). The type a kernel computes and accumulates in for a storage type.
template <class T>
struct AccTypeOf {
  using type = float;
};
template <>
struct AccTypeOf<double> {
  using type = double;
};
template <class T>
using AccType = typename AccTypeOf<T>::type;

// Loads and stores between storage and accumulation types (one rounding on store).
template <class Acc, class T>
SPATIALGRAD_INLINE Acc load_as(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<Acc>(to_float(v));
  } else {
    return static_cast<Acc>(v);
  }
}

template <class T, class Acc>
SPATIALGRAD_INLINE T store_as(Acc v) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace spatialgrad

namespace spatialgrad::detail {

// dst[i] = src[i * stride], widened exactly, for i < n.
void widen_row(const Half* src, int64_t stride, int64_t n, float* dst);
void widen_row(const BFloat16* src, int64_t stride, int64_t n, float* dst);
// dst[i * stride] = src[i], rounded to nearest even, for i < n.
void narrow_row(const float* src, int64_t n, Half* dst, int64_t stride);
void narrow_row(const float* src, int64_t n, BFloat16* dst, int64_t stride);
// dst[i * stride] = ((rows[0][i] + rows[1][i]) + ...) + rows[count - 1][i], added in float32 in that
// order and rounded once, for i < n (count >= 1): a float sum of rows followed by narrow_row, in one
// pass with no scratch row.
void narrow_sum_rows(const float* const* rows, int64_t count, int64_t n, Half* dst, int64_t stride);
void narrow_sum_rows(const float* const* rows, int64_t count, int64_t n, BFloat16* dst, int64_t stride);
// dst[i * stride] = wa * a[i] + wb * b[i] (float32, no fused multiply-add) rounded once, for i < n: a
// blend of two rows followed by narrow_row, in one pass.
void narrow_blend_rows(const float* a, const float* b, float wa, float wb, int64_t n, Half* dst, int64_t stride);
void narrow_blend_rows(const float* a, const float* b, float wa, float wb, int64_t n, BFloat16* dst, int64_t stride);

// dst[i * 8 + k] = src[k * row_step + i] widened exactly, for k < 8, i < n: eight rows (channels)
// interleaved into n vectors of 8 lanes (rows.h pack_lanes) in one pass, widened and transposed in
// registers (F16C / AVX2 where the CPU has them).
void widen_lanes8(const Half* src, int64_t row_step, int64_t n, float* dst);
void widen_lanes8(const BFloat16* src, int64_t row_step, int64_t n, float* dst);
// The inverse: dst[k * row_step + i] = src[i * 8 + k] rounded to nearest even, for k < 8, i < n.
void narrow_lanes8(const float* src, int64_t n, Half* dst, int64_t row_step);
void narrow_lanes8(const float* src, int64_t n, BFloat16* dst, int64_t row_step);

// acc[i] = sum over k < count (>= 1) of w[k] * rows[k][i] widened, for i < n: products added in order
// k = 0, 1, ... (no fused multiply-add), so the bits of widen_row into scratch followed by a float32
// weighted sum, in one pass (F16C where the CPU has it).
void weighted_sum_rows(const Half* const* rows, const float* w, int64_t count, int64_t n, float* acc);

// sums[i] = ((0 + x0) + x1) + ... + x(count - 1), xk = rows[k][i * stride] widened, added in float32 in
// that order from +0, for i < n (count >= 1): the bits of widen_row into scratch rows and a float32 sum
// of them, in one pass (F16C where the CPU has it).
void widen_sum_rows(const Half* const* rows, int64_t count, int64_t n, int64_t stride, float* sums);

// Each function takes the conversion instructions of the kernels' level (cpu.h simd_level(): F16C from
// AVX2, AVX-512 BF16 at AVX-512 where the CPU has it); tests pin each level and compare the bits.

template <class T>
constexpr bool kIsHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

}  // namespace spatialgrad::detail

// Element types and the one runtime dtype switch each entry point makes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "spatialgrad/error.h"

namespace spatialgrad {

enum class DType : int8_t { kFloat16, kBFloat16, kFloat32, kFloat64, kInt32, kInt64 };

const char* dtype_name(DType dtype);
int64_t dtype_size(DType dtype);

// IEEE binary16 storage. Arithmetic happens in float (see AccType); conversions round to nearest even.
struct Half {
  uint16_t bits;
};

// bfloat16 storage: the upper 16 bits of a float32.
struct BFloat16 {
  uint16_t bits;
};

inline float to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // Inf / NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

inline Half to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // Inf or NaN (keep NaN quiet and non-zero)
    const uint16_t nan_bits = magnitude > 0x7f800000u ? static_cast<uint16_t>(0x200u | ((magnitude >> 13) & 0x3ffu)) : 0;
    return Half{static_cast<uint16_t>(sign | 0x7c00u | nan_bits)};
  }
  if (magnitude >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to Inf
  if (magnitude < 0x38800000u) {  // result is subnormal or zero
    if (magnitude < 0x33000000u) return Half{sign};  // below half the smallest subnormal
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t value = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (value & 1u))) ++value;
    return Half{static_cast<uint16_t>(sign | value)};
  }
  // normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even
  uint32_t value = magnitude - 0x38000000u;
  value += 0xfffu + ((value >> 13) & 1u);
  return Half{static_cast<uint16_t>(sign | (value >> 13))};
}

inline float to_float(BFloat16 b) {
  const uint32_t bits = static_cast<uint32_t>(b.bits) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

inline BFloat16 to_bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((bits >> 16) | 0x40u)};  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(bits >> 16)};
}

// The type a kernel computes and accumulates in for a storage type.
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
inline Acc load_as(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<Acc>(to_float(v));
  } else {
    return static_cast<Acc>(v);
  }
}

template <class T, class Acc>
inline T store_as(Acc v) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<Half>() { return DType::kFloat16; }
template <>
constexpr DType dtype_of<BFloat16>() { return DType::kBFloat16; }
template <>
constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <>
constexpr DType dtype_of<double>() { return DType::kFloat64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::kInt64; }

// Calls fn(T{}) with T the storage type of a floating dtype that has kernels; raises a
// TypeError naming `op` and `arg` for any other dtype.
template <class Fn>
decltype(auto) dispatch_floating(DType dtype, const char* op, const char* arg, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    default:
      detail::fail(ErrorKind::kType, op, "(): expected ", arg, " to be float32 or float64, but got ",
                   dtype_name(dtype));
  }
}

}  // namespace spatialgrad

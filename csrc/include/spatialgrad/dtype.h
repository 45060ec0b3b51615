// Element types and the one runtime dtype switch each entry point makes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "spatialgrad/error.h"
#include "spatialgrad/inline.h"

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

namespace detail {
SPATIALGRAD_INLINE uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}
SPATIALGRAD_INLINE float bits_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
}  // namespace detail

// The conversions below are branch-free (every case computed, one selected), so that loops over
// arrays of them vectorise; they are exact, round to nearest even, keep NaN payloads (made quiet) and
// handle subnormals without relying on denormal float arithmetic.

namespace detail {
// All ones where `condition` holds: selecting with masks (not ?:) keeps the conversions free of
// branches, which GCC would not if-convert, and so lets loops of them vectorise.
SPATIALGRAD_INLINE uint32_t mask_if(bool condition) { return 0u - static_cast<uint32_t>(condition); }
SPATIALGRAD_INLINE uint32_t select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}
}  // namespace detail

SPATIALGRAD_INLINE float to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t em = h.bits & 0x7fffu;  // exponent and mantissa
  const uint32_t shifted = em << 13;
  const uint32_t normal = shifted + (112u << 23);  // rebias the exponent (15 -> 127)
  // Inf / NaN: exponent 255, payload kept, NaN made quiet (as the F16C instruction does).
  const uint32_t special = shifted | 0x7f800000u | (detail::mask_if(em > 0x7c00u) & 0x00400000u);
  // A subnormal m * 2^-24 as 2^-14 * (1 + m/2^10) - 2^-14, on normal floats only (exact).
  const uint32_t subnormal =
      detail::float_bits(detail::bits_float(shifted + (113u << 23)) - detail::bits_float(113u << 23));
  const uint32_t out = detail::select(detail::mask_if(em >= 0x7c00u), special,
                                      detail::select(detail::mask_if(em >= 0x0400u), normal, subnormal));
  return detail::bits_float(out | sign);
}

SPATIALGRAD_INLINE Half to_half(float f) {
  const uint32_t bits = detail::float_bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x3ffu);  // quiet, top payload bits kept
  // Normal results: rebias, then round the 13 dropped mantissa bits to nearest even (a carry
  // into the exponent is the correct result).
  const uint32_t normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal results (|f| < 2^-14): adding 0.5, whose ulp is 2^-24, makes the FPU round |f| to a
  // multiple of the smallest subnormal (to nearest even); the low bits then count those multiples.
  const uint32_t subnormal = detail::float_bits(detail::bits_float(magnitude) + 0.5f) - detail::float_bits(0.5f);
  using detail::mask_if;
  using detail::select;
  const uint32_t out = select(mask_if(magnitude > 0x7f800000u), nan,
                              select(mask_if(magnitude >= 0x477ff000u), 0x7c00u,  // rounds to Inf (65520 and up)
                                     select(mask_if(magnitude >= 0x38800000u), normal, subnormal)));  // 2^-14
  return Half{static_cast<uint16_t>(out | sign)};
}

SPATIALGRAD_INLINE float to_float(BFloat16 b) { return detail::bits_float(static_cast<uint32_t>(b.bits) << 16); }

SPATIALGRAD_INLINE BFloat16 to_bfloat16(float f) {
  const uint32_t bits = detail::float_bits(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;  // to nearest even; overflow gives Inf
  const uint32_t nan = (bits >> 16) | 0x40u;                              // quiet, top payload bits kept
  return BFloat16{
      static_cast<uint16_t>(detail::select(detail::mask_if((bits & 0x7fffffffu) > 0x7f800000u), nan, rounded))};
}

// The DType of a storage type.
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, Half>)
    return DType::kFloat16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DType::kBFloat16;
  else if constexpr (std::is_same_v<T, float>)
    return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::kFloat64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::kInt32;
  else {
    static_assert(std::is_same_v<T, int64_t>, "dtype_of: not a spatialgrad storage type");
    return DType::kInt64;
  }
}

// A type handed to a generic lambda as a value: `[&](auto tag) { using T = typename decltype(tag)::type; }`.
// The one way the library dispatches on a type at run time (dtypes, and kernels' variants).
template <class T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the storage type of a floating dtype that has kernels; raises a
// TypeError naming `op` and `arg` for any other dtype.
template <class Fn>
decltype(auto) dispatch_floating(DType dtype, const char* op, const char* arg, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16:
      return fn(TypeTag<Half>{});
    case DType::kBFloat16:
      return fn(TypeTag<BFloat16>{});
    case DType::kFloat32:
      return fn(TypeTag<float>{});
    case DType::kFloat64:
      return fn(TypeTag<double>{});
    default:
      detail::fail(ErrorKind::kType, op, "(): expected ", arg, " to be float16, bfloat16, float32 or float64, but got ",
                   dtype_name(dtype));
  }
}

}  // namespace spatialgrad

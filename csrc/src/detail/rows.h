// Row I/O per storage dtype: what kernels use to move a row of values between a tensor (any element
// stride) and a contiguous accumulation-type buffer. One argument order throughout, as in convert.h:
// the source first, the destination last (pointer, then its stride).
//
// float/double rows are plain loops (inlined into the caller's clone, so they vectorise at its ISA);
// float16/bfloat16 rows go through convert.h's vector conversions. Kernels call these instead of
// branching on the dtype.
#pragma once

#include <cstdint>

#include "convert.h"
#include "simd.h"
#include "spatialgrad/dtype.h"

namespace spatialgrad::detail {

// dst[i] = src[i * stride] in Acc, exactly, for i < n.
template <class T, class Acc>
SPATIALGRAD_INLINE void load_row(const T* src, int64_t stride, int64_t n, Acc* __restrict dst) {
  if constexpr (kIsHalfType<T> && std::is_same_v<Acc, float>) {
    widen_row(src, stride, n, dst);
  } else if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = load_as<Acc>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = load_as<Acc>(src[i * stride]);
  }
}

// dst[i * stride] = src[i] rounded once to T, for i < n.
template <class T, class Acc>
SPATIALGRAD_INLINE void store_row(const Acc* __restrict src, int64_t n, T* dst, int64_t stride) {
  if constexpr (kIsHalfType<T> && std::is_same_v<Acc, float>) {
    narrow_row(src, n, dst, stride);
  } else if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = store_as<T>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = store_as<T>(src[i]);
  }
}

// dst[i * stride] = 0 for i < n.
template <class T>
SPATIALGRAD_INLINE void zero_row(int64_t n, T* dst, int64_t stride) {
  const T zero = store_as<T>(AccType<T>(0));
  for (int64_t i = 0; i < n; ++i) dst[i * stride] = zero;
}

// store_row for float rows far larger than the caches that are not read back soon: non-temporal
// stores where dst is contiguous and aligned (store_fence() before the task ends), else store_row.
template <class T, class Acc>
SPATIALGRAD_INLINE void store_row_streaming(const Acc* src, int64_t n, T* dst, int64_t stride) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
    if (stride == 1 && reinterpret_cast<uintptr_t>(dst) % kStreamAlign == 0) {
      int64_t i = 0;
      for (Vec<float, 16> v; i + 4 <= n; i += 4) stream_store4(dst + i, load_u(v, src + i));
      for (; i < n; ++i) dst[i] = src[i];
      return;
    }
  }
  store_row(src, n, dst, stride);
}

// dst[i * stride] = a0 * r0[i] + a1 * r1[i] rounded once to T, for i < n (no fused multiply-add); with
// kStream, contiguous float rows are written with non-temporal stores (store_fence() before the task
// ends). float16/bfloat16 rows go through convert.h's narrow_blend_rows.
template <bool kStream = false, class T, class Acc>
SPATIALGRAD_INLINE void blend_rows(const Acc* r0, const Acc* r1, Acc a0, Acc a1, int64_t n, T* dst, int64_t stride) {
  if constexpr (kIsHalfType<T>) {
    narrow_blend_rows(r0, r1, a0, a1, n, dst, stride);
    return;
  } else {
    int64_t i = 0;
    if constexpr (kStream && std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
      if (stride == 1 && n >= 16) {
        for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % kStreamAlign != 0; ++i) dst[i] = a0 * r0[i] + a1 * r1[i];
        Vec<float, 16> x0, x1;
        for (; i + 4 <= n; i += 4) stream_store4(dst + i, a0 * load_u(x0, r0 + i) + a1 * load_u(x1, r1 + i));
      }
    }
    if (stride == 1) {
      for (; i < n; ++i) dst[i] = store_as<T>(a0 * r0[i] + a1 * r1[i]);
    } else {
      for (; i < n; ++i) dst[i * stride] = store_as<T>(a0 * r0[i] + a1 * r1[i]);
    }
  }
}

}  // namespace spatialgrad::detail

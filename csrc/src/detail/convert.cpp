#include "convert.h"

#include "simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SPATIALGRAD_NO_SIMD_CLONES)
#include <immintrin.h>
#define SG_HAVE_F16C_PATH 1
#endif

namespace spatialgrad::detail {
namespace {

template <class T>
SG_SIMD_CLONES void widen_portable(const T* src, int64_t stride, int64_t n, float* __restrict dst) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i * stride]);
  }
}

template <class T>
SG_SIMD_CLONES void narrow_portable(const float* __restrict src, int64_t n, T* dst, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = store_as<T>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = store_as<T>(src[i]);
  }
}

#ifdef SG_HAVE_F16C_PATH
const bool kHasF16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");

__attribute__((target("avx,f16c"))) void widen_f16c(const Half* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

__attribute__((target("avx,f16c"))) void narrow_f16c(const float* src, int64_t n, Half* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_half(src[i]);
}
#endif

}  // namespace

void widen_row(const Half* src, int64_t stride, int64_t n, float* dst) {
#ifdef SG_HAVE_F16C_PATH
  if (kHasF16c && stride == 1) return widen_f16c(src, n, dst);
#endif
  widen_portable(src, stride, n, dst);
}

void widen_row(const BFloat16* src, int64_t stride, int64_t n, float* dst) { widen_portable(src, stride, n, dst); }

void narrow_row(const float* src, int64_t n, Half* dst, int64_t stride) {
#ifdef SG_HAVE_F16C_PATH
  if (kHasF16c && stride == 1) return narrow_f16c(src, n, dst);
#endif
  narrow_portable(src, n, dst, stride);
}

void narrow_row(const float* src, int64_t n, BFloat16* dst, int64_t stride) { narrow_portable(src, n, dst, stride); }

}  // namespace spatialgrad::detail

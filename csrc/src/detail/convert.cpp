#include "convert.h"

#include "simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SPATIALGRAD_NO_SIMD_CLONES)
#include <immintrin.h>
#define SG_HAVE_F16C_PATH 1  // and the AVX2 bfloat16 narrowing
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

const bool kHasAvx2 = __builtin_cpu_supports("avx2");

// Eight floats rounded to bfloat16 as in to_bfloat16 (nearest even; NaN made quiet with its top
// payload bits), one value per 32-bit lane.
__attribute__((target("avx2"), always_inline)) inline __m256i bfloat16_lanes(const float* src) {
  const __m256 f = _mm256_loadu_ps(src);
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
}

// The same bits as narrow_portable in about half the instructions: GCC's vectorisation of
// to_bfloat16 masks every lane before packing and selects with three logic operations.
__attribute__((target("avx2"))) void narrow_bf16_avx2(const float* src, int64_t n, BFloat16* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // Lanes hold values below 2^16, so the saturating pack is exact; it interleaves 128-bit
    // halves, which the permute puts back in order.
    const __m256i packed = _mm256_packus_epi32(bfloat16_lanes(src + i), bfloat16_lanes(src + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  for (; i < n; ++i) dst[i] = to_bfloat16(src[i]);
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

void narrow_row(const float* src, int64_t n, BFloat16* dst, int64_t stride) {
#ifdef SG_HAVE_F16C_PATH
  if (kHasAvx2 && stride == 1) return narrow_bf16_avx2(src, n, dst);
#endif
  narrow_portable(src, n, dst, stride);
}

}  // namespace spatialgrad::detail

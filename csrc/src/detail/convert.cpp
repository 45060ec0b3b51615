#include "convert.h"

#include "simd.h"

#include <atomic>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SPATIALGRAD_NO_SIMD_CLONES)
#include <immintrin.h>
#define SG_HAVE_F16C_PATH 1  // and the AVX2 / AVX-512 bfloat16 narrowings
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

__attribute__((target("avx,f16c"))) void weighted_sum_f16c(const Half* const* rows, const float* w, int64_t count,
                                                          int64_t n, float* acc) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t k = 0; k < count; ++k) {
      const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + i)));
      const __m256 term = _mm256_mul_ps(_mm256_set1_ps(w[k]), x);
      sum = k == 0 ? term : _mm256_add_ps(sum, term);
    }
    _mm256_storeu_ps(acc + i, sum);
  }
  for (; i < n; ++i) {
    float sum = w[0] * to_float(rows[0][i]);
    for (int64_t k = 1; k < count; ++k) sum += w[k] * to_float(rows[k][i]);
    acc[i] = sum;
  }
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

const bool kHasAvx512Bf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl") &&
                            __builtin_cpu_supports("avx512bw");

// VCVTNEPS2BF16 rounds to nearest even and makes NaNs quiet as to_bfloat16 does, but reads float32
// subnormals as zero: lanes holding one (rare) are redone with to_bfloat16's integer rounding.
__attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16"))) void narrow_bf16_avx512(const float* src, int64_t n,
                                                                                         BFloat16* dst) {
  int64_t i = 0;
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), magnitude = _mm512_set1_epi32(0x7fffffff);
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_loadu_ps(src + i);
    __m256i out = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f));
    const __m512i bits = _mm512_castps_si512(f);
    const __mmask16 subnormal =
        _mm512_testn_epi32_mask(bits, exponent) & _mm512_test_epi32_mask(bits, magnitude);
    if (subnormal) {
      // (The maskz forms: GCC 12 warns about the undefined source operand of the plain ones.)
      const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(subnormal, bits, 16), _mm512_set1_epi32(1));
      const __m512i rounded = _mm512_maskz_srli_epi32(
          subnormal, _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
      out = _mm256_mask_blend_epi16(subnormal, out, _mm512_maskz_cvtepi32_epi16(subnormal, rounded));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), out);
  }
  for (; i < n; ++i) dst[i] = to_bfloat16(src[i]);
}
#endif

SG_SIMD_CLONES void weighted_sum_portable(const Half* const* rows, const float* w, int64_t count, int64_t n,
                                          float* __restrict acc) {
  for (int64_t i = 0; i < n; ++i) acc[i] = w[0] * to_float(rows[0][i]);
  for (int64_t k = 1; k < count; ++k) {
    const Half* row = rows[k];
    const float wk = w[k];
    for (int64_t i = 0; i < n; ++i) acc[i] += wk * to_float(row[i]);
  }
}

std::atomic<int> path_limit{static_cast<int>(ConvertPath::kAvx512Bf16)};

// Whether calls may take `path` now: the CPU has it and the limit allows it.
bool use(ConvertPath path) {
  return cpu_has_convert_path(path) && static_cast<int>(path) <= path_limit.load(std::memory_order_relaxed);
}

}  // namespace

bool cpu_has_convert_path(ConvertPath path) {
  switch (path) {
    case ConvertPath::kPortable:
      return true;
#ifdef SG_HAVE_F16C_PATH
    case ConvertPath::kF16cAvx2:
      return kHasF16c && kHasAvx2;
    case ConvertPath::kAvx512Bf16:
      return kHasAvx512Bf16;
#endif
    default:
      return false;
  }
}

void limit_convert_path(ConvertPath most_capable) {
  path_limit.store(static_cast<int>(most_capable), std::memory_order_relaxed);
}

void widen_row(const Half* src, int64_t stride, int64_t n, float* dst) {
#ifdef SG_HAVE_F16C_PATH
  if (stride == 1 && use(ConvertPath::kF16cAvx2)) return widen_f16c(src, n, dst);
#endif
  widen_portable(src, stride, n, dst);
}

void weighted_sum_rows(const Half* const* rows, const float* w, int64_t count, int64_t n, float* acc) {
#ifdef SG_HAVE_F16C_PATH
  if (use(ConvertPath::kF16cAvx2)) return weighted_sum_f16c(rows, w, count, n, acc);
#endif
  weighted_sum_portable(rows, w, count, n, acc);
}

void widen_row(const BFloat16* src, int64_t stride, int64_t n, float* dst) { widen_portable(src, stride, n, dst); }

void narrow_row(const float* src, int64_t n, Half* dst, int64_t stride) {
#ifdef SG_HAVE_F16C_PATH
  if (stride == 1 && use(ConvertPath::kF16cAvx2)) return narrow_f16c(src, n, dst);
#endif
  narrow_portable(src, n, dst, stride);
}

void narrow_row(const float* src, int64_t n, BFloat16* dst, int64_t stride) {
#ifdef SG_HAVE_F16C_PATH
  if (stride == 1 && use(ConvertPath::kAvx512Bf16)) return narrow_bf16_avx512(src, n, dst);
  if (stride == 1 && use(ConvertPath::kF16cAvx2)) return narrow_bf16_avx2(src, n, dst);
#endif
  narrow_portable(src, n, dst, stride);
}

}  // namespace spatialgrad::detail

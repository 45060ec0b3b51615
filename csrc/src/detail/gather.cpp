#include "gather.h"

#include "cpu.h"
#include "simd.h"

#if defined(SG_SIMD_LEVELS)
#include <immintrin.h>
#define SG_GATHER_AVX2 1  // and AVX-512
#endif

namespace spatialgrad::detail {
namespace {

template <class T>
void gather_portable(const T* src, const int32_t* index, int64_t first, int64_t n, T* dst) {
  for (int64_t i = first; i < n; ++i) dst[i] = index[i] >= 0 ? src[index[i]] : T(0);
}

template <class T>
void gather4_weighted_portable(const T* src, const int32_t* const* index, const T* const* w, int64_t first, int64_t n,
                               T* dst) {
  for (int64_t i = first; i < n; ++i) {
    T v[4];
    for (int k = 0; k < 4; ++k) v[k] = index[k][i] >= 0 ? src[index[k][i]] : T(0);
    dst[i] = v[0] * w[0][i] + v[1] * w[1][i] + v[2] * w[2][i] + v[3] * w[3][i];
  }
}

#if defined(SG_GATHER_AVX2)
// Eight (float) or four (double) lanes a step: the lanes whose index is negative are masked off (not
// read) and keep the zero the gather starts from.
__attribute__((target("avx2"))) void gather_avx2(const float* src, const int32_t* index, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index + i));
    const __m256 mask = _mm256_castsi256_ps(_mm256_cmpgt_epi32(at, _mm256_set1_epi32(-1)));
    _mm256_storeu_ps(dst + i, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src, at, mask, 4));
  }
  gather_portable(src, index, i, n, dst);
}

__attribute__((target("avx2"))) void gather_avx2(const double* src, const int32_t* index, int64_t n, double* dst) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128i at = _mm_loadu_si128(reinterpret_cast<const __m128i*>(index + i));
    const __m256d mask = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpgt_epi32(at, _mm_set1_epi32(-1))));
    _mm256_storeu_pd(dst + i, _mm256_mask_i32gather_pd(_mm256_setzero_pd(), src, at, mask, 8));
  }
  gather_portable(src, index, i, n, dst);
}

// The four taps of eight points gathered together (their misses overlap), then weighted and summed
// in the portable loop's order.
__attribute__((target("avx2"))) void gather4_weighted_avx2(const float* src, const int32_t* const* index,
                                                           const float* const* w, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index[k] + i));
      const __m256 mask = _mm256_castsi256_ps(_mm256_cmpgt_epi32(at, _mm256_set1_epi32(-1)));
      v[k] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src, at, mask, 4);
    }
    __m256 sum = _mm256_mul_ps(v[0], _mm256_loadu_ps(w[0] + i));
    for (int k = 1; k < 4; ++k) sum = _mm256_add_ps(sum, _mm256_mul_ps(v[k], _mm256_loadu_ps(w[k] + i)));
    _mm256_storeu_ps(dst + i, sum);
  }
  gather4_weighted_portable(src, index, w, i, n, dst);
}

#define SG_TARGET_GATHER512 __attribute__((target("avx2,avx512f,avx512vl,avx512bw,avx512dq")))

// Sixteen (float) or eight (double) lanes a step: a lane whose index is negative is masked off (a mask
// register) and keeps the zero the gather starts from.
SG_TARGET_GATHER512 void gather_avx512(const float* src, const int32_t* index, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i at = _mm512_loadu_si512(index + i);
    const __mmask16 inside = _mm512_cmpgt_epi32_mask(at, _mm512_set1_epi32(-1));
    _mm512_storeu_ps(dst + i, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), inside, at, src, 4));
  }
  gather_portable(src, index, i, n, dst);
}

SG_TARGET_GATHER512 void gather_avx512(const double* src, const int32_t* index, int64_t n, double* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index + i));
    const __mmask8 inside = _mm256_cmpgt_epi32_mask(at, _mm256_set1_epi32(-1));
    _mm512_storeu_pd(dst + i, _mm512_mask_i32gather_pd(_mm512_setzero_pd(), inside, at, src, 8));
  }
  gather_portable(src, index, i, n, dst);
}

SG_TARGET_GATHER512 void gather4_weighted_avx512(const float* src, const int32_t* const* index, const float* const* w,
                                                 int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v[4];
    for (int k = 0; k < 4; ++k) {
      const __m512i at = _mm512_loadu_si512(index[k] + i);
      const __mmask16 inside = _mm512_cmpgt_epi32_mask(at, _mm512_set1_epi32(-1));
      v[k] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), inside, at, src, 4);
    }
    __m512 sum = _mm512_mul_ps(v[0], _mm512_loadu_ps(w[0] + i));
    for (int k = 1; k < 4; ++k) sum = _mm512_add_ps(sum, _mm512_mul_ps(v[k], _mm512_loadu_ps(w[k] + i)));
    _mm512_storeu_ps(dst + i, sum);
  }
  gather4_weighted_portable(src, index, w, i, n, dst);
}
#endif

// gather_adjacent's runs of 16 (AVX-512) points: where every right tap is its left one's neighbour and both are
// inside, from a window (find_pair_window, window_pairs) or else as 64-bit pairs; any other run by two masked gathers.
SG_TARGET_GATHER512 void gather_adjacent_avx512(const float* src, const int32_t* left, const int32_t* right, int64_t n,
                                                int64_t extent, float* first, float* second) {
  int64_t i = 0;
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1)), none = _mm512_set1_epi32(-1);
  const __m512d zero = _mm512_setzero_pd();
  // Every run of pairs tries a window: on a uniform grid none fits, and the test cost nothing measurable
  // ((8,3,256,256) 4.55 ms before, 4.54 after); skipping it for a few runs after a miss cost flow grids the runs
  // after each grid row's end ((2,3,1024,1024) flow 20.8 ms against 22.3).
  for (; i + 16 <= n; i += 16) {
    const __m512i l = _mm512_loadu_si512(left + i), r = _mm512_loadu_si512(right + i);
    const __mmask16 l_in = _mm512_cmpgt_epi32_mask(l, none), r_in = _mm512_cmpgt_epi32_mask(r, none);
    const __mmask16 pairs = _mm512_cmpeq_epi32_mask(_mm512_add_epi32(l, _mm512_set1_epi32(1)), r) & l_in & r_in;
    if (pairs != 0xffff) {
      _mm512_storeu_ps(first + i, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), l_in, l, src, 4));
      _mm512_storeu_ps(second + i, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), r_in, r, src, 4));
      continue;
    }
    // A smooth grid's (a flow, a crop) pairs from one window: find_pair_window and window_pairs of simd.h.
    int32_t start = 0;
    Vec<int32_t, 64> offset;
    if (find_pair_window(Avx512Isa{}, reinterpret_cast<Vec<int32_t, 64>>(l), extent, start, offset)) {
      Vec<float, 64> a, b;
      window_pairs_avx512(src + start, offset, a, b);
      store_u(first + i, a);
      store_u(second + i, b);
      continue;
    }
    const double* at = reinterpret_cast<const double*>(src);
    const __m512 lo = _mm512_castpd_ps(_mm512_mask_i32gather_pd(zero, 0xff, _mm512_maskz_extracti64x4_epi64(0xff, l, 0), at, 4));
    const __m512 hi = _mm512_castpd_ps(_mm512_mask_i32gather_pd(zero, 0xff, _mm512_maskz_extracti64x4_epi64(0xff, l, 1), at, 4));
    _mm512_storeu_ps(first + i, _mm512_permutex2var_ps(lo, evens, hi));
    _mm512_storeu_ps(second + i, _mm512_permutex2var_ps(lo, odds, hi));
  }
  gather_portable(src, left, i, n, first);
  gather_portable(src, right, i, n, second);
}

template <class T>
void gather_any(const T* src, const int32_t* index, int64_t n, T* dst) {
#if defined(SG_GATHER_AVX2)
  switch (simd_level()) {
    case SimdLevel::kAvx512:
      return gather_avx512(src, index, n, dst);
    case SimdLevel::kAvx2:
      return gather_avx2(src, index, n, dst);
    default:
      break;
  }
#endif
  gather_portable(src, index, 0, n, dst);
}

}  // namespace

void gather4_weighted(const float* src, const int32_t* const* index, const float* const* w, int64_t n, float* dst) {
#if defined(SG_GATHER_AVX2)
  switch (simd_level()) {
    case SimdLevel::kAvx512:
      return gather4_weighted_avx512(src, index, w, n, dst);
    case SimdLevel::kAvx2:
      return gather4_weighted_avx2(src, index, w, n, dst);
    default:
      break;
  }
#endif
  gather4_weighted_portable(src, index, w, 0, n, dst);
}

void gather_adjacent(const float* src, const int32_t* left, const int32_t* right, int64_t n, int64_t extent,
                     float* first, float* second) {
#if defined(SG_GATHER_AVX2)
  if (simd_level() == SimdLevel::kAvx512) return gather_adjacent_avx512(src, left, right, n, extent, first, second);
#endif
  gather_any(src, left, n, first);
  gather_any(src, right, n, second);
}

void gather(const float* src, const int32_t* index, int64_t n, float* dst) { gather_any(src, index, n, dst); }
void gather(const double* src, const int32_t* index, int64_t n, double* dst) { gather_any(src, index, n, dst); }

}  // namespace spatialgrad::detail

#include "convert.h"

#include <algorithm>

#include "cpu.h"
#include "simd.h"

#if defined(SG_SIMD_LEVELS)
#include <immintrin.h>
#define SG_HAVE_F16C_PATH 1  // and the AVX2 / AVX-512 bfloat16 narrowings
#endif

namespace spatialgrad::detail {
namespace {

// rows[k], read with a load of its own: GCC otherwise reads two neighbouring pointers with one 16-byte
// load, which waits for the caller's two 8-byte stores of them to reach the cache (no store forwarding).
template <class T>
inline T* row_pointer(T* const* rows, int64_t k) {
  T* row = rows[k];
#if defined(__GNUC__)
  asm("" : "+r"(row));
#endif
  return row;
}

template <class Isa, class T>
SG_SIMD_KERNEL void widen_portable(Isa, const T* src, int64_t stride, int64_t n, float* __restrict dst) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i * stride]);
  }
}
template <class T>
void widen_portable(const T* src, int64_t stride, int64_t n, float* dst) {
  SG_SIMD_DISPATCH(widen_portable(isa, src, stride, n, dst));
}

template <class Isa, class T>
SG_SIMD_KERNEL void narrow_portable(Isa, const float* __restrict src, int64_t n, T* dst, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = store_as<T>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = store_as<T>(src[i]);
  }
}
template <class T>
void narrow_portable(const float* src, int64_t n, T* dst, int64_t stride) {
  SG_SIMD_DISPATCH(narrow_portable(isa, src, n, dst, stride));
}

// The fused narrowings without conversion instructions: fill(lo, len, scratch) computes the floats of
// columns [lo, lo + len) into float scratch, a chunk at a time, which are then narrowed.
template <class Isa, class T, class Fill>
SPATIALGRAD_INLINE void narrow_chunks(Isa isa, int64_t n, T* dst, int64_t stride, const Fill& fill) {
  constexpr int64_t kChunk = 256;
  float scratch[kChunk];
  for (int64_t lo = 0; lo < n; lo += kChunk) {
    const int64_t len = std::min(kChunk, n - lo);
    fill(lo, len, scratch);
    narrow_portable(isa, scratch, len, dst + lo * stride, stride);
  }
}

template <class Isa, class T>
SG_SIMD_KERNEL void narrow_sum_portable(Isa isa, const float* const* rows, int64_t count, int64_t n, T* dst, int64_t stride) {
  narrow_chunks(isa, n, dst, stride, [&](int64_t lo, int64_t len, float* __restrict sums) {
    const float* __restrict first = rows[0] + lo;
    for (int64_t i = 0; i < len; ++i) sums[i] = first[i];
    for (int64_t k = 1; k < count; ++k) {
      const float* __restrict next = rows[k] + lo;
      for (int64_t i = 0; i < len; ++i) sums[i] += next[i];
    }
  });
}
template <class T>
void narrow_sum_portable(const float* const* rows, int64_t count, int64_t n, T* dst, int64_t stride) {
  SG_SIMD_DISPATCH(narrow_sum_portable(isa, rows, count, n, dst, stride));
}

template <class Isa, class T>
SG_SIMD_KERNEL void narrow_blend_portable(Isa isa, const float* __restrict a, const float* __restrict b, float wa, float wb,
                                          int64_t n, T* dst, int64_t stride) {
  narrow_chunks(isa, n, dst, stride, [&](int64_t lo, int64_t len, float* __restrict blended) {
    for (int64_t i = 0; i < len; ++i) blended[i] = wa * a[lo + i] + wb * b[lo + i];
  });
}
template <class T>
void narrow_blend_portable(const float* a, const float* b, float wa, float wb, int64_t n, T* dst, int64_t stride) {
  SG_SIMD_DISPATCH(narrow_blend_portable(isa, a, b, wa, wb, n, dst, stride));
}

#ifdef SG_HAVE_F16C_PATH
// Where the vector narrowings read their floats: one row, the sum of two rows or of `count` rows added
// in order (narrow_sum_rows), or a weighted pair (narrow_blend_rows). Loads of 8 (AVX) or 16 (AVX-512)
// lanes from column i, and single columns for the tails.
struct OneRow {
  const float* src;
  __attribute__((target("avx"), always_inline)) __m256 load8(int64_t i) const { return _mm256_loadu_ps(src + i); }
  __attribute__((target("avx512f"), always_inline)) __m512 load16(int64_t i) const { return _mm512_loadu_ps(src + i); }
  float at(int64_t i) const { return src[i]; }
};

struct RowPair {
  const float* a;
  const float* b;
  __attribute__((target("avx"), always_inline)) __m256 load8(int64_t i) const {
    return _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
  }
  __attribute__((target("avx512f"), always_inline)) __m512 load16(int64_t i) const {
    return _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
  }
  float at(int64_t i) const { return a[i] + b[i]; }
};

struct RowBlend {
  const float* a;
  const float* b;
  float wa, wb;
  __attribute__((target("avx"), always_inline)) __m256 load8(int64_t i) const {
    return _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(wa), _mm256_loadu_ps(a + i)),
                         _mm256_mul_ps(_mm256_set1_ps(wb), _mm256_loadu_ps(b + i)));
  }
  __attribute__((target("avx512f"), always_inline)) __m512 load16(int64_t i) const {
    return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(wa), _mm512_loadu_ps(a + i)),
                         _mm512_mul_ps(_mm512_set1_ps(wb), _mm512_loadu_ps(b + i)));
  }
  float at(int64_t i) const { return wa * a[i] + wb * b[i]; }
};

struct RowSum {
  const float* const* rows;
  int64_t count;  // >= 1
  __attribute__((target("avx"), always_inline)) __m256 load8(int64_t i) const {
    __m256 sum = _mm256_loadu_ps(rows[0] + i);
    for (int64_t k = 1; k < count; ++k) sum = _mm256_add_ps(sum, _mm256_loadu_ps(rows[k] + i));
    return sum;
  }
  __attribute__((target("avx512f"), always_inline)) __m512 load16(int64_t i) const {
    __m512 sum = _mm512_loadu_ps(rows[0] + i);
    for (int64_t k = 1; k < count; ++k) sum = _mm512_add_ps(sum, _mm512_loadu_ps(rows[k] + i));
    return sum;
  }
  float at(int64_t i) const {
    float sum = rows[0][i];
    for (int64_t k = 1; k < count; ++k) sum += rows[k][i];
    return sum;
  }
};

const bool kHasF16c = cpu_features().f16c;

__attribute__((target("avx,f16c"))) void widen_f16c(const Half* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

template <class Src>
__attribute__((target("avx,f16c"))) void narrow_f16c(const Src src, int64_t n, Half* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(src.load8(i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_half(src.at(i));
}

__attribute__((target("avx,f16c"), always_inline)) inline __m256 widened8(const Half* row, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i)));
}

template <bool kWeighted>
__attribute__((target("avx"), always_inline)) inline __m256 row_term(__m256 weight, __m256 x) {
  return kWeighted ? _mm256_mul_ps(weight, x) : x;
}

// One pass over up to four rows (kRows, or `count` when kRows is 0), their pointers and weights in
// registers: acc[i] = w[0] * x0 + w[1] * x1 + ... when kWeighted, else ((0 + x0) + x1) + ..., where xk
// is rows[k][i] widened.
template <int kRows, bool kWeighted>
__attribute__((target("avx,f16c"))) void row_sum_f16c(const Half* const* rows, const float* w, int64_t count, int64_t n,
                                                      float* acc) {
  const Half* r[4];
  __m256 wk[4] = {};
  if constexpr (kRows > 0) {
    for (int k = 0; k < kRows; ++k) {
      r[k] = row_pointer(rows, k);
      if constexpr (kWeighted) wk[k] = _mm256_set1_ps(w[k]);
    }
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 sum = _mm256_setzero_ps();
    if constexpr (kRows > 0) {
      sum = kWeighted ? row_term<kWeighted>(wk[0], widened8(r[0], i)) : _mm256_add_ps(sum, widened8(r[0], i));
      for (int k = 1; k < kRows; ++k) sum = _mm256_add_ps(sum, row_term<kWeighted>(wk[k], widened8(r[k], i)));
    } else {
      for (int64_t k = 0; k < count; ++k) {
        const __m256 t = row_term<kWeighted>(_mm256_set1_ps(kWeighted ? w[k] : 0.0f), widened8(rows[k], i));
        sum = kWeighted && k == 0 ? t : _mm256_add_ps(sum, t);
      }
    }
    _mm256_storeu_ps(acc + i, sum);
  }
  for (; i < n; ++i) {
    float sum = kWeighted ? w[0] * to_float(rows[0][i]) : 0.0f + to_float(rows[0][i]);
    for (int64_t k = 1; k < count; ++k) sum += kWeighted ? w[k] * to_float(rows[k][i]) : to_float(rows[k][i]);
    acc[i] = sum;
  }
}

// Eight floats rounded to bfloat16 as in to_bfloat16 (nearest even; NaN made quiet with its top
// payload bits), one value per 32-bit lane.
__attribute__((target("avx2"), always_inline)) inline __m256i bfloat16_lanes(__m256 f) {
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
template <class Src>
__attribute__((target("avx2"))) void narrow_bf16_avx2(const Src src, int64_t n, BFloat16* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // Lanes hold values below 2^16, so the saturating pack is exact; it interleaves 128-bit
    // halves, which the permute puts back in order.
    const __m256i packed = _mm256_packus_epi32(bfloat16_lanes(src.load8(i)), bfloat16_lanes(src.load8(i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  for (; i < n; ++i) dst[i] = to_bfloat16(src.at(i));
}

const bool kHasAvx512Bf16 = cpu_features().avx512bf16;  // (with the AVX-512 level's F, VL and BW)

// VCVTNEPS2BF16 rounds to nearest even and makes NaNs quiet as to_bfloat16 does, but reads float32
// subnormals as zero: lanes holding one (rare) are redone with to_bfloat16's integer rounding.
template <class Src>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16"))) void narrow_bf16_avx512(const Src src, int64_t n,
                                                                                        BFloat16* dst) {
  int64_t i = 0;
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), magnitude = _mm512_set1_epi32(0x7fffffff);
  for (; i + 16 <= n; i += 16) {
    const __m512 f = src.load16(i);
    __m256i out = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f));
    const __m512i bits = _mm512_castps_si512(f);
    const __mmask16 subnormal = _mm512_testn_epi32_mask(bits, exponent) & _mm512_test_epi32_mask(bits, magnitude);
    if (subnormal) {
      // (The maskz forms: GCC 12 warns about the undefined source operand of the plain ones.)
      const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(subnormal, bits, 16), _mm512_set1_epi32(1));
      const __m512i rounded = _mm512_maskz_srli_epi32(
          subnormal, _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
      out = _mm256_mask_blend_epi16(subnormal, out, _mm512_maskz_cvtepi32_epi16(subnormal, rounded));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), out);
  }
  for (; i < n; ++i) dst[i] = to_bfloat16(src.at(i));
}
#endif

// The portable row_sum_f16c (any stride): acc[i] = w[0] * x0 + w[1] * x1 + ... when kWeighted, else
// ((0 + x0) + x1) + ..., where xk is rows[k][i * stride] widened.
template <bool kWeighted, class Isa>
SG_SIMD_KERNEL void row_sum_portable(Isa, const Half* const* rows, const float* w, int64_t count, int64_t n,
                                     int64_t stride, float* __restrict acc) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = to_float(rows[0][i * stride]);
    acc[i] = kWeighted ? w[0] * x : 0.0f + x;
  }
  for (int64_t k = 1; k < count; ++k) {
    const Half* row = rows[k];
    const float wk = kWeighted ? w[k] : 1.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float x = to_float(row[i * stride]);
      acc[i] += kWeighted ? wk * x : x;
    }
  }
}
template <bool kWeighted>
void row_sum_portable(const Half* const* rows, const float* w, int64_t count, int64_t n, int64_t stride, float* acc) {
  SG_SIMD_DISPATCH(row_sum_portable<kWeighted>(isa, rows, w, count, n, stride, acc));
}

// The instruction paths of the conversions beside the portable code (which the kernels' levels compile):
// F16C and AVX2 from the AVX2 level, VCVTNEPS2BF16 at the AVX-512 level on CPUs that have AVX-512 BF16.
// Every path gives the same bits (tests/cpp/test_half.cpp runs each level).
enum class ConvertPath { kF16cAvx2, kAvx512Bf16 };

bool use(ConvertPath path) {
#ifdef SG_HAVE_F16C_PATH
  const SimdLevel level = simd_level();
  if (path == ConvertPath::kF16cAvx2) return level >= SimdLevel::kAvx2 && kHasF16c;
  return level >= SimdLevel::kAvx512 && kHasAvx512Bf16;
#else
  (void)path;
  return false;
#endif
}

// widen_lanes8 for the values i in [first, n), one at a time.
template <class T>
void widen_lanes8_portable(const T* src, int64_t row_step, int64_t first, int64_t n, float* dst) {
  for (int64_t i = first; i < n; ++i)
    for (int64_t k = 0; k < 8; ++k) dst[i * 8 + k] = to_float(src[k * row_step + i]);
}

// narrow_lanes8 for the points i in [first, n), one value at a time.
template <class T>
void narrow_lanes8_portable(const float* src, int64_t first, int64_t n, T* dst, int64_t row_step) {
  for (int64_t i = first; i < n; ++i)
    for (int64_t k = 0; k < 8; ++k) dst[k * row_step + i] = store_as<T>(src[i * 8 + k]);
}

#if defined(SG_HAVE_F16C_PATH) && !defined(__clang__)  // simd.h transpose_block8 is GCC's
#define SG_HAVE_LANES8_PATH 1
// Eight values of a row widened into one vector.
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 widen8(const Half* row) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
}
__attribute__((target("avx2"), always_inline)) inline __m256 widen8(const BFloat16* row) {
  const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
}

// Blocks of 8 values of the 8 rows: widened into a block of 8 vectors, then transposed (simd.h).
template <class T>
__attribute__((target("avx2,f16c"))) void widen_lanes8_vector(const T* src, int64_t row_step, int64_t n, float* dst) {
  alignas(32) float block[64];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int64_t k = 0; k < 8; ++k) _mm256_store_ps(block + 8 * k, widen8(src + k * row_step + i));
    transpose_block8(block, 8, dst + i * 8, 8);
  }
  widen_lanes8_portable(src, row_step, i, n, dst);
}

// Sixteen floats (two vectors) rounded to sixteen values of a row.
__attribute__((target("avx2,f16c"), always_inline)) inline void narrow16(__m256 a, __m256 b, Half* row) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(row),
                      _mm256_set_m128i(_mm256_cvtps_ph(b, kRound), _mm256_cvtps_ph(a, kRound)));
}
__attribute__((target("avx2"), always_inline)) inline void narrow16(__m256 a, __m256 b, BFloat16* row) {
  // As narrow_bf16_avx2: an exact saturating pack, then the 128-bit halves back in order.
  const __m256i packed = _mm256_packus_epi32(bfloat16_lanes(a), bfloat16_lanes(b));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(row), _mm256_permute4x64_epi64(packed, 0xd8));
}

// Blocks of 16 points: transposed (simd.h) into two blocks of 8 rows, each row rounded and stored whole.
template <class T>
__attribute__((target("avx2,f16c"))) void narrow_lanes8_vector(const float* src, int64_t n, T* dst, int64_t row_step) {
  alignas(32) float block[128];
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    transpose_block8(src + i * 8, 8, block, 8);
    transpose_block8(src + (i + 8) * 8, 8, block + 64, 8);
    for (int64_t k = 0; k < 8; ++k) {
      narrow16(_mm256_load_ps(block + 8 * k), _mm256_load_ps(block + 64 + 8 * k), dst + k * row_step + i);
    }
  }
  narrow_lanes8_portable(src, i, n, dst, row_step);
}
#endif

#ifdef SG_HAVE_F16C_PATH
// The narrowing of `src` with the most capable vector path allowed: false when none is.
template <class Src>
bool narrow_vector(Src src, int64_t n, Half* dst) {
  if (!use(ConvertPath::kF16cAvx2)) return false;
  narrow_f16c(src, n, dst);
  return true;
}

template <class Src>
bool narrow_vector(Src src, int64_t n, BFloat16* dst) {
  if (use(ConvertPath::kAvx512Bf16)) {
    narrow_bf16_avx512(src, n, dst);
  } else if (use(ConvertPath::kF16cAvx2)) {
    narrow_bf16_avx2(src, n, dst);
  } else {
    return false;
  }
  return true;
}

// row_sum_f16c with the row count as a template argument up to four rows.
template <bool kWeighted>
void row_sum_vector(const Half* const* rows, const float* w, int64_t count, int64_t n, float* acc) {
  switch (count) {
    case 1:
      return row_sum_f16c<1, kWeighted>(rows, w, count, n, acc);
    case 2:
      return row_sum_f16c<2, kWeighted>(rows, w, count, n, acc);
    case 3:
      return row_sum_f16c<3, kWeighted>(rows, w, count, n, acc);
    case 4:
      return row_sum_f16c<4, kWeighted>(rows, w, count, n, acc);
    default:
      return row_sum_f16c<0, kWeighted>(rows, w, count, n, acc);
  }
}
#endif

template <class T>
void narrow_sum(const float* const* rows, int64_t count, int64_t n, T* dst, int64_t stride) {
#ifdef SG_HAVE_F16C_PATH
  if (stride == 1) {
    // One and two rows (most calls) without the loop over rows.
    if (count == 1 && narrow_vector(OneRow{rows[0]}, n, dst)) return;
    if (count == 2 && narrow_vector(RowPair{row_pointer(rows, 0), row_pointer(rows, 1)}, n, dst)) return;
    if (count > 2 && narrow_vector(RowSum{rows, count}, n, dst)) return;
  }
#endif
  if (count == 1) return narrow_portable(rows[0], n, dst, stride);
  narrow_sum_portable(rows, count, n, dst, stride);
}

}  // namespace

void widen_row(const Half* src, int64_t stride, int64_t n, float* dst) {
#ifdef SG_HAVE_F16C_PATH
  if (stride == 1 && use(ConvertPath::kF16cAvx2)) return widen_f16c(src, n, dst);
#endif
  widen_portable(src, stride, n, dst);
}

void weighted_sum_rows(const Half* const* rows, const float* w, int64_t count, int64_t n, float* acc) {
#ifdef SG_HAVE_F16C_PATH
  if (use(ConvertPath::kF16cAvx2)) return row_sum_vector<true>(rows, w, count, n, acc);
#endif
  row_sum_portable<true>(rows, w, count, n, 1, acc);
}

void widen_sum_rows(const Half* const* rows, int64_t count, int64_t n, int64_t stride, float* sums) {
#ifdef SG_HAVE_F16C_PATH
  if (stride == 1 && use(ConvertPath::kF16cAvx2)) return row_sum_vector<false>(rows, nullptr, count, n, sums);
#endif
  row_sum_portable<false>(rows, nullptr, count, n, stride, sums);
}

void widen_row(const BFloat16* src, int64_t stride, int64_t n, float* dst) { widen_portable(src, stride, n, dst); }

void widen_lanes8(const Half* src, int64_t row_step, int64_t n, float* dst) {
#ifdef SG_HAVE_LANES8_PATH
  if (use(ConvertPath::kF16cAvx2)) return widen_lanes8_vector(src, row_step, n, dst);
#endif
  widen_lanes8_portable(src, row_step, 0, n, dst);
}

void widen_lanes8(const BFloat16* src, int64_t row_step, int64_t n, float* dst) {
#ifdef SG_HAVE_LANES8_PATH
  if (use(ConvertPath::kF16cAvx2)) return widen_lanes8_vector(src, row_step, n, dst);
#endif
  widen_lanes8_portable(src, row_step, 0, n, dst);
}

template <class T>
void narrow_lanes8_any(const float* src, int64_t n, T* dst, int64_t row_step) {
#ifdef SG_HAVE_LANES8_PATH
  if (use(ConvertPath::kF16cAvx2)) return narrow_lanes8_vector(src, n, dst, row_step);
#endif
  narrow_lanes8_portable(src, 0, n, dst, row_step);
}

void narrow_lanes8(const float* src, int64_t n, Half* dst, int64_t row_step) {
  narrow_lanes8_any(src, n, dst, row_step);
}
void narrow_lanes8(const float* src, int64_t n, BFloat16* dst, int64_t row_step) {
  narrow_lanes8_any(src, n, dst, row_step);
}

void narrow_row(const float* src, int64_t n, Half* dst, int64_t stride) { narrow_sum(&src, 1, n, dst, stride); }

void narrow_row(const float* src, int64_t n, BFloat16* dst, int64_t stride) { narrow_sum(&src, 1, n, dst, stride); }

template <class T>
void narrow_blend(const float* a, const float* b, float wa, float wb, int64_t n, T* dst, int64_t stride) {
#ifdef SG_HAVE_F16C_PATH
  if (stride == 1 && narrow_vector(RowBlend{a, b, wa, wb}, n, dst)) return;
#endif
  narrow_blend_portable(a, b, wa, wb, n, dst, stride);
}

void narrow_blend_rows(const float* a, const float* b, float wa, float wb, int64_t n, Half* dst, int64_t stride) {
  narrow_blend(a, b, wa, wb, n, dst, stride);
}

void narrow_blend_rows(const float* a, const float* b, float wa, float wb, int64_t n, BFloat16* dst, int64_t stride) {
  narrow_blend(a, b, wa, wb, n, dst, stride);
}

void narrow_sum_rows(const float* const* rows, int64_t count, int64_t n, Half* dst, int64_t stride) {
  narrow_sum(rows, count, n, dst, stride);
}

void narrow_sum_rows(const float* const* rows, int64_t count, int64_t n, BFloat16* dst, int64_t stride) {
  narrow_sum(rows, count, n, dst, stride);
}

}  // namespace spatialgrad::detail

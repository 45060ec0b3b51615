// The kernels' one vocabulary for SIMD and memory hints. Kernels write portable C++ over the vector
// type Vec<T, kBytes> (GCC/Clang vector extensions: element-wise IEEE arithmetic, lane by lane) and the
// helpers below; raw intrinsics, vector typedefs and target attributes appear only in this directory.
//
// Per-level compilation (docs/design.md, "Kernel vocabulary"): a hot function is a kernel, a function
// template whose first parameter is an instruction-level tag (Isa<level>), marked SG_SIMD_KERNEL (always
// inlined); its entry runs it with SG_SIMD_DISPATCH, which calls it from one of three functions compiled
// for the baseline ISA, for AVX2 and for AVX-512, chosen by simd_level() (cpu.h: the best level the CPU
// has, capped by SPATIALGRAD_SIMD_LEVEL or a test's pin). Everything the kernel calls through
// SPATIALGRAD_INLINE is compiled into each level's copy with that level's ISA: loops the compiler
// vectorises take the level's vector width (64 bytes at AVX-512), and explicit vectors take the width the
// kernel asks for: Vec<T, 32> everywhere (one AVX2 register, two SSE ones), or Vec<T, Isa::kVecBytes> where
// a kernel opts in to full 64-byte vectors at AVX-512. No level enables FMA and the build passes
// -ffp-contract=off, so every level performs the same IEEE operations in the same order and gives the same
// bits. Why not Highway, and why not target_clones: docs/design.md.
//
// The explicit half-precision conversions (F16C, AVX-512 BF16) are in convert.cpp, behind the row
// functions of convert.h and rows.h; the gathers in gather.cpp; the CPU test and the level in cpu.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu.h"
#if defined(SG_SIMD_LEVELS)
#include <immintrin.h>
#endif  // SimdLevel, simd_level(), SG_SIMD_LEVELS
#include "spatialgrad/inline.h"  // SPATIALGRAD_INLINE, for the helpers of kernels

// ---- instruction levels ---------------------------------------------------------------------------------------

// A kernel's body: inlined into each level's copy (a function never compiled on its own).
#define SG_SIMD_KERNEL SPATIALGRAD_INLINE
// The attribute of a lambda that must be inlined into a level's copy (GCC and clang take it there).
#if defined(__GNUC__)
#define SG_SIMD_INLINE_LAMBDA __attribute__((always_inline))
#else
#define SG_SIMD_INLINE_LAMBDA
#endif

// Runs a kernel call compiled for the level in force: SG_SIMD_DISPATCH(fill(isa, x, n)) calls fill with
// `isa` naming the level's tag (Isa<...>). The call's arguments are evaluated in the caller.
#define SG_SIMD_DISPATCH(...) \
  ::spatialgrad::detail::dispatch_simd([&](auto isa) SG_SIMD_INLINE_LAMBDA -> decltype(auto) { return __VA_ARGS__; })

// The target of each level: AVX2 alone (no FMA: the clone of before issue 44), and AVX-512 with the rest
// of x86-64-v4 but FMA.
#if defined(SG_SIMD_LEVELS)
#define SG_TARGET_AVX2 __attribute__((target("avx2")))
#define SG_TARGET_AVX512 \
  __attribute__((target("avx2,f16c,bmi,bmi2,lzcnt,popcnt,avx512f,avx512bw,avx512vl,avx512dq,avx512cd")))
#endif

namespace spatialgrad::detail {

// The cache-line size of every CPU we target (x86-64, ARMv8 servers).
constexpr int64_t kCacheLine = 64;

// The tag of a level's copy of a kernel.
template <SimdLevel kLevelOf>
struct Isa {
  static constexpr SimdLevel kLevel = kLevelOf;
  // The widest explicit vector of the level: 64 bytes (a ZMM register) at AVX-512, else 32 (a YMM
  // register; two SSE registers at the baseline).
  static constexpr int kVecBytes = kLevelOf == SimdLevel::kAvx512 ? 64 : 32;
};
using BaselineIsa = Isa<SimdLevel::kBaseline>;
using Avx2Isa = Isa<SimdLevel::kAvx2>;
using Avx512Isa = Isa<SimdLevel::kAvx512>;

// Each level's copy: the kernel call inlined into a function compiled for the level (never inlined into
// its caller, whose ISA is the baseline).
template <class Call>
__attribute__((noinline)) decltype(auto) run_baseline(const Call& call) {
  return call(BaselineIsa{});
}
#if defined(SG_SIMD_LEVELS)
template <class Call>
__attribute__((noinline)) SG_TARGET_AVX2 decltype(auto) run_avx2(const Call& call) {
  return call(Avx2Isa{});
}
template <class Call>
__attribute__((noinline)) SG_TARGET_AVX512 decltype(auto) run_avx512(const Call& call) {
  return call(Avx512Isa{});
}
#endif

// The call at the level in force (SG_SIMD_DISPATCH).
template <class Call>
SPATIALGRAD_INLINE decltype(auto) dispatch_simd(const Call& call) {
#if defined(SG_SIMD_LEVELS)
  switch (simd_level()) {
    case SimdLevel::kAvx512:
      return run_avx512(call);
    case SimdLevel::kAvx2:
      return run_avx2(call);
    default:
      break;
  }
#endif
  return run_baseline(call);
}

// ---- vectors ------------------------------------------------------------------------------------------------

template <class T, int kBytes>
struct VecType {
  typedef T type __attribute__((vector_size(kBytes)));
};
// kBytes / sizeof(T) lanes of T.
template <class T, int kBytes>
using Vec = typename VecType<T, kBytes>::type;
template <class T, int kBytes>
constexpr int64_t kVecLanes = kBytes / static_cast<int64_t>(sizeof(T));

// Unaligned load and store (through memcpy, which compiles to one vector move). Loads fill a reference:
// a vector returned by value from a function that is not inlined has an ISA-dependent ABI.
template <class V, class T>
SPATIALGRAD_INLINE const V& load_u(V& v, const T* p) {
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V, class T>
SPATIALGRAD_INLINE void store_u(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// True when every lane of a vector comparison's result is true (-1). A lane-by-lane test: for a result
// gathered over a run of vectors and tested once, not inside a vector loop.
template <class M>
SPATIALGRAD_INLINE bool all_lanes(const M& mask) {
  bool all = true;
  for (int k = 0; k < static_cast<int>(sizeof(M) / sizeof(mask[0])); ++k) all &= mask[k] != 0;
  return all;
}

// dots[j] = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) for the lanes x of p_j, j < 4: four
// horizontal sums in a fixed order, computed together with shuffles that stay within 128-bit halves
// (two shufps and an add per step with AVX).
template <class T, class V>
SPATIALGRAD_INLINE void horizontal_sums4(const V& p0, const V& p1, const V& p2, const V& p3, T (&dots)[4]) {
  static_assert(sizeof(V) == 8 * sizeof(T), "the pairing below is for 8 lanes");
#if defined(__GNUC__) && !defined(__clang__)
  using Mask = decltype(V{} < V{});  // the integer vector of the same shape
  const Mask first{0, 2, 8, 10, 4, 6, 12, 14}, second{1, 3, 9, 11, 5, 7, 13, 15};
  // [a01 a23 b01 b23 | a45 a67 b45 b67], where a01 = x0 + x1 of p0, b.. of p1
  const V t01 = __builtin_shuffle(p0, p1, first) + __builtin_shuffle(p0, p1, second);
  const V t23 = __builtin_shuffle(p2, p3, first) + __builtin_shuffle(p2, p3, second);
  // [a0123 b0123 c0123 d0123 | a4567 b4567 c4567 d4567]
  const V quads = __builtin_shuffle(t01, t23, first) + __builtin_shuffle(t01, t23, second);
  for (int j = 0; j < 4; ++j) dots[j] = quads[j] + quads[j + 4];
#else
  const V p[4] = {p0, p1, p2, p3};
  for (int j = 0; j < 4; ++j) {
    const V& x = p[j];
    dots[j] = ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
  }
#endif
}

// evens = (a0, a2, a4, a6, b0, b2, b4, b6) and odds = (a1, a3, ..., b7): the two halves of eight interleaved
// pairs (the upsample forward's adjacent taps); two-input shuffles in GCC, lane by lane elsewhere.
SPATIALGRAD_INLINE void deinterleave8(const Vec<float, 32>& a, const Vec<float, 32>& b, Vec<float, 32>& evens,
                                      Vec<float, 32>& odds) {
#if defined(__GNUC__) && !defined(__clang__)
  using M = Vec<int32_t, 32>;
  evens = __builtin_shuffle(a, b, M{0, 2, 4, 6, 8, 10, 12, 14});
  odds = __builtin_shuffle(a, b, M{1, 3, 5, 7, 9, 11, 13, 15});
#else
  for (int k = 0; k < 4; ++k) {
    evens[k] = a[2 * k];
    evens[k + 4] = b[2 * k];
    odds[k] = a[2 * k + 1];
    odds[k + 4] = b[2 * k + 1];
  }
#endif
}

#if defined(__GNUC__) && !defined(__clang__)
// One 8x8 float block of transpose(): three rounds of two-input shuffles (unpack, 64-bit pairs,
// 128-bit halves), which the AVX2 level compiles to vunpck/vshufps/vperm2f128. transpose_half8 does the
// first two rounds for four rows.
SPATIALGRAD_INLINE void transpose_half8(const float* a, int64_t a_stride, Vec<float, 32> (&u)[4]) {
  using V = Vec<float, 32>;
  using M = Vec<int32_t, 32>;
  V r0, r1, r2, r3;
  load_u(r0, a);
  load_u(r1, a + a_stride);
  load_u(r2, a + 2 * a_stride);
  load_u(r3, a + 3 * a_stride);
  const V t0 = __builtin_shuffle(r0, r1, M{0, 8, 1, 9, 4, 12, 5, 13});
  const V t1 = __builtin_shuffle(r0, r1, M{2, 10, 3, 11, 6, 14, 7, 15});
  const V t2 = __builtin_shuffle(r2, r3, M{0, 8, 1, 9, 4, 12, 5, 13});
  const V t3 = __builtin_shuffle(r2, r3, M{2, 10, 3, 11, 6, 14, 7, 15});
  u[0] = __builtin_shuffle(t0, t2, M{0, 1, 8, 9, 4, 5, 12, 13});
  u[1] = __builtin_shuffle(t0, t2, M{2, 3, 10, 11, 6, 7, 14, 15});
  u[2] = __builtin_shuffle(t1, t3, M{0, 1, 8, 9, 4, 5, 12, 13});
  u[3] = __builtin_shuffle(t1, t3, M{2, 3, 10, 11, 6, 7, 14, 15});
}

SPATIALGRAD_INLINE void transpose_block8(const float* a, int64_t a_stride, float* b, int64_t b_stride) {
  using M = Vec<int32_t, 32>;
  Vec<float, 32> top[4], bottom[4];  // rows 0-3 and 4-7, 4x4 blocks transposed within each half
  transpose_half8(a, a_stride, top);
  transpose_half8(a + 4 * a_stride, a_stride, bottom);
  for (int j = 0; j < 4; ++j) {
    store_u(b + j * b_stride, __builtin_shuffle(top[j], bottom[j], M{0, 1, 2, 3, 8, 9, 10, 11}));
    store_u(b + (j + 4) * b_stride, __builtin_shuffle(top[j], bottom[j], M{4, 5, 6, 7, 12, 13, 14, 15}));
  }
}
#endif

#if defined(__SSE2__)
SPATIALGRAD_INLINE void transpose_block4(const float* a, int64_t a_stride, float* b, int64_t b_stride) {
  __m128 r0 = _mm_loadu_ps(a), r1 = _mm_loadu_ps(a + a_stride);
  __m128 r2 = _mm_loadu_ps(a + 2 * a_stride), r3 = _mm_loadu_ps(a + 3 * a_stride);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(b, r0);
  _mm_storeu_ps(b + b_stride, r1);
  _mm_storeu_ps(b + 2 * b_stride, r2);
  _mm_storeu_ps(b + 3 * b_stride, r3);
}
#endif

// Calls block(i, j) for i in [i0, i1), j in [j0, j1), both in steps of `step`; nothing when either range
// is empty (the callers' edge regions often are, and an empty inner loop per row cost as much as the
// blocks for the 64 x 8 shapes of the grid sampler's tiles).
template <class Block>
SPATIALGRAD_INLINE void for_blocks(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t step, Block&& block) {
  if (i0 >= i1 || j0 >= j1) return;
  for (int64_t i = i0; i < i1; i += step)
    for (int64_t j = j0; j < j1; j += step) block(i, j);
}

// b[j * b_stride + i] = a[i * a_stride + j] for i < rows, j < cols: 8x8 float blocks (GCC) over
// [0, rows8) x [0, cols8), 4x4 SSE blocks over the rest of [0, rows4) x [0, cols4), then single values
// (pure moves: no effect on results).
template <class Isa, class T>
SG_SIMD_KERNEL void transpose(Isa, const T* a, int64_t a_stride, int64_t rows, int64_t cols, T* b, int64_t b_stride) {
  int64_t rows8 = 0, cols8 = 0, rows4 = 0, cols4 = 0;
  auto one = [&](int64_t i, int64_t j) { b[j * b_stride + i] = a[i * a_stride + j]; };
  if constexpr (std::is_same_v<T, float>) {
#if defined(__GNUC__) && !defined(__clang__)
    // Not at the baseline: there GCC lowers the 8-lane shuffles of two SSE registers lane by lane (the
    // 4x4 SSE blocks transpose 16 x 4096 floats 13x as fast, 78 -> 6 us: measured with GCC 12).
    if constexpr (Isa::kLevel != SimdLevel::kBaseline) {
      rows8 = rows / 8 * 8;
      cols8 = cols / 8 * 8;
    }
    for_blocks(0, rows8, 0, cols8, 8, [&](int64_t i, int64_t j) {
      transpose_block8(a + i * a_stride + j, a_stride, b + j * b_stride + i, b_stride);
    });
#endif
#if defined(__SSE2__)
    rows4 = rows / 4 * 4;
    cols4 = cols / 4 * 4;
    auto block4 = [&](int64_t i, int64_t j) {
      transpose_block4(a + i * a_stride + j, a_stride, b + j * b_stride + i, b_stride);
    };
    for_blocks(0, rows8, cols8, cols4, 4, block4);
    for_blocks(rows8, rows4, 0, cols4, 4, block4);
#endif
  }
  rows4 = std::max(rows4, rows8);
  cols4 = std::max(cols4, cols8);
  for_blocks(0, rows4, cols4, cols, 1, one);
  for_blocks(rows4, rows, 0, cols, 1, one);
}

template <class T>
void transpose(const T* a, int64_t a_stride, int64_t rows, int64_t cols, T* b, int64_t b_stride) {
  SG_SIMD_DISPATCH(transpose(isa, a, a_stride, rows, cols, b, b_stride));
}

// The dense case: b[j * rows + i] = a[i * cols + j].
template <class T>
void transpose(const T* a, int64_t rows, int64_t cols, T* b) {
  transpose(a, cols, rows, cols, b, rows);
}

// ---- floors and gathers of a whole vector ------------------------------------------------------------------
// What the vector extensions cannot say, for kernels that keep a vector of points in registers (the grid
// sampler's point vectors): each helper takes the level's instructions where the vector is that level's
// width, and a lane loop elsewhere (the same values: floors and rounding are exact, gathers move values).
// Results come back through references: a vector returned by value has an ISA-dependent ABI.
//
// The instructions are in target functions (below), which a kernel can only inline once it is inside a
// level's copy: they are `inline`, never forced, as a kernel's body is compiled without a target first.
// For the same reason a kernel on 64-byte vectors uses each comparison only as the condition of a select
// (`a < b ? x : y`): GCC lowers a comparison whose result is kept as a value (combined with `&`, stored)
// lane by lane before the body reaches the AVX-512 copy. Masks are selects of all-ones and zeros.

// The int32 vector with one lane per lane of V (gather indices).
template <class V>
using IndexVecOf = Vec<int32_t, static_cast<int>(4 * sizeof(V) / sizeof(std::declval<V>()[0]))>;

#if defined(SG_SIMD_LEVELS)
#define SG_TARGET_AVX512_OPS __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))
// (The masked and zero-masked forms throughout: GCC 12 warns about the undefined source operand of the plain
// forms of these intrinsics.)

template <int kRound>
inline SG_TARGET_AVX512_OPS void round_avx512(const Vec<float, 64>& x, Vec<float, 64>& r) {
  r = reinterpret_cast<Vec<float, 64>>(_mm512_maskz_roundscale_ps(0xffff, reinterpret_cast<__m512>(x), kRound));
}
template <int kRound>
inline SG_TARGET_AVX512_OPS void round_avx512(const Vec<double, 64>& x, Vec<double, 64>& r) {
  r = reinterpret_cast<Vec<double, 64>>(_mm512_maskz_roundscale_pd(0xff, reinterpret_cast<__m512d>(x), kRound));
}
template <int kRound>
inline SG_TARGET_AVX2 void round_avx2(const Vec<float, 32>& x, Vec<float, 32>& r) {
  r = reinterpret_cast<Vec<float, 32>>(_mm256_round_ps(reinterpret_cast<__m256>(x), kRound));
}
template <int kRound>
inline SG_TARGET_AVX2 void round_avx2(const Vec<double, 32>& x, Vec<double, 32>& r) {
  r = reinterpret_cast<Vec<double, 32>>(_mm256_round_pd(reinterpret_cast<__m256d>(x), kRound));
}

inline SG_TARGET_AVX512_OPS void masked_gather_avx512(const float* base, const Vec<int32_t, 64>& index,
                                                       Vec<float, 64>& out) {
  const __m512i at = reinterpret_cast<__m512i>(index);
  const __mmask16 inside = _mm512_cmpgt_epi32_mask(at, _mm512_set1_epi32(-1));
  out = reinterpret_cast<Vec<float, 64>>(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), inside, at, base, 4));
}
inline SG_TARGET_AVX512_OPS void masked_gather_avx512(const double* base, const Vec<int32_t, 32>& index,
                                                       Vec<double, 64>& out) {
  const __m256i at = reinterpret_cast<__m256i>(index);
  const __mmask8 inside = _mm256_cmpgt_epi32_mask(at, _mm256_set1_epi32(-1));
  out = reinterpret_cast<Vec<double, 64>>(_mm512_mask_i32gather_pd(_mm512_setzero_pd(), inside, at, base, 8));
}
inline SG_TARGET_AVX2 void masked_gather_avx2(const float* base, const Vec<int32_t, 32>& index, Vec<float, 32>& out) {
  const __m256i at = reinterpret_cast<__m256i>(index);
  const __m256 inside = _mm256_castsi256_ps(_mm256_cmpgt_epi32(at, _mm256_set1_epi32(-1)));
  out = reinterpret_cast<Vec<float, 32>>(_mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, at, inside, 4));
}
inline SG_TARGET_AVX2 void masked_gather_avx2(const double* base, const Vec<int32_t, 16>& index, Vec<double, 32>& out) {
  const __m128i at = reinterpret_cast<__m128i>(index);
  const __m256d inside = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpgt_epi32(at, _mm_set1_epi32(-1))));
  out = reinterpret_cast<Vec<double, 32>>(_mm256_mask_i32gather_pd(_mm256_setzero_pd(), base, at, inside, 8));
}

// The box test and offsets of box_index (below): one masked comparison per bound, one conversion.
inline SG_TARGET_AVX512_OPS void box_index_avx512(const Vec<float, 64>& x, const Vec<float, 64>& y,
                                                  const float (&box)[4], Vec<int32_t, 64>& index) {
  const __m512 vx = reinterpret_cast<__m512>(x), vy = reinterpret_cast<__m512>(y), zero = _mm512_setzero_ps();
  __mmask16 inside = _mm512_cmp_ps_mask(vx, zero, _CMP_GE_OQ);
  inside = _mm512_mask_cmp_ps_mask(inside, vx, _mm512_set1_ps(box[0]), _CMP_LE_OQ);
  inside = _mm512_mask_cmp_ps_mask(inside, vy, zero, _CMP_GE_OQ);
  inside = _mm512_mask_cmp_ps_mask(inside, vy, _mm512_set1_ps(box[1]), _CMP_LE_OQ);
  const __m512 at = _mm512_add_ps(_mm512_mul_ps(vy, _mm512_set1_ps(box[2])), _mm512_mul_ps(vx, _mm512_set1_ps(box[3])));
  index = reinterpret_cast<Vec<int32_t, 64>>(_mm512_mask_cvttps_epi32(_mm512_set1_epi32(-1), inside, at));
}
inline SG_TARGET_AVX2 void box_index_avx2(const Vec<float, 32>& x, const Vec<float, 32>& y, const float (&box)[4],
                                          Vec<int32_t, 32>& index) {
  const __m256 vx = reinterpret_cast<__m256>(x), vy = reinterpret_cast<__m256>(y), zero = _mm256_setzero_ps();
  const __m256 inside = _mm256_and_ps(
      _mm256_and_ps(_mm256_cmp_ps(vx, zero, _CMP_GE_OQ), _mm256_cmp_ps(vx, _mm256_set1_ps(box[0]), _CMP_LE_OQ)),
      _mm256_and_ps(_mm256_cmp_ps(vy, zero, _CMP_GE_OQ), _mm256_cmp_ps(vy, _mm256_set1_ps(box[1]), _CMP_LE_OQ)));
  const __m256 at = _mm256_add_ps(_mm256_mul_ps(vy, _mm256_set1_ps(box[2])), _mm256_mul_ps(vx, _mm256_set1_ps(box[3])));
  index = reinterpret_cast<Vec<int32_t, 32>>(
      _mm256_blendv_epi8(_mm256_set1_epi32(-1), _mm256_cvttps_epi32(at), _mm256_castps_si256(inside)));
}

inline SG_TARGET_AVX512_OPS bool all_set_avx512(const Vec<int32_t, 64>& mask) {
  return _mm512_test_epi32_mask(reinterpret_cast<__m512i>(mask), reinterpret_cast<__m512i>(mask)) == 0xffff;
}
inline SG_TARGET_AVX2 bool all_set_avx2(const Vec<int32_t, 32>& mask) {
  return _mm256_movemask_ps(_mm256_castsi256_ps(reinterpret_cast<__m256i>(mask))) == 0xff;
}

// Sixteen (eight) pairs of adjacent floats as 64-bit lanes, then split into their first and second halves.
inline SG_TARGET_AVX512_OPS void gather_pairs_avx512(const float* base, const Vec<int32_t, 64>& index,
                                                      Vec<float, 64>& first, Vec<float, 64>& second) {
  const __m512i at = reinterpret_cast<__m512i>(index);
  const double* pairs = reinterpret_cast<const double*>(base);
  const __m512d zero = _mm512_setzero_pd();
  const __m256i low_at = _mm512_maskz_extracti64x4_epi64(0xff, at, 0), high_at = _mm512_maskz_extracti64x4_epi64(0xff, at, 1);
  const __m512 low = _mm512_castpd_ps(_mm512_mask_i32gather_pd(zero, 0xff, low_at, pairs, 4));
  const __m512 high = _mm512_castpd_ps(_mm512_mask_i32gather_pd(zero, 0xff, high_at, pairs, 4));
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  first = reinterpret_cast<Vec<float, 64>>(_mm512_permutex2var_ps(low, evens, high));
  second = reinterpret_cast<Vec<float, 64>>(
      _mm512_permutex2var_ps(low, _mm512_add_epi32(evens, _mm512_set1_epi32(1)), high));
}
inline SG_TARGET_AVX2 void gather_pairs_avx2(const float* base, const Vec<int32_t, 32>& index, Vec<float, 32>& first,
                                             Vec<float, 32>& second) {
  const __m256i at = reinterpret_cast<__m256i>(index);
  const double* pairs = reinterpret_cast<const double*>(base);
  const __m256d zero = _mm256_setzero_pd(), all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
  const __m256 low = _mm256_castpd_ps(_mm256_mask_i32gather_pd(zero, pairs, _mm256_castsi256_si128(at), all, 4));
  const __m256 high = _mm256_castpd_ps(_mm256_mask_i32gather_pd(zero, pairs, _mm256_extracti128_si256(at, 1), all, 4));
  // [a0 b0 a1 b1 | a2 b2 a3 b3] and [a4 b4 ...]: the a's and b's of each 128-bit half, then the halves in order.
  const __m256 a = _mm256_shuffle_ps(low, high, 0x88), b = _mm256_shuffle_ps(low, high, 0xdd);
  first = reinterpret_cast<Vec<float, 32>>(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(a), 0xd8)));
  second = reinterpret_cast<Vec<float, 32>>(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(b), 0xd8)));
}

// Pairs read from a window of two vectors' worth of floats at base + start (offset[k] = index[k] - start, in
// [0, 2 * lanes - 2]): two loads and two permutes of the window instead of the pairs' gathers.
inline SG_TARGET_AVX512_OPS void window_pairs_avx512(const float* base, const Vec<int32_t, 64>& offset,
                                                     Vec<float, 64>& first, Vec<float, 64>& second) {
  const __m512 low = _mm512_loadu_ps(base), high = _mm512_loadu_ps(base + 16);
  const __m512i at = reinterpret_cast<__m512i>(offset);
  first = reinterpret_cast<Vec<float, 64>>(_mm512_permutex2var_ps(low, at, high));
  second = reinterpret_cast<Vec<float, 64>>(_mm512_permutex2var_ps(low, _mm512_add_epi32(at, _mm512_set1_epi32(1)), high));
}
inline SG_TARGET_AVX2 __m256 window_lanes_avx2(__m256 low, __m256 high, __m256i at) {
  // permutevar8x32 reads an offset's low 3 bits: the lane from low, or from high where the offset passes 7.
  const __m256 from_high = _mm256_castsi256_ps(_mm256_cmpgt_epi32(at, _mm256_set1_epi32(7)));
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, at), _mm256_permutevar8x32_ps(high, at), from_high);
}
inline SG_TARGET_AVX2 void window_pairs_avx2(const float* base, const Vec<int32_t, 32>& offset, Vec<float, 32>& first,
                                             Vec<float, 32>& second) {
  const __m256 low = _mm256_loadu_ps(base), high = _mm256_loadu_ps(base + 8);
  const __m256i at = reinterpret_cast<__m256i>(offset);
  first = reinterpret_cast<Vec<float, 32>>(window_lanes_avx2(low, high, at));
  second = reinterpret_cast<Vec<float, 32>>(window_lanes_avx2(low, high, _mm256_add_epi32(at, _mm256_set1_epi32(1))));
}

// out = table[index] for a table of 32 floats (all readable), index in [0, 32): two loads and one two-register
// permute.
inline SG_TARGET_AVX512_OPS void lookup32_avx512(const float* table, const Vec<int32_t, 64>& index,
                                                 Vec<float, 64>& out) {
  const __m512 low = _mm512_loadu_ps(table), high = _mm512_loadu_ps(table + 16);
  out = reinterpret_cast<Vec<float, 64>>(_mm512_permutex2var_ps(low, reinterpret_cast<__m512i>(index), high));
}
// The same on eight lanes: each quarter of the table permuted, then the quarters chosen by the index's bits 3
// and 4 (moved to the sign bit, which blendv reads).
inline SG_TARGET_AVX2 void lookup32_avx2(const float* table, const Vec<int32_t, 32>& index, Vec<float, 32>& out) {
  const __m256i at = reinterpret_cast<__m256i>(index);
  __m256 quarter[4];
  for (int q = 0; q < 4; ++q) quarter[q] = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 8 * q), at);
  const __m256 bit3 = _mm256_castsi256_ps(_mm256_slli_epi32(at, 28)), bit4 = _mm256_castsi256_ps(_mm256_slli_epi32(at, 27));
  const __m256 low = _mm256_blendv_ps(quarter[0], quarter[1], bit3), high = _mm256_blendv_ps(quarter[2], quarter[3], bit3);
  out = reinterpret_cast<Vec<float, 32>>(_mm256_blendv_ps(low, high, bit4));
}
#endif

// The element type of V (a vector extension type; GCC 12 and 14 give its subscript different value categories).
template <class V>
using ElementOf = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<V&>()[0])>>;
static_assert(std::is_same_v<ElementOf<const Vec<float, 32>>, float>, "kernels branch on the element type");

// Lanes of V (a vector extension type).
template <class V>
constexpr int kLanesOf = static_cast<int>(sizeof(V) / sizeof(std::declval<V>()[0]));

template <class V, size_t... kLane>
SPATIALGRAD_INLINE void deinterleave_lanes(const V& a, const V& b, V& evens, V& odds, std::index_sequence<kLane...>) {
  evens = __builtin_shufflevector(a, b, static_cast<int>(2 * kLane)...);
  odds = __builtin_shufflevector(a, b, static_cast<int>(2 * kLane + 1)...);
}
// evens = (a0, a2, ..., b0, b2, ...) and odds = (a1, a3, ..., b1, b3, ...): the two halves of a vector's worth
// of interleaved pairs, for any width (deinterleave8's shuffles, written for every lane count).
template <class V>
SPATIALGRAD_INLINE void deinterleave(const V& a, const V& b, V& evens, V& odds) {
  deinterleave_lanes(a, b, evens, odds, std::make_index_sequence<static_cast<size_t>(kLanesOf<V>)>{});
}

// The two roundings the kernels use: toward -infinity (floor) and to nearest in the current rounding mode (ties
// to even by default, as nearbyint). Both are exact; NaN, infinities and -0 pass through.
enum class Rounding { kFloor, kNearest };

template <Rounding kMode, class Isa, class V>
SPATIALGRAD_INLINE void round_lanes(Isa, const V& x, V& r) {
#if defined(SG_SIMD_LEVELS)
  constexpr int kImm = (kMode == Rounding::kFloor ? _MM_FROUND_TO_NEG_INF : _MM_FROUND_CUR_DIRECTION) |
                       _MM_FROUND_NO_EXC;
  if constexpr (Isa::kLevel == SimdLevel::kAvx512 && sizeof(V) == 64) return round_avx512<kImm>(x, r);
  if constexpr (Isa::kLevel != SimdLevel::kBaseline && sizeof(V) == 32) return round_avx2<kImm>(x, r);
#endif
  for (int k = 0; k < kLanesOf<V>; ++k) r[k] = kMode == Rounding::kFloor ? std::floor(x[k]) : std::nearbyint(x[k]);
}

// r = floor(x) in every lane.
template <class Isa, class V>
SPATIALGRAD_INLINE void floor_lanes(Isa isa, const V& x, V& r) {
  round_lanes<Rounding::kFloor>(isa, x, r);
}

// r = nearbyint(x) in every lane.
template <class Isa, class V>
SPATIALGRAD_INLINE void nearbyint_lanes(Isa isa, const V& x, V& r) {
  round_lanes<Rounding::kNearest>(isa, x, r);
}

// True when every lane of an int32 mask (lanes of -1 or 0) is set: one test at AVX2 and AVX-512 (all_lanes
// reads the lanes one by one).
template <class Isa, class IV>
SPATIALGRAD_INLINE bool all_set(Isa, const IV& mask) {
#if defined(SG_SIMD_LEVELS)
  if constexpr (Isa::kLevel == SimdLevel::kAvx512 && sizeof(IV) == 64) return all_set_avx512(mask);
  if constexpr (Isa::kLevel != SimdLevel::kBaseline && sizeof(IV) == 32) return all_set_avx2(mask);
#endif
  return all_lanes(mask);
}

// index = y * box[2] + x * box[3] where 0 <= x <= box[0] and 0 <= y <= box[1] (NaN outside), else -1, for
// integral float lanes: the nearest pixel's offset in a plane whose offsets are below 2^24, exact in float
// (the caller checks), with one conversion instead of two and the box tested in float.
template <class Isa, class V>
SPATIALGRAD_INLINE void box_index(Isa, const V& x, const V& y, const float (&box)[4], IndexVecOf<V>& index) {
  static_assert(std::is_same_v<ElementOf<V>, float>, "box_index: float lanes");
#if defined(SG_SIMD_LEVELS)
  if constexpr (Isa::kLevel == SimdLevel::kAvx512 && sizeof(V) == 64) return box_index_avx512(x, y, box, index);
  if constexpr (Isa::kLevel != SimdLevel::kBaseline && sizeof(V) == 32) return box_index_avx2(x, y, box, index);
#endif
  for (int k = 0; k < kLanesOf<V>; ++k) {
    const bool inside = x[k] >= 0 && x[k] <= box[0] && y[k] >= 0 && y[k] <= box[1];
    index[k] = inside ? static_cast<int32_t>(y[k] * box[2] + x[k] * box[3]) : -1;
  }
}

// out[k] = base[index[k]] where index[k] >= 0, else 0 (the lane is not read).
template <class Isa, class T, class V>
SPATIALGRAD_INLINE void masked_gather(Isa, const T* base, const IndexVecOf<V>& index, V& out) {
#if defined(SG_SIMD_LEVELS)
  if constexpr (Isa::kLevel == SimdLevel::kAvx512 && sizeof(V) == 64) return masked_gather_avx512(base, index, out);
  if constexpr (Isa::kLevel != SimdLevel::kBaseline && sizeof(V) == 32) return masked_gather_avx2(base, index, out);
#endif
  for (int k = 0; k < kLanesOf<V>; ++k) out[k] = index[k] >= 0 ? base[index[k]] : T(0);
}

// first[k] = base[index[k]] and second[k] = base[index[k] + 1] for every lane (the caller has checked that
// both are inside the array): float pairs read as one 64-bit lane each, half the loads of two gathers.
template <class Isa, class V>
SPATIALGRAD_INLINE void gather_pairs(Isa, const float* base, const IndexVecOf<V>& index, V& first, V& second) {
#if defined(SG_SIMD_LEVELS)
  if constexpr (Isa::kLevel == SimdLevel::kAvx512 && sizeof(V) == 64) return gather_pairs_avx512(base, index, first, second);
  if constexpr (Isa::kLevel != SimdLevel::kBaseline && sizeof(V) == 32) return gather_pairs_avx2(base, index, first, second);
#endif
  for (int k = 0; k < kLanesOf<V>; ++k) {
    first[k] = base[index[k]];
    second[k] = base[index[k] + 1];
  }
}

// A vector's pairs (gather_pairs) that lie in one window of 2 * lanes floats: on a smooth grid (a flow, a crop
// at most as large as its output) the points of a vector read neighbouring pixels, and two loads and
// permutes of the window read them at a fraction of the gathers' cost. find_pair_window (once per vector)
// gives the window's start and the lanes' offsets in it, or false: a lane falls outside [start, start +
// 2 * lanes - 2], or the window would leave [0, extent) (extent: elements of the plane, so no load passes
// its ends). The window starts kSlack before the lower of the first and last lanes' pixels, so that
// points walking right or left, and a few pixels of jitter, fit.
template <class Isa, class IV>
SPATIALGRAD_INLINE bool find_pair_window(Isa isa, const IV& index, int64_t extent, int32_t& start, IV& offset) {
  constexpr int32_t kLanes = kLanesOf<IV>, kSlack = 4;
  start = std::min(index[0], index[kLanes - 1]) - kSlack;
  if (start < 0 || int64_t{start} + 2 * kLanes > extent) return false;
  offset = index - start;
  const IV inside = ~((offset | (2 * kLanes - 2 - offset)) >> 31);  // 0 <= offset <= 2 * lanes - 2 (lanes_inside)
  return all_set(isa, inside);
}

// first[k] = window[offset[k]] and second[k] = window[offset[k] + 1]: the values gather_pairs(window +
// offset) reads (find_pair_window gave start and offsets; window = base + start).
template <class Isa, class V>
SPATIALGRAD_INLINE void window_pairs(Isa, const float* window, const IndexVecOf<V>& offset, V& first, V& second) {
#if defined(SG_SIMD_LEVELS)
  if constexpr (Isa::kLevel == SimdLevel::kAvx512 && sizeof(V) == 64) return window_pairs_avx512(window, offset, first, second);
  if constexpr (Isa::kLevel != SimdLevel::kBaseline && sizeof(V) == 32) return window_pairs_avx2(window, offset, first, second);
#endif
  gather_pairs(Isa{}, window, offset, first, second);  // the portable loop: the same values
}

// out[k] = table[index[k]] for a table of kLookupValues floats, every one readable (a row of a narrow plane held
// in registers: the upsample forward's "narrow" strategy), and 0 <= index[k] < kLookupValues: permutes of the
// table instead of loads at computed positions.
constexpr int64_t kLookupValues = 32;
template <class Isa, class V>
SPATIALGRAD_INLINE void lookup32(Isa, const float* table, const IndexVecOf<V>& index, V& out) {
#if defined(SG_SIMD_LEVELS)
  if constexpr (Isa::kLevel == SimdLevel::kAvx512 && sizeof(V) == 64) return lookup32_avx512(table, index, out);
  if constexpr (Isa::kLevel != SimdLevel::kBaseline && sizeof(V) == 32) return lookup32_avx2(table, index, out);
#endif
  for (int k = 0; k < kLanesOf<V>; ++k) out[k] = table[index[k]];
}

// ---- memory hints (no effect on results) --------------------------------------------------------------------

enum class Access : int { kRead = 0, kWrite = 1 };
// Where a prefetched line should land: kL1 (all levels) for data used at once, kL2 for data a few
// steps ahead that would evict lines still in use from L1.
enum class Locality : int { kL2 = 2, kL1 = 3 };

template <Access kAccess = Access::kRead, Locality kWhere = Locality::kL1>
SPATIALGRAD_INLINE void prefetch(const void* p) {
  __builtin_prefetch(p, static_cast<int>(kAccess), static_cast<int>(kWhere));
#if defined(__GNUC__)
  // GCC counts a prefetch as no effect at all: a helper that only prefetches is found "const" and its
  // calls deleted (measured: the upsample NCHW backward lost its prefetches, 30% slower). An empty
  // volatile asm (no instruction, no memory clobber) marks the effect.
  asm volatile("");
#endif
}

// Asks for every cache line of the `bytes` bytes at p.
template <Access kAccess = Access::kRead, Locality kWhere = Locality::kL1>
SPATIALGRAD_INLINE void prefetch_bytes(const void* p, int64_t bytes) {
  const char* line = static_cast<const char*>(p) - (reinterpret_cast<uintptr_t>(p) & (kCacheLine - 1));
  const char* end = static_cast<const char*>(p) + bytes;
  for (; line < end; line += kCacheLine) prefetch<kAccess, kWhere>(line);
}

// Non-temporal stores: for outputs far larger than the caches that are not read back soon, the store
// skips the read-for-ownership of each line. stream_store4 writes 4 floats to a 16-byte aligned dst
// (a plain store where the ISA has none); a task that streamed ends with store_fence().
constexpr int64_t kStreamAlign = 16;
SPATIALGRAD_INLINE void stream_store4(float* dst, const Vec<float, 16>& v) {
#if defined(__SSE2__)
  _mm_stream_ps(dst, v);
#else
  store_u(dst, v);
#endif
}
SPATIALGRAD_INLINE void store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace spatialgrad::detail

// The kernels' one vocabulary for SIMD and memory hints. Kernels write portable C++ over the vector
// type Vec<T, kBytes> (GCC/Clang vector extensions: element-wise IEEE arithmetic, lane by lane) and the
// helpers below; raw intrinsics, vector typedefs and target attributes appear only in this directory.
//
// Per-ISA compilation: SG_SIMD_CLONES gives a hot function an AVX2 clone that the loader picks on CPUs
// that have it; everything it calls through SPATIALGRAD_INLINE is compiled into each clone with that clone's ISA,
// so one source gives SSE2 code and AVX2 code (a Vec<float, 32> is one AVX2 register, two SSE ones in
// the default clone). Portable builds stay at the baseline ISA (no -march). The clone performs the same
// IEEE operations in the same order, only wider: "avx2" does not enable FMA, so no multiply-add is
// contracted and both clones give bitwise identical results. Why not Highway: docs/design.md.
//
// The explicit half-precision conversions (F16C, AVX-512 BF16) are in convert.cpp, behind the row
// functions of convert.h and rows.h; the CPU test is cpu.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// GCC only: clang 14 cannot multiversion function templates (and most cloned functions are templates),
// so a clang build runs these loops at the baseline ISA: correct, slower. Releases build with GCC.
//
// A cloned function must not throw: under GCC 12 an exception leaving a target_clones function ends
// the process (std::terminate), so its callers allocate every buffer it uses (the kernels' Scratch structs).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SPATIALGRAD_NO_SIMD_CLONES)
#define SG_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SG_SIMD_CLONES
#endif

#include "spatialgrad/inline.h"  // SPATIALGRAD_INLINE, for the helpers of cloned functions

namespace spatialgrad::detail {

// The cache-line size of every CPU we target (x86-64, ARMv8 servers).
constexpr int64_t kCacheLine = 64;

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
// 128-bit halves), which the AVX2 clone compiles to vunpck/vshufps/vperm2f128. transpose_half8 does the
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
template <class T>
SG_SIMD_CLONES void transpose(const T* a, int64_t a_stride, int64_t rows, int64_t cols, T* b, int64_t b_stride) {
  int64_t rows8 = 0, cols8 = 0, rows4 = 0, cols4 = 0;
  auto one = [&](int64_t i, int64_t j) { b[j * b_stride + i] = a[i * a_stride + j]; };
  if constexpr (std::is_same_v<T, float>) {
#if defined(__GNUC__) && !defined(__clang__)
    rows8 = rows / 8 * 8;
    cols8 = cols / 8 * 8;
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

// The dense case: b[j * rows + i] = a[i * cols + j].
template <class T>
void transpose(const T* a, int64_t rows, int64_t cols, T* b) {
  transpose(a, cols, rows, cols, b, rows);
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

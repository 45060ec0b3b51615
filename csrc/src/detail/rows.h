// Row I/O per storage dtype: what kernels use to move a row of values between a tensor (any element
// stride) and a contiguous accumulation-type buffer. One argument order throughout, as in convert.h:
// the source first, the destination last (pointer, then its stride).
//
// float/double rows are plain loops (inlined into the calling kernel's level, so they vectorise at its ISA);
// float16/bfloat16 rows go through convert.h's vector conversions. Kernels call these instead of
// branching on the dtype.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

// evens[i] = pairs[2 * i] and odds[i] = pairs[2 * i + 1] for i < n: a row of interleaved pairs (the grid
// sampler's (x, y) values) split in two, eight pairs a step for float.
template <class Isa, class Acc>
SG_SIMD_KERNEL void split_pairs(Isa, const Acc* __restrict pairs, int64_t n, Acc* __restrict evens, Acc* __restrict odds) {
  int64_t i = 0;
  if constexpr (std::is_same_v<Acc, float>) {
    using V = Vec<float, 32>;
    for (; i + 8 <= n; i += 8) {
      V a, b, even, odd;
      load_u(a, pairs + 2 * i);
      load_u(b, pairs + 2 * i + 8);
      deinterleave8(a, b, even, odd);
      store_u(evens + i, even);
      store_u(odds + i, odd);
    }
  }
  for (; i < n; ++i) {
    evens[i] = pairs[2 * i];
    odds[i] = pairs[2 * i + 1];
  }
}
template <class Acc>
void split_pairs(const Acc* pairs, int64_t n, Acc* evens, Acc* odds) {
  SG_SIMD_DISPATCH(split_pairs(isa, pairs, n, evens, odds));
}

// pairs[2 * i] = evens[i] and pairs[2 * i + 1] = odds[i], rounded once to T, for i < n: split_pairs'
// inverse.
template <class Isa, class Acc, class T>
SG_SIMD_KERNEL void store_pairs(Isa, const Acc* __restrict evens, const Acc* __restrict odds, int64_t n,
                                T* __restrict pairs) {
  for (int64_t i = 0; i < n; ++i) {
    pairs[2 * i] = store_as<T>(evens[i]);
    pairs[2 * i + 1] = store_as<T>(odds[i]);
  }
}
template <class Acc, class T>
void store_pairs(const Acc* evens, const Acc* odds, int64_t n, T* pairs) {
  SG_SIMD_DISPATCH(store_pairs(isa, evens, odds, n, pairs));
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

// Zeroes n contiguous float or double values at dst with non-temporal stores where the ISA has them
// (store_fence() before the task ends): memory far larger than the caches that is not read back soon
// (21 MB and 260 MB: 2x memset's speed on the development machine, which reads every line it writes).
template <class T>
SPATIALGRAD_INLINE void zero_span_streaming(T* dst, int64_t n) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "all-zero bits are 0.0");
  char* p = reinterpret_cast<char*>(dst);
  int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kStreamAlign);
  const int64_t head = std::min(bytes, misaligned == 0 ? int64_t{0} : kStreamAlign - misaligned);
  std::memset(p, 0, static_cast<size_t>(head));
  p += head;
  bytes -= head;
  const Vec<float, 16> zero{};
  for (; bytes >= kStreamAlign; p += kStreamAlign, bytes -= kStreamAlign)
    stream_store4(reinterpret_cast<float*>(p), zero);
  std::memset(p, 0, static_cast<size_t>(bytes));
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

// ---- lane-interleaved tiles ---------------------------------------------------------------------------------

// Packs kLanes rows into one lane-interleaved row: dst[i * kLanes + k] = src[k * row_step + i * stride] in
// Acc for k < count, 0 for count <= k < kLanes, i < n. `scratch` holds kLanes * n values.
template <int64_t kLanes, class T, class Acc>
void pack_lanes(const T* src, int64_t row_step, int64_t count, int64_t stride, int64_t n, Acc* scratch, Acc* dst) {
  if constexpr (std::is_same_v<T, Acc>) {
    if (count == kLanes && stride == 1) return transpose(src, row_step, kLanes, n, dst, kLanes);
  } else if constexpr (kIsHalfType<T> && std::is_same_v<Acc, float> && kLanes == 8) {
    if (count == kLanes && stride == 1) return widen_lanes8(src, row_step, n, dst);
  }
  for (int64_t k = 0; k < kLanes; ++k) {
    if (k < count) {
      load_row(src + k * row_step, stride, n, scratch + k * n);
    } else {
      std::fill(scratch + k * n, scratch + (k + 1) * n, Acc(0));
    }
  }
  transpose(scratch, kLanes, n, dst);
}

// The inverse for the first `count` lanes: dst[k * row_step + i * stride] = src[i * kLanes + k] rounded
// once to T. `scratch` holds kLanes * n values. Always through scratch, then row by row: transposing
// straight into the kLanes rows (16 KB apart in a 64x64 tensor) was slower than the two steps (measured:
// 0.22 vs 0.175 ms per 4 MB).
template <int64_t kLanes, class T, class Acc>
void unpack_lanes(const Acc* src, int64_t n, int64_t count, Acc* scratch, T* dst, int64_t row_step, int64_t stride) {
  if constexpr (kIsHalfType<T> && std::is_same_v<Acc, float> && kLanes == 8) {
    if (count == kLanes && stride == 1) return narrow_lanes8(src, n, dst, row_step);
  }
  transpose(src, n, kLanes, scratch);
  for (int64_t k = 0; k < count; ++k) store_row(scratch + k * n, n, dst + k * row_step, stride);
}

// sums[i] += ((v[i][0] + v[i][1]) + v[i][2]) + ... for i < n, where v[i] is the row of kLanes values at
// v + i * kLanes: horizontal sums of n vectors in one fixed order, computed n at a time (transposed, so the
// adds run across vectors). `scratch` holds kLanes * n values.
template <int64_t kLanes, class Acc>
void add_lane_sums(const Acc* v, int64_t n, Acc* scratch, Acc* sums) {
  transpose(v, n, kLanes, scratch);
  for (int64_t k = 1; k < kLanes; ++k) {
    const Acc* lane = scratch + k * n;
    for (int64_t i = 0; i < n; ++i) scratch[i] += lane[i];
  }
  for (int64_t i = 0; i < n; ++i) sums[i] += scratch[i];
}

// ---- weighted sums of rows ----------------------------------------------------------------------------------

// acc[i] = (acc[i] +) sum over m < M of w[m] * rows[m][i * stride], summed in order m = 0, 1, ...
template <int M, bool kFirst, bool kUnit, class T, class Acc>
SPATIALGRAD_INLINE void sum_group(Acc* acc, const T* const* rows, const Acc* w, int64_t stride, int64_t n) {
  const T* r[M];
  Acc wt[M];
  for (int m = 0; m < M; ++m) {
    r[m] = rows[m];
    wt[m] = w[m];
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = kUnit ? i : i * stride;
    Acc sum = kFirst ? wt[0] * load_as<Acc>(r[0][at]) : acc[i] + wt[0] * load_as<Acc>(r[0][at]);
    for (int m = 1; m < M; ++m) sum += wt[m] * load_as<Acc>(r[m][at]);
    acc[i] = sum;
  }
}

template <bool kFirst, bool kUnit, class T, class Acc>
SPATIALGRAD_INLINE void sum_group_of(int64_t m, Acc* acc, const T* const* rows, const Acc* w, int64_t stride,
                                     int64_t n) {
  switch (m) {
    case 1:
      return sum_group<1, kFirst, kUnit>(acc, rows, w, stride, n);
    case 2:
      return sum_group<2, kFirst, kUnit>(acc, rows, w, stride, n);
    case 3:
      return sum_group<3, kFirst, kUnit>(acc, rows, w, stride, n);
    default:
      return sum_group<4, kFirst, kUnit>(acc, rows, w, stride, n);
  }
}

// acc[i] = sum over k < count (>= 1) of w[k] * rows[k][i * stride] in Acc, in order k = 0, 1, ...: up to
// four rows per pass, so the accumulator row is read and written once per four source rows. float16 rows
// of unit stride go through convert.h's weighted_sum_rows (F16C where present; the same bits).
template <class Isa, class T, class Acc>
SG_SIMD_KERNEL void weighted_row_sum(Isa, const T* const* rows, const Acc* w, int64_t count, int64_t stride, int64_t n,
                                     Acc* acc) {
  if constexpr (std::is_same_v<T, Half> && std::is_same_v<Acc, float>) {
    if (stride == 1) return weighted_sum_rows(rows, w, count, n, acc);
  }
  for (int64_t k = 0; k < count; k += 4) {
    const int64_t m = std::min<int64_t>(4, count - k);
    if (stride == 1) {
      if (k == 0) {
        sum_group_of<true, true>(m, acc, rows + k, w + k, stride, n);
      } else {
        sum_group_of<false, true>(m, acc, rows + k, w + k, stride, n);
      }
    } else {
      if (k == 0) {
        sum_group_of<true, false>(m, acc, rows + k, w + k, stride, n);
      } else {
        sum_group_of<false, false>(m, acc, rows + k, w + k, stride, n);
      }
    }
  }
}
template <class T, class Acc>
void weighted_row_sum(const T* const* rows, const Acc* w, int64_t count, int64_t stride, int64_t n, Acc* acc) {
  SG_SIMD_DISPATCH(weighted_row_sum(isa, rows, w, count, stride, n, acc));
}

}  // namespace spatialgrad::detail

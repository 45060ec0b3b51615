// Lane layout, part of the kernel vocabulary: images whose innermost axis is a run of "lanes" that a kernel's
// loops run over in one vector pass (the channels of a channels-last tensor, or planes packed side by side
// into a tile), and the moves between that layout and a tensor's (docs/design.md). The moves are pure copies
// (and exact widening): they never change a result. The pooling kernels' channels-last and plane-tile
// strategies run on them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "detail/rows.h"
#include "detail/simd.h"

namespace spatialgrad::detail {

// Element (h, w, lane k) of an image at data[h * row + w * pixel + k * lane].
template <class U>
struct LaneImage {
  U* data;
  int64_t row, pixel, lane;
  U* at(int64_t h, int64_t w) const { return data + h * row + w * pixel; }
};

// dst[i * L + k] = src[k * lane + i * pixel] in Acc, for pixels i < n and lanes k < count (lanes count..L of
// dst untouched). `scratch` holds count * n values. Pure moves (and exact widening): no effect on results.
template <class T, class Acc>
SPATIALGRAD_INLINE void gather_lanes(const T* src, int64_t lane, int64_t pixel, int64_t n, int64_t count, int64_t L,
                                     Acc* scratch, Acc* dst) {
  if constexpr (std::is_same_v<T, Acc>) {
    if (pixel == 1) return transpose(src, lane, count, n, dst, L);  // 8x8 float blocks
  }
  if (lane == 1) {  // a pixel's lanes are contiguous (channels-last)
    for (int64_t i = 0; i < n; ++i) load_row(src + i * pixel, 1, count, dst + i * L);
    return;
  }
  for (int64_t k = 0; k < count; ++k) load_row(src + k * lane, pixel, n, scratch + k * n);
  transpose(scratch, n, count, n, dst, L);
}

// The inverse: dst[k * lane + i * pixel] = src[i * L + k] rounded once to T, for i < n, k < count. `scratch`
// holds count * n values.
template <class T, class Acc>
SPATIALGRAD_INLINE void scatter_lanes(const Acc* src, int64_t n, int64_t count, int64_t L, T* dst, int64_t lane,
                                      int64_t pixel, Acc* scratch) {
  if (lane == 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) store_row(src + i * L, count, dst + i * pixel, lane);
    return;
  }
  if constexpr (std::is_same_v<T, Acc>) {
    if (pixel == 1) {
      // Eight lanes at a time over all pixels, so that eight output streams are written front to back: one
      // transpose of all lanes wrote 32 bytes to each of `count` streams in turn, which took 1.9x as long
      // for 64 streams into a 12.8 MB tensor of 56x56 planes (2.45 vs 1.28 ms; a memset of the same runs:
      // 0.66 ms).
      for (int64_t k = 0; k < count; k += 8) {
        transpose(src + k, L, n, std::min<int64_t>(8, count - k), dst + k * lane, lane);
      }
      return;
    }
  }
  transpose(src, L, n, count, scratch, n);
  for (int64_t k = 0; k < count; ++k) store_row(scratch + k * n, n, dst + k * lane, pixel);
}

}  // namespace spatialgrad::detail

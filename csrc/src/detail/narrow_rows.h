// What the narrow kernels share (the operators' "narrow" strategies): rows of at most kLookupValues (32) floats
// read as whole tables by lookup32 (simd.h), and rows of output covered by whole vectors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "simd.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail {

// The narrow kernels' tables of per-column taps and weights are padded to at least this many columns: a vector
// at column 0 of a row narrower than a vector reads padding (never stored), and no index passes 64.
constexpr int64_t kNarrowPad = 64;

// Rows of a float tensor read as tables of `values` floats (kLookupValues unless said): a row is its own table
// where that many floats from it lie within the tensor (the values past the row are never selected), else it is
// copied into one of two local tables first (the last rows of the tensor). Allocates: build it outside kernels.
class RowTables {
 public:
  explicit RowTables(const TensorView& t, int64_t values = kLookupValues)
      : values_(values), staged_(static_cast<size_t>(2 * values), 0.0f) {
    int64_t last = 0;  // the offset of the highest element
    for (int64_t d = 0; d < t.dim(); ++d) last += std::max<int64_t>(0, (t.size(d) - 1) * t.stride(d));
    end_ = t.data<float>() + last + 1;
  }
  // The table of `row` (which: 0 or 1, the local table it may take).
  SPATIALGRAD_INLINE const float* table(const float* row, int which) {
    if (row + values_ <= end_) return row;
    float* staged = staged_.data() + which * values_;
    std::memcpy(staged, row, static_cast<size_t>(end_ - row) * sizeof(float));
    return staged;
  }

 private:
  int64_t values_;
  const float* end_ = nullptr;
  std::vector<float> staged_;
};

// Calls vector(at) for the vectors of kStep values that cover [0, n), n >= kStep: at = 0, kStep, ... and, where
// kStep does not divide n, n - kStep (the last vector ends at the row's end and recomputes the values it shares
// with the one before it: the same values).
template <int64_t kStep, class Vector>
SPATIALGRAD_INLINE void for_row_vectors(int64_t n, Vector&& vector) {
  int64_t at = 0;
  for (; at + kStep <= n; at += kStep) vector(at);
  if (at < n) vector(n - kStep);
}

// dst[k] = v[k] for k < n (a row shorter than a vector).
template <class V>
SPATIALGRAD_INLINE void store_first_lanes(float* dst, const V& v, int64_t n) {
  for (int64_t k = 0; k < n; ++k) dst[k] = v[k];
}

}  // namespace spatialgrad::detail

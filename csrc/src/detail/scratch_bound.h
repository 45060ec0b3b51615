// The scratch a call may take above its inputs and outputs (issue 31; docs/operators.md, "Memory"):
// max(64 MiB, 25% of the bytes of its inputs and outputs), whatever the plane. The operators that choose a
// strategy by its memory ask these.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "spatialgrad/dtype.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail {

constexpr int64_t kScratchFloorBytes = int64_t{64} << 20;

inline int64_t scratch_bound(int64_t in_out_bytes) { return std::max(kScratchFloorBytes, in_out_bytes / 4); }

// The bytes of the tensors (null entries: tensors not wanted, counted as nothing).
inline int64_t bytes_of(std::initializer_list<const TensorView*> tensors) {
  int64_t total = 0;
  for (const TensorView* t : tensors) {
    if (t != nullptr) total += t->numel() * dtype_size(t->dtype());
  }
  return total;
}

}  // namespace spatialgrad::detail

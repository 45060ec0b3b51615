// float32 staging of float16/bfloat16 tensors for the kernels that read their inputs at scattered
// positions (through detail/entry.h's Staging). Widening each value where a
// gather reads it costs several instructions per read, and a value is read many times; widening every
// tensor once with row conversions (F16C where present), running the float32 kernel and rounding each
// output once is several times faster. The results are bitwise those of computing in float32 from
// the exactly widened values and rounding once, which is the half-precision contract (docs/operators.md, Common rules).
// The cost is a float32 copy of each staged tensor for the duration of the call, in memory kept for
// reuse by the next call (spatialgrad/memory.h).
#pragma once

#include <cstdint>
#include <memory>

#include "spatialgrad/memory.h"
#include "convert.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail {

class FloatStaging {
 public:
  // A contiguous float32 copy of the float16/bfloat16 tensor `t` (any strides).
  static FloatStaging copy_of(const TensorView& t);
  // An uninitialised contiguous float32 buffer of t's shape.
  static FloatStaging like(const TensorView& t);

  const TensorView& view() const { return view_; }
  // Rounds the buffer to nearest even into the float16/bfloat16 tensor `t` of the same shape (any strides).
  void narrow_into(const TensorView& t) const;

 private:
  // Memory from the memory cache (spatialgrad/memory.h): staging buffers have the same sizes call after call.
  struct Release {
    size_t bytes;
    void operator()(float* p) const { release_block(p, bytes); }
  };
  std::unique_ptr<float, Release> data_{nullptr, Release{0}};
  TensorView view_;
};

}  // namespace spatialgrad::detail

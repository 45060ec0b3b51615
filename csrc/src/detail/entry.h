// The one entry template of every operator's public functions (forward, backward, second order):
//
//   validate (detail/checks.h and the operator's own checks)
//   -> run_entry(op, arg, dtype, run): the dtype switch (dispatch_floating, TypeError for other dtypes)
//   -> run(TypeTag<T>, staging): the operator's run_*<...>, where each tensor the kernel wants in float32
//      is wrapped in staging.in(t) / staging.out(t); what is not wrapped reaches the kernel in its storage
//      type, for kernels that convert rows as they read and write them.
//
// For float16/bfloat16, in(t) is a float32 copy of t and out(t) a float32 buffer rounded into t once the
// kernel returns (detail/float_staging.h); for float32/float64 both are t itself, at no cost. So
// `run_forward<AccType<T>>(staging.in(input), staging.out(output))` is a float32 kernel on staged copies for
// half precision and the T kernel on the tensors otherwise, and `run_forward<T>(input, output)` converts
// by rows: one template for both policies, and a kernel may mix them (staging the small tensors it reads
// one value at a time, converting the rows it streams).
#pragma once

#include <array>
#include <cstddef>
#include <utility>

#include "float_staging.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail {

// A TensorView() standing for an absent optional operand (a cotangent counted as zeros).
inline bool is_absent(const TensorView& t) { return t.raw_data() == nullptr && t.dim() == 0; }

// The float32 staging of one half-precision call (see above). An absent input, or an output not wanted,
// is passed on as TensorView().
class Staging {
 public:
  const TensorView& in(const TensorView& t) { return is_absent(t) ? t : keep(FloatStaging::copy_of(t), nullptr); }
  const TensorView& out(const TensorView& t, bool wanted = true) {
    return wanted ? keep(FloatStaging::like(t), &t) : absent_;
  }
  // Rounds every out() buffer into its tensor.
  void narrow_outputs() const {
    for (size_t i = 0; i < count_; ++i)
      if (targets_[i] != nullptr) slots_[i].narrow_into(*targets_[i]);
  }

 private:
  static constexpr size_t kMaxTensors = 12;  // the most any entry stages today is 11

  const TensorView& keep(FloatStaging staged, const TensorView* target) {
    SG_CHECK(count_ < kMaxTensors, "Staging(): expected at most ", kMaxTensors, " staged tensors, but got more");
    slots_[count_] = std::move(staged);
    targets_[count_] = target;
    return slots_[count_++].view();
  }

  std::array<FloatStaging, kMaxTensors> slots_;
  std::array<const TensorView*, kMaxTensors> targets_{};
  size_t count_ = 0;
  TensorView absent_;
};

// The same interface for float32/float64: every tensor is passed on as it is.
struct NoStaging {
  const TensorView& in(const TensorView& t) const { return t; }
  const TensorView& out(const TensorView& t, bool = true) const { return t; }
};

// Calls run(TypeTag<T>{}, staging) with T the storage type of `dtype` (a TypeError naming `op` and `arg`
// for a dtype without kernels), staging a Staging for float16/bfloat16 (outputs narrowed after run
// returns) and a NoStaging otherwise.
template <class Run>
void run_entry(const char* op, const char* arg, DType dtype, Run&& run) {
  dispatch_floating(dtype, op, arg, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsHalfType<T>) {
      Staging staging;
      run(tag, staging);
      staging.narrow_outputs();
    } else {
      NoStaging staging;
      run(tag, staging);
    }
  });
}

}  // namespace spatialgrad::detail

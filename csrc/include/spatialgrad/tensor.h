// TensorView: a non-owning view of strided memory. Sizes and strides are int64 and counted in
// elements (not bytes); strides may be zero or negative. Kernels read inputs and write outputs
// through views the caller owns.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "spatialgrad/dtype.h"

namespace spatialgrad {

class TensorView {
 public:
  TensorView() = default;
  // Strides default to C-contiguous when omitted.
  TensorView(void* data, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {});

  template <class T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  void* raw_data() const { return data_; }
  DType dtype() const { return dtype_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  // Negative indices count from the end, as in Python.
  int64_t size(int64_t d) const { return sizes_[wrap(d)]; }
  int64_t stride(int64_t d) const { return strides_[wrap(d)]; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  // Number of elements; computed with overflow checks at construction.
  int64_t numel() const { return numel_; }
  bool is_empty() const { return numel_ == 0; }
  bool is_contiguous() const;
  // "(2, 3, 4)", for messages.
  std::string shape_string() const;

 private:
  size_t wrap(int64_t d) const { return static_cast<size_t>(d < 0 ? d + dim() : d); }

  void* data_ = nullptr;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t numel_ = 0;
};

// Writes zero to every element of `view` through its strides (any dtype: zero is all-zero bits).
void fill_zeros(const TensorView& view);

// The dimension order of an operator's 4-D tensors (3-D: without N), as the aclnn tensor format says it.
// kNHWC: tensors are (N, H, W, C) and every shape argument of the call is read in that order too. The
// order of the sizes, not the strides: a channels-last tensor of NCHW sizes is kNCHW (its strides choose
// the kernel, never the meaning).
enum class Layout : int8_t { kNCHW = 0, kNHWC = 1 };

const char* layout_name(Layout layout);
// "NCHW" / "NHWC", case-insensitive; anything else raises a ValueError-kind error naming `op`.
Layout parse_layout(const char* op, const std::string& name);

// C-contiguous strides for `sizes`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
// Product of sizes; throws an OverflowError-kind error when it does not fit int64.
int64_t checked_numel(const std::vector<int64_t>& sizes);
// "(2, 3, 4)" / "[2, 3]" formatting for messages; more than 8 entries print as "[0, 1, 2, 3, 4, 5, ..., 99]".
std::string format_list(const std::vector<int64_t>& values, const char* open = "(", const char* close = ")");

}  // namespace spatialgrad

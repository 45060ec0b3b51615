// Helpers for the aclnn operator tests that compare the C API with the core API on the same memory,
// and for the float16/bfloat16 tests, which hold whether or not the core has kernels for them yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aclnn_test_util.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/error.h"
#include "spatialgrad/tensor.h"

namespace aclnn_testing {

// The core's view of a HostTensor: the same storage, strides and offset.
template <class T>
spatialgrad::TensorView core_view(HostTensor<T>& t, spatialgrad::DType dtype) {
  return spatialgrad::TensorView(t.storage.data() + t.offset, dtype, t.shape, t.strides);
}

struct HalfCase {
  aclDataType acl;
  spatialgrad::DType core;
  const char* name;
};
inline const HalfCase kHalfCases[] = {{ACL_FLOAT16, spatialgrad::DType::kFloat16, "ACL_FLOAT16"},
                                      {ACL_BF16, spatialgrad::DType::kBFloat16, "ACL_BF16"}};

// Storage bits of float values in float16 or bfloat16 (round to nearest even).
inline std::vector<uint16_t> half_bits(const std::vector<float>& values, aclDataType dtype) {
  std::vector<uint16_t> out;
  out.reserve(values.size());
  for (float v : values) {
    out.push_back(dtype == ACL_FLOAT16 ? spatialgrad::to_half(v).bits : spatialgrad::to_bfloat16(v).bits);
  }
  return out;
}

// Random multiples of 1/8 in [-2, 2]: exact in float16 and bfloat16, so both dtypes see the same data.
inline std::vector<float> exact_half_values(int64_t n, uint32_t seed) {
  std::vector<float> v = random_values<float>(n, seed);
  for (float& x : v) x = static_cast<float>(static_cast<int>(x * 16.0f)) / 8.0f;
  return v;
}

// The floating dtypes the C API lists as accepted, in CANN's order.
inline std::string accepted_floating() { return "ACL_FLOAT16, ACL_BF16, ACL_FLOAT, ACL_DOUBLE"; }

inline size_t count_nonzero(const std::vector<uint16_t>& bits) {
  size_t n = 0;
  for (uint16_t b : bits) n += (b & 0x7fffu) != 0;
  return n;
}

}  // namespace aclnn_testing

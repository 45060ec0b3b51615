// Helpers for the aclnn C API tests: RAII owners of aclTensor / arrays over host vectors, and a
// status check that also reads aclGetRecentErrMsg(). Uses only the public C headers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn/aclnn_base.h"

namespace aclnn_testing {

// The statuses the tests expect (aclnn_base.h's codes). The aclnn test files' own code lives in this namespace.
constexpr int kOk = ACLNN_SUCCESS;
constexpr int kNull = ACLNN_ERR_PARAM_NULLPTR;
constexpr int kInvalid = ACLNN_ERR_PARAM_INVALID;

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  return strides;
}

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Storage of `storage_elems` elements of T plus an aclTensor viewing it.
template <class T>
struct HostTensor {
  std::vector<T> storage;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
  aclTensor* tensor = nullptr;

  HostTensor() = default;
  // Contiguous tensor of `shape` filled with `values` (or zeros).
  HostTensor(std::vector<int64_t> shape_, aclDataType dtype, std::vector<T> values = {},
             aclFormat format = ACL_FORMAT_ND)
      : shape(std::move(shape_)) {
    strides = contiguous_strides(shape);
    storage = values.empty() ? std::vector<T>(static_cast<size_t>(numel(shape)), T(0)) : std::move(values);
    const std::vector<int64_t> storage_shape{static_cast<int64_t>(storage.size())};
    tensor = aclCreateTensor(shape.data(), shape.size(), dtype, strides.data(), 0, format, storage_shape.data(), 1,
                             storage.empty() ? nullptr : storage.data());
  }
  // A strided view (strides, offset) into storage of `storage_elems` elements filled with `fill`.
  HostTensor(std::vector<int64_t> shape_, std::vector<int64_t> strides_, int64_t offset_, int64_t storage_elems,
             aclDataType dtype, T fill, aclFormat format = ACL_FORMAT_ND)
      : storage(static_cast<size_t>(storage_elems), fill), shape(std::move(shape_)), strides(std::move(strides_)),
        offset(offset_) {
    const std::vector<int64_t> storage_shape{storage_elems};
    tensor = aclCreateTensor(shape.data(), shape.size(), dtype, strides.data(), offset, format, storage_shape.data(),
                             1, storage.data());
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  ~HostTensor() { aclDestroyTensor(tensor); }

  // Element at a multi-index, through strides and offset.
  T& at(const std::vector<int64_t>& index) {
    int64_t pos = offset;
    for (size_t d = 0; d < index.size(); ++d) pos += index[d] * strides[d];
    return storage[static_cast<size_t>(pos)];
  }
};

// A contiguous aclTensor over memory owned elsewhere (to place one tensor inside another's buffer).
struct AliasTensor {
  aclTensor* tensor;
  AliasTensor(std::vector<int64_t> shape, aclDataType dtype, void* data) {
    const std::vector<int64_t> strides = contiguous_strides(shape), storage{numel(shape)};
    tensor = aclCreateTensor(shape.data(), shape.size(), dtype, strides.data(), 0, ACL_FORMAT_ND, storage.data(), 1,
                             data);
  }
  AliasTensor(const AliasTensor&) = delete;
  AliasTensor& operator=(const AliasTensor&) = delete;
  ~AliasTensor() { aclDestroyTensor(tensor); }
};

struct IntArray {
  aclIntArray* array;
  explicit IntArray(std::vector<int64_t> values) : array(aclCreateIntArray(values.data(), values.size())) {}
  IntArray(const IntArray&) = delete;
  IntArray& operator=(const IntArray&) = delete;
  ~IntArray() { aclDestroyIntArray(array); }
};

template <class T>
std::vector<T> random_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> out(static_cast<size_t>(n));
  for (auto& v : out) v = static_cast<T>(dist(gen));
  return out;
}

// Reads (and so clears) this thread's recent error messages; "" when there are none.
inline std::string take_error_message() {
  const char* message = aclGetRecentErrMsg();
  return message == nullptr ? std::string() : std::string(message);
}

// Checks a status and that the recorded message contains `text` (failures) or that none was recorded.
#define EXPECT_ACL_STATUS(call, code, text)                                                   \
  do {                                                                                        \
    aclGetRecentErrMsg();                                                                     \
    const auto status_ = (call);                                                              \
    const std::string message_ = ::aclnn_testing::take_error_message();                       \
    EXPECT_EQ(status_, (code)) << "message: " << message_;                                    \
    if ((code) != 0) {                                                                        \
      EXPECT_NE(message_.find(text), std::string::npos) << "message: " << message_;           \
    } else {                                                                                  \
      EXPECT_EQ(message_, "");                                                                \
    }                                                                                         \
  } while (0)

}  // namespace aclnn_testing

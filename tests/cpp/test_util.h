// Helpers for the GoogleTest suite: owning test tensors and seeded random data.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "spatialgrad/tensor.h"

namespace spatialgrad::testing {

// An owning contiguous tensor (or, with `strides`, a strided view into a larger buffer).
template <class T>
struct OwnedTensor {
  std::vector<T> storage;
  TensorView view;

  OwnedTensor() = default;
  explicit OwnedTensor(std::vector<int64_t> sizes, T fill = T(0)) {
    storage.assign(static_cast<size_t>(checked_numel(sizes)), fill);
    view = TensorView(storage.data(), dtype_of<T>(), std::move(sizes));
  }
  T* data() { return storage.data(); }
  T& operator[](int64_t i) { return storage[static_cast<size_t>(i)]; }
  int64_t numel() const { return view.numel(); }
};

template <class T>
OwnedTensor<T> random_tensor(std::vector<int64_t> sizes, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  OwnedTensor<T> t(std::move(sizes));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (auto& v : t.storage) v = static_cast<T>(dist(gen));
  return t;
}

// Element (i0, i1, ...) of a view, through its strides.
template <class T>
T& at(const TensorView& view, std::initializer_list<int64_t> index) {
  int64_t offset = 0, d = 0;
  for (int64_t i : index) offset += i * view.stride(d++);
  return view.data<T>()[offset];
}

// A copy of `src` (contiguous) laid out with the given dimension order reversed in memory along
// `dim` (negative stride), returned as storage plus a view with the same logical values.
template <class T>
OwnedTensor<T> flipped_copy(const OwnedTensor<T>& src, int64_t dim) {
  OwnedTensor<T> out(src.view.sizes());
  const int64_t n = src.view.size(dim);
  std::vector<int64_t> strides = src.view.strides();
  const int64_t step = strides[static_cast<size_t>(dim)];
  // Logical element i along dim is stored at physical position n - 1 - i.
  const int64_t total = src.view.numel();
  for (int64_t flat = 0; flat < total; ++flat) {
    const int64_t i = (flat / step) % n;
    const int64_t physical = flat + (n - 1 - 2 * i) * step;
    out.storage[static_cast<size_t>(physical)] = src.storage[static_cast<size_t>(flat)];
  }
  strides[static_cast<size_t>(dim)] = -step;
  T* origin = out.storage.data() + (n - 1) * step;
  out.view = TensorView(origin, dtype_of<T>(), src.view.sizes(), strides);
  return out;
}

inline void expect_all_near(const std::vector<double>& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tol * (1.0 + std::abs(expected[i]))) << "at flat index " << i;
  }
}

// Runs fn() and checks that it throws spatialgrad::Error of `kind` whose message contains `text`.
template <class Fn>
void expect_error(Fn&& fn, ErrorKind kind, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing \"" << text << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace spatialgrad::testing

// Helpers for the GoogleTest suite: owning test tensors and seeded random data.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "spatialgrad/parallel.h"
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

// ---- thread-count determinism ----------------------------------------------------------------------------

// The concatenation of the tensors' values, for comparing several outputs at once.
template <class T>
std::vector<T> concatenated(std::initializer_list<const OwnedTensor<T>*> tensors) {
  std::vector<T> all;
  for (const OwnedTensor<T>* t : tensors) all.insert(all.end(), t->storage.begin(), t->storage.end());
  return all;
}

// Runs compute() (returning a std::vector of values) under each thread count and expects the bits of
// every run to equal the first's: results must not depend on the thread count. Restores the default.
template <class Compute>
void expect_same_bits_for_thread_counts(std::initializer_list<int> counts, Compute&& compute) {
  using Values = decltype(compute());
  std::vector<Values> results;
  for (int threads : counts) {
    set_num_threads(threads);
    results.push_back(compute());
  }
  set_num_threads(0);
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(results[i].size(), results[0].size());
    EXPECT_EQ(0, std::memcmp(results[i].data(), results[0].data(), results[0].size() * sizeof(results[0][0])))
        << "threads: run " << i << " differs from run 0";
  }
}

// ---- naive average pooling -------------------------------------------------------------------------------

// Straight from docs/operators.md (Average pooling): output size, window clipping, divisor; in 128-bit
// arithmetic, so the reference does not overflow where the kernels must not either.
struct NaivePool {
  __extension__ typedef __int128 Wide;
  int64_t kh, kw, sh, sw, ph, pw;
  bool ceil_mode, count_include_pad;
  int64_t divisor_override;

  static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil) {
    Wide num = Wide(in) + 2 * Wide(p) - k + (ceil ? s - 1 : 0);
    Wide out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil && (out - 1) * s >= Wide(in) + p) --out;
    return static_cast<int64_t>(out);
  }
  int64_t out_h(int64_t H) const { return out_size(H, kh, sh, ph, ceil_mode); }
  int64_t out_w(int64_t W) const { return out_size(W, kw, sw, pw, ceil_mode); }

  // Calls visit(h, w, 1/divisor) for every input pixel of window (oh, ow).
  template <class Visit>
  void window(int64_t H, int64_t W, int64_t oh, int64_t ow, Visit visit) const {
    Wide h0 = Wide(oh) * sh - ph, w0 = Wide(ow) * sw - pw;
    Wide h1 = std::min(h0 + kh, Wide(H) + ph), w1 = std::min(w0 + kw, Wide(W) + pw);
    const Wide pool = (h1 - h0) * (w1 - w0);
    h0 = std::max<Wide>(h0, 0);
    w0 = std::max<Wide>(w0, 0);
    h1 = std::min<Wide>(h1, H);
    w1 = std::min<Wide>(w1, W);
    if (h0 >= h1 || w0 >= w1) return;
    const Wide div = divisor_override ? divisor_override : (count_include_pad ? pool : (h1 - h0) * (w1 - w0));
    for (int64_t h = int64_t(h0); h < h1; ++h)
      for (int64_t w = int64_t(w0); w < w1; ++w) visit(h, w, 1.0 / static_cast<double>(div));
  }

  // The backward of `planes` (H, W) planes: grad_output g is (planes, out_h, out_w), contiguous.
  std::vector<double> backward(const std::vector<double>& g, int64_t planes, int64_t H, int64_t W) const {
    const int64_t OH = out_h(H), OW = out_w(W);
    std::vector<double> out(static_cast<size_t>(planes * H * W), 0.0);
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          window(H, W, oh, ow, [&](int64_t h, int64_t w, double inv) {
            out[static_cast<size_t>((pl * H + h) * W + w)] += g[static_cast<size_t>((pl * OH + oh) * OW + ow)] * inv;
          });
    return out;
  }
};

}  // namespace spatialgrad::testing

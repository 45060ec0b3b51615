// Pooling windows along one axis, computed once per call and shared by the forward and the backward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "detail/checks.h"
#include "detail/simd.h"

namespace spatialgrad::detail {

// The windows of one axis: window o covers input indices [start[o], end[o]) (clipped to the input); pool[o]
// is its length clipped only at the padded edge (the count_include_pad divisor factor); the windows that
// cover input index i are exactly [first[i], last[i]). Table is std::vector<int64_t> (PoolAxis) or a fixed
// array for the small calls' direct kernels (SmallPoolAxis in avg_pool2d.cpp), filled by fill_pool_axis.
template <class Table>
struct PoolAxisOf {
  int64_t in = 0;   // input length
  int64_t out = 0;  // number of windows
  Table start, end, pool;
  Table first, last;  // backward
  int64_t max_cover = 0;   // max over i of last[i] - first[i]
  int64_t max_window = 0;  // max over o of end[o] - start[o]
};

using PoolAxis = PoolAxisOf<std::vector<int64_t>>;

// Window o covers [o*s - pad, o*s - pad + k) of the padded axis (in + 2*pad long). The arithmetic is in
// 128 bits: with kernel sizes and strides near 2^63 the int64 sums overflow, and the clipped results
// (what the tables keep) always fit. The tables hold at least `out` (start, end, pool) and `in` (first,
// last) entries.
template <class Table>
void fill_pool_axis(PoolAxisOf<Table>& axis, int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad) {
  axis.in = in;
  axis.out = out;
  for (int64_t o = 0; o < out; ++o) {
    const Int128 lo = static_cast<Int128>(o) * stride - pad;
    const Int128 hi = std::min<Int128>(lo + kernel, static_cast<Int128>(in) + pad);
    axis.pool[o] = static_cast<int64_t>(hi - lo);  // <= in + 2 * pad, checked by the caller to fit
    axis.start[o] = static_cast<int64_t>(std::clamp<Int128>(lo, 0, in));
    axis.end[o] = static_cast<int64_t>(std::clamp<Int128>(hi, axis.start[o], in));
    axis.max_window = std::max(axis.max_window, axis.end[o] - axis.start[o]);
  }
  // Window starts and ends are non-decreasing in o, so the covering windows of i form a range
  // that two sweeping pointers find.
  int64_t first = 0, last = 0;
  for (int64_t i = 0; i < in; ++i) {
    while (first < out && axis.end[first] <= i) ++first;
    while (last < out && axis.start[last] <= i) ++last;
    axis.first[i] = first;
    axis.last[i] = std::max(first, last);
    axis.max_cover = std::max(axis.max_cover, axis.last[i] - first);
  }
}

inline PoolAxis make_pool_axis(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad) {
  PoolAxis axis;
  for (auto* table : {&axis.start, &axis.end, &axis.pool}) table->resize(static_cast<size_t>(out));
  for (auto* table : {&axis.first, &axis.last}) table->resize(static_cast<size_t>(in));
  fill_pool_axis(axis, in, out, kernel, stride, pad);
  return axis;
}

// True when the strided width passes below would cost more than the data: their buffers and loops grow
// with the kernel size and the stride (O(k + s) per row), while windows longer than the input or gaps
// wider than it cover at most the input. Such axes take the direct passes (DirectBoxSum, DirectSpread),
// whose cost is the total clipped window length, with the same sums in the same order.
inline bool windows_exceed_input(int64_t in, int64_t kernel, int64_t stride) { return kernel > in || stride > in; }

// The width pass of the forward: window o of the padded row sums P[o*s .. o*s + k - 1], added in
// that order, for o < n_out (P is the row behind `pad` zeros, zeros after it). The sums read the
// stride's phases (P[i*s + r] for a fixed r), so every pass is a unit-stride vector loop; stride 2
// splits P into its two phases in one pass the compiler vectorises too.
template <class Acc>
class StridedBoxSum {
 public:
  StridedBoxSum(int64_t n_in, int64_t n_out, int64_t k, int64_t s, int64_t pad)
      : n_out_(n_out),
        k_(k),
        s_(s),
        phase_len_(n_out + (k - 1) / s),
        padded_(static_cast<size_t>(std::max((n_out - 1) * s + k, pad + n_in)), Acc(0)),
        phases_(s == 1 ? 0 : static_cast<size_t>(std::min(s, k) * phase_len_)),
        input_(padded_.data() + pad) {}

  // Where the caller puts the n_in row values (everything around them stays zero).
  Acc* input() { return input_; }

  SPATIALGRAD_INLINE void run(Acc* __restrict dst) {
    const Acc* p = padded_.data();
    if (s_ == 2 && k_ >= 2) {
      // Both phases in one pass over P; phase 0 is one longer when k is odd.
      Acc* __restrict even = phases_.data();
      Acc* __restrict odd = even + phase_len_;
      const int64_t pairs = n_out_ + (k_ - 2) / 2;
      for (int64_t i = 0; i < pairs; ++i) {
        even[i] = p[2 * i];
        odd[i] = p[2 * i + 1];
      }
      if (k_ % 2 != 0) even[pairs] = p[2 * pairs];
    } else if (s_ > 1) {
      for (int64_t r = 0; r < std::min(s_, k_); ++r) {
        Acc* __restrict phase = phases_.data() + r * phase_len_;
        const int64_t len = n_out_ + (k_ - 1 - r) / s_;
        for (int64_t i = 0; i < len; ++i) phase[i] = p[i * s_ + r];
      }
    }
    auto tap = [&](int64_t t) {  // P[o*s + t] as a row over o
      return s_ == 1 ? p + t : phases_.data() + (t % s_) * phase_len_ + t / s_;
    };
    // The first two taps in one pass (a lone copy of the first would be a memmove call).
    const Acc* __restrict first = tap(0);
    if (k_ == 1) {
      for (int64_t o = 0; o < n_out_; ++o) dst[o] = first[o];
      return;
    }
    const Acc* __restrict second = tap(1);
    for (int64_t o = 0; o < n_out_; ++o) dst[o] = first[o] + second[o];
    for (int64_t t = 2; t < k_; ++t) {
      const Acc* __restrict next = tap(t);
      for (int64_t o = 0; o < n_out_; ++o) dst[o] += next[o];
    }
  }

 private:
  int64_t n_out_, k_, s_, phase_len_;
  std::vector<Acc> padded_, phases_;
  Acc* input_;
};

// The width pass of the backward, the adjoint of StridedBoxSum: x < n_in receives the sum of
// src[o] over the windows o in [0, n_out) that cover it (o*s - pad <= x < o*s - pad + k), added in
// increasing o, or 0 if none does. The windows covering x = q*s + r are o = q + lo[r] .. q + hi[r]
// for every q, so each phase r is a few unit-stride passes over src read with zeros on both sides;
// stride 2 interleaves its two phases in one vector loop. Two input slots, so that a caller can fill
// one while the other is spread: the spread reads its input at offsets the caller's vector stores did
// not write, and such a load waits until those stores reach the cache (no store forwarding).
template <class Acc>
class BoxSpread {
 public:
  BoxSpread(int64_t n_in, int64_t n_out, int64_t k, int64_t s, int64_t pad) : n_in_(n_in), s_(s) {
    int64_t lead = 0, trail = 0;
    for (int64_t r = 0; r < s; ++r) {
      const int64_t count = r < n_in ? (n_in - r + s - 1) / s : 0;
      const int64_t lo = floor_div(r + pad - k, s) + 1, hi = floor_div(r + pad, s);
      phases_.push_back(Phase{count, lo, hi});
      if (count == 0 || lo > hi) continue;
      lead = std::max(lead, -lo);
      trail = std::max(trail, count - 1 + hi - (n_out - 1));
    }
    for (int slot = 0; slot < 2; ++slot) {
      padded_[slot].assign(static_cast<size_t>(lead + n_out + trail), Acc(0));
      input_[slot] = padded_[slot].data() + lead;
    }
    sums_.resize(static_cast<size_t>(s * phases_[0].count));
  }

  // Where the caller puts the n_out window values of slot 0 or 1 (everything around them stays zero).
  Acc* input(int slot) { return input_[slot]; }

  // Spreads the values of `slot` into dst[0, n_in).
  SPATIALGRAD_INLINE void run(int slot, Acc* __restrict dst) {
    const Acc* src = input_[slot];
    if (s_ == 1) {
      const Acc* sums = phase_sums(src, phases_[0], sums_.data());
      for (int64_t x = 0; x < n_in_; ++x) dst[x] = sums[x];
      return;
    }
    const int64_t pitch = phases_[0].count;
    if (s_ == 2) {
      const Acc* __restrict even = phase_sums(src, phases_[0], sums_.data());
      const Acc* __restrict odd = phase_sums(src, phases_[1], sums_.data() + pitch);
      const int64_t pairs = n_in_ / 2;
      for (int64_t q = 0; q < pairs; ++q) {
        dst[2 * q] = even[q];
        dst[2 * q + 1] = odd[q];
      }
      if (n_in_ % 2 != 0) dst[n_in_ - 1] = even[pairs];
      return;
    }
    for (int64_t r = 0; r < s_; ++r) {
      const Phase& ph = phases_[static_cast<size_t>(r)];
      const Acc* sums = phase_sums(src, ph, sums_.data() + r * pitch);
      for (int64_t q = 0; q < ph.count; ++q) dst[q * s_ + r] = sums[q];
    }
  }

 private:
  struct Phase {
    int64_t count, lo, hi;
  };

  // The sums src[q + lo] + ... + src[q + hi] for q < count: computed into `scratch`, or, for a
  // single term, src itself.
  SPATIALGRAD_INLINE const Acc* phase_sums(const Acc* src, const Phase& ph, Acc* __restrict scratch) const {
    if (ph.lo > ph.hi) {
      std::fill(scratch, scratch + ph.count, Acc(0));
      return scratch;
    }
    const Acc* first = src + ph.lo;
    if (ph.lo == ph.hi) return first;
    const Acc* __restrict second = first + 1;
    for (int64_t q = 0; q < ph.count; ++q) scratch[q] = first[q] + second[q];
    for (int64_t j = ph.lo + 2; j <= ph.hi; ++j) {
      const Acc* __restrict next = src + j;
      for (int64_t q = 0; q < ph.count; ++q) scratch[q] += next[q];
    }
    return scratch;
  }

  int64_t n_in_, s_;
  std::vector<Phase> phases_;
  std::vector<Acc> padded_[2], sums_;
  Acc* input_[2] = {nullptr, nullptr};
};

// dst[j] = the sum of src[begin[j] .. end[j]) from +0, in order, for j < count: the direct passes' one loop
// (windows over inputs forward, covering windows over outputs backward).
template <class Acc>
SPATIALGRAD_INLINE void range_sums(const Acc* src, const std::vector<int64_t>& begin, const std::vector<int64_t>& end,
                                   int64_t count, Acc* __restrict dst) {
  for (int64_t j = 0; j < count; ++j) {
    Acc sum = 0;
    for (int64_t i = begin[j]; i < end[j]; ++i) sum += src[i];
    dst[j] = sum;
  }
}

// StridedBoxSum's interface over the window table: window o sums input[start[o] .. end[o]) from +0, in
// order. Padding contributes zeros, which change no sum (the inputs are sums from +0: never -0), so the
// results are those of StridedBoxSum. For axes where windows_exceed_input().
template <class Acc>
class DirectBoxSum {
 public:
  explicit DirectBoxSum(const PoolAxis& axis) : axis_(&axis), input_(static_cast<size_t>(axis.in)) {}

  Acc* input() { return input_.data(); }

  SPATIALGRAD_INLINE void run(Acc* __restrict dst) {
    range_sums(input_.data(), axis_->start, axis_->end, axis_->out, dst);
  }

 private:
  const PoolAxis* axis_;
  std::vector<Acc> input_;
};

// BoxSpread's interface over the window table: x receives the sum of src[o] over its covering windows
// [first[x], last[x]), in increasing o (0 if none). The same results as BoxSpread (src is never -0).
template <class Acc>
class DirectSpread {
 public:
  explicit DirectSpread(const PoolAxis& axis) : axis_(&axis) {
    for (auto& slot : input_) slot.resize(static_cast<size_t>(axis.out));
  }

  Acc* input(int slot) { return input_[slot].data(); }

  SPATIALGRAD_INLINE void run(int slot, Acc* __restrict dst) {
    range_sums(input_[slot].data(), axis_->first, axis_->last, axis_->in, dst);
  }

 private:
  const PoolAxis* axis_;
  std::vector<Acc> input_[2];
};

}  // namespace spatialgrad::detail

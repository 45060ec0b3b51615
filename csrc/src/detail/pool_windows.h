// Pooling windows along one axis, computed once per call and shared by the forward and the backward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace spatialgrad::detail {

struct PoolAxis {
  int64_t in = 0;   // input length
  int64_t out = 0;  // number of windows
  // Window o covers input indices [start[o], end[o]) (clipped to the input); pool[o] is its length
  // clipped only at the padded edge (the count_include_pad divisor factor).
  std::vector<int64_t> start, end, pool;
  // Backward: the windows that cover input index i are exactly [first[i], last[i]).
  std::vector<int64_t> first, last;
  int64_t max_cover = 0;  // max over i of last[i] - first[i]
};

inline PoolAxis make_pool_axis(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad) {
  PoolAxis axis;
  axis.in = in;
  axis.out = out;
  axis.start.resize(out);
  axis.end.resize(out);
  axis.pool.resize(out);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t lo = o * stride - pad;
    const int64_t hi = std::min(lo + kernel, in + pad);
    axis.pool[o] = hi - lo;
    axis.start[o] = std::max<int64_t>(lo, 0);
    axis.end[o] = std::max(std::min<int64_t>(hi, in), axis.start[o]);
  }
  // Window starts and ends are non-decreasing in o, so the covering windows of i form a range
  // that two sweeping pointers find.
  axis.first.resize(in);
  axis.last.resize(in);
  int64_t first = 0, last = 0;
  for (int64_t i = 0; i < in; ++i) {
    while (first < out && axis.end[first] <= i) ++first;
    while (last < out && axis.start[last] <= i) ++last;
    axis.first[i] = first;
    axis.last[i] = std::max(first, last);
    axis.max_cover = std::max(axis.max_cover, axis.last[i] - first);
  }
  return axis;
}

// dst[x] = src[x] + src[x + 1] + ... + src[x + k - 1] for x in [0, n): k contiguous passes the
// compiler vectorises (src holds n + k - 1 values).
template <class Acc>
inline void box_sum(const Acc* src, int64_t n, int64_t k, Acc* dst) {
  for (int64_t x = 0; x < n; ++x) dst[x] = src[x];
  for (int64_t t = 1; t < k; ++t) {
    const Acc* shifted = src + t;
    for (int64_t x = 0; x < n; ++x) dst[x] += shifted[x];
  }
}

}  // namespace spatialgrad::detail

// Linear interpolation tables along one axis (PyTorch's area_pixel_compute_scale /
// area_pixel_compute_source_index), computed once per call and shared by the forward and the
// backward of bilinear upsampling.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace spatialgrad::detail {

// Source-coordinate step per output index (PyTorch's area_pixel_compute_scale), in double for every
// dtype. A scale that is not > 0 (also NaN) means "not given". PyTorch 1.13 rounds the ratio to float for
// float32 and PyTorch 2 also computes the coordinates in float (opmath_t): a coordinate then carries an
// error of up to 2^-24 of its size, and a weight with it, which moved results of 64 -> 128 rows by up to
// 1.3e-5 on PyTorch 2.6. Ours are exact to double precision: the only float32 rounding of a weight is
// its own.
inline double linear_ratio(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  return scale > 0 ? 1.0 / scale : static_cast<double>(in) / static_cast<double>(out);
}

// Source coordinate of output index d (area_pixel_compute_source_index), in double; never negative.
inline double linear_source(double ratio, int64_t d, bool align_corners) {
  if (align_corners) return ratio * static_cast<double>(d);
  const double src = ratio * (static_cast<double>(d) + 0.5) - 0.5;
  return src < 0 ? 0.0 : src;
}

// Forward: output o = l0[o] * input[i0[o]] + l1[o] * input[i1[o]].
// Backward (gather form): input i = sum over e in [start[i], start[i + 1]) of weight[e] * output[source[e]],
// where the sources of i are the outputs whose stencil touches it (a contiguous range of o, both
// taps listed separately when i0 == i1, as the forward uses both).
template <class Acc>
struct LinearAxis {
  int64_t in = 0, out = 0;
  std::vector<int64_t> i0, i1;
  std::vector<Acc> l0, l1;
  std::vector<int64_t> start, source;
  std::vector<Acc> weight;
  int64_t max_sources = 0;  // max over i of start[i + 1] - start[i]
};

template <class Acc>
LinearAxis<Acc> make_linear_axis(int64_t in, int64_t out, bool align_corners, double scale) {
  LinearAxis<Acc> axis;
  axis.in = in;
  axis.out = out;
  axis.i0.resize(out);
  axis.i1.resize(out);
  axis.l0.resize(out);
  axis.l1.resize(out);
  const double ratio = linear_ratio(in, out, align_corners, scale);
  const double last = static_cast<double>(in - 1);
  for (int64_t o = 0; o < out; ++o) {
    if (in == out) {  // same size: a copy, whatever the ratio says
      axis.i0[o] = axis.i1[o] = o;
      axis.l0[o] = Acc(1);
      axis.l1[o] = Acc(0);
      continue;
    }
    const double src = linear_source(ratio, o, align_corners);
    // A huge ratio (tiny user scale) can push src to +Inf: compare before converting, so the
    // integer conversion is always in range. src is never NaN here.
    const int64_t i0 = src < last ? static_cast<int64_t>(src) : in - 1;
    const double frac = src - static_cast<double>(i0);
    // Rounded to Acc first, then l0 = 1 - l1 from the rounded value (PyTorch's order).
    const Acc l1 = static_cast<Acc>(frac > 0 ? std::min(frac, 1.0) : 0.0);
    axis.i0[o] = i0;
    axis.i1[o] = i0 + (i0 < in - 1 ? 1 : 0);
    axis.l1[o] = l1;
    axis.l0[o] = static_cast<Acc>(1.0 - static_cast<double>(l1));
  }
  // Transpose into per-input source lists (counting sort, stable in o).
  axis.start.assign(static_cast<size_t>(in + 1), 0);
  for (int64_t o = 0; o < out; ++o) {
    ++axis.start[axis.i0[o] + 1];
    ++axis.start[axis.i1[o] + 1];
  }
  for (int64_t i = 0; i < in; ++i) {
    axis.max_sources = std::max(axis.max_sources, axis.start[i + 1]);
    axis.start[i + 1] += axis.start[i];
  }
  axis.source.resize(static_cast<size_t>(2 * out));
  axis.weight.resize(static_cast<size_t>(2 * out));
  std::vector<int64_t> fill(axis.start.begin(), axis.start.end() - 1);
  for (int64_t o = 0; o < out; ++o) {
    int64_t e = fill[axis.i0[o]]++;
    axis.source[e] = o;
    axis.weight[e] = axis.l0[o];
    e = fill[axis.i1[o]]++;
    axis.source[e] = o;
    axis.weight[e] = axis.l1[o];
  }
  return axis;
}

// The number of inputs that some output reads (those with sources in the gather form).
template <class Acc>
int64_t read_inputs(const LinearAxis<Acc>& axis) {
  int64_t count = 0;
  for (int64_t i = 0; i < axis.in; ++i) count += axis.start[i + 1] > axis.start[i] ? 1 : 0;
  return count;
}

}  // namespace spatialgrad::detail

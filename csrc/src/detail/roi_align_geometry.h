// RoIAlign sample geometry (docs/operators.md, RoIAlign), shared by the forward and the backward: for every ROI, bin
// and axis, the bilinear taps of the samples that contribute, computed once per call. A sample (iy, ix) contributes iff
// its y tap and its x tap both exist, with corner weights (products of the axis weights) w1 = hy*hx at (y.lo, x.lo), w2
// = hy*lx at (y.lo, x.hi), w3 = ly*hx at (y.hi, x.lo), w4 = ly*lx at (y.hi, x.hi): the separable form of the bilinear
// rule.
//
// Coordinates are computed in the accumulation type with torchvision's operation order (torchvision
// computes in the input dtype), so float32 sample positions and adaptive sample counts match it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "convert.h"
#include "detail/checks.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/roi_align.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail {

// One sample along one axis: its two neighbouring pixels (equal at the far edge) and their weights.
template <class Acc>
struct RoiTap {
  int64_t lo, hi;
  Acc w_lo, w_hi;  // 1 - l and l
};

// docs/operators.md (RoIAlign) bilinear rule along an axis of `size` pixels; false when the sample contributes nothing.
template <class Acc>
inline bool bilinear_tap(Acc coord, int64_t size, RoiTap<Acc>& tap) {
  // !(in range) so that NaN takes this branch; an empty axis has no pixel to sample.
  if (!(coord >= Acc(-1) && coord <= static_cast<Acc>(size)) || size <= 0) return false;
  if (coord <= Acc(0)) coord = Acc(0);
  int64_t lo = static_cast<int64_t>(coord);
  int64_t hi = lo + 1;
  if (lo >= size - 1) {
    lo = hi = size - 1;
    coord = static_cast<Acc>(lo);
  }
  const Acc l = coord - static_cast<Acc>(lo);
  tap = RoiTap<Acc>{lo, hi, Acc(1) - l, l};
  return true;
}

// One axis of one box: sample i of bin p sits at start + p*bin + (i + 0.5)*bin/grid.
template <class Acc>
struct RoiAxis {
  Acc start = 0, bin = 0;
  double grid = 0;  // samples per bin (integer valued); 0 = the box has no samples
};

template <class Acc>
inline RoiAxis<Acc> roi_axis(Acc corner1, Acc corner2, Acc scale, bool aligned, int64_t pooled,
                             int64_t sampling_ratio) {
  const Acc offset = aligned ? Acc(0.5) : Acc(0);
  RoiAxis<Acc> axis;
  axis.start = corner1 * scale - offset;
  Acc size = (corner2 * scale - offset) - axis.start;
  if (!aligned) size = std::max(size, Acc(1));  // torchvision forces malformed boxes to 1 pixel (NaN stays NaN)
  axis.bin = size / static_cast<Acc>(pooled);
  // NaN/Inf corners (or a zero pooled size) give a non-finite start or bin: no samples, never UB.
  if (!std::isfinite(axis.start) || !std::isfinite(axis.bin)) return RoiAxis<Acc>{};
  // Adaptive: ceil(size / pooled), which is 0 (no samples) for an empty aligned box, as in torchvision.
  axis.grid = sampling_ratio > 0 ? static_cast<double>(sampling_ratio) : static_cast<double>(std::ceil(axis.bin));
  if (!(axis.grid > 0)) axis.grid = 0;
  return axis;
}

// Sample indices of bin p that can lie in [-1, size]: found in double and widened by the rounding error
// of the Acc coordinates, so the exact per-sample test still decides, while a box much larger than the
// image (a huge adaptive grid) costs only its samples near the image. Empty range: first > last.
constexpr double kMaxSampleIndex = 9007199254740991.0;  // 2^53 - 1

template <class Acc>
inline void candidate_samples(const RoiAxis<Acc>& axis, Acc base, int64_t size, int64_t& first, int64_t& last) {
  first = 1;
  last = 0;
  const double step = static_cast<double>(axis.bin) / axis.grid;
  double lo = 0, hi = axis.grid - 1;
  // The common case first: a bin inside [0, size - 1] has every sample in [-1, size] (its first sample is
  // at base + step / 2 >= 0, its last at base + bin - step / 2 <= size - 1; rounding moves them by far less
  // than a pixel). The general test below costs several divisions; the table of a call was 15% of a
  // 3-channel forward (measured).
  const double b0 = static_cast<double>(base);
  if (step > 0 && b0 >= 0 && b0 + static_cast<double>(axis.bin) <= static_cast<double>(size - 1)) {
    first = 0;
    last = static_cast<int64_t>(std::min(hi, kMaxSampleIndex));
    return;
  }
  if (step != 0) {
    const double b = static_cast<double>(base);
    double from = (-1.0 - b) / step - 0.5, to = (static_cast<double>(size) - b) / step - 0.5;
    if (step < 0) std::swap(from, to);
    const double eps = std::numeric_limits<Acc>::epsilon();
    // Beyond 1024 sample spacings of rounding error (coordinates ~1e9 and up in float32) samples
    // further out are not looked at.
    const double slack =
        std::min(2.0 + 8.0 * eps * (std::fabs(b) + static_cast<double>(size) + 2.0) / std::fabs(step), 1024.0);
    from = std::ceil(from - slack);
    to = std::floor(to + slack);
    if (from > lo) lo = from;  // comparisons leave lo/hi unchanged for NaN
    if (to < hi) hi = to;
  } else {
    // A zero-size bin: every sample sits at `base`, so all or none contribute.
    RoiTap<Acc> tap;
    if (!bilinear_tap(base, size, tap)) return;
  }
  // Indices from 2^53 on are not distinguishable in double (nor in the sample coordinates): such
  // samples of astronomically large boxes are not looked at.
  hi = std::min(hi, kMaxSampleIndex);
  if (!(lo <= hi)) return;
  first = static_cast<int64_t>(lo);
  last = static_cast<int64_t>(hi);
}

// Pixels touched by samples: rows [row0, row1) x columns [col0, col1); empty when row0 >= row1.
struct RoiRegion {
  int64_t row0 = 0, row1 = 0, col0 = 0, col1 = 0;
  bool empty() const { return row0 >= row1 || col0 >= col1; }
  int64_t rows() const { return empty() ? 0 : row1 - row0; }
  int64_t cols() const { return empty() ? 0 : col1 - col0; }
};

template <class Acc>
struct RoiTable {
  int64_t pooled_h = 0, pooled_w = 0;
  std::vector<Acc> count;  // per ROI: the divisor max(gh * gw, 1)
  // Taps of bin ph of ROI k: y_taps[y_first[k*PH + ph] .. y_first[k*PH + ph + 1]); same for x with PW.
  std::vector<int64_t> y_first, x_first;
  std::vector<RoiTap<Acc>> y_taps, x_taps;
  // ROIs grouped by image in their original order: order[image_first[b] .. image_first[b + 1]).
  std::vector<int64_t> image_first, order;
  std::vector<RoiRegion> region;      // per image: the pixels any of its samples touches
  std::vector<RoiRegion> roi_region;  // per ROI: the pixels its samples touch (empty: none contributes)
  int64_t samples = 0;                // contributing samples over all ROIs (a work estimate)
};

// Appends the taps of bin p of one axis; widens [px_lo, px_hi] by the pixels they touch.
template <class Acc>
inline void append_taps(const RoiAxis<Acc>& axis, int64_t p, int64_t size, std::vector<RoiTap<Acc>>& taps,
                        int64_t& px_lo, int64_t& px_hi) {
  if (axis.grid == 0) return;
  const Acc base = axis.start + static_cast<Acc>(p) * axis.bin;
  const Acc grid = static_cast<Acc>(std::min(axis.grid, static_cast<double>(std::numeric_limits<Acc>::max())));
  int64_t first, last;
  candidate_samples(axis, base, size, first, last);
  for (int64_t i = first; i <= last; ++i) {
    const Acc coord = base + static_cast<Acc>(static_cast<double>(i) + 0.5) * axis.bin / grid;
    // Written in place: a tap built on the stack and copied in took 40% of the table's time (its 16-byte
    // copy read two 8-byte stores: a store-forwarding stall).
    RoiTap<Acc>& tap = taps.emplace_back();
    if (!bilinear_tap(coord, size, tap)) {
      taps.pop_back();
      continue;
    }
    px_lo = std::min(px_lo, tap.lo);
    px_hi = std::max(px_hi, tap.hi);
  }
}

// Limits of the sample grid of one call, over all ROIs: taps per axis (memory: tens of bytes each) and
// sample points (work: each is read for every channel). Real models stay far below them (512 ROIs, 7x7
// bins, 800-pixel boxes: ~4e5 taps, ~3e8 points); a sampling_ratio in the millions reaches them (so
// does a zero-size bin, whose samples all sit at one place), where torchvision would loop for hours.
constexpr double kMaxTapsPerAxis = 16777216.0;      // 2^24
constexpr double kMaxSamplePoints = 68719476736.0;  // 2^36

// Candidate samples of all bins of one axis of a ROI (an upper bound of its taps), counted before any
// is stored.
template <class Acc>
double planned_taps(const RoiAxis<Acc>& axis, int64_t pooled, int64_t size) {
  if (axis.grid == 0) return 0;
  double count = 0;
  for (int64_t p = 0; p < pooled; ++p) {
    int64_t first, last;
    candidate_samples(axis, axis.start + static_cast<Acc>(p) * axis.bin, size, first, last);
    if (first <= last) count += static_cast<double>(last - first) + 1;
  }
  return count;
}

// `boxes` (K, 5) of storage type T; `image` holds the validated batch index of every ROI. Raises (naming
// `op`) when the sample grid exceeds kMaxTapsPerAxis or kMaxSamplePoints.
template <class T, class Acc = AccType<T>>
RoiTable<Acc> build_roi_table(const char* op, const TensorView& boxes, const std::vector<int64_t>& image,
                              int64_t num_images, int64_t height, int64_t width, const RoiAlignParams& params) {
  RoiTable<Acc> table;
  const int64_t num_rois = boxes.size(0), ph_count = params.pooled_height, pw_count = params.pooled_width;
  table.pooled_h = ph_count;
  table.pooled_w = pw_count;
  table.count.resize(static_cast<size_t>(num_rois));
  table.y_first.reserve(static_cast<size_t>(num_rois * ph_count + 1));
  table.x_first.reserve(static_cast<size_t>(num_rois * pw_count + 1));
  table.region.assign(static_cast<size_t>(num_images), RoiRegion{});
  table.roi_region.assign(static_cast<size_t>(num_rois), RoiRegion{});
  std::vector<bool> seen(static_cast<size_t>(num_images), false);
  const T* data = boxes.data<T>();
  const int64_t s0 = boxes.stride(0), s1 = boxes.stride(1);
  const Acc scale = static_cast<Acc>(params.spatial_scale);
  double planned_y = 0, planned_x = 0, planned_points = 0;
  for (int64_t k = 0; k < num_rois; ++k) {
    const T* box = data + k * s0;
    const auto corner = [&](int64_t j) { return load_as<Acc>(box[j * s1]); };
    RoiAxis<Acc> x = roi_axis(corner(1), corner(3), scale, params.aligned, pw_count, params.sampling_ratio);
    RoiAxis<Acc> y = roi_axis(corner(2), corner(4), scale, params.aligned, ph_count, params.sampling_ratio);
    if (x.grid == 0 || y.grid == 0) x.grid = y.grid = 0;
    const double ny_planned = planned_taps(y, ph_count, height), nx_planned = planned_taps(x, pw_count, width);
    planned_y += ny_planned;
    planned_x += nx_planned;
    planned_points += ny_planned * nx_planned;
    SG_CHECK(planned_y <= kMaxTapsPerAxis && planned_x <= kMaxTapsPerAxis && planned_points <= kMaxSamplePoints, op,
             "(): expected a sampling grid of at most 2^24 samples per axis and 2^36 sample points over all ROIs, "
             "but sampling_ratio ",
             params.sampling_ratio, " gives ", planned_y, " x ", planned_x, " (", planned_points, " points) by ROI ", k,
             "; use a smaller sampling_ratio");
    table.count[static_cast<size_t>(k)] = static_cast<Acc>(
        std::min(std::max(y.grid * x.grid, 1.0), static_cast<double>(std::numeric_limits<Acc>::max())));
    int64_t row_lo = height, row_hi = -1, col_lo = width, col_hi = -1;
    const size_t y_before = table.y_taps.size(), x_before = table.x_taps.size();
    for (int64_t ph = 0; ph < ph_count; ++ph) {
      table.y_first.push_back(static_cast<int64_t>(table.y_taps.size()));
      append_taps(y, ph, height, table.y_taps, row_lo, row_hi);
    }
    for (int64_t pw = 0; pw < pw_count; ++pw) {
      table.x_first.push_back(static_cast<int64_t>(table.x_taps.size()));
      append_taps(x, pw, width, table.x_taps, col_lo, col_hi);
    }
    const int64_t ny = static_cast<int64_t>(table.y_taps.size() - y_before);
    const int64_t nx = static_cast<int64_t>(table.x_taps.size() - x_before);
    table.samples += ny * nx;
    if (ny == 0 || nx == 0) {
      // No sample contributes: drop the taps of the other axis too, so kernels never touch them.
      table.y_taps.resize(y_before);
      table.x_taps.resize(x_before);
      std::fill(table.y_first.end() - ph_count, table.y_first.end(), static_cast<int64_t>(y_before));
      std::fill(table.x_first.end() - pw_count, table.x_first.end(), static_cast<int64_t>(x_before));
      continue;
    }
    table.roi_region[static_cast<size_t>(k)] = RoiRegion{row_lo, row_hi + 1, col_lo, col_hi + 1};
    const size_t b = static_cast<size_t>(image[static_cast<size_t>(k)]);
    RoiRegion& r = table.region[b];
    if (!seen[b]) {
      r = RoiRegion{row_lo, row_hi + 1, col_lo, col_hi + 1};
      seen[b] = true;
    } else {
      r = RoiRegion{std::min(r.row0, row_lo), std::max(r.row1, row_hi + 1), std::min(r.col0, col_lo),
                    std::max(r.col1, col_hi + 1)};
    }
  }
  table.y_first.push_back(static_cast<int64_t>(table.y_taps.size()));
  table.x_first.push_back(static_cast<int64_t>(table.x_taps.size()));
  // Stable grouping by image (counting sort), so each image's ROIs keep their order.
  table.image_first.assign(static_cast<size_t>(num_images + 1), 0);
  for (int64_t b : image) ++table.image_first[static_cast<size_t>(b + 1)];
  for (int64_t b = 0; b < num_images; ++b) table.image_first[b + 1] += table.image_first[b];
  table.order.resize(static_cast<size_t>(num_rois));
  std::vector<int64_t> next(table.image_first.begin(), table.image_first.end() - 1);
  for (int64_t k = 0; k < num_rois; ++k) table.order[static_cast<size_t>(next[image[k]]++)] = k;
  return table;
}

}  // namespace spatialgrad::detail

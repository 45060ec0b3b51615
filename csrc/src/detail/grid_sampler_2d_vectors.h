// The plane strategy's point vectors (float and double planes whose offsets fit int32): a vector of the
// level's width holds consecutive points of a block, their taps and weights are computed in registers, and
// every channel's taps are gathered for the whole vector and combined there (PyTorch's CPU kernel has the
// same shape). The tables of grid_sampler_2d_planes.h store a block's taps and weights and read them back
// per channel: with one to three channels those passes cost as much as the gathers.
//
// Where a vector's points all lie inside the image and the rows are contiguous, two horizontally adjacent
// taps are read as one 64-bit pair (simd.h gather_pairs): half the loads of gathering each tap.
//
// Every value is computed with the tables' formulas in the same order (grid_sampler_2d_planes.h, which
// follows the tile sweeps), outside taps read 0, so the bits are the tables' at every level.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "grid_sampler_2d_coords.h"
#include "grid_sampler_2d_planes.h"  // PlaneGeometry, kBlock
#include "simd.h"

namespace spatialgrad::detail::grid_sampler {

// Where a vector kernel writes: channel c's value of point i at plane + c * channel_step + offset[i]; the
// offsets are one run (offset[i] = offset[0] + i) when `straight`.
template <class T>
struct PointOutputs {
  T* plane;
  int64_t channel_step;
  const int64_t* offset;
  bool straight;

  // Points [i, i + lanes) of channel c (with `straight`, offset[0] is the only offset read).
  template <class V>
  SPATIALGRAD_INLINE void store(int64_t c, int64_t i, int64_t lanes, const V& v) const {
    T* base = plane + c * channel_step;
    if (straight && lanes == kLanesOf<V>) return store_u(base + offset[0] + i, v);
    for (int64_t k = 0; k < lanes; ++k) base[straight ? offset[0] + i + k : offset[i + k]] = v[k];
  }
};

// The input planes of a batch: channel c at plane + c * channel_step.
template <class T>
struct PointInputs {
  const T* plane;
  int64_t channel_step;
  int64_t channels;
  const T* channel(int64_t c) const { return plane + c * channel_step; }
};

// Smooth grids (flows, crops, resizes) walk the planes' rows, and a gather does not lead the hardware prefetchers:
// each vector would wait for the new lines it reads. The forwards request the row this far ahead of lane 0's pixel
// (where the vectors a few steps later read); nearest only when that pixel is near the previous vector's (RowWalk:
// at random points the requests took load slots its gathers need, 3%). 2 threads, core calls, nearest flow
// (4,3,512,512) reflection align_corners 2.6-3.0 -> 2.0-2.5 ms (256 bytes ahead 2.4-2.6, 2048 1.6 but (4,3,512,
// 384) rows slower), (2,3,1024,1024) 6.3 -> 4.3 ms.
template <class T>
constexpr int64_t kRowAheadValues = 1024 / static_cast<int64_t>(sizeof(T));

// Whether each vector's first pixel lies within kRowAheadValues of the previous vector's, give or take two rows
// (a flow's vectors step between neighbouring rows as the lanes' rows change).
template <class T>
struct RowWalk {
  int64_t reach;
  int64_t last = std::numeric_limits<int32_t>::min();
  explicit RowWalk(const PlaneGeometry& g) : reach(kRowAheadValues<T> + 2 * int64_t{g.s2}) {}
  SPATIALGRAD_INLINE bool near(int64_t first) {
    const int64_t step = first - last;
    last = first;
    return step >= -reach && step <= reach;
  }
};

// Loads up to a vector of values from p (lanes < the vector's: the rest filled with `fill`).
template <class V, class Acc>
SPATIALGRAD_INLINE void load_lanes(const Acc* p, int64_t lanes, Acc fill, V& v) {
  if (lanes == kLanesOf<V>) {
    load_u(v, p);
    return;
  }
  for (int k = 0; k < kLanesOf<V>; ++k) v[k] = k < lanes ? p[k] : fill;
}

// Where a block's point vectors read their source coordinates: the grid's dense (x, y) pairs, or two rows
// of grid values (a strided grid), each mapped by unnormalize() (source_coordinates' formula for zeros
// padding), then clipped to the image for border padding; or, when `mapped`, two rows of coordinates
// computed already (reflection padding, by source_coordinates).
template <class T>
struct PointCoordinates {
  const T* pairs = nullptr;  // the block's (x, y) pairs, or null: the rows x, y
  const T* x = nullptr;
  const T* y = nullptr;
  bool mapped = false;
  bool clip = false;
  T scale_x = 1, scale_y = 1, shift = 0, high_x = 0, high_y = 0;

  // The coordinates of points [i, i + lanes) of the block; lanes past the end read `fill` (a grid value or a
  // coordinate far outside the image).
  template <class V>
  SPATIALGRAD_INLINE void load(int64_t i, int64_t lanes, T fill, V& cx, V& cy) const {
    constexpr int64_t kLanes = kLanesOf<V>;
    if (pairs != nullptr && lanes == kLanes) {
      V a, b;
      load_u(a, pairs + 2 * i);
      load_u(b, pairs + 2 * i + kLanes);
      deinterleave(a, b, cx, cy);
    } else if (pairs != nullptr) {
      for (int64_t k = 0; k < kLanes; ++k) {
        cx[k] = k < lanes ? pairs[2 * (i + k)] : fill;
        cy[k] = k < lanes ? pairs[2 * (i + k) + 1] : fill;
      }
    } else {
      load_lanes(x + i, lanes, fill, cx);
      load_lanes(y + i, lanes, fill, cy);
    }
    if (mapped) return;
    cx = (cx + 1) * scale_x - shift;  // x - 0 == x, also for -0: the bits of unnormalize() when aligned
    cy = (cy + 1) * scale_y - shift;
    if (clip) {  // clip_to(), one comparison per select (simd.h)
      const V x_below = cx < high_x ? cx : V{} + high_x, y_below = cy < high_y ? cy : V{} + high_y;
      cx = cx > T(0) ? x_below : V{};
      cy = cy > T(0) ? y_below : V{};
    }
  }
};


// The int32 lanes of an integral-valued vector whose lanes are all within int32 (selected before).
template <class V>
SPATIALGRAD_INLINE void to_index(const V& v, IndexVecOf<V>& index) {
  index = __builtin_convertvector(v, IndexVecOf<V>);
}

// index = y * s2 + x * s3 where `inside` (a mask of -1 or 0 lanes), else -1: uint32 arithmetic, as
// PlaneGeometry::index.
template <class IV>
SPATIALGRAD_INLINE void pixel_index(const IV& y, const IV& x, const PlaneGeometry& g, const IV& inside, IV& index) {
  using U = Vec<uint32_t, static_cast<int>(sizeof(IV))>;
  const U at = reinterpret_cast<const U&>(y) * static_cast<uint32_t>(g.s2) +
               reinterpret_cast<const U&>(x) * static_cast<uint32_t>(g.s3);
  index = reinterpret_cast<const IV&>(at) | ~inside;
}

// inside = -1 where 0 <= v < size, else 0, in every lane of an int32 vector (as PlaneGeometry's inside()).
template <class IV>
SPATIALGRAD_INLINE void lanes_inside(const IV& v, int32_t size, IV& inside) {
  // The sign bit of v | (size - 1 - v) is set exactly when v < 0 or v > size - 1: integer arithmetic, no
  // comparison (GCC folds two comparisons of one value into a mask it lowers lane by lane; see simd.h).
  inside = ~((v | (size - 1 - v)) >> 31);
}

// The int32 index of an integral coordinate vector where it lies in [low, high), else `outside` (NaN too):
// one comparison per select (see simd.h on 64-byte comparisons).
template <class V>
SPATIALGRAD_INLINE void index_within(const V& v, ElementOf<V> low, ElementOf<V> high, int32_t outside,
                                     IndexVecOf<V>& index) {
  const V away = V{} + static_cast<decltype(low)>(outside);
  V kept = v >= low ? v : away;
  kept = kept < high ? kept : away;
  to_index(kept, index);
}

// ---- bilinear ----------------------------------------------------------------------------------------

// A vector of points' nw corners and their distances from them, as PlaneBilinear::fill computes them.
template <class V>
struct BilinearAxes {
  using IV = IndexVecOf<V>;
  V tx, ty;  // the distances from the nw corner
  IV x, y;   // the nw corner's column and row; -2 on an axis where no corner is inside

  template <class Isa>
  SPATIALGRAD_INLINE BilinearAxes(Isa isa, const V& cx, const V& cy, const PlaneGeometry& g) {
    using Acc = ElementOf<V>;
    V x0, y0;
    floor_lanes(isa, cx, x0);
    floor_lanes(isa, cy, y0);
    tx = cx - x0;
    ty = cy - y0;
    // A point whose nw corner is not within a pixel of the image reads no corner (its axes are tested one at a
    // time: a corner is read only when both of its axes are inside, so the indices are PlaneBilinear's).
    index_within(x0, Acc(-1), static_cast<Acc>(g.W), -2, x);
    index_within(y0, Acc(-1), static_cast<Acc>(g.H), -2, y);
  }
};

// The four corners of a vector of points and their weights, as PlaneBilinear::fill computes them. (The axes are
// not kept: the forward does not read them, and GCC 14 kept a struct's unread vectors on the stack.)
template <class V>
struct BilinearVector {
  using IV = IndexVecOf<V>;
  V w[4];        // nw, ne, sw, se
  IV index[4];   // -1 outside the image
  bool paired;   // every corner inside, unit column stride: corners read in pairs from index[0] and index[2]
  bool windowed;  // paired, and each row's pairs lie in one window (find_pair_window): the lower row's window
                  // starts a row (s2) after the upper's, with the same offsets
  int32_t window = 0;  // the upper row's window start
  IV offset;       // the lanes' offsets in their row's window
  int64_t row_step;  // s2

  template <class Isa>
  SPATIALGRAD_INLINE BilinearVector(Isa isa, const V& cx, const V& cy, const PlaneGeometry& g, bool windows) {
    using Acc = ElementOf<V>;
    const BilinearAxes<V> a(isa, cx, cy, g);
    const V tx = a.tx, ty = a.ty, ex = 1 - tx, sy = 1 - ty;
    const IV x = a.x, y = a.y;
    w[0] = sy * ex;
    w[1] = sy * tx;
    w[2] = ty * ex;
    w[3] = ty * tx;
    IV x_in, x1_in, y_in, y1_in;
    lanes_inside(x, g.W, x_in);
    lanes_inside(IV(x + 1), g.W, x1_in);
    lanes_inside(y, g.H, y_in);
    lanes_inside(IV(y + 1), g.H, y1_in);
    pixel_index(y, x, g, IV(x_in & y_in), index[0]);
    pixel_index(y, IV(x + 1), g, IV(x1_in & y_in), index[1]);
    pixel_index(IV(y + 1), x, g, IV(x_in & y1_in), index[2]);
    pixel_index(IV(y + 1), IV(x + 1), g, IV(x1_in & y1_in), index[3]);
    paired = std::is_same_v<Acc, float> && g.s3 == 1 && all_set(isa, IV(x_in & x1_in & y_in & y1_in));
    // Both windows inside the plane: the upper one ends a row before the plane does.
    const int64_t upper_extent = int64_t{g.H - 2} * g.s2 + g.W;
    windowed = windows && paired && find_pair_window(isa, index[0], upper_extent, window, offset);
    row_step = g.s2;
  }

  // The four corners of one channel's plane.
  template <class Isa, class T>
  SPATIALGRAD_INLINE void corners(Isa isa, const T* plane, V (&v)[4]) const {
    if constexpr (std::is_same_v<T, float>) {
      if (windowed) {
        window_pairs(isa, plane + window, offset, v[0], v[1]);
        window_pairs(isa, plane + window + row_step, offset, v[2], v[3]);
        return;
      }
      if (paired) {
        gather_pairs(isa, plane, index[0], v[0], v[1]);
        gather_pairs(isa, plane, index[2], v[2], v[3]);
        return;
      }
    }
    for (int k = 0; k < 4; ++k) masked_gather(isa, plane, index[k], v[k]);
  }

  // Prefetches the lines corners(plane) will read: each row's window (two vectors' worth of floats), or the
  // nw and sw corners of every lane (upper, lower: index[0] and index[2] as stored lanes; a lane outside the
  // image prefetches a harmless address, and a prefetch never faults).
  template <class T>
  SPATIALGRAD_INLINE void prefetch_corners(const T* plane, const int32_t* upper, const int32_t* lower) const {
    constexpr int kLanes = kLanesOf<V>;
    if (windowed) {
      for (const T* row : {plane + window, plane + window + row_step}) {
        prefetch(row);
        prefetch(row + 2 * kLanes - 1);
      }
      return;
    }
    for (int k = 0; k < kLanes; ++k) {
      prefetch(plane + upper[k]);
      prefetch(plane + lower[k]);
    }
  }
};

// Whether a forward block's sweep keeps testing its vectors for windows (find_pair_window): not once its first
// kTrials tested vectors all failed the test. Random points (pairs spread over the plane) fail it on every
// vector, while a flow's vectors pass it about every other time (the others straddle two rows). 2 threads, core
// calls: (8,1,256,256) uniform 0.50 -> 0.46 ms (0.46 without the test), (8,3,256,256) 0.99-1.26 -> 0.93-1.03,
// flows unchanged (0.30 ms; 0.37 without the test; stopping after 2 misses in a row instead: 0.36). (The fused
// backward, bound by its scatter, measured no difference: it tests every vector.)
struct WindowTrials {
  static constexpr int kTrials = 4;
  bool trying;
  int tested = 0, hits = 0;
  explicit WindowTrials(bool windows) : trying(windows) {}
  template <class Vector>
  SPATIALGRAD_INLINE void record(const Vector& p) {
    if (!trying || !p.paired || tested == kTrials) return;
    ++tested;
    hits += p.windowed;
    trying = hits > 0 || tested < kTrials;
  }
};

// The forward of `count` points (source coordinates as PlaneBilinear::build computes them) over every channel:
// out = v0 * w0 + v1 * w1 + v2 * w2 + v3 * w3, as PlaneBilinear::combine.
template <class Isa, class T>
SG_SIMD_KERNEL void bilinear_vectors_forward(Isa isa, PointCoordinates<T> at, int64_t count, PlaneGeometry g,
                                             PointInputs<T> in, PointOutputs<T> out) {
  using V = Vec<T, Isa::kVecBytes>;
  constexpr int64_t kLanes = kLanesOf<V>;
  // Windows (find_pair_window) where their test pays: at AVX2 (eight lanes, cheaper pair gathers) a single
  // channel read through windows ran 5% slower ((8,1,256,256), a flow grid, 2 threads: 0.50 -> 0.53 ms).
  const bool windows = Isa::kLevel == SimdLevel::kAvx512 || in.channels > 1;
  // Many channels of planes beyond the L2 cache: each channel's corners are misses at random addresses 64 KiB
  // or more apart, which no hardware prefetcher follows, and the gathers wait for them one channel at a time;
  // prefetched kPrefetchChannels ahead, they overlap. (2,256,128,128) with 2048 points (PointRend), 2 threads,
  // core call: 4.2 -> 2.2 ms (AVX2 5.2 -> 2.1); (1,512,128,128), 1024 points: 2.0 -> 1.0 ms; 4 MiB of planes a
  // batch (256 of 64x64) and fewer than 32 channels: no gain.
  constexpr int64_t kPrefetchChannels = 8;
  const bool prefetching = in.channels >= 32 && in.channels * in.channel_step * int64_t{sizeof(T)} >= (int64_t{8} << 20);
  // Two copies of the sweep, with and without the prefetches: the index rows exist only where they are written
  // (GCC 12 warned of them as maybe unread). Declared once outside the loop instead, they kept GCC 14 from holding
  // the vector's values in registers: 1.7 times the stack accesses, (4,3,512,384) flow 0.94 -> 0.98 ms.
  auto sweep = [&](auto prefetch) SG_SIMD_INLINE_LAMBDA {
    WindowTrials trials(windows);
    for (int64_t i = 0; i < count; i += kLanes) {
      const int64_t lanes = std::min(kLanes, count - i);
      V x, y;
      at.load(i, lanes, T(-4), x, y);  // lanes past the end: outside the image, never read
      const BilinearVector<V> p(isa, x, y, g, trials.trying);
      trials.record(p);
      [[maybe_unused]] int32_t upper[kLanes], lower[kLanes];
      if constexpr (decltype(prefetch)::value) {
        store_u(upper, p.index[0]);
        store_u(lower, p.index[2]);
      }
      // Else the rows ahead of lane 0's corners (kRowAheadValues; at random points too: the bilinear forward
      // measured no cost there, its RowWalk test 7%).
      [[maybe_unused]] int64_t upper_ahead = 0, lower_ahead = 0;
      if constexpr (!decltype(prefetch)::value) {
        upper_ahead = std::max<int64_t>(p.index[0][0], 0) + kRowAheadValues<T>;
        lower_ahead = std::max<int64_t>(p.index[2][0], 0) + kRowAheadValues<T>;
      }
      for (int64_t c = 0; c < in.channels; ++c) {
        if constexpr (decltype(prefetch)::value) {
          if (c + kPrefetchChannels < in.channels) p.prefetch_corners(in.channel(c + kPrefetchChannels), upper, lower);
        } else {
          detail::prefetch(in.channel(c) + upper_ahead);
          detail::prefetch(in.channel(c) + lower_ahead);
        }
        V v[4];
        p.corners(isa, in.channel(c), v);
        out.store(c, i, lanes, V(v[0] * p.w[0] + v[1] * p.w[1] + v[2] * p.w[2] + v[3] * p.w[3]));
      }
    }
  };
  if (prefetching) {
    sweep(std::true_type{});
  } else {
    sweep(std::false_type{});
  }
}

// Where a fused backward (bilinear_vectors_backward) reads grad_output and writes its gradients: channel c's
// grad_output of point i at go + c * go_step + go_offset[i] (a run when `straight`); the input gradient through
// one unbanded GradTarget per channel (none: not wanted); the grid gradient of point i to gx[i], gy[i].
struct FusedBackwardIo {
  const float* go;
  int64_t go_step;
  const int64_t* go_offset;
  bool straight;
  const GradTarget<float>* targets;
  bool with_grad;
  float mult_x, mult_y;  // d coordinate / d grid value (zeros padding: constants)
  float* gx;             // room for whole vectors: kBlock values
  float* gy;
};

// The scatter of one channel's grad_output gv of a vector of points to their corners, lane by lane in point
// order, as PlaneBilinear::backward_checked (the weighted values computed as vectors: the same products).
template <class V>
SPATIALGRAD_INLINE void scatter_corners(const BilinearAxes<V>& a, const BilinearVector<V>& p, const V& gv,
                                        int64_t lanes, const PlaneGeometry& g, const GradTarget<float>& target) {
  const V nw = p.w[0] * gv, ne = p.w[1] * gv, sw = p.w[2] * gv, se = p.w[3] * gv;
  for (int64_t l = 0; l < lanes; ++l) {
    const int32_t x = a.x[l], y = a.y[l];
    if (inside(x, g.W - 1) && inside(y, g.H - 1)) {
      target.add_corners<false>(y, x, nw[l], ne[l], sw[l], se[l]);
      continue;
    }
    const float weighted[4] = {nw[l], ne[l], sw[l], se[l]};
    for (int k = 0; k < 4; ++k) {
      const int32_t yk = y + (k >> 1), xk = x + (k & 1);
      if (inside(xk, g.W) && inside(yk, g.H)) target.add<false>(yk, xk, weighted[k]);
    }
  }
}

// The channels a fused backward takes. With three, interleaving the channels' scatters per vector ran slower
// than the tables' channel-by-channel sweeps ((8,3,256,256), 2 threads: 4.4 -> 6.0 ms at GCC 12).
constexpr int64_t kFusedBackwardChannels = 2;

// The backward of `count` points with zeros padding over one to kFusedBackwardChannels float channels, no
// bands, as point vectors: corners, weights and the grid terms in registers, the scatter lane by lane in point
// order. With one channel the table's passes (coordinates, fill, indices, per-lane sums) were a fifth of the
// call. The values and their order are PlaneBilinear::backward's, the grid gradient sum_lanes' ((0 + s0 + s1
// + ...) * mult, each channel's sum s = +0 + term), so the bits are the tables'.
template <class Isa>
SG_SIMD_KERNEL void bilinear_vectors_backward(Isa isa, PointCoordinates<float> at, int64_t count, PlaneGeometry g,
                                              PointInputs<float> in, FusedBackwardIo io) {
  using V = Vec<float, Isa::kVecBytes>;
  constexpr int64_t kLanes = kLanesOf<V>;
  const bool windows = Isa::kLevel == SimdLevel::kAvx512 || in.channels > 1;  // as bilinear_vectors_forward
  for (int64_t i = 0; i < count; i += kLanes) {
    const int64_t lanes = std::min(kLanes, count - i);
    V x, y;
    at.load(i, lanes, -4.0f, x, y);  // lanes past the end: outside the image, never read nor scattered
    const BilinearAxes<V> a(isa, x, y, g);  // (the vector's constructor computes them too: the compiler's to share)
    const BilinearVector<V> p(isa, x, y, g, io.with_grad || windows);
    const V ex = 1 - a.tx, sy = 1 - a.ty;
    V sum_x{}, sum_y{};
    for (int64_t c = 0; c < in.channels; ++c) {
      const float* go = io.go + c * io.go_step;
      V gv;
      if (io.straight && lanes == kLanes) {
        load_u(gv, go + io.go_offset[0] + i);
      } else {
        for (int64_t k = 0; k < kLanes; ++k) {
          gv[k] = k < lanes ? go[io.straight ? io.go_offset[0] + i + k : io.go_offset[i + k]] : 0.0f;
        }
      }
      if (io.with_grad) {
        V v[4];
        p.corners(isa, in.channel(c), v);
        const V term_x = ((v[1] - v[0]) * sy + (v[3] - v[2]) * a.ty) * gv;
        const V term_y = ((v[2] - v[0]) * ex + (v[3] - v[1]) * a.tx) * gv;
        if (c == 0) {
          sum_x = V{} + term_x;
          sum_y = V{} + term_y;
        } else {
          sum_x += V{} + term_x;
          sum_y += V{} + term_y;
        }
      }
      if (io.targets != nullptr) scatter_corners(a, p, gv, lanes, g, io.targets[c]);
    }
    if (io.with_grad) {
      store_u(io.gx + i, V((V{} + sum_x) * io.mult_x));  // whole vectors: the lanes past count are not read
      store_u(io.gy + i, V((V{} + sum_y) * io.mult_y));
    }
  }
}

// ---- nearest -----------------------------------------------------------------------------------------

// Nearest: the pixel round(cx), round(cy) (ties to even), 0 outside, as PlaneNearest::fill.
template <class Isa, class T>
SG_SIMD_KERNEL void nearest_vectors_forward(Isa isa, PointCoordinates<T> at, int64_t count, PlaneGeometry g,
                                            PointInputs<T> in, PointOutputs<T> out) {
  using V = Vec<T, Isa::kVecBytes>;
  using IV = IndexVecOf<V>;
  constexpr int64_t kLanes = kLanesOf<V>;
  const T W = static_cast<T>(g.W), H = static_cast<T>(g.H);
  // Float planes whose every offset is below 2^24: y * s2 + x * s3 is exact in float, one conversion.
  const int64_t last_offset = int64_t{g.H - 1} * g.s2 + int64_t{g.W - 1} * g.s3;
  const bool float_offsets = std::is_same_v<T, float> && last_offset < (int64_t{1} << 24);
  const float box[4] = {static_cast<float>(g.W - 1), static_cast<float>(g.H - 1), static_cast<float>(g.s2),
                        static_cast<float>(g.s3)};
  int64_t start = 0;
  if constexpr (std::is_same_v<T, float>) {
    // One channel of the common case (dense pairs, zeros padding, outputs in one run): its whole vectors without
    // the general loop's per-vector tests. 2 threads, core call, (8,1,256,256): 0.183 -> 0.171 ms at GCC 14,
    // 0.189 -> 0.169 at GCC 12; with three channels GCC 14 ran it 5% slower (0.474 -> 0.501 ms).
    if (in.channels == 1 && float_offsets && at.pairs != nullptr && !at.mapped && !at.clip && out.straight) {
      start = count / kLanes * kLanes;
      RowWalk<T> walk(g);
      for (int64_t i = 0; i < start; i += kLanes) {
        V a, b, x, y, xr, yr;
        load_u(a, at.pairs + 2 * i);
        load_u(b, at.pairs + 2 * i + kLanes);
        deinterleave(a, b, x, y);
        nearbyint_lanes(isa, V((x + 1) * at.scale_x - at.shift), xr);
        nearbyint_lanes(isa, V((y + 1) * at.scale_y - at.shift), yr);
        IV index;
        box_index(isa, xr, yr, box, index);
        if (walk.near(index[0])) prefetch(in.plane + std::max<int64_t>(index[0], 0) + kRowAheadValues<T>);
        V v;
        masked_gather(isa, in.plane, index, v);
        store_u(out.plane + out.offset[0] + i, v);
      }
    }
  }
  RowWalk<T> walk(g);
  for (int64_t i = start; i < count; i += kLanes) {
    const int64_t lanes = std::min(kLanes, count - i);
    V x, y, xr, yr;
    at.load(i, lanes, T(-4), x, y);
    nearbyint_lanes(isa, x, xr);
    nearbyint_lanes(isa, y, yr);
    IV index;
    bool indexed = false;
    if constexpr (std::is_same_v<T, float>) {
      if (float_offsets) {
        box_index(isa, xr, yr, box, index);
        indexed = true;
      }
    }
    if (!indexed) {
      IV xi, yi, x_in, y_in;
      index_within(xr, T(0), W, -1, xi);  // -1 outside (NaN too)
      index_within(yr, T(0), H, -1, yi);
      lanes_inside(xi, g.W, x_in);
      lanes_inside(yi, g.H, y_in);
      pixel_index(yi, xi, g, IV(x_in & y_in), index);
    }
    // On a smooth grid, the rows ahead (kRowAheadValues).
    const bool ahead = walk.near(index[0]);
    const int64_t at_ahead = std::max<int64_t>(index[0], 0) + kRowAheadValues<T>;
    for (int64_t c = 0; c < in.channels; ++c) {
      if (ahead) prefetch(in.channel(c) + at_ahead);
      V v;
      masked_gather(isa, in.channel(c), index, v);
      out.store(c, i, lanes, v);
    }
  }
}

// ---- bicubic -----------------------------------------------------------------------------------------

// The 4x4 taps of a vector of points and their weights, as BicubicPoint and BicubicTable::taps compute them.
template <class V>
struct BicubicVector {
  using IV = IndexVecOf<V>;
  using Acc = ElementOf<V>;
  V wx[4], wy[4];
  V tx, ty;           // the fractions of the coordinates (for the weights' derivatives)
  V y0;               // floor of the unnormalised y (the home row's)
  IV col[4], row[4];  // tap columns and rows (padded), -1 outside
  IV valid_col[4], valid_row[4];
  int32_t s2, s3;     // the plane's strides
  bool paired;  // every tap inside and consecutive, unit column stride: taps read in pairs

  // ux, uy: the unnormalised coordinates (BicubicPoint's).
  template <class Isa, class T>
  SPATIALGRAD_INLINE BicubicVector(Isa isa, const V& ux, const V& uy, const Context<T>& ctx, const PlaneGeometry& g) {
    V x0;
    floor_lanes(isa, ux, x0);
    floor_lanes(isa, uy, y0);
    tx = ux - x0;
    ty = uy - y0;
    weights(tx, wx);
    weights(ty, wy);
    taps(x0, ctx.W, ctx, col, valid_col);
    taps(y0, ctx.H, ctx, row, valid_row);
    IV interior = IV{} - 1;
    for (int k = 0; k < 4; ++k) interior &= valid_col[k] & valid_row[k];
    // Interior taps are unpadded, so consecutive: the first tap of each pair of columns then names both.
    interior &= col[1] == col[0] + 1 ? IV{} - 1 : IV{};
    interior &= col[3] == col[2] + 1 ? IV{} - 1 : IV{};
    paired = g.s3 == 1 && std::is_same_v<Acc, float> && all_set(isa, interior);
    s2 = static_cast<int32_t>(g.s2);
    s3 = static_cast<int32_t>(g.s3);
  }

  // Cubic::weights of every lane.
  static SPATIALGRAD_INLINE void weights(const V& t, V (&w)[4]) {
    using C = Cubic<Acc>;
    C::outer_of(V(t + 1), w[0]);
    C::inner_of(t, w[1]);
    C::inner_of(V(1 - t), w[2]);
    C::outer_of(V(2 - t), w[3]);
  }

  // BicubicTable::taps of every lane: floor + i - 1 padded, its int32 index where it names a pixel.
  template <class T>
  static SPATIALGRAD_INLINE void taps(const V& base, int64_t size, const Context<T>& ctx, IV (&index)[4], IV (&valid)[4]) {
    const Acc high = static_cast<Acc>(size - 1), extent = static_cast<Acc>(size);
    for (int i = 0; i < 4; ++i) {
      V tap = base + Acc(i - 1);
      if (ctx.padding == GridSamplerPadding::kBorder) {
        const V below_high = tap < high ? tap : V{} + high;  // clip(): high unless below it, 0 unless above 0
        tap = tap > Acc(0) ? below_high : V{};
      } else if (ctx.padding == GridSamplerPadding::kReflection) {
        for (int k = 0; k < kLanesOf<V>; ++k) tap[k] = apply_padding<Acc>(tap[k], size, ctx.padding, ctx.align).value;
      }
      index_within(tap, Acc(0), extent, -1, index[i]);  // in_bounds() of an integral tap: -1 outside
      valid[i] = ~(index[i] >> 31);  // -1 where index >= 0
    }
  }

  // The tap (row j, column i) of every lane: -1 outside (PlaneGeometry::index's uint32 arithmetic; computing
  // it per channel was faster than keeping the offsets: 4.9 vs 5.6 ms, (8,1,256,256), 1 thread).
  SPATIALGRAD_INLINE void tap_index(int j, int i, IV& index) const {
    using U = Vec<uint32_t, static_cast<int>(sizeof(IV))>;
    const U at = reinterpret_cast<const U&>(row[j]) * static_cast<uint32_t>(s2) +
                 reinterpret_cast<const U&>(col[i]) * static_cast<uint32_t>(s3);
    index = reinterpret_cast<const IV&>(at) | ~(valid_row[j] & valid_col[i]);
  }

  // The four taps of row j of one channel's plane.
  template <class Isa, class T>
  SPATIALGRAD_INLINE void row_taps(Isa isa, const T* plane, int j, V (&v)[4]) const {
    if constexpr (std::is_same_v<T, float>) {
      if (paired) {
        IV at[2];
        tap_index(j, 0, at[0]);
        tap_index(j, 2, at[1]);
        gather_pairs(isa, plane, at[0], v[0], v[1]);
        gather_pairs(isa, plane, at[1], v[2], v[3]);
        return;
      }
    }
    for (int i = 0; i < 4; ++i) {
      IV at;
      tap_index(j, i, at);
      masked_gather(isa, plane, at, v[i]);
    }
  }
};

// The forward of `count` points with grid values gx, gy over every channel: rows first (x taps), then the
// column of row sums (y taps), as PlaneBicubic::forward.
template <class Isa, class T>
SG_SIMD_KERNEL void bicubic_vectors_forward(Isa isa, PointCoordinates<T> at, int64_t count, const Context<T>& ctx,
                                            PlaneGeometry g, PointInputs<T> in, PointOutputs<T> out) {
  // 32-byte vectors at every level: at 64 bytes the taps, weights and masks of a vector outgrow the registers
  // (measured, (8,1,256,256), 1 thread: 5.4 ms with 64-byte vectors, 5.0 with 32-byte ones at AVX-512).
  using V = Vec<T, 32>;
  constexpr int64_t kLanes = kLanesOf<V>;
  for (int64_t i = 0; i < count; i += kLanes) {
    const int64_t lanes = std::min(kLanes, count - i);
    V x, y;
    at.load(i, lanes, T(-8), x, y);  // unnormalised; lanes past the end: far outside
    const BicubicVector<V> p(isa, x, y, ctx, g);
    for (int64_t c = 0; c < in.channels; ++c) {
      V rows[4];
      for (int j = 0; j < 4; ++j) {
        V v[4];
        p.row_taps(isa, in.channel(c), j, v);
        rows[j] = v[0] * p.wx[0];
        for (int k = 1; k < 4; ++k) rows[j] += v[k] * p.wx[k];
      }
      out.store(c, i, lanes, V(rows[0] * p.wy[0] + rows[1] * p.wy[1] + rows[2] * p.wy[2] + rows[3] * p.wy[3]));
    }
  }
}

// PlaneBicubic::build of `count` points with grid values gx, gy, as point vectors (the scalar build was 40% of
// a one-channel backward): the same taps, weights, derivatives and home rows.
template <class Isa, class T, class Acc>
SG_SIMD_KERNEL void bicubic_vectors_build(Isa isa, const Acc* __restrict gx, const Acc* __restrict gy, int64_t count,
                                          const Context<T>& ctx, PlaneGeometry g, bool with_grad,
                                          PlaneBicubic<Acc>& table) {
  using V = Vec<Acc, 32>;
  using IV = IndexVecOf<V>;
  constexpr int64_t kLanes = kLanesOf<V>;
  const Acc scale_x = unnormalize<Acc>(0, ctx.W, ctx.align).grad, scale_y = unnormalize<Acc>(0, ctx.H, ctx.align).grad;
  const Acc shift = ctx.align ? Acc(0) : Acc(0.5), top = static_cast<Acc>(g.H - 1);
  table.count = count;
  for (int64_t i = 0; i < count; i += kLanes) {
    const int64_t lanes = std::min(kLanes, count - i);
    V x, y;
    load_lanes(gx + i, lanes, Acc(-8), x);
    load_lanes(gy + i, lanes, Acc(-8), y);
    const BicubicVector<V> p(isa, V((x + 1) * scale_x - shift), V((y + 1) * scale_y - shift), ctx, g);
    V dx[4] = {}, dy[4] = {};
    if (with_grad) {
      Cubic<Acc>::derivatives_of(p.tx, dx);
      Cubic<Acc>::derivatives_of(p.ty, dy);
    }
    // home_row(): floor(uy) clamped into the plane, 0 for NaN (one comparison per select, simd.h).
    const V below_top = p.y0 < top ? p.y0 : V{} + top;
    IV home;
    to_index(V(p.y0 > Acc(0) ? below_top : V{}), home);
    IV inner = IV{} - 1;
    for (int k = 0; k < 4; ++k) inner &= p.valid_col[k] & p.valid_row[k];
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t at = i + l;
      table.home[at] = home[l];
      table.inner[at] = inner[l] != 0;
      table.mult[0][at] = scale_x;
      table.mult[1][at] = scale_y;
      for (int k = 0; k < 4; ++k) {
        table.xs[k][at] = p.col[k][l];
        table.ys[k][at] = p.row[k][l];
        table.row[k][at] = int64_t{p.row[k][l]} * g.s2;
        table.col[k][at] = int64_t{p.col[k][l]} * g.s3;
        table.cx[k][at] = p.wx[k][l];
        table.cy[k][at] = p.wy[k][l];
        table.dx[k][at] = dx[k][l];
        table.dy[k][at] = dy[k][l];
      }
    }
  }
}

// PlaneBicubic::backward's grid terms of one channel, as point vectors: the 16 taps of a vector of points
// gathered (in pairs where a row's taps are adjacent and inside), then, in PlaneBicubic::backward's order (x
// taps outside, y taps inside), ax -= tap * g * dx[i] * cy[j] and ay -= tap * g * dy[j] * cx[i], added to sx,
// sy for the points with `owned` (all without kBanded). The input gradient's scatter stays scalar.
template <bool kBanded, class Isa, class T>
SG_SIMD_KERNEL void bicubic_vectors_grid_terms(Isa isa, const PlaneBicubic<T>& t, const T* __restrict plane,
                                               PlaneGeometry g, const T* __restrict go,
                                               const int64_t* __restrict go_offset, const bool* __restrict owned,
                                               T* __restrict sx, T* __restrict sy) {
  using V = Vec<T, 32>;  // as bicubic_vectors_forward
  using IV = IndexVecOf<V>;
  constexpr int64_t kLanes = kLanesOf<V>;
  for (int64_t i = 0; i < t.count; i += kLanes) {
    const int64_t lanes = std::min(kLanes, t.count - i);
    IV x[4], y[4], x_in[4], y_in[4];
    V cx[4], cy[4], dx[4], dy[4];
    for (int k = 0; k < 4; ++k) {
      load_lanes(t.xs[k] + i, lanes, int32_t{-1}, x[k]);
      load_lanes(t.ys[k] + i, lanes, int32_t{-1}, y[k]);
      x_in[k] = ~(x[k] >> 31);
      y_in[k] = ~(y[k] >> 31);
      load_lanes(t.cx[k] + i, lanes, T(0), cx[k]);
      load_lanes(t.cy[k] + i, lanes, T(0), cy[k]);
      load_lanes(t.dx[k] + i, lanes, T(0), dx[k]);
      load_lanes(t.dy[k] + i, lanes, T(0), dy[k]);
    }
    IV adjacent = x_in[0] & x_in[1] & x_in[2] & x_in[3];
    for (int k = 0; k < 4; ++k) adjacent &= y_in[k];
    adjacent &= x[1] == x[0] + 1 ? IV{} - 1 : IV{};
    adjacent &= x[3] == x[2] + 1 ? IV{} - 1 : IV{};
    const bool paired = std::is_same_v<T, float> && g.s3 == 1 && all_set(isa, adjacent);
    V taps[4][4];  // [y tap j][x tap i]
    for (int j = 0; j < 4; ++j) {
      IV at[4];
      for (int k = 0; k < 4; ++k) pixel_index(y[j], x[k], g, IV(y_in[j] & x_in[k]), at[k]);
      if constexpr (std::is_same_v<T, float>) {
        if (paired) {
          gather_pairs(isa, plane, at[0], taps[j][0], taps[j][1]);
          gather_pairs(isa, plane, at[2], taps[j][2], taps[j][3]);
          continue;
        }
      }
      for (int k = 0; k < 4; ++k) masked_gather(isa, plane, at[k], taps[j][k]);
    }
    V gv;
    for (int64_t l = 0; l < kLanes; ++l) gv[l] = l < lanes ? load_as<T>(go[go_offset[i + l]]) : T(0);
    V ax{}, ay{};
    for (int k = 0; k < 4; ++k) {
      for (int j = 0; j < 4; ++j) {
        const V vg = taps[j][k] * gv;
        ax -= vg * dx[k] * cy[j];
        ay -= vg * dy[j] * cx[k];
      }
    }
    for (int64_t l = 0; l < lanes; ++l) {
      if (kBanded && !owned[i + l]) continue;
      sx[i + l] += ax[l];
      sy[i + l] += ay[l];
    }
  }
}

// ---- the forward of a block ---------------------------------------------------------------------------

// The coordinates of block b of batch n: read from the grid (pairs or rows gx, gy, which then hold the
// block's grid values), mapped in the kernels, or computed into cx, cy here (reflection, and bicubic never).
template <class Table, class T>
PointCoordinates<T> block_coordinates(const Context<T>& ctx, int64_t n, int64_t b, T* gx, T* gy, T* cx, T* cy,
                                      int64_t& count) {
  PointCoordinates<T> at;
  const int64_t begin = b * kBlock;
  count = ctx.block_end(b) - begin;
  if (ctx.dense_pairs(ctx.grid)) {
    at.pairs = ctx.grid.data + n * ctx.grid.s0 + 2 * begin;
  } else {
    ctx.grid_block(n, b, gx, gy);
    at.x = gx;
    at.y = gy;
  }
  const bool bicubic = std::is_same_v<Table, PlaneBicubic<T>>;
  if (!bicubic && ctx.padding == GridSamplerPadding::kReflection) {
    if (at.pairs != nullptr) ctx.grid_block(n, b, gx, gy);
    T unused[kBlock];
    detail::source_coordinates(gx, count, ctx.W, ctx.padding, ctx.align, cx, unused);
    detail::source_coordinates(gy, count, ctx.H, ctx.padding, ctx.align, cy, unused);
    return {nullptr, cx, cy, true};
  }
  at.scale_x = unnormalize(T(0), ctx.W, ctx.align).grad;
  at.scale_y = unnormalize(T(0), ctx.H, ctx.align).grad;
  at.shift = ctx.align ? T(0) : T(0.5);
  at.clip = !bicubic && ctx.padding == GridSamplerPadding::kBorder;
  at.high_x = static_cast<T>(ctx.W - 1);
  at.high_y = static_cast<T>(ctx.H - 1);
  return at;
}

// The forward of the points of a block with the point vectors of Table's mode (PlaneBilinear, PlaneNearest
// or PlaneBicubic), at the level in force.
template <class Table, class T>
void forward_vectors(const Context<T>& ctx, const PointCoordinates<T>& at, int64_t count, const PlaneGeometry& g,
                     const PointInputs<T>& in, const PointOutputs<T>& out) {
  if constexpr (std::is_same_v<Table, PlaneBicubic<T>>) {
    SG_SIMD_DISPATCH(bicubic_vectors_forward(isa, at, count, ctx, g, in, out));
  } else if constexpr (std::is_same_v<Table, PlaneBilinear<T>>) {
    SG_SIMD_DISPATCH(bilinear_vectors_forward(isa, at, count, g, in, out));
  } else {
    SG_SIMD_DISPATCH(nearest_vectors_forward(isa, at, count, g, in, out));
  }
}

}  // namespace spatialgrad::detail::grid_sampler

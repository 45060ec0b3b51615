// The bilinear sampling point of multi-scale deformable attention (docs/operators.md, Multi-scale deformable
// attention), shared by the forward and the backward so both see exactly the same corners and weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "simd.h"
#include "spatialgrad/tensor.h"

namespace spatialgrad::detail {

// One level of the value tensor: rows [start, start + height*width) of the S axis.
struct DeformLevel {
  int64_t height, width, start;
};

// The sizes of one call and its level table, read from spatial_shapes (validated).
struct DeformProblem {
  int64_t batch, spatial, heads, channels, queries, levels, points;
  std::vector<DeformLevel> level_table;
};

// Validates what every ms_deform_attn entry point shares (ranks, shapes, dtypes, the level table) and
// reads the level table; messages name `op`. Defined in ms_deform_attn.cpp.
DeformProblem validate_deform_attn(const char* op, const TensorView& value, const TensorView& spatial_shapes,
                                   const TensorView& level_start_index, const TensorView& sampling_locations,
                                   const TensorView& attention_weights);

// A located point: its top-left corner (hl, wl), in [-1, H-1] x [-1, W-1] (a corner outside the
// level reads as zero), its fractional offsets (lh, lw) and the corner weights, in the order
// (hl, wl), (hl, wl+1), (hl+1, wl), (hl+1, wl+1): hh*hw, hh*lw, lh*hw, lh*lw.
template <class Acc>
struct DeformPoint {
  int64_t hl, wl;
  Acc lh, lw, hh, hw;
  Acc weight[4];
};

// The offsets and corner weights of a point whose fractional offsets are (lh, lw).
template <class Acc>
SPATIALGRAD_INLINE void weigh_deform_point(Acc lh, Acc lw, DeformPoint<Acc>& pt) {
  pt.lh = lh;
  pt.lw = lw;
  pt.hh = Acc(1) - lh;
  pt.hw = Acc(1) - lw;
  pt.weight[0] = pt.hh * pt.hw;
  pt.weight[1] = pt.hh * pt.lw;
  pt.weight[2] = pt.lh * pt.hw;
  pt.weight[3] = pt.lh * pt.lw;
}

// Locates (x, y) on a height x width level. Returns false when the point contributes nothing: the
// strict test -1 < h_im < H, -1 < w_im < W is written so that NaN and Inf fail it.
template <class Acc>
SPATIALGRAD_INLINE bool locate_deform_point(Acc x, Acc y, int64_t height, int64_t width, DeformPoint<Acc>& pt) {
  const Acc w_im = x * static_cast<Acc>(width) - Acc(0.5);
  const Acc h_im = y * static_cast<Acc>(height) - Acc(0.5);
  if (!(h_im > Acc(-1) && w_im > Acc(-1) && h_im < static_cast<Acc>(height) && w_im < static_cast<Acc>(width))) {
    return false;
  }
  const Acc h_floor = std::floor(h_im), w_floor = std::floor(w_im);
  pt.hl = static_cast<int64_t>(h_floor);
  pt.wl = static_cast<int64_t>(w_floor);
  weigh_deform_point(h_im - h_floor, w_im - w_floor, pt);
  return true;
}

}  // namespace spatialgrad::detail

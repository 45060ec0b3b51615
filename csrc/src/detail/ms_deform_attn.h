// The bilinear sampling point of multi-scale deformable attention (SPEC §5), shared by the forward
// and the backward so both see exactly the same corners and weights.
#pragma once

#include <cmath>
#include <cstdint>

namespace spatialgrad::detail {

// One level of the value tensor: rows [start, start + height*width) of the S axis.
struct DeformLevel {
  int64_t height, width, start;
};

// The four corners of a sampling point, in the order (hl, wl), (hl, wl+1), (hl+1, wl), (hl+1, wl+1).
template <class Acc>
struct DeformSample {
  int64_t pixel[4];  // y*W + x within the level, or -1 for a corner outside the image (it reads as 0)
  Acc weight[4];     // hh*hw, hh*lw, lh*hw, lh*lw
  Acc lh, lw, hh, hw;
};

// Locates (x, y) on a height x width level. Returns false when the point contributes nothing: the
// strict test -1 < h_im < H, -1 < w_im < W is written so that NaN and Inf fail it.
template <class Acc>
inline bool locate_deform_sample(Acc x, Acc y, int64_t height, int64_t width, DeformSample<Acc>& s) {
  const Acc w_im = x * static_cast<Acc>(width) - Acc(0.5);
  const Acc h_im = y * static_cast<Acc>(height) - Acc(0.5);
  if (!(h_im > Acc(-1) && w_im > Acc(-1) && h_im < static_cast<Acc>(height) && w_im < static_cast<Acc>(width))) {
    return false;
  }
  const Acc h_floor = std::floor(h_im), w_floor = std::floor(w_im);
  const int64_t hl = static_cast<int64_t>(h_floor), wl = static_cast<int64_t>(w_floor);  // in [-1, H-1] x [-1, W-1]
  s.lh = h_im - h_floor;
  s.lw = w_im - w_floor;
  s.hh = Acc(1) - s.lh;
  s.hw = Acc(1) - s.lw;
  const bool top = hl >= 0, bottom = hl + 1 < height, left = wl >= 0, right = wl + 1 < width;
  s.pixel[0] = top && left ? hl * width + wl : -1;
  s.pixel[1] = top && right ? hl * width + wl + 1 : -1;
  s.pixel[2] = bottom && left ? (hl + 1) * width + wl : -1;
  s.pixel[3] = bottom && right ? (hl + 1) * width + wl + 1 : -1;
  s.weight[0] = s.hh * s.hw;
  s.weight[1] = s.hh * s.lw;
  s.weight[2] = s.lh * s.hw;
  s.weight[3] = s.lh * s.lw;
  return true;
}

}  // namespace spatialgrad::detail

#include "spatialgrad/roi_align.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "detail/checks.h"
#include "detail/entry.h"
#include "detail/lanes.h"
#include "detail/parallel_for.h"
#include "detail/roi_align_geometry.h"
#include "detail/rows.h"
#include "detail/scratch_bound.h"
#include "detail/simd.h"
#include "detail/strategy.h"
#include "spatialgrad/memory.h"

namespace spatialgrad {
namespace {

using detail::RoiAlignStrategy;
using detail::RoiRegion;
using detail::RoiTable;

constexpr const char* kForward = "roi_align";
constexpr const char* kBackward = "roi_align_backward";
// Element-operations per task: twice parallel.h's kMinWorkPerTask, a task's setup (tap offsets, a patch)
// being heavier than other kernels'.
constexpr int64_t kMinWorkPerRoiTask = 1 << 16;

// A pixel of the packed kernels' patches: V units of 16 bytes of Acc, one channel per lane, computed in the
// level's vectors (Lanes, below), so the per-sample work is a fixed-width vector loop. Wide pixels are a 64-byte
// line (16 floats); narrow ones 16 bytes (4 floats), for few channels.
constexpr int kWide = 4, kNarrow = 1;
template <class Acc, int V>
constexpr int64_t kLanes = V * static_cast<int64_t>(16 / sizeof(Acc));

// Channels that share each sample's weights and offsets in the direct kernels: the per-sample work (4 taps'
// positions and weights) is done once for the group (1.4x faster than channel by channel at 3 channels,
// measured), while a group's planes stay few enough for their lines to stay cached between samples.
constexpr int64_t kDirectGroup = 4;

void check_params(const char* op, const RoiAlignParams& p) {
  SG_CHECK(p.pooled_height >= 0 && p.pooled_width >= 0, op,
           "(): expected pooled_height and pooled_width >= 0, but got ", p.pooled_height, " and ", p.pooled_width);
  SG_CHECK(p.sampling_ratio >= 0, op, "(): expected sampling_ratio >= 0, but got ", p.sampling_ratio);
  SG_CHECK(std::isfinite(p.spatial_scale) && p.spatial_scale > 0, op,
           "(): expected spatial_scale to be finite and > 0, but got ", p.spatial_scale);
}

void check_boxes(const char* op, const TensorView& boxes) {
  SG_CHECK(boxes.dim() == 2 && boxes.size(1) == 5, op,
           "(): expected boxes of shape (K, 5) with rows (batch_index, x1, y1, x2, y2), but got ",
           boxes.shape_string());
}

// floor(boxes[k, 0]) for every ROI, each checked to name an image in [0, num_images). The range test
// runs on the floating value, so NaN and huge values fail it before any conversion to an integer.
template <class T>
std::vector<int64_t> image_indices(const char* op, const TensorView& boxes, int64_t num_images) {
  const int64_t num_rois = boxes.size(0), s0 = boxes.stride(0);
  const T* data = boxes.data<T>();
  std::vector<int64_t> image(static_cast<size_t>(num_rois));
  for (int64_t k = 0; k < num_rois; ++k) {
    const double v = load_as<double>(data[k * s0]);
    SG_CHECK_KIND(v >= 0 && v < static_cast<double>(num_images), kIndex, op, "(): expected the batch index of ROI ", k,
                  " (boxes[", k, ", 0]) to be in [0, ", num_images, "), but got ", v);
    image[static_cast<size_t>(k)] = static_cast<int64_t>(std::floor(v));
  }
  return image;
}

// Strides of a 4-D view.
struct Strides4 {
  int64_t s0, s1, s2, s3;
  explicit Strides4(const TensorView& t) : s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
};

template <class Acc, int V>
int64_t channel_blocks(int64_t channels) {
  return (channels + kLanes<Acc, V> - 1) / kLanes<Acc, V>;
}

// ---- the cost model ------------------------------------------------------------------------------------------

// Scratch a call may take above its inputs and outputs (docs/operators.md, Memory): max(64 MiB, 25% of them).
double scratch_budget(double in_out_bytes) {
  return static_cast<double>(detail::scratch_bound(static_cast<int64_t>(in_out_bytes)));
}

// The cost model: nanoseconds per unit of work of each kernel, fitted (least squares, relative errors) to
// single-thread CPU times of the kernels on 27 shapes (docs/design.md, issue 31: roi_align; float32).
// S = contributing samples, C = channels, groups = ceil(C / kDirectGroup), blocks = ceil(C / lanes),
// pixels = the images' sampled regions, planes = the elements of grad_input, out = those of (grad_)output.
//   forward direct: S * (2.6 groups + 0.6 C), twice that when an image's planes exceed kCachedImageBytes (the
//                   taps then come from memory: 2x measured at 33-41 MB),
//           packed (wide): blocks * (6.2 S + 11.0 pixels)
//   backward direct: S * (1.8 groups + 1.6 C) + 0.3 planes + 1.5 out,
//            packed wide: blocks * (7.8 S + 8.7 pixels) + 0.54 planes + 1.2 out,
//            packed narrow: blocks * (3.4 S + 1.06 pixels) + 0.71 planes + 2.1 out
// (The forward's output terms, 1.1-1.6 ns per element, are left out: nearly equal. Narrow patches in the
// forward measured no faster than the direct kernel, whose per-sample work is the same: never chosen there.)
struct PackedCosts {
  double per_sample, per_pixel;  // per block of lanes
  double per_plane_element, per_out;
};
struct RoiCosts {
  double sample_per_group, sample_per_channel, per_plane_element, per_out;
  PackedCosts wide, narrow;
};
constexpr RoiCosts kForwardCosts{2.6, 0.6, 0, 0, {6.2, 11.0, 0, 0}, {}};
constexpr RoiCosts kBackwardCosts{1.8, 1.6, 0.3, 1.5, {7.8, 8.7, 0.54, 1.2}, {3.4, 1.06, 0.71, 2.1}};
constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr double kCachedImageBytes = 8.0 * (1 << 20);

// The pixels of all images' sampled regions, and the largest region's.
template <class Acc>
void region_pixels(const RoiTable<Acc>& table, double& total, double& largest) {
  total = largest = 0;
  for (const RoiRegion& r : table.region) {
    const double pixels = static_cast<double>(r.rows()) * static_cast<double>(r.cols());
    total += pixels;
    largest = std::max(largest, pixels);
  }
}

// Every thread's pooled bins in the packed kernels (pooled_h * pooled_w pixels of V vectors each).
template <int V, class Acc>
double packed_bins_bytes(const RoiTable<Acc>& table) {
  return static_cast<double>(get_num_threads()) * static_cast<double>(table.pooled_h) *
         static_cast<double>(table.pooled_w) * static_cast<double>(kLanes<Acc, V> * sizeof(Acc));
}

// What a call costs: its shape and the table's work.
struct CallWork {
  double samples, pixels, largest, channels, planes, out, budget;
  bool backward;
};

// The packed kernel's estimate with pixels of V vectors; infinite when its memory exceeds the budget: a patch
// (the forward's, at least: the backward cuts its per-thread patches into bands that fit) and the threads'
// pooled bins.
template <int V, class Acc>
double packed_estimate(const RoiTable<Acc>& table, const CallWork& w, const PackedCosts& k) {
  const double bins_bytes = packed_bins_bytes<V>(table);
  const double patch_bytes = w.largest * static_cast<double>(kLanes<Acc, V> * sizeof(Acc));
  if (w.backward ? bins_bytes > w.budget / 2 : patch_bytes + bins_bytes > w.budget)
    return kNever;
  const double blocks = static_cast<double>(channel_blocks<Acc, V>(static_cast<int64_t>(w.channels)));
  return blocks * (k.per_sample * w.samples + k.per_pixel * w.pixels) + k.per_plane_element * w.planes +
         k.per_out * w.out;
}

// The cost model: the estimates of the three kernels.
template <class Acc>
RoiAlignStrategy cheapest_path(const RoiTable<Acc>& table, const std::vector<int64_t>& input_shape, double out,
                               double in_out_bytes, bool backward) {
  const RoiCosts& k = backward ? kBackwardCosts : kForwardCosts;
  CallWork w{static_cast<double>(table.samples), 0, 0, static_cast<double>(input_shape[1]), 0, out,
             scratch_budget(in_out_bytes), backward};
  region_pixels(table, w.pixels, w.largest);
  const double image_elements = w.channels * static_cast<double>(input_shape[2]) * static_cast<double>(input_shape[3]);
  w.planes = image_elements * static_cast<double>(input_shape[0]);
  const double groups = std::ceil(w.channels / kDirectGroup);
  const double memory = !backward && image_elements * sizeof(Acc) > kCachedImageBytes ? 2.0 : 1.0;
  const double direct = w.samples * (k.sample_per_group * groups + k.sample_per_channel * w.channels) * memory +
                        k.per_plane_element * w.planes + k.per_out * out;
  const double wide = packed_estimate<kWide>(table, w, k.wide);
  const double narrow = backward ? packed_estimate<kNarrow>(table, w, k.narrow) : kNever;
  if (direct <= wide && direct <= narrow) return RoiAlignStrategy::kDirect;
  return wide <= narrow ? RoiAlignStrategy::kPacked : RoiAlignStrategy::kPackedNarrow;
}

// The kernel for a call on `input_shape` (B, C, H, W) with `out` elements of (grad_)output: a pinned one (any
// but narrow patches in the forward, a backward kernel only), else the cheapest estimate.
template <class Acc>
RoiAlignStrategy choose_path(const RoiTable<Acc>& table, const std::vector<int64_t>& input_shape, double out,
                             double in_out_bytes, bool backward) {
  return detail::choose_strategy<RoiAlignStrategy>(
      [&](RoiAlignStrategy pinned) { return backward || pinned != RoiAlignStrategy::kPackedNarrow; },
      [&] { return cheapest_path(table, input_shape, out, in_out_bytes, backward); });
}

// An uninitialised buffer from the memory cache (spatialgrad/memory.h): patches have the same size call after
// call, and fresh pages cost page faults.
template <class Acc>
class Scratch {
 public:
  explicit Scratch(int64_t count)
      : bytes_(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(Acc)),
        data_(static_cast<Acc*>(acquire_block(bytes_))) {}
  ~Scratch() { release_block(data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Acc* data() const { return data_; }

 private:
  size_t bytes_;
  Acc* data_;
};

// ---- the direct kernels: taps straight from the planes ----------------------------------------------------------

// One ROI's taps as element offsets in a plane (row * s2, column * s3), with their weights.
template <class Acc>
struct AxisOffsets {
  struct Tap {
    int64_t lo, hi;
    Acc w_lo, w_hi;
  };
  std::vector<Tap> taps;
  int64_t first = 0;  // the table index of taps[0]

  void fill(const std::vector<detail::RoiTap<Acc>>& table_taps, int64_t begin, int64_t end, int64_t stride) {
    first = begin;
    taps.resize(static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i) {
      const auto& t = table_taps[static_cast<size_t>(i)];
      taps[static_cast<size_t>(i - begin)] = Tap{t.lo * stride, t.hi * stride, t.w_lo, t.w_hi};
    }
  }
  const Tap* at(int64_t table_index) const { return taps.data() + (table_index - first); }
};

// The sums of the samples of bin (ph, pw) of ROI k in planes base + g * plane_step, g < G, one sample at a
// time in torchvision's order and association (the packed kernels' add_sample, lane by lane).
template <int G, class Acc>
SPATIALGRAD_INLINE void direct_bin_sums(const Acc* base, int64_t plane_step, const RoiTable<Acc>& table,
                                        const AxisOffsets<Acc>& ys, const AxisOffsets<Acc>& xs, int64_t k, int64_t ph,
                                        int64_t pw, Acc (&acc)[G]) {
  const auto* y_begin = ys.at(table.y_first[k * table.pooled_h + ph]);
  const auto* y_end = ys.at(table.y_first[k * table.pooled_h + ph + 1]);
  const auto* x_begin = xs.at(table.x_first[k * table.pooled_w + pw]);
  const auto* x_end = xs.at(table.x_first[k * table.pooled_w + pw + 1]);
  for (int g = 0; g < G; ++g) acc[g] = 0;
  for (const auto* ty = y_begin; ty != y_end; ++ty) {
    for (const auto* tx = x_begin; tx != x_end; ++tx) {
      const Acc w1 = ty->w_lo * tx->w_lo, w2 = ty->w_lo * tx->w_hi, w3 = ty->w_hi * tx->w_lo, w4 = ty->w_hi * tx->w_hi;
      const int64_t o1 = ty->lo + tx->lo, o2 = ty->lo + tx->hi, o3 = ty->hi + tx->lo, o4 = ty->hi + tx->hi;
      for (int g = 0; g < G; ++g) {
        const Acc* p = base + g * plane_step;
        acc[g] += ((w1 * p[o1] + w2 * p[o2]) + w3 * p[o3]) + w4 * p[o4];
      }
    }
  }
}

// Channels [c0, c0 + G) of ROI k: out_roi[c, ph, pw] = the mean of the bin's samples in plane c of image_planes.
template <int G, class T>
void direct_pool_group(const T* image_planes, int64_t c0, const Strides4& is, const RoiTable<T>& table, int64_t k,
                       const AxisOffsets<T>& ys, const AxisOffsets<T>& xs, T* out_roi, const Strides4& os) {
  const T count = table.count[k];
  for (int64_t ph = 0; ph < table.pooled_h; ++ph) {
    for (int64_t pw = 0; pw < table.pooled_w; ++pw) {
      T acc[G];
      direct_bin_sums<G>(image_planes + c0 * is.s1, is.s1, table, ys, xs, k, ph, pw, acc);
      for (int g = 0; g < G; ++g) out_roi[(c0 + g) * os.s1 + ph * os.s2 + pw * os.s3] = acc[g] / count;
    }
  }
}

// Every channel of ROI k, kDirectGroup channels at a time (a smaller group for the rest).
template <class T>
void direct_pool_roi(const T* image_planes, int64_t channels, const Strides4& is, const RoiTable<T>& table,
                     int64_t k, AxisOffsets<T>& ys, AxisOffsets<T>& xs, T* out_roi, const Strides4& os) {
  const int64_t PH = table.pooled_h, PW = table.pooled_w;
  if (table.roi_region[static_cast<size_t>(k)].empty()) {  // no sample: zeros, as the mean of nothing below
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < PH * PW; ++i) out_roi[c * os.s1 + (i / PW) * os.s2 + (i % PW) * os.s3] = T(0);
    }
    return;
  }
  ys.fill(table.y_taps, table.y_first[k * PH], table.y_first[(k + 1) * PH], is.s2);
  xs.fill(table.x_taps, table.x_first[k * PW], table.x_first[(k + 1) * PW], is.s3);
  int64_t c0 = 0;
  for (; c0 + kDirectGroup <= channels; c0 += kDirectGroup)
    direct_pool_group<kDirectGroup>(image_planes, c0, is, table, k, ys, xs, out_roi, os);
  static_assert(kDirectGroup == 4, "the rest below is 1 to 3 channels");
  switch (channels - c0) {
    case 3: return direct_pool_group<3>(image_planes, c0, is, table, k, ys, xs, out_roi, os);
    case 2: return direct_pool_group<2>(image_planes, c0, is, table, k, ys, xs, out_roi, os);
    case 1: return direct_pool_group<1>(image_planes, c0, is, table, k, ys, xs, out_roi, os);
    default: return;
  }
}

// Tasks are chunks of ROIs (grouped by image): each ROI writes its own outputs, every channel from its plane.
template <class T>
void direct_forward(const TensorView& input, const TensorView& output, const RoiTable<T>& table,
                    const std::vector<int64_t>& image) {
  const int64_t num_rois = output.size(0), channels = input.size(1);
  const Strides4 is(input), os(output);
  const double work = static_cast<double>(table.samples) * 4.0 * static_cast<double>(channels) +
                      static_cast<double>(output.numel());
  parallel_for(0, num_rois, grain_for(work / static_cast<double>(num_rois), kMinWorkPerRoiTask),
               [&](int64_t lo, int64_t hi) {
                 AxisOffsets<T> ys, xs;
                 for (int64_t r = lo; r < hi; ++r) {
                   const int64_t k = table.order[r];
                   const T* planes = input.data<T>() + image[static_cast<size_t>(k)] * is.s0;  // (not read if empty)
                   direct_pool_roi(planes, channels, is, table, k, ys, xs, output.data<T>() + k * os.s0, os);
                 }
               });
}

// ---- the packed kernels: kLanes channels per pixel ------------------------------------------------------------

// An image's sampled region (or a band of its rows), kLanes<Acc, V> channels interleaved per pixel.
template <class Acc, int V>
struct Patch {
  RoiRegion region;
  Acc* values = nullptr;
  Acc* at(int64_t row, int64_t col) const {
    return values + ((row - region.row0) * region.cols() + (col - region.col0)) * kLanes<Acc, V>;
  }
};

// A pixel's lanes (V * 16 bytes) as vectors of kChunk bytes, whose element-wise arithmetic is the scalar IEEE
// arithmetic, lane by lane. kChunk is the level's (kChunkBytes): a wide pixel is one register at AVX-512, two
// at AVX2; the same operations in the same order at every level, so the same bits.
template <class Acc, int V, int kChunk>
struct Lanes {
  static constexpr int kCount = V * 16 / kChunk;
  static constexpr int64_t kStep = kChunk / static_cast<int64_t>(sizeof(Acc));  // elements per vector
  detail::Vec<Acc, kChunk> v[kCount];
};
// (16 at the baseline: its 32-byte vectors, two SSE registers, made the packed forward 4x as slow as 16-byte
// ones, measured with GCC 12.)
template <class IsaT, int V>
constexpr int kChunkBytes = IsaT::kLevel == detail::SimdLevel::kBaseline ? 16 : std::min(V * 16, IsaT::kVecBytes);
static_assert(sizeof(Lanes<float, kWide, 64>) == kLanes<float, kWide> * sizeof(float), "a pixel is kLanes values");
static_assert(sizeof(Lanes<double, kNarrow, 16>) == kLanes<double, kNarrow> * sizeof(double),
              "a pixel is kLanes values");

// Forward, one sample: acc += ((w1 v1 + w2 v2) + w3 v3) + w4 v4, torchvision's association.
template <class Acc, int V, int C>
SPATIALGRAD_INLINE void add_sample(Lanes<Acc, V, C>& acc, const Acc* p1, const Acc* p2, const Acc* p3, const Acc* p4,
                                   Acc w1, Acc w2, Acc w3, Acc w4) {
  constexpr int64_t n = Lanes<Acc, V, C>::kStep;
  for (int j = 0; j < Lanes<Acc, V, C>::kCount; ++j) {
    detail::Vec<Acc, C> v1, v2, v3, v4;
    detail::load_u(v1, p1 + j * n), detail::load_u(v2, p2 + j * n);
    detail::load_u(v3, p3 + j * n), detail::load_u(v4, p4 + j * n);
    acc.v[j] += ((w1 * v1 + w2 * v2) + w3 * v3) + w4 * v4;
  }
}

// Backward, one corner: p += g * w.
template <class Acc, int V, int C>
SPATIALGRAD_INLINE void add_scaled(Acc* p, const Lanes<Acc, V, C>& g, Acc w) {
  constexpr int64_t n = Lanes<Acc, V, C>::kStep;
  for (int j = 0; j < Lanes<Acc, V, C>::kCount; ++j) {
    detail::Vec<Acc, C> v;
    detail::store_u(p + j * n, detail::load_u(v, p + j * n) + g.v[j] * w);
  }
}

// Asks for the cache lines of `channels` runs of `span` elements `stride` apart: the next ROI's
// gradient block, whose scattered 1-3 KB pieces the hardware prefetcher does not see coming.
template <class T>
inline void prefetch_block(const T* first, int64_t channels, int64_t stride, int64_t span) {
  if (span <= 0 || span > 4096) return;  // unusual layouts: leave it to the hardware
  for (int64_t c = 0; c < channels; ++c)
    detail::prefetch_bytes(first + c * stride, span * static_cast<int64_t>(sizeof(T)));
}

// Row y of the patch from channels [c0, c0 + nc) of image b, transposed through `scratch` (kLanes * cols
// values); lanes past the last channel are zero.
template <int V, class T, class Acc>
void pack_row(const T* in, const Strides4& is, int64_t b, int64_t c0, int64_t nc, int64_t y,
              const Patch<Acc, V>& patch, Acc* scratch) {
  const RoiRegion& r = patch.region;
  detail::pack_lanes<kLanes<Acc, V>>(in + b * is.s0 + c0 * is.s1 + y * is.s2 + r.col0 * is.s3, is.s1, nc, is.s3,
                                     r.cols(), scratch, patch.at(y, r.col0));
}

// The sum of the samples of bin (ph, pw) of ROI k, all lanes at once, in vectors of C bytes.
template <int C, int V, class Acc>
SPATIALGRAD_INLINE Lanes<Acc, V, C> bin_sum(const RoiTable<Acc>& table, const Patch<Acc, V>& patch, int64_t k,
                                            int64_t ph, int64_t pw) {
  constexpr int64_t L = kLanes<Acc, V>;
  const int64_t col0 = patch.region.col0;
  const int64_t y_begin = table.y_first[k * table.pooled_h + ph], y_end = table.y_first[k * table.pooled_h + ph + 1];
  const int64_t x_begin = table.x_first[k * table.pooled_w + pw], x_end = table.x_first[k * table.pooled_w + pw + 1];
  Lanes<Acc, V, C> acc{};
  for (int64_t iy = y_begin; iy < y_end; ++iy) {
    const auto& ty = table.y_taps[iy];
    const Acc* row_lo = patch.at(ty.lo, col0);
    const Acc* row_hi = patch.at(ty.hi, col0);
    for (int64_t ix = x_begin; ix < x_end; ++ix) {
      const auto& tx = table.x_taps[ix];
      const Acc w1 = ty.w_lo * tx.w_lo, w2 = ty.w_lo * tx.w_hi, w3 = ty.w_hi * tx.w_lo, w4 = ty.w_hi * tx.w_hi;
      const int64_t x_lo = (tx.lo - col0) * L, x_hi = (tx.hi - col0) * L;
      add_sample(acc, row_lo + x_lo, row_lo + x_hi, row_hi + x_lo, row_hi + x_hi, w1, w2, w3, w4);
    }
  }
  return acc;
}

// ROI k's bins, bin-major with kLanes channels each: the means of their samples. A kernel (detail/simd.h):
// run through SG_SIMD_DISPATCH, its vectors the level's width.
template <class IsaT, int V, class Acc>
SG_SIMD_KERNEL void pool_roi(IsaT, const RoiTable<Acc>& table, const Patch<Acc, V>& patch, int64_t k, Acc* bins) {
  constexpr int C = kChunkBytes<IsaT, V>;
  constexpr int64_t L = kLanes<Acc, V>;
  const Acc count = table.count[k];
  for (int64_t ph = 0; ph < table.pooled_h; ++ph) {
    for (int64_t pw = 0; pw < table.pooled_w; ++pw) {
      const Lanes<Acc, V, C> acc = bin_sum<C>(table, patch, k, ph, pw);
      Acc* means = bins + (ph * table.pooled_w + pw) * L;
      for (int j = 0; j < Lanes<Acc, V, C>::kCount; ++j)
        detail::store_u(means + j * Lanes<Acc, V, C>::kStep, acc.v[j] / count);  // torchvision's output_val /= count
    }
  }
}

// Written channel by channel through detail::scatter_lanes (vector transposes; scalar copies took 40% of the
// bench shape's forward, 25 MB of output: measured). `scratch` holds ph_count * pw_count * kLanes values.
template <int V, class T>
void store_roi(const T* bins, int64_t ph_count, int64_t pw_count, int64_t nc, T* out_roi, const Strides4& os,
               T* scratch) {
  constexpr int64_t L = kLanes<T, V>;
  if (os.s2 == pw_count * os.s3) return detail::scatter_lanes(bins, ph_count * pw_count, nc, L, out_roi, os.s1, os.s3,
                                                             scratch);
  for (int64_t ph = 0; ph < ph_count; ++ph)
    detail::scatter_lanes(bins + ph * pw_count * L, pw_count, nc, L, out_roi + ph * os.s2, os.s1, os.s3, scratch);
}

// The patches the forward packs in one step: several blocks' when they are small, so that the threads meet at
// fewer barriers (two per step; on a shared machine a barrier can wait for a preempted thread), while the
// patches stay in the L2 cache between packing and pooling (2 MiB per core here: 2 MiB steps pooled 5%
// slower than 0.5 MiB steps at one thread, measured on the bench shape).
constexpr double kForwardStepBytes = 0.5 * (1 << 20);

// Image b, channel blocks [block0, block0 + count): their patches (`values`, one after the other) packed by
// all threads (rows split), then the image's ROIs pooled by all threads ((block, ROI) pairs split; each writes
// its own outputs).
template <int V, class T>
void packed_forward_step(const TensorView& input, const TensorView& output, const RoiTable<T>& table, T* values,
                         int64_t b, int64_t block0, int64_t count) {
  constexpr int64_t L = kLanes<T, V>;
  const Strides4 is(input), os(output);
  const RoiRegion& region = table.region[static_cast<size_t>(b)];
  const int64_t rows = region.rows(), first = table.image_first[b], rois = table.image_first[b + 1] - first;
  const auto patch = [&](int64_t j) { return Patch<T, V>{region, values + j * rows * region.cols() * L}; };
  const auto channels_of = [&](int64_t j) { return std::min(L, input.size(1) - (block0 + j) * L); };
  parallel_for(0, rows * count, grain_for(static_cast<double>(region.cols() * L)), [&](int64_t lo, int64_t hi) {
    std::vector<T> scratch(static_cast<size_t>(region.cols() * L));
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t j = i / rows;
      pack_row(input.data<T>(), is, b, (block0 + j) * L, channels_of(j), region.row0 + i % rows, patch(j),
               scratch.data());
    }
  });
  double samples = 0;  // a work estimate for the split: the image's share of the samples
  if (table.image_first.back() > 0) samples = static_cast<double>(table.samples) * rois / table.image_first.back();
  const double work = (samples * 4.0 + static_cast<double>(rois * table.pooled_h * table.pooled_w)) * L;
  const int64_t items = rois * count;
  parallel_for(0, items, grain_for(work / static_cast<double>(std::max<int64_t>(rois, 1)), kMinWorkPerRoiTask),
               [&](int64_t lo, int64_t hi) {
                 std::vector<T> bins(static_cast<size_t>(table.pooled_h * table.pooled_w * L)), scratch(bins.size());
                 for (int64_t i = lo; i < hi; ++i) {
                   const int64_t k = table.order[first + i % rois], j = i / rois;
                   SG_SIMD_DISPATCH(pool_roi(isa, table, patch(j), k, bins.data()));
                   store_roi<V>(bins.data(), table.pooled_h, table.pooled_w, channels_of(j),
                             output.data<T>() + k * os.s0 + (block0 + j) * L * os.s1, os, scratch.data());
                 }
               });
}

// Enough (image, block) pairs for every thread: each thread packs and pools whole pairs in a patch of its own,
// in one parallel region (at 2 threads on a shared machine, the shared steps' barriers cost 5-10% on the bench
// shape, 32 pairs: measured).
template <int V, class T>
void packed_forward_private(const TensorView& input, const TensorView& output, const RoiTable<T>& table,
                            int64_t largest) {
  constexpr int64_t L = kLanes<T, V>;
  const int64_t blocks = channel_blocks<T, V>(input.size(1)), PH = table.pooled_h, PW = table.pooled_w;
  const Strides4 is(input), os(output);
  const double work = (static_cast<double>(table.samples) * 4.0 + static_cast<double>(output.numel())) * L;
  const int64_t items = input.size(0) * blocks;
  parallel_for(0, items, grain_for(work / static_cast<double>(items), kMinWorkPerRoiTask), [&](int64_t lo, int64_t hi) {
    Scratch<T> values(largest * L);
    // scratch: a row's transpose (pack_row) or a ROI's (store_roi)
    std::vector<T> scratch(static_cast<size_t>(std::max<int64_t>({input.size(3), PH * PW, 1}) * L)), bins(PH * PW * L);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t b = item / blocks, c0 = (item % blocks) * L, nc = std::min(L, input.size(1) - c0);
      const Patch<T, V> patch{table.region[static_cast<size_t>(b)], values.data()};
      for (int64_t y = patch.region.row0; y < patch.region.row0 + patch.region.rows(); ++y)
        pack_row(input.data<T>(), is, b, c0, nc, y, patch, scratch.data());
      for (int64_t r = table.image_first[b]; r < table.image_first[b + 1]; ++r) {
        SG_SIMD_DISPATCH(pool_roi(isa, table, patch, table.order[r], bins.data()));
        store_roi<V>(bins.data(), PH, PW, nc, output.data<T>() + table.order[r] * os.s0 + c0 * os.s1, os,
                     scratch.data());
      }
    }
  });
}

// Patches in a thread's own memory when there are enough (image, block) pairs for the threads and the budget
// holds one per thread; else shared by the threads, a step at a time (memory: one step's patches).
template <int V, class T>
void packed_forward(const TensorView& input, const TensorView& output, const RoiTable<T>& table, double budget_bytes) {
  constexpr int64_t L = kLanes<T, V>;
  double pixels, largest;
  region_pixels(table, pixels, largest);
  const int64_t blocks = channel_blocks<T, V>(input.size(1));
  const double patch_bytes = std::max(largest, 1.0) * static_cast<double>(L * sizeof(T));
  const int64_t threads = get_num_threads();
  const double bins_bytes = packed_bins_bytes<V>(table);
  if (input.size(0) * blocks >= kChunksPerThread * threads && patch_bytes * threads + bins_bytes <= budget_bytes)
    return packed_forward_private<V>(input, output, table, static_cast<int64_t>(largest));
  const double step_bytes = std::min(kForwardStepBytes, budget_bytes - bins_bytes);  // (one patch fits: choose_path)
  const int64_t per_step = std::clamp<int64_t>(static_cast<int64_t>(step_bytes / patch_bytes), 1, blocks);
  Scratch<T> values(static_cast<int64_t>(largest) * L * per_step);
  for (int64_t b = 0; b < input.size(0); ++b) {
    if (table.image_first[b + 1] == table.image_first[b]) continue;
    for (int64_t block0 = 0; block0 < blocks; block0 += per_step)
      packed_forward_step<V>(input, output, table, values.data(), b, block0, std::min(per_step, blocks - block0));
  }
}

// ---- the backward: tasks own bands of rows of grad_input --------------------------------------------------------

// Rows [row0, row1) of an image's planes.
struct RowBand {
  int64_t row0, row1;
  bool has(int64_t y) const { return y >= row0 && y < row1; }
  bool meets(const RoiRegion& r) const { return !r.empty() && r.row0 < row1 && r.row1 > row0; }
};

// n elements `stride` apart set to +0.0: one memset when contiguous (all-zero bits; 2-3x faster than the
// element loop, measured on 800x800 planes).
template <class T>
void zero_elements(T* dst, int64_t n, int64_t stride) {
  if (n <= 0) return;
  if (stride == 1) return static_cast<void>(std::memset(dst, 0, static_cast<size_t>(n) * sizeof(T)));
  detail::zero_row(n, dst, stride);
}

// Rows `band` of one plane (width elements each), as one run when the rows are contiguous.
template <class T>
void zero_rows(T* plane, const RowBand& band, int64_t width, const Strides4& is) {
  if (is.s3 == 1 && is.s2 == width) return zero_elements(plane + band.row0 * is.s2, (band.row1 - band.row0) * width, 1);
  for (int64_t y = band.row0; y < band.row1; ++y) zero_elements(plane + y * is.s2, width, is.s3);
}

// The corners of one row of samples in image row y when the sample's other row is outside the band: weight
// w_y * w_x / count at the two columns of each x tap in [x_begin, x_end), in tap order.
template <class Acc, class Sink>
SPATIALGRAD_INLINE void scatter_tap_row(const Sink& sink, int64_t y, const detail::RoiTap<Acc>* x_begin,
                                        const detail::RoiTap<Acc>* x_end, Acc w_y, Acc inv_count) {
  auto* row = sink.row(y);
  for (const auto* tx = x_begin; tx != x_end; ++tx) {
    const int64_t x_lo = sink.column(tx->lo), x_hi = sink.column(tx->hi);
    const Acc w_lo = w_y * tx->w_lo * inv_count, w_hi = w_y * tx->w_hi * inv_count;
    sink.add(row + x_lo, w_lo);
    sink.add(row + x_hi, w_hi);
  }
}

// One row of samples (tap ty) whose two image rows are both in the band: the four corners of each sample in
// order (row_hi == row_lo at the last image row, where the order matters).
template <class Acc, class Sink>
SPATIALGRAD_INLINE void scatter_sample_row(const Sink& sink, const detail::RoiTap<Acc>& ty,
                                           const detail::RoiTap<Acc>* x_begin, const detail::RoiTap<Acc>* x_end,
                                           Acc inv_count) {
  auto* row_lo = sink.row(ty.lo);
  auto* row_hi = sink.row(ty.hi);
  for (const auto* tx = x_begin; tx != x_end; ++tx) {
    const int64_t x_lo = sink.column(tx->lo), x_hi = sink.column(tx->hi);
    const Acc w1 = ty.w_lo * tx->w_lo * inv_count, w2 = ty.w_lo * tx->w_hi * inv_count;
    const Acc w3 = ty.w_hi * tx->w_lo * inv_count, w4 = ty.w_hi * tx->w_hi * inv_count;
    sink.add(row_lo + x_lo, w1);
    sink.add(row_lo + x_hi, w2);
    sink.add(row_hi + x_lo, w3);
    sink.add(row_hi + x_hi, w4);
  }
}

// Adds bin (ph, pw)'s gradient (held by the sink: sink.add(row + sink.column(x), w) adds it times w at (y, x)
// of row = sink.row(y)) at the bin's sample corners that lie in `band`. Each element receives its
// contributions in the order iy, ix, corner (w / count once per sample: exact like torchvision's g * w / count
// when count is a power of 2). A sample with one row in the band touches only that row: its corners there
// keep their order. kWholeRoi: the band holds all the ROI's rows (the common case, without the row tests,
// which cost 5-10% when inside the loop: measured).
template <bool kWholeRoi, class Acc, class Sink>
SPATIALGRAD_INLINE void scatter_bin(const RoiTable<Acc>& table, const RowBand& band, int64_t k, int64_t ph,
                                    int64_t pw, Acc inv_count, const Sink& sink) {
  const int64_t y_begin = table.y_first[k * table.pooled_h + ph], y_end = table.y_first[k * table.pooled_h + ph + 1];
  const auto* x_begin = table.x_taps.data() + table.x_first[k * table.pooled_w + pw];
  const auto* x_end = table.x_taps.data() + table.x_first[k * table.pooled_w + pw + 1];
  for (int64_t iy = y_begin; iy < y_end; ++iy) {
    const auto& ty = table.y_taps[iy];
    const bool lo_in = kWholeRoi || band.has(ty.lo), hi_in = kWholeRoi || band.has(ty.hi);
    if (lo_in && hi_in) {
      scatter_sample_row(sink, ty, x_begin, x_end, inv_count);
    } else if (lo_in || hi_in) {
      scatter_tap_row(sink, lo_in ? ty.lo : ty.hi, x_begin, x_end, lo_in ? ty.w_lo : ty.w_hi, inv_count);
    }
  }
}

// ROI k's contributions to `band`, bin by bin (ph, pw): the order of every element's sum whatever the band.
template <bool kWholeRoi, class Acc, class Sink>
SPATIALGRAD_INLINE void scatter_roi_bins(const RoiTable<Acc>& table, const RowBand& band, int64_t k, Sink& sink) {
  const Acc inv_count = Acc(1) / table.count[k];
  for (int64_t ph = 0; ph < table.pooled_h; ++ph) {
    const int64_t y_first = table.y_first[k * table.pooled_h + ph];
    if (y_first == table.y_first[k * table.pooled_h + ph + 1]) continue;
    for (int64_t pw = 0; pw < table.pooled_w; ++pw) {
      if (table.x_first[k * table.pooled_w + pw] == table.x_first[k * table.pooled_w + pw + 1]) continue;
      sink.load_gradient(ph, pw);
      scatter_bin<kWholeRoi>(table, band, k, ph, pw, inv_count, sink);
    }
  }
}

template <class Acc, class Sink>
SPATIALGRAD_INLINE void scatter_roi(const RoiTable<Acc>& table, const RowBand& band, int64_t k, Sink& sink) {
  const RoiRegion& rows = table.roi_region[static_cast<size_t>(k)];
  if (band.row0 <= rows.row0 && rows.row1 <= band.row1) return scatter_roi_bins<true>(table, band, k, sink);
  scatter_roi_bins<false>(table, band, k, sink);
}

// The direct sink: G planes of grad_input (plane_step apart), the same G channels of grad_output's ROI.
// One sample's weight serves the G planes (kDirectGroup).
template <int G, class T>
struct PlaneSink {
  T* plane;  // the group's first plane
  int64_t plane_step, s2, s3;
  const T* g_roi;  // grad_output[k, c0]
  int64_t gs1, gs2, gs3;
  T g[G] = {};
  void load_gradient(int64_t ph, int64_t pw) {
    for (int i = 0; i < G; ++i) g[i] = g_roi[i * gs1 + ph * gs2 + pw * gs3];
  }
  T* row(int64_t y) const { return plane + y * s2; }
  int64_t column(int64_t x) const { return x * s3; }
  void add(T* p, T w) const {
    for (int i = 0; i < G; ++i) p[i * plane_step] = p[i * plane_step] + g[i] * w;
  }
};

// The packed sink: a band's patch, kLanes channels of grad_output's ROI bin-major in `bins`, in vectors of C
// bytes. (Plain values, not a reference to the patch: the compiler then keeps them in registers across the
// stores.)
template <class Acc, int V, int C>
struct PatchSink {
  Acc* values;
  int64_t row0, col0, cols;
  const Acc* bins;
  int64_t pw_count;
  Lanes<Acc, V, C> g;
  PatchSink(const Patch<Acc, V>& patch, const Acc* bins, int64_t pw_count)
      : values(patch.values),
        row0(patch.region.row0),
        col0(patch.region.col0),
        cols(patch.region.cols()),
        bins(bins),
        pw_count(pw_count),
        g{} {}
  void load_gradient(int64_t ph, int64_t pw) { detail::load_u(g, bins + (ph * pw_count + pw) * kLanes<Acc, V>); }
  Acc* row(int64_t y) const { return values + (y - row0) * cols * kLanes<Acc, V>; }
  int64_t column(int64_t x) const { return (x - col0) * kLanes<Acc, V>; }
  void add(Acc* p, Acc w) const { add_scaled(p, g, w); }
};

// ROI k's contributions to a band's patch: a kernel (detail/simd.h), its vectors the level's width.
template <class IsaT, class Acc, int V>
SG_SIMD_KERNEL void scatter_roi_to_patch(IsaT, const RoiTable<Acc>& table, const RowBand& band, int64_t k,
                                         const Patch<Acc, V>& patch, const Acc* bins, int64_t pw_count) {
  PatchSink<Acc, V, kChunkBytes<IsaT, V>> sink(patch, bins, pw_count);
  scatter_roi(table, band, k, sink);
}

// How a backward cuts an image's planes: `bands` bands of `rows` rows.
struct BandSplit {
  int64_t rows = 1, bands = 1;
  RowBand band(int64_t i, int64_t height) const { return RowBand{i * rows, std::min(height, (i + 1) * rows)}; }
};

// Enough bands for every thread to have kChunksPerThread tasks of `planes` (image, channel group) pairs,
// and, when `max_rows_fit` > 0, bands of at most that many rows.
BandSplit split_rows(int64_t height, int64_t planes, int64_t max_rows_fit) {
  const int64_t wanted = kChunksPerThread * get_num_threads();
  int64_t bands = std::min(height, std::max<int64_t>(1, (wanted + planes - 1) / std::max<int64_t>(planes, 1)));
  if (max_rows_fit > 0) bands = std::max(bands, (height + max_rows_fit - 1) / max_rows_fit);
  bands = std::max<int64_t>(1, std::min(bands, height));
  const int64_t pinned_rows = detail::pinned_band<detail::RoiAlignStrategy>();
  if (pinned_rows > 0) bands = (height + pinned_rows - 1) / pinned_rows;
  BandSplit split;
  split.rows = std::max<int64_t>(1, (height + bands - 1) / bands);
  split.bands = (height + split.rows - 1) / split.rows;
  return split;
}

// Channels [c0, c0 + G) of image b, rows `band`: zeroed, then the image's ROIs added in their order.
template <int G, class T>
void direct_scatter_group(const TensorView& grad_output, const TensorView& grad_input, const RoiTable<T>& table,
                          int64_t b, int64_t c0, const RowBand& band) {
  const Strides4 gs(grad_output), is(grad_input);
  T* plane = grad_input.data<T>() + b * is.s0 + c0 * is.s1;
  for (int g = 0; g < G; ++g) zero_rows(plane + g * is.s1, band, grad_input.size(3), is);
  PlaneSink<G, T> sink{plane, is.s1, is.s2, is.s3, nullptr, gs.s1, gs.s2, gs.s3};
  for (int64_t r = table.image_first[b]; r < table.image_first[b + 1]; ++r) {
    const int64_t k = table.order[r];
    if (!band.meets(table.roi_region[static_cast<size_t>(k)])) continue;
    sink.g_roi = grad_output.data<T>() + k * gs.s0 + c0 * gs.s1;
    scatter_roi(table, band, k, sink);
  }
}

// The direct backward's bands: at most this many bytes of its planes, so that they stay in the L2 cache from
// the zero-fill to the adds (bands of 12 MB made the adds of 256 boxes on 2048^2 planes 3x as slow as on
// 256^2 planes, their misses growing with the plane: measured).
constexpr int64_t kDirectBandBytes = int64_t(1) << 20;

// Task (image b, group of kDirectGroup channels, band) owns those rows of those planes. Every element sees
// its contributions in the packed kernel's order, with its operations.
template <class T>
void direct_backward(const TensorView& grad_output, const TensorView& grad_input, const RoiTable<T>& table) {
  const int64_t channels = grad_input.size(1), height = grad_input.size(2);
  const int64_t groups = (channels + kDirectGroup - 1) / kDirectGroup;
  const int64_t group_row_bytes = grad_input.size(3) * std::min(kDirectGroup, channels) * sizeof(T);
  const BandSplit split = split_rows(height, grad_input.size(0) * groups,
                                     std::max<int64_t>(1, kDirectBandBytes / std::max<int64_t>(group_row_bytes, 1)));
  const int64_t items = grad_input.size(0) * groups * split.bands;
  const double work = static_cast<double>(table.samples) * 4.0 * static_cast<double>(channels) +
                      static_cast<double>(grad_input.numel());
  parallel_for(0, items, grain_for(work / static_cast<double>(items), kMinWorkPerRoiTask), [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t group_index = item / split.bands, b = group_index / groups;
      const int64_t c0 = (group_index % groups) * kDirectGroup;
      const RowBand band = split.band(item % split.bands, height);
      static_assert(kDirectGroup == 4, "groups are 1 to 4 channels");
      switch (std::min(kDirectGroup, channels - c0)) {
        case 4: direct_scatter_group<4>(grad_output, grad_input, table, b, c0, band); break;
        case 3: direct_scatter_group<3>(grad_output, grad_input, table, b, c0, band); break;
        case 2: direct_scatter_group<2>(grad_output, grad_input, table, b, c0, band); break;
        default: direct_scatter_group<1>(grad_output, grad_input, table, b, c0, band); break;
      }
    }
  });
}

// ROI k's gradient block, bin-major with kLanes channels each (lanes past nc are left as they are).
// Read channel by channel: contiguous for a contiguous grad_output.
template <int V, class T, class Acc>
void load_grad_bins(const T* g_roi, const Strides4& gs, int64_t ph_count, int64_t pw_count, int64_t nc, Acc* bins) {
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t ph = 0; ph < ph_count; ++ph) {
      for (int64_t pw = 0; pw < pw_count; ++pw)
        bins[(ph * pw_count + pw) * kLanes<Acc, V> + c] = load_as<Acc>(g_roi[c * gs.s1 + ph * gs.s2 + pw * gs.s3]);
    }
  }
}

// Writes every element of the block's planes in `band` once: the patch inside it (transposed through
// `scratch`, kLanes * cols values), zeros outside.
template <int V, class T, class Acc>
void write_block(const Patch<Acc, V>& patch, const RowBand& band, T* gi, const Strides4& is, int64_t b, int64_t c0,
                 int64_t nc, int64_t width, Acc* scratch) {
  const RoiRegion& reg = patch.region;
  T* block = gi + b * is.s0 + c0 * is.s1;
  for (int64_t y = band.row0; y < band.row1; ++y) {
    const bool inside = !reg.empty() && y >= reg.row0 && y < reg.row1;
    for (int64_t c = 0; c < nc; ++c) {
      T* row = block + c * is.s1 + y * is.s2;
      zero_elements(row, inside ? reg.col0 : width, is.s3);
      if (inside) zero_elements(row + reg.col1 * is.s3, width - reg.col1, is.s3);
    }
    if (inside) {
      detail::unpack_lanes<kLanes<Acc, V>>(patch.at(y, reg.col0), reg.cols(), nc, scratch,
                                           block + y * is.s2 + reg.col0 * is.s3, is.s1, is.s3);
    }
  }
}

// The part of image b's region in `band` (empty when they do not meet).
RoiRegion band_region(const RoiRegion& region, const RowBand& band) {
  if (!band.meets(region)) return RoiRegion{};
  return RoiRegion{std::max(region.row0, band.row0), std::min(region.row1, band.row1), region.col0, region.col1};
}

// Task (image b, channel block, band) owns those rows of grad_input[b, c0:c0+L]: it zeroes its patch (the
// band's part of the image's region), adds the image's ROIs in their original order and writes the patch
// out, so every element sums its contributions in one fixed order (torchvision's: ROI, ph, pw, iy, ix,
// corner) whatever the thread count, with no atomics. Bands keep each thread's patch within the budget.
template <int V, class T>
void packed_backward(const TensorView& grad_output, const TensorView& grad_input, const RoiTable<T>& table,
                     double budget_bytes) {
  constexpr int64_t L = kLanes<T, V>;
  const int64_t channels = grad_input.size(1), height = grad_input.size(2), width = grad_input.size(3);
  const int64_t PH = table.pooled_h, PW = table.pooled_w, blocks = channel_blocks<T, V>(channels);
  const Strides4 gs(grad_output), is(grad_input);
  double pixels, largest;
  region_pixels(table, pixels, largest);
  int64_t widest = 1;
  for (const RoiRegion& r : table.region) widest = std::max(widest, r.cols());
  // Each thread: a patch of band rows, a row of transpose scratch, the pooled bins (choose_path: <= budget / 2).
  const double row_bytes = static_cast<double>(widest * L) * sizeof(T) * get_num_threads();
  const double patch_budget = budget_bytes - packed_bins_bytes<V>(table) - row_bytes;
  const BandSplit split = split_rows(height, grad_input.size(0) * blocks,
                                     std::max<int64_t>(1, static_cast<int64_t>(patch_budget / row_bytes)));
  const int64_t items = grad_input.size(0) * blocks * split.bands;
  const double work = (static_cast<double>(table.samples) * 4.0 + pixels * 2.0) * L * blocks +
                      static_cast<double>(grad_input.numel());
  const int64_t g_span = PH > 0 && PW > 0 ? (PH - 1) * gs.s2 + (PW - 1) * gs.s3 + 1 : 0;
  parallel_for(0, items, grain_for(work / static_cast<double>(items), kMinWorkPerRoiTask), [&](int64_t lo, int64_t hi) {
    Scratch<T> values(std::min(split.rows, height) * widest * L);
    std::vector<T> scratch(static_cast<size_t>(widest * L));
    std::vector<T> bins(static_cast<size_t>(PH * PW * L));
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t block_index = item / split.bands, b = block_index / blocks, c0 = (block_index % blocks) * L;
      const int64_t nc = std::min(L, channels - c0);
      if (nc < L) std::fill(bins.begin(), bins.end(), T(0));  // lanes past nc: zero, whatever the last block left
      const RowBand band = split.band(item % split.bands, height);
      const Patch<T, V> patch{band_region(table.region[static_cast<size_t>(b)], band), values.data()};
      std::fill(values.data(), values.data() + patch.region.rows() * patch.region.cols() * L, T(0));
      const T* go = grad_output.data<T>() + c0 * gs.s1;
      for (int64_t r = table.image_first[b]; r < table.image_first[b + 1]; ++r) {
        const int64_t k = table.order[r];
        if (!band.meets(table.roi_region[static_cast<size_t>(k)])) continue;
        if (r + 1 < table.image_first[b + 1]) prefetch_block(go + table.order[r + 1] * gs.s0, nc, gs.s1, g_span);
        load_grad_bins<V>(go + k * gs.s0, gs, PH, PW, nc, bins.data());
        SG_SIMD_DISPATCH(scatter_roi_to_patch(isa, table, band, k, patch, bins.data(), PW));
      }
      write_block(patch, band, grad_input.data<T>(), is, b, c0, nc, width, scratch.data());
    }
  });
}

// The validated operators in float32/float64 (half precision arrives here staged to float32).
template <typename T>
void run_forward(const TensorView& input, const TensorView& boxes, const TensorView& output,
                 const RoiAlignParams& params) {
  const std::vector<int64_t> image = image_indices<T>(kForward, boxes, input.size(0));
  if (output.is_empty()) return;
  const auto table =
      detail::build_roi_table<T>(kForward, boxes, image, input.size(0), input.size(2), input.size(3), params);
  const double bytes = static_cast<double>(input.numel() + boxes.numel() + output.numel()) * sizeof(T);
  if (choose_path(table, input.sizes(), static_cast<double>(output.numel()), bytes, false) == RoiAlignStrategy::kDirect)
    return direct_forward<T>(input, output, table, image);
  packed_forward<kWide, T>(input, output, table, scratch_budget(bytes));
}

template <typename T>
void run_backward(const TensorView& grad_output, const TensorView& boxes, const std::vector<int64_t>& input_shape,
                  const TensorView& grad_input, const RoiAlignParams& params) {
  const std::vector<int64_t> image = image_indices<T>(kBackward, boxes, input_shape[0]);
  if (grad_input.is_empty()) return;
  // No ROI: nothing to scatter (and the kernel's per-thread bin scratch, pooled_h * pooled_w lanes, is
  // bounded by grad_output only when there is at least one ROI).
  if (grad_output.is_empty()) return fill_zeros(grad_input);
  const auto table =
      detail::build_roi_table<T>(kBackward, boxes, image, input_shape[0], input_shape[2], input_shape[3], params);
  const double bytes = static_cast<double>(grad_output.numel() + boxes.numel() + grad_input.numel()) * sizeof(T);
  switch (choose_path(table, input_shape, static_cast<double>(grad_output.numel()), bytes, true)) {
    case RoiAlignStrategy::kPacked:
      return packed_backward<kWide, T>(grad_output, grad_input, table, scratch_budget(bytes));
    case RoiAlignStrategy::kPackedNarrow:
      return packed_backward<kNarrow, T>(grad_output, grad_input, table, scratch_budget(bytes));
    default: return direct_backward<T>(grad_output, grad_input, table);
  }
}

}  // namespace

std::vector<int64_t> roi_align_output_shape(const std::vector<int64_t>& input_shape,
                                            const std::vector<int64_t>& boxes_shape, const RoiAlignParams& params) {
  check_params(kForward, params);
  SG_CHECK(input_shape.size() == 4, kForward, "(): expected input to be 4-D (B, C, H, W), but got ", input_shape.size(),
           "-D shape ", format_list(input_shape));
  SG_CHECK(boxes_shape.size() == 2 && boxes_shape[1] == 5, kForward,
           "(): expected boxes of shape (K, 5) with rows (batch_index, x1, y1, x2, y2), but got ",
           format_list(boxes_shape));
  const std::vector<int64_t> shape{boxes_shape[0], input_shape[1], params.pooled_height, params.pooled_width};
  checked_numel(shape);
  return shape;
}

void roi_align(const TensorView& input, const TensorView& boxes, const TensorView& output,
               const RoiAlignParams& params) {
  const std::vector<int64_t> expected = roi_align_output_shape(input.sizes(), boxes.sizes(), params);
  detail::check_shape(kForward, "output", output, expected);
  detail::check_same_dtype(kForward, "boxes", boxes, "input", input);
  detail::check_same_dtype(kForward, "output", output, "input", input);
  // Half precision computed in float32 on staged copies (detail/entry.h).
  detail::run_entry(kForward, "input", input.dtype(), [&](auto tag, auto& staging) {
    using T = AccType<typename decltype(tag)::type>;
    run_forward<T>(staging.in(input), staging.in(boxes), staging.out(output), params);
  });
}

void check_roi_align_backward_args(const TensorView& grad_output, const TensorView& boxes,
                                   const std::vector<int64_t>& input_shape, const RoiAlignParams& params) {
  check_params(kBackward, params);
  detail::check_dim(kBackward, "grad_output", grad_output, 4);
  check_boxes(kBackward, boxes);
  SG_CHECK(input_shape.size() == 4, kBackward, "(): expected input_shape to have 4 entries (B, C, H, W), but got ",
           input_shape.size(), " (", format_list(input_shape, "[", "]"), ")");
  SG_CHECK(std::all_of(input_shape.begin(), input_shape.end(), [](int64_t v) { return v >= 0; }), kBackward,
           "(): expected input_shape entries >= 0, but got ", format_list(input_shape, "[", "]"));
  SG_CHECK(boxes.size(0) == grad_output.size(0), kBackward,
           "(): expected boxes to have one row per ROI of grad_output (", grad_output.size(0), "), but got ",
           boxes.size(0), " rows");
  SG_CHECK(grad_output.size(2) == params.pooled_height && grad_output.size(3) == params.pooled_width, kBackward,
           "(): expected grad_output of pooled size (pooled_height, pooled_width) = (", params.pooled_height, ", ",
           params.pooled_width, "), but got ", grad_output.size(2), "x", grad_output.size(3), " in shape ",
           grad_output.shape_string());
  SG_CHECK(grad_output.size(1) == input_shape[1], kBackward, "(): expected grad_output to have the ", input_shape[1],
           " channels of input_shape ", format_list(input_shape), ", but got ", grad_output.size(1));
}

void check_roi_align_backward(const TensorView& grad_output, const TensorView& boxes,
                              const std::vector<int64_t>& input_shape, const TensorView& grad_input,
                              const RoiAlignParams& params) {
  check_roi_align_backward_args(grad_output, boxes, input_shape, params);
  detail::check_shape(kBackward, "grad_input", grad_input, input_shape);
  detail::check_same_dtype(kBackward, "boxes", boxes, "grad_output", grad_output);
  detail::check_same_dtype(kBackward, "grad_input", grad_input, "grad_output", grad_output);
  detail::check_floating(kBackward, "grad_output", grad_output.dtype());
}

void roi_align_backward(const TensorView& grad_output, const TensorView& boxes, const std::vector<int64_t>& input_shape,
                        const TensorView& grad_input, const RoiAlignParams& params) {
  check_roi_align_backward(grad_output, boxes, input_shape, grad_input, params);
  detail::run_entry(kBackward, "grad_output", grad_output.dtype(), [&](auto tag, auto& staging) {
    using T = AccType<typename decltype(tag)::type>;
    run_backward<T>(staging.in(grad_output), staging.in(boxes), input_shape, staging.out(grad_input), params);
  });
}

}  // namespace spatialgrad

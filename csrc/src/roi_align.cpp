#include "spatialgrad/roi_align.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "detail/checks.h"
#include "detail/float_staging.h"
#include "detail/roi_align_geometry.h"
#include "detail/simd.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "roi_align";
constexpr const char* kBackward = "roi_align_backward";
// Element-operations per task: twice parallel.h's kMinWorkPerTask, a task's setup (packing ROI patches)
// being heavier than other kernels'.
constexpr int64_t kMinWorkPerRoiTask = 1 << 16;

// Channels handled together: one 64-byte line of Acc values per pixel in the packed patch, so the
// per-sample work is a fixed-width loop the compiler vectorises.
template <class Acc>
constexpr int64_t kLanes = static_cast<int64_t>(64 / sizeof(Acc));

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

// A task's view of one image and one channel block: channels [c0, c0 + channels) of image b,
// packed pixel-major over the image's sampled region, kLanes values per pixel.
template <class Acc>
struct Patch {
  detail::RoiRegion region;
  std::vector<Acc> values;
  Acc* at(int64_t row, int64_t col) {
    return values.data() + ((row - region.row0) * region.cols() + (col - region.col0)) * kLanes<Acc>;
  }
  const Acc* at(int64_t row, int64_t col) const { return const_cast<Patch*>(this)->at(row, col); }
  void reset(const detail::RoiRegion& r) {
    region = r;
    values.assign(static_cast<size_t>(r.rows() * r.cols() * kLanes<Acc>), Acc(0));
  }
};

// A lane group is kVecs 16-byte vectors (detail::Vec: SSE2 on baseline x86-64, NEON on ARM), whose
// element-wise arithmetic is the scalar IEEE arithmetic, lane by lane.
template <class Acc>
using Vec = detail::Vec<Acc, 16>;
constexpr int64_t kVecs = 4;

template <class Acc>
struct Lanes {
  Vec<Acc> v[kVecs];
};
static_assert(sizeof(Lanes<float>) == kLanes<float> * sizeof(float), "a lane group is kLanes values");
static_assert(sizeof(Lanes<double>) == kLanes<double> * sizeof(double), "a lane group is kLanes values");

template <class Acc>
SPATIALGRAD_INLINE Vec<Acc> load_vec(const Acc* p) {
  Vec<Acc> v;
  return detail::load_u(v, p);
}

// Forward, one sample: acc += ((w1 v1 + w2 v2) + w3 v3) + w4 v4, torchvision's association.
template <class Acc>
inline void add_sample(Lanes<Acc>& acc, const Acc* p1, const Acc* p2, const Acc* p3, const Acc* p4, Acc w1, Acc w2,
                       Acc w3, Acc w4) {
  constexpr int64_t n = kLanes<Acc> / kVecs;
  for (int64_t j = 0; j < kVecs; ++j) {
    acc.v[j] += ((w1 * load_vec(p1 + j * n) + w2 * load_vec(p2 + j * n)) + w3 * load_vec(p3 + j * n)) +
                w4 * load_vec(p4 + j * n);
  }
}

// Backward, one corner: p += g * w.
template <class Acc>
inline void add_scaled(Acc* p, const Lanes<Acc>& g, Acc w) {
  constexpr int64_t n = kLanes<Acc> / kVecs;
  for (int64_t j = 0; j < kVecs; ++j) {
    detail::store_u(p + j * n, load_vec(p + j * n) + g.v[j] * w);
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

template <class Acc>
int64_t channel_blocks(int64_t channels) {
  return (channels + kLanes<Acc> - 1) / kLanes<Acc>;
}

// Strides of a 4-D view.
struct Strides4 {
  int64_t s0, s1, s2, s3;
  explicit Strides4(const TensorView& t) : s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
};

// Packs the sampled region of image b, channels [c0, c0 + nc) interleaved; lanes past the last channel
// stay zero.
template <class T, class Acc>
void pack_patch(const T* in, const Strides4& is, int64_t b, int64_t c0, int64_t nc, const detail::RoiRegion& region,
                Patch<Acc>& patch) {
  constexpr int64_t L = kLanes<Acc>;
  patch.reset(region);
  for (int64_t y = region.row0; y < region.row1; ++y) {
    Acc* dst = patch.at(y, region.col0);
    for (int64_t c = 0; c < nc; ++c) {
      const T* src = in + b * is.s0 + (c0 + c) * is.s1 + y * is.s2;
      for (int64_t x = region.col0, i = 0; x < region.col1; ++x, ++i) dst[i * L + c] = load_as<Acc>(src[x * is.s3]);
    }
  }
}

// The sum of the samples of bin (ph, pw) of ROI k, all lanes at once.
template <class Acc>
SPATIALGRAD_INLINE Lanes<Acc> bin_sum(const detail::RoiTable<Acc>& table, Patch<Acc>& patch, int64_t k, int64_t ph,
                                      int64_t pw) {
  constexpr int64_t L = kLanes<Acc>;
  const int64_t col0 = patch.region.col0;
  const int64_t y_begin = table.y_first[k * table.pooled_h + ph], y_end = table.y_first[k * table.pooled_h + ph + 1];
  const int64_t x_begin = table.x_first[k * table.pooled_w + pw], x_end = table.x_first[k * table.pooled_w + pw + 1];
  Lanes<Acc> acc{};
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

// ROI k's bins, bin-major with kLanes channels each: the means of their samples.
template <class Acc>
void pool_roi(const detail::RoiTable<Acc>& table, Patch<Acc>& patch, int64_t k, Acc* bins) {
  constexpr int64_t L = kLanes<Acc>;
  const Acc count = table.count[k];
  for (int64_t ph = 0; ph < table.pooled_h; ++ph) {
    for (int64_t pw = 0; pw < table.pooled_w; ++pw) {
      const Lanes<Acc> acc = bin_sum(table, patch, k, ph, pw);
      Acc* means = bins + (ph * table.pooled_w + pw) * L;
      for (int64_t j = 0; j < kVecs; ++j)
        detail::store_u(means + j * (L / kVecs), acc.v[j] / count);  // torchvision's output_val /= count
    }
  }
}

// Written channel by channel: contiguous for a contiguous output.
template <class T, class Acc>
void store_roi(const Acc* bins, int64_t ph_count, int64_t pw_count, int64_t nc, T* out_roi, const Strides4& os) {
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t ph = 0; ph < ph_count; ++ph) {
      for (int64_t pw = 0; pw < pw_count; ++pw)
        out_roi[c * os.s1 + ph * os.s2 + pw * os.s3] = store_as<T>(bins[(ph * pw_count + pw) * kLanes<Acc> + c]);
    }
  }
}

// Tasks are (image, channel block, chunk of the image's ROIs). ROIs write disjoint outputs, so the
// forward may also split each image's ROIs into chunks when images x channel blocks are too few to keep
// the threads busy.
template <class T>
void forward_kernel(const TensorView& input, const TensorView& output, const detail::RoiTable<AccType<T>>& table) {
  using Acc = AccType<T>;
  constexpr int64_t L = kLanes<Acc>;
  const int64_t num_images = input.size(0), channels = input.size(1);
  const Strides4 is(input), os(output);
  const int64_t blocks = channel_blocks<Acc>(channels);
  int64_t max_rois = 0, pixels = 0;
  for (int64_t b = 0; b < num_images; ++b)
    max_rois = std::max(max_rois, table.image_first[b + 1] - table.image_first[b]);
  for (const auto& r : table.region) pixels += r.rows() * r.cols();
  const int64_t wanted = 4 * static_cast<int64_t>(get_num_threads());
  const int64_t chunks =
      std::max<int64_t>(1, std::min(max_rois, (wanted + num_images * blocks - 1) / (num_images * blocks)));
  const int64_t items = num_images * blocks * chunks;
  const int64_t work = table.samples * 4 * channels + (pixels * chunks + output.numel()) * L;
  parallel_for(
      0, items, grain_for(static_cast<double>(work) / std::max<int64_t>(items, 1), kMinWorkPerRoiTask),
      [&](int64_t lo, int64_t hi) {
        Patch<Acc> patch;
        std::vector<Acc> bins(static_cast<size_t>(table.pooled_h * table.pooled_w * L));
        int64_t packed = -1;  // (image, block) currently in the patch
        for (int64_t item = lo; item < hi; ++item) {
          const int64_t chunk = item % chunks, image_block = item / chunks;
          const int64_t b = image_block / blocks, c0 = (image_block % blocks) * L, nc = std::min(L, channels - c0);
          const int64_t first = table.image_first[b], total = table.image_first[b + 1] - first;
          const int64_t per_chunk = (total + chunks - 1) / chunks;
          const int64_t r_lo = first + std::min(total, chunk * per_chunk);
          const int64_t r_hi = first + std::min(total, (chunk + 1) * per_chunk);
          if (r_lo >= r_hi) continue;
          if (packed != image_block) pack_patch(input.data<T>(), is, b, c0, nc, table.region[b], patch);
          packed = image_block;
          for (int64_t r = r_lo; r < r_hi; ++r) {
            const int64_t k = table.order[r];
            pool_roi(table, patch, k, bins.data());
            store_roi(bins.data(), table.pooled_h, table.pooled_w, nc, output.data<T>() + k * os.s0 + c0 * os.s1, os);
          }
        }
      });
}

// ROI k's gradient block, bin-major with kLanes channels each (lanes past nc stay as they are: zero).
// Read channel by channel: contiguous for a contiguous grad_output.
template <class T, class Acc>
void load_grad_bins(const T* g_roi, const Strides4& gs, int64_t ph_count, int64_t pw_count, int64_t nc, Acc* bins) {
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t ph = 0; ph < ph_count; ++ph) {
      for (int64_t pw = 0; pw < pw_count; ++pw)
        bins[(ph * pw_count + pw) * kLanes<Acc> + c] = load_as<Acc>(g_roi[c * gs.s1 + ph * gs.s2 + pw * gs.s3]);
    }
  }
}

// Adds bin (ph, pw)'s gradient g to the patch at the bin's samples.
template <class Acc>
SPATIALGRAD_INLINE void scatter_bin(const detail::RoiTable<Acc>& table, Patch<Acc>& patch, int64_t k, int64_t ph,
                                    int64_t pw, const Lanes<Acc>& g, Acc inv_count) {
  constexpr int64_t L = kLanes<Acc>;
  const int64_t col0 = patch.region.col0;
  const int64_t y_begin = table.y_first[k * table.pooled_h + ph], y_end = table.y_first[k * table.pooled_h + ph + 1];
  const int64_t x_begin = table.x_first[k * table.pooled_w + pw], x_end = table.x_first[k * table.pooled_w + pw + 1];
  for (int64_t iy = y_begin; iy < y_end; ++iy) {
    const auto& ty = table.y_taps[iy];
    Acc* row_lo = patch.at(ty.lo, col0);
    Acc* row_hi = patch.at(ty.hi, col0);
    for (int64_t ix = x_begin; ix < x_end; ++ix) {
      const auto& tx = table.x_taps[ix];
      const int64_t x_lo = (tx.lo - col0) * L, x_hi = (tx.hi - col0) * L;
      // w / count once per sample; exact like torchvision's g * w / count when count is a power of 2.
      const Acc w1 = ty.w_lo * tx.w_lo * inv_count, w2 = ty.w_lo * tx.w_hi * inv_count;
      const Acc w3 = ty.w_hi * tx.w_lo * inv_count, w4 = ty.w_hi * tx.w_hi * inv_count;
      // Corners may coincide at the far edge: four separate passes keep the adds in order.
      add_scaled(row_lo + x_lo, g, w1);
      add_scaled(row_lo + x_hi, g, w2);
      add_scaled(row_hi + x_lo, g, w3);
      add_scaled(row_hi + x_hi, g, w4);
    }
  }
}

template <class Acc>
void scatter_roi(const detail::RoiTable<Acc>& table, Patch<Acc>& patch, int64_t k, const Acc* bins) {
  const Acc inv_count = Acc(1) / table.count[k];
  for (int64_t ph = 0; ph < table.pooled_h; ++ph) {
    const int64_t y_first = table.y_first[k * table.pooled_h + ph];
    if (y_first == table.y_first[k * table.pooled_h + ph + 1]) continue;
    for (int64_t pw = 0; pw < table.pooled_w; ++pw) {
      if (table.x_first[k * table.pooled_w + pw] == table.x_first[k * table.pooled_w + pw + 1]) continue;
      Lanes<Acc> g;
      detail::load_u(g, bins + (ph * table.pooled_w + pw) * kLanes<Acc>);
      scatter_bin(table, patch, k, ph, pw, g, inv_count);
    }
  }
}

// Writes every element of the block's planes once: the patch inside the region, zeros outside. Row by
// row, pixel-major over the patch (its lines are read once) into nc row streams.
template <class T, class Acc>
void write_block(const Patch<Acc>& patch, T* gi, const Strides4& is, int64_t b, int64_t c0, int64_t nc, int64_t height,
                 int64_t width) {
  const detail::RoiRegion& reg = patch.region;
  T* rows[kLanes<Acc>];
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t c = 0; c < nc; ++c) rows[c] = gi + b * is.s0 + (c0 + c) * is.s1 + y * is.s2;
    const bool inside = !reg.empty() && y >= reg.row0 && y < reg.row1;
    const int64_t zero_end = inside ? reg.col0 : width;
    for (int64_t c = 0; c < nc; ++c) {
      for (int64_t x = 0; x < zero_end; ++x) rows[c][x * is.s3] = store_as<T>(Acc(0));
      for (int64_t x = inside ? reg.col1 : width; x < width; ++x) rows[c][x * is.s3] = store_as<T>(Acc(0));
    }
    if (!inside) continue;
    const Acc* src = patch.at(y, reg.col0);
    for (int64_t x = reg.col0; x < reg.col1; ++x, src += kLanes<Acc>) {
      for (int64_t c = 0; c < nc; ++c) rows[c][x * is.s3] = store_as<T>(src[c]);
    }
  }
}

// Channel-block split of the scatter: task (image b, block) owns grad_input[b, c0:c0+L] and walks the
// image's ROIs in their original order, so every element sums its contributions in one fixed order
// (torchvision's: ROI, ph, pw, iy, ix, corner) whatever the thread count, with no atomics.
template <class T>
void backward_kernel(const TensorView& grad_output, const TensorView& grad_input,
                     const detail::RoiTable<AccType<T>>& table) {
  using Acc = AccType<T>;
  constexpr int64_t L = kLanes<Acc>;
  const int64_t channels = grad_input.size(1), height = grad_input.size(2), width = grad_input.size(3);
  const int64_t ph_count = table.pooled_h, pw_count = table.pooled_w;
  const Strides4 gs(grad_output), is(grad_input);
  const T* go = grad_output.data<T>();
  const int64_t blocks = channel_blocks<Acc>(channels), items = grad_input.size(0) * blocks;
  const int64_t work = table.samples * 4 * channels + grad_input.numel() * 2;
  // Elements from a channel's first to its last gradient value (prefetched for the next ROI).
  const int64_t g_span = ph_count > 0 && pw_count > 0 ? (ph_count - 1) * gs.s2 + (pw_count - 1) * gs.s3 + 1 : 0;
  parallel_for(0, items, grain_for(static_cast<double>(work) / std::max<int64_t>(items, 1), kMinWorkPerRoiTask),
               [&](int64_t lo, int64_t hi) {
                 Patch<Acc> patch;
                 std::vector<Acc> bins(static_cast<size_t>(ph_count * pw_count * L),
                                       Acc(0));  // lanes past nc stay zero
                 for (int64_t item = lo; item < hi; ++item) {
                   const int64_t b = item / blocks, c0 = (item % blocks) * L, nc = std::min(L, channels - c0);
                   patch.reset(table.region[b]);  // zeroed per task: the block's gradient stays cache-resident
                   for (int64_t r = table.image_first[b]; r < table.image_first[b + 1]; ++r) {
                     const int64_t k = table.order[r];
                     if (r + 1 < table.image_first[b + 1])
                       prefetch_block(go + table.order[r + 1] * gs.s0 + c0 * gs.s1, nc, gs.s1, g_span);
                     load_grad_bins(go + k * gs.s0 + c0 * gs.s1, gs, ph_count, pw_count, nc, bins.data());
                     scatter_roi(table, patch, k, bins.data());
                   }
                   write_block(patch, grad_input.data<T>(), is, b, c0, nc, height, width);
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
  forward_kernel<T>(input, output, table);
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
  backward_kernel<T>(grad_output, grad_input, table);
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
  dispatch_floating(input.dtype(), kForward, "input", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (detail::kIsHalfType<T>) {  // computed in float32 on staged copies: detail/float_staging.h
      using detail::FloatStaging;
      const auto staged_input = FloatStaging::copy_of(input), staged_boxes = FloatStaging::copy_of(boxes);
      const auto staged_output = FloatStaging::like(output);
      run_forward<float>(staged_input.view(), staged_boxes.view(), staged_output.view(), params);
      staged_output.narrow_into(output);
    } else {
      run_forward<T>(input, boxes, output, params);
    }
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
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [](auto) {});
}

void roi_align_backward(const TensorView& grad_output, const TensorView& boxes, const std::vector<int64_t>& input_shape,
                        const TensorView& grad_input, const RoiAlignParams& params) {
  check_roi_align_backward(grad_output, boxes, input_shape, grad_input, params);
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (detail::kIsHalfType<T>) {  // computed in float32 on staged copies: detail/float_staging.h
      using detail::FloatStaging;
      const auto staged_grad_output = FloatStaging::copy_of(grad_output), staged_boxes = FloatStaging::copy_of(boxes);
      const auto staged_grad_input = FloatStaging::like(grad_input);
      run_backward<float>(staged_grad_output.view(), staged_boxes.view(), input_shape, staged_grad_input.view(),
                          params);
      staged_grad_input.narrow_into(grad_input);
    } else {
      run_backward<T>(grad_output, boxes, input_shape, grad_input, params);
    }
  });
}

}  // namespace spatialgrad

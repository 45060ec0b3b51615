#include "spatialgrad/ms_deform_attn.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "detail/checks.h"
#include "detail/convert.h"
#include "detail/entry.h"
#include "detail/ms_deform_attn.h"
#include "detail/parallel_for.h"
#include "detail/rows.h"
#include "detail/scratch_bound.h"
#include "detail/simd.h"
#include "detail/strategy.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "ms_deform_attn";
constexpr const char* kBackward = "ms_deform_attn_backward";
// Forward tasks cover this many queries of one (batch, head) pair.
constexpr int64_t kQueryBlock = 64;
// Channel reductions keep this many independent partial sums (vectorisable, fixed order).
constexpr int64_t kLanes = 8;
// The cost model of the parallel split (grain_for, parallel.h), in multiply-adds: a sampling point costs
// 4 taps per channel in the forward, and 4 taps reading value, 4 scattering grad_value and 4 forming the
// location gradient in the backward; the per-point terms are its coordinate and weight arithmetic. A
// packed forward also copies its pair's slice once, a packed backward packs, zeroes and unpacks it (3 passes
// over rows * C values; 2 when only the gradient is in a buffer).
constexpr int64_t kForwardCostPerChannel = 4, kForwardCostPerPoint = 16;
constexpr int64_t kBackwardCostPerChannel = 12, kBackwardCostPerPoint = 32, kBackwardSlicePasses = 3;

using detail::DeformLevel;

using Problem = detail::DeformProblem;

void check_index_dtype(const char* op, const char* name, const TensorView& t) {
  SG_CHECK_KIND(t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64, kType, op, "(): expected ", name,
                " to be int32 or int64, but got ", dtype_name(t.dtype()));
}

// The int32/int64 element at `offset` (in elements) of an index view.
int64_t read_index(const TensorView& t, int64_t offset) {
  return t.dtype() == DType::kInt32 ? static_cast<int64_t>(t.data<int32_t>()[offset]) : t.data<int64_t>()[offset];
}

// Validates the inputs both directions share (docs/operators.md (Multi-scale deformable attention) plus what the NPU
// leaves unchecked) and reads the level table.
Problem validate(const char* op, const TensorView& value, const TensorView& spatial_shapes,
                 const TensorView& level_start_index, const TensorView& sampling_locations,
                 const TensorView& attention_weights) {
  detail::check_dim(op, "value", value, 4);
  detail::check_dim(op, "spatial_shapes", spatial_shapes, 2);
  SG_CHECK(spatial_shapes.size(1) == 2, op, "(): expected spatial_shapes of shape (L, 2), but got ",
           spatial_shapes.shape_string());
  detail::check_dim(op, "level_start_index", level_start_index, 1);
  detail::check_dim(op, "sampling_locations", sampling_locations, 6);
  SG_CHECK(sampling_locations.size(5) == 2, op,
           "(): expected sampling_locations of shape (bs, Q, nH, L, P, 2), but got last dimension ",
           sampling_locations.size(5), " in shape ", sampling_locations.shape_string());
  detail::check_dim(op, "attention_weights", attention_weights, 5);
  detail::check_same_dtype(op, "sampling_locations", sampling_locations, "value", value);
  detail::check_same_dtype(op, "attention_weights", attention_weights, "value", value);
  check_index_dtype(op, "spatial_shapes", spatial_shapes);
  check_index_dtype(op, "level_start_index", level_start_index);

  Problem pb;
  pb.batch = value.size(0);
  pb.spatial = value.size(1);
  pb.heads = value.size(2);
  pb.channels = value.size(3);
  pb.levels = spatial_shapes.size(0);
  pb.queries = sampling_locations.size(1);
  pb.points = sampling_locations.size(4);
  const std::vector<int64_t> loc_shape{pb.batch, pb.queries, pb.heads, pb.levels, pb.points, 2};
  SG_CHECK(sampling_locations.sizes() == loc_shape, op,
           "(): expected sampling_locations of shape (bs, Q, nH, L, P, 2) = ", format_list(loc_shape),
           " (bs, nH from value, L from spatial_shapes), but got ", sampling_locations.shape_string());
  const std::vector<int64_t> weight_shape{pb.batch, pb.queries, pb.heads, pb.levels, pb.points};
  SG_CHECK(attention_weights.sizes() == weight_shape, op,
           "(): expected attention_weights of shape (bs, Q, nH, L, P) = ", format_list(weight_shape),
           " (the first five dimensions of sampling_locations), but got ", attention_weights.shape_string());
  SG_CHECK(level_start_index.size(0) == pb.levels, op, "(): expected level_start_index of shape (L,) = (", pb.levels,
           ",) (one entry per level of spatial_shapes), but got ", level_start_index.shape_string());

  pb.level_table.resize(static_cast<size_t>(pb.levels));
  int64_t total = 0;
  for (int64_t l = 0; l < pb.levels; ++l) {
    const int64_t h = read_index(spatial_shapes, l * spatial_shapes.stride(0));
    const int64_t w = read_index(spatial_shapes, l * spatial_shapes.stride(0) + spatial_shapes.stride(1));
    SG_CHECK(h >= 1 && w >= 1, op, "(): expected spatial_shapes entries (H, W) >= 1, but got (", h, ", ", w,
             ") at level ", l);
    pb.level_table[static_cast<size_t>(l)] = DeformLevel{h, w, total};
    total = detail::checked_add(op, total, detail::checked_mul(op, h, w));
  }
  SG_CHECK(total == pb.spatial, op, "(): expected value.shape[1] to be ", total,
           " (the sum of H*W over spatial_shapes), but got ", pb.spatial, " in value of shape ", value.shape_string());
  for (int64_t l = 0; l < pb.levels; ++l) {
    const int64_t start = read_index(level_start_index, l * level_start_index.stride(0));
    const int64_t expected = pb.level_table[static_cast<size_t>(l)].start;
    SG_CHECK(start == expected, op, "(): expected level_start_index[", l, "] to be ", expected,
             " (the sum of H*W over the levels before it), but got ", start);
  }
  return pb;
}

// No query, level, point or channel: the sums are empty, the results zeros. The kernels are not run: they
// would form pointers into the empty tensors, whose data may be null (null + offset is undefined).
bool nothing_sampled(const Problem& pb) {
  return pb.queries == 0 || pb.levels == 0 || pb.points == 0 || pb.channels == 0;
}

// The point tensors' strides, flattened into the index arithmetic the kernels need.
struct Strides {
  int64_t loc[6], attn[5];
  Strides(const TensorView& loc_view, const TensorView& attn_view) {
    for (int d = 0; d < 6; ++d) loc[d] = loc_view.stride(d);
    for (int d = 0; d < 5; ++d) attn[d] = attn_view.stride(d);
  }
};

// ---- where a level's rows are -------------------------------------------------------------------------------
// The kernels reach the four corner rows of a located point through a row source of its level: pointers to C
// values each, in the order of DeformPoint::weight. Two strategies give them (docs/design.md, "ms_deform_attn:
// packed or direct"; the choice is pack_pays', below):
//  - packed: the value rows of one (b, h) pair are copied into a contiguous buffer in the accumulation
//    type, each level with a one-pixel border of zero rows: a located point's corners (hl, wl) ..
//    (hl+1, wl+1), with hl in [-1, H-1] and wl in [-1, W-1], are then always four rows of the buffer (a
//    corner outside the level reads a zero), so the per-point work has no bounds tests. The backward
//    accumulates the gradient in a buffer of the same layout (what lands on the border is discarded) and
//    writes it out at the end. Cost and scratch follow the value slice, whatever the number of points.
//  - direct: the rows are read in value where they are (copied per corner where they must be converted:
//    float16/bfloat16, or a channel stride other than 1), and float/double gradients with a unit channel
//    stride are added into grad_value in place (zeroed first; otherwise they are summed in buffers over
//    bands of pixels, BandGrads). A corner outside the level reads a row of zeros, or writes a row whose
//    contents are discarded. Cost and scratch follow the points (plus the zero-fill of grad_value).
// Both feed the channel passes the same numbers in the same order: the same bits.

struct PaddedLevel {
  int64_t height, width, start;  // as in DeformLevel
  int64_t row_pitch;             // width + 2: rows of the buffer from one image row to the next
  int64_t first;                 // buffer row of pixel (0, 0)
};

struct PaddedLayout {
  std::vector<PaddedLevel> levels;
  int64_t rows = 0;  // buffer rows in all
};

PaddedLayout padded_layout(const Problem& pb) {
  PaddedLayout out;
  for (const DeformLevel& level : pb.level_table) {
    const int64_t pitch = level.width + 2;
    out.levels.push_back(PaddedLevel{level.height, level.width, level.start, pitch, out.rows + pitch + 1});
    out.rows += (level.height + 2) * pitch;
  }
  return out;
}

// A level of a pair's padded buffer. E: const Acc for value rows, Acc for gradient rows.
template <class E>
struct PaddedRows {
  E* origin;               // pixel (0, 0)
  int64_t x_step, y_step;  // C and (W + 2) * C
  SPATIALGRAD_INLINE void corners(int64_t hl, int64_t wl, E* (&rows)[4]) const {
    E* top = origin + hl * y_step + wl * x_step;
    rows[0] = top;
    rows[1] = top + x_step;
    rows[2] = top + y_step;
    rows[3] = top + y_step + x_step;
  }
  static constexpr bool kPrefetch = false;  // a pair's buffer: mostly in cache
  SPATIALGRAD_INLINE void prefetch(int64_t, int64_t) const {}
};

template <class E>
PaddedRows<E> padded_rows(E* buffer, const PaddedLevel& level, int64_t channels) {
  return {buffer + level.first * channels, channels, level.row_pitch * channels};
}

// The corners of a point whose top-left corner is (hl, wl), on a height x width level whose pixels are
// x_step elements apart: their offsets from pixel (0, 0), and whether each lies inside the level.
struct LevelGrid {
  int64_t x_step, y_step, height, width;  // y_step = width * x_step
  SPATIALGRAD_INLINE void corners(int64_t hl, int64_t wl, int64_t (&at)[4], bool (&inside)[4]) const {
    const bool top = hl >= 0, bottom = hl + 1 < height, left = wl >= 0, right = wl + 1 < width;
    at[0] = hl * y_step + wl * x_step;
    at[1] = at[0] + x_step;
    at[2] = at[0] + y_step;
    at[3] = at[2] + x_step;
    inside[0] = top && left;
    inside[1] = top && right;
    inside[2] = bottom && left;
    inside[3] = bottom && right;
  }
};

// A level of value[b, :, h, :] or grad_value[b, :, h, :] itself (T == Acc, unit channel stride).
template <class E>
struct TensorRows {
  E* origin;  // pixel (0, 0)
  LevelGrid grid;
  E* outside;            // the rows of the corners outside the level
  int64_t outside_step;  // 0: one row of zeros (reads); C: four rows to discard (writes, never aliased)
  int64_t row_bytes;     // C values
  SPATIALGRAD_INLINE void corners(int64_t hl, int64_t wl, E* (&rows)[4]) const {
    int64_t at[4];
    bool inside[4];
    grid.corners(hl, wl, at, inside);
    for (int k = 0; k < 4; ++k) rows[k] = inside[k] ? origin + at[k] : outside + k * outside_step;
  }
  // Random rows of a large tensor: requested ahead of their use (prefetch_point).
  static constexpr bool kPrefetch = true;
  SPATIALGRAD_INLINE void prefetch(int64_t hl, int64_t wl) const {
    constexpr detail::Access kAccess = std::is_const_v<E> ? detail::Access::kRead : detail::Access::kWrite;
    int64_t at[4];
    bool inside[4];
    grid.corners(hl, wl, at, inside);
    for (int k = 0; k < 4; ++k) {
      if (inside[k]) detail::prefetch_bytes<kAccess>(origin + at[k], row_bytes);
    }
  }
};

// A level of value[b, :, h, :] whose rows must be converted (float16/bfloat16) or gathered (a channel
// stride other than 1): the corners inside the level are copied into four local rows as they are reached.
template <class T, class Acc>
struct ConvertedRows {
  const T* origin;  // pixel (0, 0)
  LevelGrid grid;
  int64_t channel_step, channels;
  Acc* local;        // four rows of C
  const Acc* zeros;  // a row of C zeros
  SPATIALGRAD_INLINE void corners(int64_t hl, int64_t wl, const Acc* (&rows)[4]) const {
    int64_t at[4];
    bool inside[4];
    grid.corners(hl, wl, at, inside);
    for (int k = 0; k < 4; ++k) {
      Acc* row = local + k * channels;
      if (inside[k]) detail::load_row(origin + at[k], channel_step, channels, row);
      rows[k] = inside[k] ? row : zeros;
    }
  }
  static constexpr bool kPrefetch = true;
  SPATIALGRAD_INLINE void prefetch(int64_t hl, int64_t wl) const {
    const int64_t row_bytes = (channel_step == 1 ? channels : 1) * static_cast<int64_t>(sizeof(T));  // else: 1st
    int64_t at[4];
    bool inside[4];
    grid.corners(hl, wl, at, inside);
    for (int k = 0; k < 4; ++k) {
      if (inside[k]) detail::prefetch_bytes(origin + at[k], row_bytes);
    }
  }
};

// tensor[b, :, h, :]: where it starts, and its strides along S and C.
template <class T>
struct Slice {
  T* data;
  int64_t row_step, channel_step;
};

template <class T>
Slice<T> slice_of(const TensorView& t, int64_t b, int64_t h) {
  return {t.data<std::remove_const_t<T>>() + b * t.stride(0) + h * t.stride(2), t.stride(1), t.stride(3)};
}

template <class E>
LevelGrid level_grid(const DeformLevel& level, const Slice<E>& slice) {
  return {slice.row_step, level.width * slice.row_step, level.height, level.width};
}

// Rows of one head sit nH*C elements apart, a stride the hardware prefetchers do not follow across
// pages: the copies in and out of the per-pair buffers request the row kRowsAhead ahead themselves
// (measured ~1.4x faster copies).
constexpr int64_t kRowsAhead = 16;

template <class T>
SPATIALGRAD_INLINE void prefetch_span(const T* row, int64_t n, bool for_write) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  if (for_write) {
    detail::prefetch_bytes<detail::Access::kWrite>(row, bytes);
  } else {
    detail::prefetch_bytes(row, bytes);
  }
}

// Copies the value slice into the interior rows of `rows` (the border is left alone: zero).
// Cloned, and with a unit-stride path, so that the row copies (and conversions) are vector loops.
template <class Isa, class T, class Acc>
SG_SIMD_KERNEL void pack_value_slice(Isa, const Slice<const T>& slice, const PaddedLayout& layout, int64_t channels,
                                     Acc* __restrict rows) {
  const int64_t row_stride = slice.row_step, channel_stride = slice.channel_step;
  for (const PaddedLevel& level : layout.levels) {
    const int64_t pixels = level.height * level.width;
    const T* row = slice.data + level.start * row_stride;
    for (int64_t y = 0, s = 0; y < level.height; ++y) {
      Acc* __restrict dst = rows + (level.first + y * level.row_pitch) * channels;
      for (int64_t x = 0; x < level.width; ++x, ++s, row += row_stride, dst += channels) {
        if (channel_stride == 1 && s + kRowsAhead < pixels)
          prefetch_span(row + kRowsAhead * row_stride, channels, false);
        detail::load_row(row, channel_stride, channels, dst);  // float16: F16C where the CPU has it
      }
    }
  }
}
template <class T, class Acc>
void pack_value_slice(const Slice<const T>& slice, const PaddedLayout& layout, int64_t channels, Acc* rows) {
  SG_SIMD_DISPATCH(pack_value_slice(isa, slice, layout, channels, rows));
}

// Writes the interior rows of `grads` to the gradient slice.
template <class Isa, class T, class Acc>
SG_SIMD_KERNEL void unpack_grad_slice(Isa, const Acc* __restrict grads, const PaddedLayout& layout, int64_t channels,
                                      const Slice<T>& slice) {
  const int64_t row_stride = slice.row_step, channel_stride = slice.channel_step;
  for (const PaddedLevel& level : layout.levels) {
    const int64_t pixels = level.height * level.width;
    T* row = slice.data + level.start * row_stride;
    for (int64_t y = 0, s = 0; y < level.height; ++y) {
      const Acc* __restrict src = grads + (level.first + y * level.row_pitch) * channels;
      for (int64_t x = 0; x < level.width; ++x, ++s, row += row_stride, src += channels) {
        if (channel_stride == 1 && s + kRowsAhead < pixels)
          prefetch_span(row + kRowsAhead * row_stride, channels, true);
        detail::store_row(src, channels, row, channel_stride);
      }
    }
  }
}
template <class T, class Acc>
void unpack_grad_slice(const Acc* grads, const PaddedLayout& layout, int64_t channels, const Slice<T>& slice) {
  SG_SIMD_DISPATCH(unpack_grad_slice(isa, grads, layout, channels, slice));
}

// The value rows of the pair a thread works on, packed: prepare(b, h) copies its slice into the padded
// buffer (unless the buffer holds it already); rows(l) is level l's row source.
template <class T, class Acc>
class PackedValue {
 public:
  PackedValue(const TensorView& value, const PaddedLayout& layout, int64_t channels)
      : value_(value), layout_(layout), channels_(channels), buffer_(static_cast<size_t>(layout.rows * channels)) {}
  void prepare(int64_t b, int64_t h) {
    if (b == b_ && h == h_) return;
    pack_value_slice<T>(slice_of<const T>(value_, b, h), layout_, channels_, buffer_.data());
    b_ = b;
    h_ = h;
  }
  PaddedRows<const Acc> rows(int64_t l) const {
    return padded_rows<const Acc>(buffer_.data(), layout_.levels[static_cast<size_t>(l)], channels_);
  }

 private:
  const TensorView& value_;
  const PaddedLayout& layout_;
  int64_t channels_, b_ = -1, h_ = -1;
  std::vector<Acc> buffer_;  // value-initialised: the borders stay zero
};

// The value rows of the pair a thread works on, read where they are: in place when kInPlace (T == Acc,
// unit channel stride), else copied per corner.
template <class T, class Acc, bool kInPlace>
class DirectValue {
 public:
  DirectValue(const TensorView& value, const Problem& pb)
      : value_(value),
        levels_(pb.level_table),
        channels_(pb.channels),
        zeros_(static_cast<size_t>(pb.channels)),
        local_(kInPlace ? 0 : static_cast<size_t>(4 * pb.channels)) {}
  void prepare(int64_t b, int64_t h) { slice_ = slice_of<const T>(value_, b, h); }
  int64_t row_bytes() const { return channels_ * static_cast<int64_t>(sizeof(T)); }
  auto rows(int64_t l) {
    const DeformLevel& level = levels_[static_cast<size_t>(l)];
    const T* origin = slice_.data + level.start * slice_.row_step;
    if constexpr (kInPlace) {
      return TensorRows<const Acc>{origin, level_grid(level, slice_), zeros_.data(), 0, row_bytes()};
    } else {
      return ConvertedRows<T, Acc>{
          origin, level_grid(level, slice_), slice_.channel_step, channels_, local_.data(), zeros_.data()};
    }
  }

 private:
  const TensorView& value_;
  const std::vector<DeformLevel>& levels_;
  int64_t channels_;
  Slice<const T> slice_{};
  std::vector<Acc> zeros_, local_;
};

// A band of a slice's pixels [first, last) along S, made of whole image rows.
struct Band {
  int64_t first, last;
};

// Cuts S into bands of whole image rows, each of at most max_pixels pixels (or one image row).
std::vector<Band> pixel_bands(const Problem& pb, int64_t max_pixels) {
  std::vector<Band> bands;
  Band band{0, 0};
  for (const DeformLevel& level : pb.level_table) {
    for (int64_t y = 0; y < level.height; ++y) {
      if (band.last > band.first && band.last - band.first + level.width > max_pixels) {
        bands.push_back(band);
        band = {band.last, band.last};
      }
      band.last += level.width;
    }
  }
  bands.push_back(band);
  return bands;
}

// The gradient rows of the pair a thread works on, accumulated in a padded buffer and written to
// grad_value by finish() (the packed strategy: one band, the whole slice).
template <class T, class Acc>
class PaddedGrads {
 public:
  PaddedGrads(const TensorView& grad_value, const PaddedLayout& layout, int64_t channels)
      : grad_value_(grad_value),
        layout_(layout),
        channels_(channels),
        buffer_(static_cast<size_t>(layout.rows * channels)) {}
  void prepare(int64_t b, int64_t h, const Band&) {
    std::fill(buffer_.begin(), buffer_.end(), Acc(0));
    slice_ = slice_of<T>(grad_value_, b, h);
  }
  PaddedRows<Acc> rows(int64_t l) {
    return padded_rows<Acc>(buffer_.data(), layout_.levels[static_cast<size_t>(l)], channels_);
  }
  void finish() const { unpack_grad_slice(buffer_.data(), layout_, channels_, slice_); }

 private:
  const TensorView& grad_value_;
  const PaddedLayout& layout_;
  int64_t channels_;
  Slice<T> slice_{};
  std::vector<Acc> buffer_;
};

// A level's gradient rows within a band of a pair's pixels, in a buffer of the band's rows: the corners
// outside the level or the band go to four rows whose contents are discarded.
template <class Acc>
struct BandRows {
  Acc* buffer;          // the band's first pixel
  int64_t origin;       // the level's pixel (0, 0) from there, in elements (negative before the band)
  LevelGrid grid;       // x_step C
  int64_t top, bottom;  // the level's image rows in the band: [top, bottom)
  Acc* discard;
  int64_t channels;
  SPATIALGRAD_INLINE void corners(int64_t hl, int64_t wl, Acc* (&rows)[4]) const {
    int64_t at[4];
    bool inside[4];
    grid.corners(hl, wl, at, inside);
    const bool upper = hl >= top && hl < bottom, lower = hl + 1 >= top && hl + 1 < bottom;
    const bool in_band[4] = {upper, upper, lower, lower};
    for (int k = 0; k < 4; ++k) rows[k] = inside[k] && in_band[k] ? buffer + (origin + at[k]) : discard + k * channels;
  }
  static constexpr bool kPrefetch = false;  // a band's buffer: bounded, mostly in cache
  SPATIALGRAD_INLINE void prefetch(int64_t, int64_t) const {}
};

// The gradient rows of a band of the pair a thread works on, accumulated in a buffer (float32 for the half
// types) and written to grad_value by finish(): the direct strategy where the gradient cannot be added in
// place (float16/bfloat16, a channel stride other than 1). The bands keep the buffers within the scratch
// bound whatever S; every band's task visits all the pair's points in the same order and adds only the
// corners in its band, so each row is summed as without bands.
template <class T, class Acc>
class BandGrads {
 public:
  BandGrads(const TensorView& grad_value, const Problem& pb, int64_t band_pixels)
      : grad_value_(grad_value),
        levels_(pb.level_table),
        channels_(pb.channels),
        buffer_(static_cast<size_t>(band_pixels * pb.channels)),
        discard_(static_cast<size_t>(4 * pb.channels)) {}
  void prepare(int64_t b, int64_t h, const Band& band) {
    band_ = band;
    slice_ = slice_of<T>(grad_value_, b, h);
    std::fill(buffer_.begin(), buffer_.begin() + (band.last - band.first) * channels_, Acc(0));
  }
  BandRows<Acc> rows(int64_t l) {
    const DeformLevel& level = levels_[static_cast<size_t>(l)];
    const int64_t W = level.width, end = level.start + level.height * W;
    auto image_row = [&](int64_t pixel) { return (std::clamp(pixel, level.start, end) - level.start) / W; };
    return {buffer_.data(),
            (level.start - band_.first) * channels_,
            LevelGrid{channels_, W * channels_, level.height, W},
            image_row(band_.first),
            image_row(band_.last),
            discard_.data(),
            channels_};
  }
  void finish() const {
    for (int64_t s = band_.first; s < band_.last; ++s) {
      detail::store_row(buffer_.data() + (s - band_.first) * channels_, channels_, slice_.data + s * slice_.row_step,
                        slice_.channel_step);
    }
  }

 private:
  const TensorView& grad_value_;
  const std::vector<DeformLevel>& levels_;
  int64_t channels_;
  Band band_{};
  Slice<T> slice_{};
  std::vector<Acc> buffer_, discard_;
};

// The gradient rows of the pair a thread works on, added into grad_value in place (T == Acc, unit channel
// stride; zeroed before the kernel runs: zero_rows).
template <class Acc>
class TensorGrads {
 public:
  TensorGrads(const TensorView& grad_value, const Problem& pb)
      : grad_value_(grad_value), levels_(pb.level_table), discard_(static_cast<size_t>(4 * pb.channels)) {}
  void prepare(int64_t b, int64_t h, const Band&) { slice_ = slice_of<Acc>(grad_value_, b, h); }
  TensorRows<Acc> rows(int64_t l) {
    const DeformLevel& level = levels_[static_cast<size_t>(l)];
    const int64_t channels = static_cast<int64_t>(discard_.size()) / 4;
    return {slice_.data + level.start * slice_.row_step, level_grid(level, slice_), discard_.data(), channels,
            channels * static_cast<int64_t>(sizeof(Acc))};
  }
  void finish() const {}

 private:
  const TensorView& grad_value_;
  const std::vector<DeformLevel>& levels_;
  Slice<Acc> slice_{};
  std::vector<Acc> discard_;
};

// Zeroes a float/double tensor of shape (bs, S, nH, C) whose channel stride is 1, split over the threads
// by its (b, s) rows: one span when they follow one another, else row by row or head by head. Non-temporal
// stores: the direct backward, which zeroes grad_value, touches few of its rows afterwards.
template <class T>
void zero_rows(const TensorView& t) {
  const int64_t S = t.size(1), heads = t.size(2), C = t.size(3);
  const bool whole = t.stride(2) == C;  // a row's heads follow one another
  const bool flat = whole && t.stride(1) == heads * C && (t.size(0) == 1 || t.stride(0) == S * heads * C);
  parallel_for(0, t.size(0) * S, grain_for(static_cast<double>(heads * C)), [&](int64_t lo, int64_t hi) {
    if (flat) {
      detail::zero_span_streaming(t.data<T>() + lo * heads * C, (hi - lo) * heads * C);
    } else {
      for (int64_t r = lo; r < hi; ++r) {
        T* row = t.data<T>() + (r / S) * t.stride(0) + (r % S) * t.stride(1);
        for (int64_t h = 0; h < (whole ? 1 : heads); ++h)
          detail::zero_span_streaming(row + h * t.stride(2), whole ? heads * C : C);
      }
    }
    detail::store_fence();
  });
}

// Copies grad_output[b, q, h*C + c] for q in [q_begin, q_end) and all c into `rows` (contiguous).
template <class T, class Isa, class Acc>
SG_SIMD_KERNEL void pack_grad_output_slice(Isa, const TensorView& grad_output, int64_t b, int64_t h, int64_t q_begin,
                                           int64_t q_end, int64_t channels, Acc* rows) {
  const int64_t s1 = grad_output.stride(1), s2 = grad_output.stride(2);
  const T* src = grad_output.data<T>() + b * grad_output.stride(0) + h * channels * s2;
  for (int64_t q = q_begin; q < q_end; ++q) {
    if (s2 == 1 && q + kRowsAhead < q_end) prefetch_span(src + (q + kRowsAhead) * s1, channels, false);
    detail::load_row(src + q * s1, s2, channels, rows + (q - q_begin) * channels);
  }
}
template <class T, class Acc>
void pack_grad_output_slice(const TensorView& grad_output, int64_t b, int64_t h, int64_t q_begin, int64_t q_end,
                            int64_t channels, Acc* rows) {
  SG_SIMD_DISPATCH(pack_grad_output_slice<T>(isa, grad_output, b, h, q_begin, q_end, channels, rows));
}

// Where gather_pair_points reads the points: the point tensors flattened to pointers and strides.
template <class T>
struct PointArgs {
  const T* loc;
  const T* attn;
  Strides st;
  int64_t points;
  // The location of point p of (b, q, h, l) (x; y is st.loc[5] further on), and the offset of the
  // weights of (b, q, h, l).
  const T* xy(int64_t b, int64_t q, int64_t h, int64_t l, int64_t p) const {
    return loc + b * st.loc[0] + q * st.loc[1] + h * st.loc[2] + l * st.loc[3] + p * st.loc[4];
  }
  int64_t attn_offset(int64_t b, int64_t q, int64_t h, int64_t l) const {
    return b * st.attn[0] + q * st.attn[1] + h * st.attn[2] + l * st.attn[3];
  }
};

// The locations and attention weights of queries [q_begin, q_end) of pair (b, h) as (x, y, a) per
// point, level by level: points[((l * n + q - q_begin) * P + p) * 3 ..], n = q_end - q_begin. The
// level walks of both directions then read them in order. The tensors hold the next query's values of
// (b, h, l) nH*L*P*2 elements further on, after a few small steps: a pattern the hardware prefetchers
// do not follow (loading the locations in the walks took ~15% of the backward and half the forward),
// so this pass requests the values of the query kQueriesAhead ahead itself.
constexpr int64_t kQueriesAhead = 8;

template <class T, class Acc>
void gather_pair_points(const PointArgs<T>& args, int64_t b, int64_t h, int64_t q_begin, int64_t q_end, int64_t levels,
                        Acc* __restrict points) {
  const int64_t P = args.points, loc_p = args.st.loc[4], loc_y = args.st.loc[5], attn_p = args.st.attn[4];
  const int64_t queries = q_end - q_begin;
  for (int64_t q = q_begin; q < q_end; ++q) {
    for (int64_t l = 0; l < levels; ++l) {
      if (q + kQueriesAhead < q_end) {
        detail::prefetch(args.xy(b, q + kQueriesAhead, h, l, 0));
        detail::prefetch(args.attn + args.attn_offset(b, q + kQueriesAhead, h, l));
      }
      const T* xy = args.xy(b, q, h, l, 0);
      const T* attn = args.attn + args.attn_offset(b, q, h, l);
      Acc* to = points + (l * queries + q - q_begin) * P * 3;
      for (int64_t p = 0; p < P; ++p) {
        to[3 * p] = load_as<Acc>(xy[p * loc_p]);
        to[3 * p + 1] = load_as<Acc>(xy[p * loc_p + loc_y]);
        to[3 * p + 2] = load_as<Acc>(attn[p * attn_p]);
      }
    }
  }
}

// ---- the strategy of a call ---------------------------------------------------------------------------------

// The strategies (detail/strategy.h): kPacked copies each (batch, head) slice of value into a padded buffer
// (and sums its gradient in one); kDirect reads value and adds into grad_value where they are. Both give
// the same bits.

// Packing a pair's slice costs a pass over its S rows; it pays back through the points, each of whose
// corner rows is then read (and its gradient added) in a compact buffer instead of at a random place of
// a large tensor. The direct strategy's extra cost per corner is about one memory latency whatever the
// row's length, while packing costs per channel: the crossover, in points per pixel of the slice, grows
// with the row, as kPackMinPointsPerPixel * (row bytes / 128 B, at least 1). Measured (packed and direct
// forced, alternating, 2 threads, float32, uniform points; points per pixel, direct time / packed time):
//  - DETR levels (100x167 .. 13x21, S = 22,223), 8 heads x 32 channels (128 B rows): forward 0.43: 0.69,
//    0.72: 0.83, 1.08: 0.99, 2.16: 1.19; backward 0.43: 0.79, 0.72: 0.91, 1.08: 1.03, 2.16: 1.33.
//    16 channels (64 B): the same crossover, 1.08: 1.0, 1.02. 4 x 64 channels (256 B): 1.08: 0.74, 0.87;
//    2.16: 0.98, 1.11. 2 x 128 (512 B): 2.88: 0.83, 0.84; 5.76: 1.04, 1.04.
//  - levels 64x64 .. 8x8 (S = 5,440), 8 x 32: the pair's buffers stay in L2 (2 MiB here), and the
//    backward's three passes over them are cheap: backward 0.59: 0.92, 0.88: 1.14, 1.47: 1.33 (forward
//    0.88: 0.76, 1.47: 0.96, 2.06: 1.10, 2.94: 1.16).
//  - an encoder (Q = S, local points) is 16 points per pixel: packed, direct 1.39x forward, 1.22x backward.
//  - float16, whose direct strategy converts every corner row it reads, DETR levels 8 x 32: forward 0.22:
//    0.62, 0.72: 1.08, 1.08: 1.30; backward (its gradient in a padded float32 buffer) 0.72: 0.94, 1.08:
//    1.0, 2.16: 1.28. Forward crossovers are 0.6 times the float32 ones there.
constexpr double kForwardPackMinPointsPerPixel = 1.0;
constexpr double kConvertedForwardFactor = 0.6;
constexpr double kBackwardPackMinPointsPerPixel = 1.0;
constexpr double kBackwardPackMinPointsPerPixelInL2 = 0.6;
constexpr int64_t kPackRowBytes = 128;
constexpr int64_t kL2Bytes = int64_t{2} << 20;  // per core, on the development machine
// A slice whose rows follow one another (one head, float32/float64) is laid out as the packed buffer
// already: the direct strategy was faster at any density (1 x 256 channels, DETR levels: 2.4x forward,
// 1.6x backward at 2.2 points per pixel; levels 64x64 + 32x32, 8 points: 1.2x, 1.2x at 9.4), so it is
// never packed.

// The strategy of a call and the grain of its parallel split.
struct Plan {
  bool packed;
  int64_t grain;
  int64_t band_pixels = 0;  // backward, direct, gradient in bands: their size (at most)
};

// What the choice reads besides the problem.
struct CallFacts {
  int64_t acc_bytes;     // sizeof(Acc)
  int64_t in_out_bytes;  // the call's inputs and outputs
  bool in_place;         // the direct strategy reads value in place (else it converts the rows it reads)
  bool compact;          // ... and every slice it reads or writes in place has consecutive rows
};

// Whether packing pays: the slice of a pair is swept by at least min_points_per_pixel points per pixel (per
// 128 bytes of its rows) and is not compact, and the buffers (`buffers` per task, at most `tasks` tasks at once) fit
// the scratch bound: the cost model.
bool pack_estimate_pays(const Problem& pb, const PaddedLayout& layout, double min_points_per_pixel, int64_t buffers,
                        int64_t tasks, const CallFacts& facts) {
  const double points = static_cast<double>(pb.queries) * pb.levels * pb.points;
  const double row_factor = std::max(1.0, static_cast<double>(pb.channels * facts.acc_bytes) / kPackRowBytes);
  if (facts.compact || points < min_points_per_pixel * row_factor * static_cast<double>(pb.spatial)) return false;
  const int64_t threads = std::min<int64_t>(get_num_threads(), tasks);
  const double scratch =
      static_cast<double>(threads) * static_cast<double>(buffers * layout.rows * pb.channels * facts.acc_bytes);
  return scratch <= static_cast<double>(detail::scratch_bound(facts.in_out_bytes));
}

// Whether a call packs: the pinned strategy (any call takes either), else the cost model.
bool pack_pays(const Problem& pb, const PaddedLayout& layout, double min_points_per_pixel, int64_t buffers,
               int64_t tasks, const CallFacts& facts) {
  using detail::MsDeformAttnStrategy;
  const auto cost_model = [&] {
    const bool pays = pack_estimate_pays(pb, layout, min_points_per_pixel, buffers, tasks, facts);
    return pays ? MsDeformAttnStrategy::kPacked : MsDeformAttnStrategy::kDirect;
  };
  const auto any_call = [](MsDeformAttnStrategy) { return true; };
  return detail::choose_strategy<MsDeformAttnStrategy>(any_call, cost_model) == MsDeformAttnStrategy::kPacked;
}

Plan plan_forward(const Problem& pb, const PaddedLayout& layout, const CallFacts& facts) {
  const int64_t blocks = (pb.queries + kQueryBlock - 1) / kQueryBlock;
  const double min_points_per_pixel = kForwardPackMinPointsPerPixel * (facts.in_place ? 1 : kConvertedForwardFactor);
  const bool packed = pack_pays(pb, layout, min_points_per_pixel, 1, pb.batch * pb.heads * blocks, facts);
  const double block_points = static_cast<double>(std::min(pb.queries, kQueryBlock)) * pb.levels * pb.points;
  // A packed slice is shared by the items of a pair (and so is its cost).
  const double packing = packed ? static_cast<double>(layout.rows) * pb.channels / static_cast<double>(blocks) : 0;
  return {packed,
          grain_for(block_points * (kForwardCostPerChannel * pb.channels + kForwardCostPerPoint) + packing + 1)};
}

// In place, the direct strategy adds the gradient into grad_value itself; else into bands of at most
// band_pixels pixels, sized so that a buffer per thread keeps within the bound.
Plan plan_backward(const Problem& pb, const PaddedLayout& layout, const CallFacts& facts) {
  const int64_t buffer_bytes = layout.rows * pb.channels * facts.acc_bytes;
  const double min_points_per_pixel =
      2 * buffer_bytes <= kL2Bytes ? kBackwardPackMinPointsPerPixelInL2 : kBackwardPackMinPointsPerPixel;
  Plan plan{pack_pays(pb, layout, min_points_per_pixel, 2, pb.batch * pb.heads, facts), 0, 0};
  double slice_rows = 0;  // rows of pair buffers a task packs, zeroes or writes out
  if (plan.packed) {
    slice_rows = kBackwardSlicePasses * static_cast<double>(layout.rows);
  } else if (!facts.in_place) {
    const int64_t forced = detail::pinned_band<detail::MsDeformAttnStrategy>();
    const int64_t pixel_bytes = std::max<int64_t>(pb.channels * facts.acc_bytes, 1);
    plan.band_pixels =
        forced > 0 ? forced : detail::scratch_bound(facts.in_out_bytes) / get_num_threads() / pixel_bytes;
    plan.band_pixels = std::max<int64_t>(plan.band_pixels, 1);
    slice_rows = (kBackwardSlicePasses - 1) * static_cast<double>(std::min(plan.band_pixels, pb.spatial));
  }
  const double points = static_cast<double>(pb.queries) * pb.levels * pb.points;
  plan.grain = grain_for(points * (kBackwardCostPerChannel * pb.channels + kBackwardCostPerPoint) +
                         slice_rows * pb.channels + 1);
  return plan;
}

// ---- forward ------------------------------------------------------------------------------------------------

// sum += w0 v0 + w1 v1 + w2 v2 + w3 v3 over the channels of the corner rows v.
template <class Acc>
SPATIALGRAD_INLINE void forward_channels(int64_t channels, const Acc* const (&v)[4], Acc w0, Acc w1, Acc w2, Acc w3,
                                         Acc* __restrict sum) {
  const Acc* __restrict v0 = v[0];
  const Acc* __restrict v1 = v[1];
  const Acc* __restrict v2 = v[2];
  const Acc* __restrict v3 = v[3];
  for (int64_t c = 0; c < channels; ++c) sum[c] += w0 * v0[c] + w1 * v1[c] + w2 * v2[c] + w3 * v3[c];
}

// Calls add(corner, w) for each point of query q that lies on the height x width level, in point order: its
// four corner rows (from `rows`) and its weights a * w_i.
template <class Acc, class Rows, class Add>
SPATIALGRAD_INLINE void for_query_points(const Acc* __restrict points, int64_t q, int64_t P, int64_t height,
                                         int64_t width, const Rows& rows, Add&& add) {
  for (int64_t p = 0; p < P; ++p) {
    const Acc* xya = points + (q * P + p) * 3;
    detail::DeformPoint<Acc> pt;
    if (!detail::locate_deform_point(xya[0], xya[1], height, width, pt)) continue;
    const Acc* corner[4];
    rows.corners(pt.hl, pt.wl, corner);
    const Acc a = xya[2];
    add(corner, a * pt.weight[0], a * pt.weight[1], a * pt.weight[2], a * pt.weight[3]);
  }
}

// forward_level for C = N vectors of the level: a query's sums stay in registers across its points, where the
// general loop stores them and loads them back for the next point (a dependency through memory: 18% of the
// forward's samples on that store at 16 channels a head). The same operations in the same order.
template <int N, class Isa, class Acc, class Rows>
SPATIALGRAD_INLINE void forward_level_in_registers(Isa, int64_t P, int64_t queries, int64_t height, int64_t width,
                                                   const Acc* __restrict points, const Rows& rows, Acc* acc) {
  using V = detail::Vec<Acc, Isa::kVecBytes>;
  constexpr int64_t n = detail::kVecLanes<Acc, Isa::kVecBytes>;
  for (int64_t q = 0; q < queries; ++q) {
    V sum[N];
    for (int j = 0; j < N; ++j) detail::load_u(sum[j], acc + (q * N + j) * n);
    for_query_points(points, q, P, height, width, rows,
                     [&](const Acc* const (&corner)[4], Acc w0, Acc w1, Acc w2, Acc w3) SG_SIMD_INLINE_LAMBDA {
                       for (int j = 0; j < N; ++j) {
                         V v0, v1, v2, v3;
                         detail::load_u(v0, corner[0] + j * n), detail::load_u(v1, corner[1] + j * n);
                         detail::load_u(v2, corner[2] + j * n), detail::load_u(v3, corner[3] + j * n);
                         sum[j] += w0 * v0 + w1 * v1 + w2 * v2 + w3 * v3;
                       }
                     });
    for (int j = 0; j < N; ++j) detail::store_u(acc + (q * N + j) * n, sum[j]);
  }
}

// One level of `queries` queries of a pair: acc[q * C + c] += the level's share of output row q, point by
// point; points holds the level's (x, y, a) per point q * P + p (gather_pair_points), `rows` its row source.
// One kernel per row source (a copy per instruction level): the channel passes inline into it and floor() is
// one instruction.
template <class Isa, class Acc, class Rows>
SG_SIMD_KERNEL void forward_level(Isa isa, int64_t channels, int64_t points_per_query, int64_t queries, int64_t height,
                                  int64_t width, const Acc* __restrict points, Rows rows, Acc* acc) {
  const int64_t C = channels, P = points_per_query;
  constexpr int64_t kVector = detail::kVecLanes<Acc, Isa::kVecBytes>;
  if (C == kVector) return forward_level_in_registers<1>(isa, P, queries, height, width, points, rows, acc);
  if (C == 2 * kVector) return forward_level_in_registers<2>(isa, P, queries, height, width, points, rows, acc);
  if (C == 4 * kVector) return forward_level_in_registers<4>(isa, P, queries, height, width, points, rows, acc);
  for (int64_t q = 0; q < queries; ++q) {
    Acc* sum = acc + q * C;
    for_query_points(points, q, P, height, width, rows,
                     [&](const Acc* const (&corner)[4], Acc w0, Acc w1, Acc w2, Acc w3) SG_SIMD_INLINE_LAMBDA {
                       forward_channels(C, corner, w0, w1, w2, w3, sum);
                     });
  }
}
template <class Acc, class Rows>
void forward_level(int64_t channels, int64_t points_per_query, int64_t queries, int64_t height, int64_t width,
                   const Acc* points, Rows rows, Acc* acc) {
  SG_SIMD_DISPATCH(forward_level(isa, channels, points_per_query, queries, height, width, points, rows, acc));
}

// The forward over (b, h, query block) items, the value rows from a source per thread (make_value()):
// output rows summed level by level (the rows read at a time are one level's), then point by point.
// T: the dtype of value and output; PT: that of the locations and weights (float32 staging for the half
// types: the gather reads them one value at a time).
template <class T, class PT, class MakeValue>
void forward_items(const Problem& pb, const PointArgs<PT>& args, const TensorView& output, int64_t grain,
                   const MakeValue& make_value) {
  using Acc = AccType<T>;
  const int64_t C = pb.channels, Q = pb.queries, L = pb.levels, P = pb.points;
  T* out = output.data<T>();
  const int64_t os0 = output.stride(0), os1 = output.stride(1), os2 = output.stride(2);
  const int64_t block_size = std::min(Q, kQueryBlock), blocks = (Q + kQueryBlock - 1) / kQueryBlock;
  // Items are (b, h, query block), so the items of one thread share a packed value slice.
  parallel_chunks(0, pb.batch * pb.heads * blocks, grain, 0, [&](ChunkQueue& queue) {
    auto value = make_value();                                  // per thread, kept across its chunks
    std::vector<Acc> acc(static_cast<size_t>(block_size * C));  // the block's output rows
    std::vector<Acc> points(static_cast<size_t>(block_size * L * P * 3));
    for (int64_t lo, hi; queue.next(lo, hi);) {
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t pair = item / blocks, b = pair / pb.heads, h = pair % pb.heads;
        const int64_t q_begin = item % blocks * kQueryBlock, q_end = std::min(Q, q_begin + kQueryBlock);
        const int64_t n = q_end - q_begin;
        value.prepare(b, h);
        std::fill(acc.begin(), acc.end(), Acc(0));
        gather_pair_points(args, b, h, q_begin, q_end, L, points.data());
        for (int64_t l = 0; l < L; ++l) {
          const DeformLevel& level = pb.level_table[static_cast<size_t>(l)];
          forward_level(C, P, n, level.height, level.width, points.data() + l * n * P * 3, value.rows(l), acc.data());
        }
        for (int64_t q = q_begin; q < q_end; ++q)
          detail::store_row(acc.data() + (q - q_begin) * C, C, out + b * os0 + q * os1 + h * C * os2, os2);
      }
    }
  });
}

template <class T, class PT>
void forward_kernel(const Problem& pb, const TensorView& value, const TensorView& loc_view, const TensorView& attn_view,
                    const TensorView& output, int64_t in_out_bytes) {
  using Acc = AccType<T>;
  const PointArgs<PT> args{loc_view.data<PT>(), attn_view.data<PT>(), Strides(loc_view, attn_view), pb.points};
  const PaddedLayout layout = padded_layout(pb);
  const bool in_place = std::is_same_v<T, Acc> && value.stride(3) == 1;
  const bool compact = in_place && value.stride(1) == pb.channels;
  const Plan plan = plan_forward(pb, layout, {sizeof(Acc), in_out_bytes, in_place, compact});
  if (plan.packed) {
    return forward_items<T>(pb, args, output, plan.grain,
                            [&] { return PackedValue<T, Acc>(value, layout, pb.channels); });
  }
  if constexpr (std::is_same_v<T, Acc>) {
    if (in_place) {
      return forward_items<T>(pb, args, output, plan.grain, [&] { return DirectValue<T, Acc, true>(value, pb); });
    }
  }
  forward_items<T>(pb, args, output, plan.grain, [&] { return DirectValue<T, Acc, false>(value, pb); });
}

// ---- backward -----------------------------------------------------------------------------------------------

// kLanes partial sums as one vector (detail::Vec): one AVX2 register for float.
template <class Acc>
using LanesVec = detail::Vec<Acc, kLanes * sizeof(Acc)>;

// The channel pass of one sampling point whose corner rows are v (value) and d (gradient). Every gradient
// but grad_value is linear in the corner values, so those are combinations of the four dot products
// dots[i] = <g, v_i>; the same pass adds aw_i * g to the four gradient rows.
template <class Acc>
SPATIALGRAD_INLINE void backward_channels(int64_t channels, const Acc* __restrict g, const Acc* const (&v)[4],
                                          Acc* const (&d)[4], const Acc (&aw)[4], Acc (&dots)[4]) {
  using V = LanesVec<Acc>;
  const Acc* __restrict v0 = v[0];
  const Acc* __restrict v1 = v[1];
  const Acc* __restrict v2 = v[2];
  const Acc* __restrict v3 = v[3];
  Acc* __restrict d0 = d[0];
  Acc* __restrict d1 = d[1];
  Acc* __restrict d2 = d[2];
  Acc* __restrict d3 = d[3];
  V p0{}, p1{}, p2{}, p3{};
  int64_t c = 0;
  for (; c + kLanes <= channels; c += kLanes) {
    V gc, x, y;
    detail::load_u(gc, g + c);
    p0 += gc * detail::load_u(x, v0 + c);
    p1 += gc * detail::load_u(x, v1 + c);
    p2 += gc * detail::load_u(x, v2 + c);
    p3 += gc * detail::load_u(x, v3 + c);
    detail::store_u(d0 + c, detail::load_u(y, d0 + c) + aw[0] * gc);
    detail::store_u(d1 + c, detail::load_u(y, d1 + c) + aw[1] * gc);
    detail::store_u(d2 + c, detail::load_u(y, d2 + c) + aw[2] * gc);
    detail::store_u(d3 + c, detail::load_u(y, d3 + c) + aw[3] * gc);
  }
  if (c < channels) {
    // The last channels as zero-padded vectors: the padding lanes add 0 * 0 to the sums and write
    // nothing back, and channel c still lands in lane c % kLanes.
    const size_t n = static_cast<size_t>(channels - c) * sizeof(Acc);
    V gc{}, x0{}, x1{}, x2{}, x3{}, y0{}, y1{}, y2{}, y3{};
    std::memcpy(&gc, g + c, n);
    std::memcpy(&x0, v0 + c, n);
    std::memcpy(&x1, v1 + c, n);
    std::memcpy(&x2, v2 + c, n);
    std::memcpy(&x3, v3 + c, n);
    p0 += gc * x0;
    p1 += gc * x1;
    p2 += gc * x2;
    p3 += gc * x3;
    std::memcpy(&y0, d0 + c, n);
    std::memcpy(&y1, d1 + c, n);
    std::memcpy(&y2, d2 + c, n);
    std::memcpy(&y3, d3 + c, n);
    y0 += aw[0] * gc;
    y1 += aw[1] * gc;
    y2 += aw[2] * gc;
    y3 += aw[3] * gc;
    std::memcpy(d0 + c, &y0, n);
    std::memcpy(d1 + c, &y1, n);
    std::memcpy(d2 + c, &y2, n);
    std::memcpy(d3 + c, &y3, n);
  }
  detail::horizontal_sums4(p0, p1, p2, p3, dots);
}

// The backward of one located point: the channel pass over its corner rows v (value) and d (gradient),
// then its weight gradient and its location gradients (x, y) in out[0..3).
template <class Acc>
SPATIALGRAD_INLINE void backward_point(int64_t channels, const Acc* g, const Acc* const (&v)[4], Acc* const (&d)[4],
                                       Acc a, const detail::DeformPoint<Acc>& pt, Acc width, Acc height,
                                       Acc (&out)[3]) {
  const Acc aw[4] = {a * pt.weight[0], a * pt.weight[1], a * pt.weight[2], a * pt.weight[3]};
  Acc dots[4];
  backward_channels(channels, g, v, d, aw, dots);
  const Acc g0 = dots[0], g1 = dots[1], g2 = dots[2], g3 = dots[3];
  // Contract: sum_c tg * (w1 v1 + ... + w4 v4); gw = -hh v1 + hh v2 - lh v3 + lh v4; gh = -hw v1 - lw v2 + hw v3 + lw
  // v4.
  out[0] = pt.weight[0] * g0 + pt.weight[1] * g1 + pt.weight[2] * g2 + pt.weight[3] * g3;
  out[1] = width * a * (pt.hh * (g1 - g0) + pt.lh * (g3 - g2));
  out[2] = height * a * (pt.hw * (g2 - g0) + pt.lw * (g3 - g1));
}
// Rows read and written in place by the backward are random rows of tensors larger than the caches, and
// the read-modify-writes of the gradient rows keep the processor from running far ahead: each point
// requests the rows of the point kPointsAhead after it (direct backward, DETR levels, Q 100-1000: 1.17x
// faster with 4 or 8 points ahead; the forward, which only reads, was not faster: it does not request).
constexpr int64_t kPointsAhead = 4;

// Requests the corner rows of the point whose location is xy[0..2) from the row sources `rows`.
template <class Acc, class... Rows>
SPATIALGRAD_INLINE void prefetch_point(const Acc* xy, int64_t height, int64_t width, const Rows&... rows) {
  detail::DeformPoint<Acc> pt;
  if (detail::locate_deform_point(xy[0], xy[1], height, width, pt)) (rows.prefetch(pt.hl, pt.wl), ...);
}

// backward_point on the corner rows of the point's row sources, its gradients (a, x, y) written to `to`.
// Forced inline (a lambda calling it may not be: a lambda is a function of its own, compiled for the
// baseline ISA, and the channel pass must land in the kernel's copy of the level).
template <class Acc, class ValueRows, class GradRows>
SPATIALGRAD_INLINE void backward_visit(int64_t channels, const Acc* g, const ValueRows& value, const GradRows& grads,
                                       const detail::DeformPoint<Acc>& pt, Acc a, Acc width, Acc height, Acc* to) {
  const Acc* v[4];
  Acc* d[4];
  value.corners(pt.hl, pt.wl, v);
  grads.corners(pt.hl, pt.wl, d);
  Acc grad[3];
  backward_point(channels, g, v, d, a, pt, width, height, grad);
  to[0] = grad[0];
  to[1] = grad[1];
  to[2] = grad[2];
}

// Where the backward writes the location and weight gradients.
template <class T>
struct GradPointArgs {
  T* grad_loc;
  T* grad_attn;
  int64_t gls[6], gas[5];
};

// Writes the (a, x, y) gradients of queries [q_begin, q_end) of pair (b, h), laid out as
// gather_pair_points' points, to the weight and location gradients (requesting the values ahead, as there).
template <class T, class Acc>
void scatter_pair_grads(const GradPointArgs<T>& out, int64_t b, int64_t h, int64_t q_begin, int64_t q_end,
                        int64_t levels, int64_t points_per_query, const Acc* __restrict point_grads) {
  const int64_t P = points_per_query, queries = q_end - q_begin;
  const int64_t* gl = out.gls;
  const int64_t* ga = out.gas;
  auto loc_at = [&](int64_t q, int64_t l) {
    return out.grad_loc + b * gl[0] + (q_begin + q) * gl[1] + h * gl[2] + l * gl[3];
  };
  auto attn_at = [&](int64_t q, int64_t l) {
    return out.grad_attn + b * ga[0] + (q_begin + q) * ga[1] + h * ga[2] + l * ga[3];
  };
  for (int64_t q = 0; q < queries; ++q) {
    for (int64_t l = 0; l < levels; ++l) {
      if (q + kQueriesAhead < queries) {
        detail::prefetch<detail::Access::kWrite>(loc_at(q + kQueriesAhead, l));
        detail::prefetch<detail::Access::kWrite>(attn_at(q + kQueriesAhead, l));
      }
      T* gxy = loc_at(q, l);
      T* gattn = attn_at(q, l);
      const Acc* from = point_grads + (l * queries + q) * P * 3;
      for (int64_t p = 0; p < P; ++p) {
        gattn[p * ga[4]] = store_as<T>(from[3 * p]);
        gxy[p * gl[4]] = store_as<T>(from[3 * p + 1]);
        gxy[p * gl[4] + gl[5]] = store_as<T>(from[3 * p + 2]);
      }
    }
  }
}

// Levels whose value and gradient rows take more than this many bytes are walked in row order
// (backward_level sorts their points); smaller ones stay in L1/L2 in any order.
constexpr int64_t kSortLevelBytes = 96 << 10;
// Points per sorting chunk (of a block of queries): a constant, as the order in which gradient rows
// receive their updates must depend on the problem alone.
constexpr int64_t kChunkPoints = 4096;
// A backward task takes its pair's queries in blocks whose points (and their gradients) and grad_output
// rows take at most this many bytes (or one query): its scratch does not grow with Q. Deformable-DETR
// (4 levels x 4 points, 32 channels): 8192 queries per block, the whole decoder and most encoder pairs.
constexpr int64_t kQueryBlockBytes = int64_t{4} << 20;

// A located point waiting for its channel pass (compact: chunks of them are sorted).
template <class Acc>
struct PendingPoint {
  int64_t hl, wl;  // its top-left corner
  int32_t offset;  // its id (q * P + p, its place in the level's points) minus the chunk's first
  Acc lh, lw, a;
};

// Per-thread buffers of backward_level.
template <class Acc>
struct LevelScratch {
  std::vector<PendingPoint<Acc>> located, sorted;
  std::vector<int64_t> row_start;  // counting sort by top row
  explicit LevelScratch(int64_t max_height)
      : located(kChunkPoints), sorted(kChunkPoints), row_start(static_cast<size_t>(max_height + 2)) {}
};

// The queries and points of one height x width level of a pair: adds their value gradients to the rows of
// `grads` and puts their weight and location gradients (a, x, y) in point_grads; `value` and `grads` are
// the level's row sources. g holds the pair's grad_output rows; points the level's (x, y, a) per point
// q * P + p (gather_pair_points).
// Points of a large level are taken in chunks of kChunkPoints, located, and visited sorted by their
// top row (a stable counting sort): the rows a stretch of points touches are then a few image rows
// that stay in L1, instead of random rows of a level larger than L2 (which made the backward
// memory-bound: ~2x slower than on levels that fit). Whether a level is sorted depends on its size
// alone, so both strategies add to every gradient row in the same order. One kernel per pair of
// row sources (a copy per level): the channel passes inline into it and floor() is one instruction.
template <class Isa, class Acc, class ValueRows, class GradRows>
SG_SIMD_KERNEL void backward_level(Isa, int64_t channels, int64_t points_per_query, int64_t queries, int64_t height,
                                   int64_t width, ValueRows value, GradRows grads, const Acc* g,
                                   const Acc* __restrict points, Acc* __restrict point_grads,
                                   LevelScratch<Acc>& scratch) {
  const int64_t C = channels, P = points_per_query, H = height, W = width;
  const Acc acc_height = static_cast<Acc>(H), acc_width = static_cast<Acc>(W);
  auto write = [&](int64_t id, const Acc(&grad)[3]) {
    Acc* to = point_grads + 3 * id;
    to[0] = grad[0];
    to[1] = grad[1];
    to[2] = grad[2];
  };
  const Acc zero[3] = {Acc(0), Acc(0), Acc(0)};
  auto locate = [&](int64_t id, detail::DeformPoint<Acc>& pt) {
    return C > 0 && detail::locate_deform_point(points[3 * id], points[3 * id + 1], H, W, pt);
  };
  const int64_t n_points = queries * P;
  constexpr bool kPrefetch = ValueRows::kPrefetch || GradRows::kPrefetch;
  const bool sort = 2 * (H + 2) * (W + 2) * C * static_cast<int64_t>(sizeof(Acc)) > kSortLevelBytes;
  if (!sort) {
    for (int64_t id = 0; id < n_points; ++id) {
      if (kPrefetch && id + kPointsAhead < n_points)
        prefetch_point(points + 3 * (id + kPointsAhead), H, W, value, grads);
      detail::DeformPoint<Acc> pt;
      if (locate(id, pt)) {
        backward_visit(C, g + (id / P) * C, value, grads, pt, points[3 * id + 2], acc_width, acc_height,
                       point_grads + 3 * id);
      } else {
        write(id, zero);
      }
    }
    return;
  }
  PendingPoint<Acc>* located = scratch.located.data();
  PendingPoint<Acc>* sorted = scratch.sorted.data();
  int64_t* row_start = scratch.row_start.data();
  for (int64_t first = 0; first < n_points; first += kChunkPoints) {
    const int64_t last = std::min(n_points, first + kChunkPoints);
    std::fill(row_start, row_start + H + 2, int64_t(0));
    int64_t count = 0;
    for (int64_t id = first; id < last; ++id) {
      detail::DeformPoint<Acc> pt;
      if (!locate(id, pt)) {
        write(id, zero);
        continue;
      }
      located[count] =
          PendingPoint<Acc>{pt.hl, pt.wl, static_cast<int32_t>(id - first), pt.lh, pt.lw, points[3 * id + 2]};
      ++row_start[pt.hl + 2];  // hl in [-1, H-1]
      ++count;
    }
    for (int64_t r = 1; r < H + 2; ++r) row_start[r] += row_start[r - 1];
    for (int64_t i = 0; i < count; ++i) sorted[row_start[located[i].hl + 1]++] = located[i];
    for (int64_t i = 0; i < count; ++i) {
      if (kPrefetch && i + kPointsAhead < count) {
        value.prefetch(sorted[i + kPointsAhead].hl, sorted[i + kPointsAhead].wl);
        grads.prefetch(sorted[i + kPointsAhead].hl, sorted[i + kPointsAhead].wl);
      }
      const PendingPoint<Acc>& pp = sorted[i];
      detail::DeformPoint<Acc> pt;
      pt.hl = pp.hl;
      pt.wl = pp.wl;
      detail::weigh_deform_point(pp.lh, pp.lw, pt);
      const int64_t id = first + pp.offset;
      backward_visit(C, g + (id / P) * C, value, grads, pt, pp.a, acc_width, acc_height, point_grads + 3 * id);
    }
  }
}
template <class Acc, class ValueRows, class GradRows>
void backward_level(int64_t channels, int64_t points_per_query, int64_t queries, int64_t height, int64_t width,
                    ValueRows value, GradRows grads, const Acc* g, const Acc* points, Acc* point_grads,
                    LevelScratch<Acc>& scratch) {
  SG_SIMD_DISPATCH(backward_level(isa, channels, points_per_query, queries, height, width, value, grads, g, points,
                                  point_grads, scratch));
}

// Per-thread buffers of the backward's tasks, for a block of `block` queries.
template <class Acc>
struct BackwardScratch {
  int64_t block;
  std::vector<Acc> g;  // grad_output[b, block, h, :]
  std::vector<Acc> points, point_grads;
  LevelScratch<Acc> levels;
  BackwardScratch(const Problem& pb, int64_t block_queries, int64_t max_height)
      : block(block_queries),
        g(static_cast<size_t>(block * pb.channels)),
        points(static_cast<size_t>(3 * block * pb.levels * pb.points)),
        point_grads(points.size()),
        levels(max_height) {}
};

// The points of pair (b, h), query block by query block, onto the rows of its row sources; the point
// gradients written when `write_points` (the first band's task). Level by level, so the rows one pass
// touches are those of one level (less cache pressure); each gradient row still receives its updates in
// query-then-point order (sorted levels: by chunk, then by row).
template <class T, class PT, class Value, class Grads>
void backward_task(const Problem& pb, const PointArgs<PT>& args, const GradPointArgs<PT>& out,
                   const TensorView& grad_output, int64_t b, int64_t h, bool write_points, Value& value, Grads& grads,
                   BackwardScratch<AccType<T>>& scratch) {
  const int64_t C = pb.channels, Q = pb.queries, L = pb.levels, P = pb.points;
  for (int64_t q_begin = 0; q_begin < Q; q_begin += scratch.block) {
    const int64_t q_end = std::min(Q, q_begin + scratch.block), n = q_end - q_begin;
    pack_grad_output_slice<T>(grad_output, b, h, q_begin, q_end, C, scratch.g.data());
    gather_pair_points(args, b, h, q_begin, q_end, L, scratch.points.data());
    for (int64_t l = 0; l < L; ++l) {
      const DeformLevel& level = pb.level_table[static_cast<size_t>(l)];
      backward_level(C, P, n, level.height, level.width, value.rows(l), grads.rows(l), scratch.g.data(),
                     scratch.points.data() + 3 * l * n * P, scratch.point_grads.data() + 3 * l * n * P, scratch.levels);
    }
    if (write_points) scatter_pair_grads(out, b, h, q_begin, q_end, L, P, scratch.point_grads.data());
  }
}

// One task per (b, h) pair and band of its pixels: it owns grad_value[b, band, h, :] (and, in the first band,
// the location and weight gradients of the pair), and walks the levels, queries and points in a fixed order,
// so no atomics are needed and any thread count gives the same bits. The value rows and the gradient rows
// come from sources per thread (make_value(), make_grads()). T and PT as in forward_items (grad_output and
// grad_value are T, the other gradients PT). A task takes its pair's queries in blocks whose points and
// grad_output rows take kQueryBlockBytes.
template <class T, class PT, class MakeValue, class MakeGrads>
void backward_pairs(const Problem& pb, const PointArgs<PT>& args, const GradPointArgs<PT>& out,
                    const TensorView& grad_output, const std::vector<Band>& bands, int64_t grain,
                    const MakeValue& make_value, const MakeGrads& make_grads) {
  using Acc = AccType<T>;
  const int64_t n_bands = static_cast<int64_t>(bands.size());
  int64_t max_height = 0;
  for (const DeformLevel& level : pb.level_table) max_height = std::max(max_height, level.height);
  const int64_t query_bytes = static_cast<int64_t>(sizeof(Acc)) * (6 * pb.levels * pb.points + pb.channels);
  const int64_t block = std::min(pb.queries, std::max<int64_t>(kQueryBlockBytes / query_bytes, 1));
  // One task per chunk: few, long tasks, so a late thread's tasks go to the others (parallel.h).
  parallel_chunks(0, pb.batch * pb.heads * n_bands, grain, 1, [&](ChunkQueue& queue) {
    auto value = make_value();
    auto grads = make_grads();
    BackwardScratch<Acc> scratch(pb, block, max_height);
    for (int64_t lo, hi; queue.next(lo, hi);) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t pair = task / n_bands, band = task % n_bands, b = pair / pb.heads, h = pair % pb.heads;
        value.prepare(b, h);
        grads.prepare(b, h, bands[static_cast<size_t>(band)]);
        backward_task<T>(pb, args, out, grad_output, b, h, band == 0, value, grads, scratch);
        grads.finish();
      }
    }
  });
}

struct BackwardViews {
  const TensorView &value, &loc, &attn, &grad_output, &grad_value, &grad_loc, &grad_attn;
};

template <class T, class PT>
void backward_kernel(const Problem& pb, const BackwardViews& t, int64_t in_out_bytes) {
  using Acc = AccType<T>;
  const int64_t C = pb.channels;
  const PointArgs<PT> args{t.loc.data<PT>(), t.attn.data<PT>(), Strides(t.loc, t.attn), pb.points};
  GradPointArgs<PT> out{t.grad_loc.data<PT>(), t.grad_attn.data<PT>(), {}, {}};
  for (int d = 0; d < 6; ++d) out.gls[d] = t.grad_loc.stride(d);
  for (int d = 0; d < 5; ++d) out.gas[d] = t.grad_attn.stride(d);
  const PaddedLayout layout = padded_layout(pb);
  const bool in_place = std::is_same_v<T, Acc> && t.value.stride(3) == 1 && t.grad_value.stride(3) == 1;
  const bool compact = in_place && t.value.stride(1) == C && t.grad_value.stride(1) == C;
  const Plan plan = plan_backward(pb, layout, {sizeof(Acc), in_out_bytes, in_place, compact});
  const std::vector<Band> whole{Band{0, pb.spatial}};
  if (plan.packed) {
    return backward_pairs<T>(
        pb, args, out, t.grad_output, whole, plan.grain, [&] { return PackedValue<T, Acc>(t.value, layout, C); },
        [&] { return PaddedGrads<T, Acc>(t.grad_value, layout, C); });
  }
  if constexpr (std::is_same_v<T, Acc>) {
    if (in_place) {
      zero_rows<T>(t.grad_value);
      return backward_pairs<T>(
          pb, args, out, t.grad_output, whole, plan.grain, [&] { return DirectValue<T, Acc, true>(t.value, pb); },
          [&] { return TensorGrads<Acc>(t.grad_value, pb); });
    }
  }
  const std::vector<Band> bands = pixel_bands(pb, plan.band_pixels);
  int64_t widest = 0;
  for (const Band& band : bands) widest = std::max(widest, band.last - band.first);
  backward_pairs<T>(
      pb, args, out, t.grad_output, bands, plan.grain, [&] { return DirectValue<T, Acc, false>(t.value, pb); },
      [&] { return BandGrads<T, Acc>(t.grad_value, pb, widest); });
}

}  // namespace

std::vector<int64_t> ms_deform_attn_output_shape(const std::vector<int64_t>& value_shape,
                                                 const std::vector<int64_t>& sampling_locations_shape) {
  detail::check_rank(kForward, "value", value_shape, 4);
  detail::check_rank(kForward, "sampling_locations", sampling_locations_shape, 6);
  return {value_shape[0], sampling_locations_shape[1], detail::checked_mul(kForward, value_shape[2], value_shape[3])};
}

void ms_deform_attn(const TensorView& value, const TensorView& spatial_shapes, const TensorView& level_start_index,
                    const TensorView& sampling_locations, const TensorView& attention_weights,
                    const TensorView& output) {
  // value rows are widened as the kernel packs them, output rows narrowed as it writes them; the locations
  // and weights, read one at a time, are staged in float32 for half precision (detail/entry.h).
  detail::run_entry(kForward, "value", value.dtype(), [&](auto tag, auto& staging) {
    using T = typename decltype(tag)::type;
    const Problem pb =
        validate(kForward, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
    detail::check_shape(kForward, "output", output,
                        ms_deform_attn_output_shape(value.sizes(), sampling_locations.sizes()));
    detail::check_same_dtype(kForward, "output", output, "value", value);
    if (output.is_empty()) return;
    if (nothing_sampled(pb)) return fill_zeros(output);
    const int64_t in_out = detail::bytes_of({&value, &sampling_locations, &attention_weights, &output});
    forward_kernel<T, AccType<T>>(pb, value, staging.in(sampling_locations), staging.in(attention_weights), output,
                                  in_out);
  });
}

namespace {

// The backward's checks beyond validate(): grad_output and the three gradients.
Problem validate_backward(const TensorView& value, const TensorView& spatial_shapes,
                          const TensorView& level_start_index, const TensorView& sampling_locations,
                          const TensorView& attention_weights, const TensorView& grad_output,
                          const TensorView& grad_value, const TensorView& grad_sampling_locations,
                          const TensorView& grad_attention_weights) {
  Problem pb = validate(kBackward, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
  detail::check_dim(kBackward, "grad_output", grad_output, 3);
  const std::vector<int64_t> out_shape{pb.batch, pb.queries, detail::checked_mul(kBackward, pb.heads, pb.channels)};
  SG_CHECK(grad_output.sizes() == out_shape, kBackward,
           "(): expected grad_output of shape (bs, Q, nH*C) = ", format_list(out_shape), ", but got ",
           grad_output.shape_string());
  detail::check_same_dtype(kBackward, "grad_output", grad_output, "value", value);
  detail::check_shape(kBackward, "grad_value", grad_value, value.sizes());
  detail::check_shape(kBackward, "grad_sampling_locations", grad_sampling_locations, sampling_locations.sizes());
  detail::check_shape(kBackward, "grad_attention_weights", grad_attention_weights, attention_weights.sizes());
  detail::check_same_dtype(kBackward, "grad_value", grad_value, "value", value);
  detail::check_same_dtype(kBackward, "grad_sampling_locations", grad_sampling_locations, "value", value);
  detail::check_same_dtype(kBackward, "grad_attention_weights", grad_attention_weights, "value", value);
  return pb;
}

}  // namespace

void check_ms_deform_attn_backward(const TensorView& value, const TensorView& spatial_shapes,
                                   const TensorView& level_start_index, const TensorView& sampling_locations,
                                   const TensorView& attention_weights, const TensorView& grad_output,
                                   const TensorView& grad_value, const TensorView& grad_sampling_locations,
                                   const TensorView& grad_attention_weights) {
  detail::check_floating(kBackward, "value", value.dtype());
  validate_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_output,
                    grad_value, grad_sampling_locations, grad_attention_weights);
}

void ms_deform_attn_backward(const TensorView& value, const TensorView& spatial_shapes,
                             const TensorView& level_start_index, const TensorView& sampling_locations,
                             const TensorView& attention_weights, const TensorView& grad_output,
                             const TensorView& grad_value, const TensorView& grad_sampling_locations,
                             const TensorView& grad_attention_weights) {
  // As in the forward: value, grad_output and grad_value rows converted as the kernel reads and writes
  // them, the points and their gradients staged in float32 for half precision.
  detail::run_entry(kBackward, "value", value.dtype(), [&](auto tag, auto& staging) {
    using T = typename decltype(tag)::type;
    const Problem pb =
        validate_backward(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, grad_output,
                          grad_value, grad_sampling_locations, grad_attention_weights);
    if (pb.batch == 0 || pb.heads == 0) return;  // every output is empty
    if (nothing_sampled(pb)) {
      fill_zeros(grad_value);
      fill_zeros(grad_sampling_locations);
      fill_zeros(grad_attention_weights);
      return;
    }
    const int64_t in_out = detail::bytes_of({&value, &sampling_locations, &attention_weights, &grad_output, &grad_value,
                                     &grad_sampling_locations, &grad_attention_weights});
    backward_kernel<T, AccType<T>>(
        pb,
        {value, staging.in(sampling_locations), staging.in(attention_weights), grad_output, grad_value,
         staging.out(grad_sampling_locations), staging.out(grad_attention_weights)},
        in_out);
  });
}

namespace detail {

DeformProblem validate_deform_attn(const char* op, const TensorView& value, const TensorView& spatial_shapes,
                                   const TensorView& level_start_index, const TensorView& sampling_locations,
                                   const TensorView& attention_weights) {
  return validate(op, value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
}

}  // namespace detail

}  // namespace spatialgrad

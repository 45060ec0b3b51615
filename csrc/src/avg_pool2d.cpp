#include "spatialgrad/avg_pool2d.h"

#include <algorithm>
#include <vector>

#include "detail/checks.h"
#include "detail/convert.h"
#include "detail/pool_windows.h"
#include "detail/simd.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "avg_pool2d";
constexpr const char* kBackward = "avg_pool2d_backward";
// Rough element-operations per parallel task below which splitting costs more than it saves.
constexpr int64_t kMinWorkPerTask = 1 << 15;

struct Resolved {
  int64_t kh, kw, sh, sw, ph, pw;
};

Resolved resolve(const char* op, const AvgPool2dParams& p) {
  const auto& k = p.kernel_size;
  const auto& s = p.stride;
  const auto& pad = p.padding;
  SG_CHECK(k.size() == 1 || k.size() == 2, op, "(): expected kernel_size to have 1 or 2 entries, but got ",
           k.size(), " (", format_list(k, "[", "]"), ")");
  SG_CHECK(s.size() <= 2, op, "(): expected stride to have 0, 1 or 2 entries, but got ", s.size(), " (",
           format_list(s, "[", "]"), ")");
  SG_CHECK(pad.size() == 1 || pad.size() == 2, op, "(): expected padding to have 1 or 2 entries, but got ",
           pad.size(), " (", format_list(pad, "[", "]"), ")");
  Resolved r;
  r.kh = k[0];
  r.kw = k.size() == 1 ? k[0] : k[1];
  r.sh = s.empty() ? r.kh : s[0];
  r.sw = s.empty() ? r.kw : (s.size() == 1 ? s[0] : s[1]);
  r.ph = pad[0];
  r.pw = pad.size() == 1 ? pad[0] : pad[1];
  SG_CHECK(r.kh > 0 && r.kw > 0, op, "(): expected kernel_size entries > 0, but got ", format_list(k, "[", "]"));
  SG_CHECK(r.sh > 0 && r.sw > 0, op, "(): expected stride entries > 0, but got ", format_list(s, "[", "]"));
  SG_CHECK(r.ph >= 0 && r.pw >= 0, op, "(): expected padding entries >= 0, but got ", format_list(pad, "[", "]"));
  SG_CHECK(r.ph <= r.kh / 2 && r.pw <= r.kw / 2, op,
           "(): expected padding to be at most half the kernel size, but got padding ", format_list(pad, "[", "]"),
           " for kernel_size ", format_list(k, "[", "]"));
  SG_CHECK(p.cube_math_type >= 0 && p.cube_math_type <= 3, op, "(): expected cube_math_type in {0, 1, 2, 3}, but got ",
           p.cube_math_type);
  return r;
}

int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t out = detail::floor_div(in + 2 * p - k + (ceil_mode ? s - 1 : 0), s) + 1;
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

std::vector<int64_t> output_shape(const char* op, const std::vector<int64_t>& in_shape, const AvgPool2dParams& p) {
  const Resolved r = resolve(op, p);
  SG_CHECK(in_shape.size() == 3 || in_shape.size() == 4, op, "(): expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, but got ",
           in_shape.size(), "-D shape ", format_list(in_shape));
  const int64_t h = in_shape[in_shape.size() - 2], w = in_shape.back();
  int64_t oh = pooled_size(h, r.kh, r.sh, r.ph, p.ceil_mode);
  int64_t ow = pooled_size(w, r.kw, r.sw, r.pw, p.ceil_mode);
  if (checked_numel(in_shape) == 0) {
    // Empty input: a correctly shaped (possibly empty) zero output, never an error.
    oh = std::max<int64_t>(oh, 0);
    ow = std::max<int64_t>(ow, 0);
  } else {
    SG_CHECK(oh >= 1 && ow >= 1, op, "(): expected an output of at least 1x1, but got ", oh, "x", ow,
             " for input shape ", format_list(in_shape), " (the input is smaller than the kernel)");
  }
  std::vector<int64_t> out(in_shape.begin(), in_shape.end() - 2);
  out.push_back(oh);
  out.push_back(ow);
  return out;
}

// Plane geometry shared by both directions: a 3-D tensor is one batch of C planes.
struct Planes {
  int64_t count, channels;
  const TensorView* view;
  int64_t offset(int64_t plane) const {
    const int64_t d = view->dim();
    const int64_t c = plane % channels, n = plane / channels;
    return c * view->stride(-3) + (d == 4 ? n * view->stride(0) : 0);
  }
};

Planes planes_of(const TensorView& t) {
  const int64_t channels = t.size(-3);
  return Planes{t.dim() == 4 ? t.size(0) * channels : channels, channels, &t};
}

// Window tables of both axes plus the divisor of window (oh, ow), factored as
// row_factor[oh] * col_factor[ow]: the integer product PyTorch divides by, exact in Acc for any
// product below 2^24 (float) or 2^53 (double).
struct Windows {
  detail::PoolAxis h, w;
  int64_t kw, sw, pw;
  std::vector<double> row_factor, col_factor;
};

Windows make_windows(const Resolved& r, const AvgPool2dParams& p, int64_t in_h, int64_t in_w, int64_t out_h,
                     int64_t out_w) {
  Windows win{detail::make_pool_axis(in_h, out_h, r.kh, r.sh, r.ph),
              detail::make_pool_axis(in_w, out_w, r.kw, r.sw, r.pw), r.kw, r.sw, r.pw, {}, {}};
  auto factors = [&](const detail::PoolAxis& axis, bool is_rows) {
    std::vector<double> f(static_cast<size_t>(axis.out));
    for (int64_t o = 0; o < axis.out; ++o) {
      if (p.divisor_override != 0) {
        f[o] = is_rows ? static_cast<double>(p.divisor_override) : 1.0;
      } else {
        const int64_t count = p.count_include_pad ? axis.pool[o] : axis.end[o] - axis.start[o];
        // A window with no input pixel (only possible for an empty input) sums to 0 and outputs
        // 0 / 1, not 0 / 0: so no divisor is ever 0 and the kernels divide without a test.
        f[o] = static_cast<double>(count != 0 ? count : 1);
      }
    }
    return f;
  };
  win.row_factor = factors(win.h, true);
  win.col_factor = factors(win.w, false);
  return win;
}

template <class Acc>
std::vector<Acc> cast_all(const std::vector<double>& values) {
  return std::vector<Acc>(values.begin(), values.end());
}

// float16 rows are widened by whole rows (F16C where the CPU has it, detail/convert.h); bfloat16 widens
// with a shift that vectorises inline in the kernels' clones. Both narrow whole rows.
template <class T>
constexpr bool kWidenRows = std::is_same_v<T, Half>;
template <class T>
constexpr bool kNarrowRows = detail::kIsHalfType<T>;

// sums[i] = 0 + row(0)[i * stride] + ... + row(count - 1)[i * stride] for i < n, added in that
// order from +0 as PyTorch's sums are (0 when count is 0); the first two rows in one pass.
template <class Acc, class RowAt>
SG_INLINE void sum_rows(int64_t count, int64_t n, int64_t stride, const RowAt& row, Acc* __restrict sums) {
  if (count == 0) {
    std::fill(sums, sums + n, Acc(0));
    return;
  }
  const auto* __restrict r0 = row(0);
  if (count == 1) {
    for (int64_t i = 0; i < n; ++i) sums[i] = Acc(0) + load_as<Acc>(r0[i * stride]);
    return;
  }
  const auto* __restrict r1 = row(1);
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) sums[i] = (Acc(0) + load_as<Acc>(r0[i])) + load_as<Acc>(r1[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) sums[i] = (Acc(0) + load_as<Acc>(r0[i * stride])) + load_as<Acc>(r1[i * stride]);
  }
  for (int64_t r = 2; r < count; ++r) {
    const auto* __restrict next = row(r);
    if (stride == 1) {
      for (int64_t i = 0; i < n; ++i) sums[i] += load_as<Acc>(next[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) sums[i] += load_as<Acc>(next[i * stride]);
    }
  }
}

// dst[i * stride] = src[i] for i < n, one rounding per element.
template <class T, class Acc>
SG_INLINE void store_row(const Acc* __restrict src, int64_t n, T* dst, int64_t stride) {
  if constexpr (kNarrowRows<T>) {
    detail::narrow_row(src, n, dst, stride);
  } else if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = store_as<T>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] = store_as<T>(src[i]);
  }
}

// What a task of forward_rows or backward_rows needs of the call: the planes it reads (src: input or
// grad_output) and those it writes (dst: output or grad_input).
template <class T>
struct PlanePlan {
  PlanePlan(const Windows& windows, const TensorView& from, const TensorView& to)
      : win(&windows),
        src_planes(planes_of(from)),
        dst_planes(planes_of(to)),
        src(from.data<T>()),
        dst(to.data<T>()),
        src_h(from.stride(-2)),
        src_w(from.stride(-1)),
        dst_h(to.stride(-2)),
        dst_w(to.stride(-1)),
        col_factor(cast_all<AccType<T>>(windows.col_factor)) {}

  const Windows* win;
  Planes src_planes, dst_planes;
  const T* src;
  T* dst;
  int64_t src_h, src_w, dst_h, dst_w;
  std::vector<AccType<T>> col_factor;
};

// A task's position among the items plane * rows + row of forward_rows or backward_rows: the row, and
// the planes it reads (src) and writes (dst).
template <class T>
struct PlaneCursor {
  const PlanePlan<T>& plan;
  int64_t rows;
  int64_t plane = -1, row = 0;
  const T* src = nullptr;
  T* dst = nullptr;
  // Moves to `item`, the task's first item or the one after the last: true when it starts a plane (or
  // the task), where the plane pointers change.
  SG_INLINE bool move_to(int64_t item) {
    if (plane >= 0 && ++row < rows) return false;
    plane = item / rows;
    row = item % rows;
    src = plan.src + plan.src_planes.offset(plane);
    dst = plan.dst + plan.dst_planes.offset(plane);
    return true;
  }
};

// Output rows [lo, hi) (item = plane * out_h + oh): sum the window's input rows, then the strided
// box sums of those column sums (detail::StridedBoxSum). One function with an AVX2 clone: all its
// loops are unit-stride vector loops in L1-sized scratch rows.
template <class T>
SG_SIMD_CLONES void forward_rows(const PlanePlan<T>& plan, int64_t lo, int64_t hi) {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t in_w = win.w.in, out_h = win.h.out, out_w = win.w.out;
  detail::StridedBoxSum<Acc> box(in_w, out_w, win.kw, win.sw, win.pw);
  std::vector<Acc> sums(static_cast<size_t>(out_w));
  Acc* column_sums = box.input();
  const Acc* col_factor = plan.col_factor.data();
  // float16: the window's rows are widened as they are summed (detail::widen_sum_rows).
  std::vector<const T*> window(static_cast<size_t>(std::max<int64_t>(win.h.max_window, 1)));
  PlaneCursor<T> cursor{plan, out_h};
  for (int64_t item = lo; item < hi; ++item) {
    cursor.move_to(item);
    const int64_t oh = cursor.row;
    const T* src = cursor.src;
    const int64_t first = win.h.start[oh], count = win.h.end[oh] - first;
    if constexpr (kWidenRows<T>) {
      for (int64_t r = 0; r < count; ++r) window[r] = src + (first + r) * plan.src_h;
      if (count == 0) {
        std::fill(column_sums, column_sums + in_w, Acc(0));
      } else {
        detail::widen_sum_rows(window.data(), count, in_w, plan.src_w, column_sums);
      }
    } else {
      sum_rows(count, in_w, plan.src_w, [&](int64_t r) { return src + (first + r) * plan.src_h; }, column_sums);
    }
    box.run(sums.data());
    const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
    for (int64_t ow = 0; ow < out_w; ++ow) sums[ow] /= row_factor * col_factor[ow];
    store_row(sums.data(), out_w, cursor.dst + oh * plan.dst_h, plan.dst_w);
  }
}

// Channels-last input (channel stride 1, width stride not): the plane walk above would read each
// cache line once per channel in it, so rows are computed for all channels at once instead, every
// loop running over the C contiguous channels (or a whole row of W*C values). Item = n * out_h + oh.
// The same sums in the same order as forward_rows, so the same bits.
template <class T>
struct ChannelsLastPlan {
  const Windows* win;
  int64_t channels;
  const T* in;
  T* out;
  int64_t in_n, in_h, in_w, out_n, out_h, out_w, out_c;  // strides (batch 0 for a 3-D tensor)
  std::vector<AccType<T>> col_factor;
};

template <class T>
SG_SIMD_CLONES void forward_rows_channels_last(const ChannelsLastPlan<T>& plan, int64_t lo, int64_t hi) {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t C = plan.channels, in_w = win.w.in, out_h = win.h.out, out_w = win.w.out;
  const int64_t kw = win.kw, sw = win.sw, pw = win.pw;
  // Column sums of pixel j - pw at padded[j * C ..]: zeros before and after the input row.
  std::vector<Acc> padded(static_cast<size_t>(std::max((out_w - 1) * sw + kw, pw + in_w) * C), Acc(0));
  std::vector<Acc> sums(static_cast<size_t>(out_w * C));
  Acc* column_sums = padded.data() + pw * C;
  const Acc* col_factor = plan.col_factor.data();
  const bool dense_rows = plan.in_w == C;  // a row's pixels are back to back
  for (int64_t item = lo; item < hi; ++item) {
    const int64_t n = item / out_h, oh = item % out_h;
    const int64_t first = win.h.start[oh], count = win.h.end[oh] - first;
    const T* src = plan.in + n * plan.in_n + first * plan.in_h;
    if (dense_rows) {
      sum_rows(count, in_w * C, 1, [&](int64_t r) { return src + r * plan.in_h; }, column_sums);
    } else {
      for (int64_t w = 0; w < in_w; ++w) {
        sum_rows(count, C, 1, [&](int64_t r) { return src + r * plan.in_h + w * plan.in_w; }, column_sums + w * C);
      }
    }
    const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
    for (int64_t ow = 0; ow < out_w; ++ow) {
      Acc* __restrict sum = sums.data() + ow * C;
      const Acc* window = padded.data() + ow * sw * C;
      for (int64_t c = 0; c < C; ++c) sum[c] = window[c];
      for (int64_t t = 1; t < kw; ++t) {
        const Acc* __restrict next = window + t * C;
        for (int64_t c = 0; c < C; ++c) sum[c] += next[c];
      }
      const Acc divisor = row_factor * col_factor[ow];
      for (int64_t c = 0; c < C; ++c) sum[c] /= divisor;
      store_row(sum, C, plan.out + n * plan.out_n + oh * plan.out_h + ow * plan.out_w, plan.out_c);
    }
  }
}

template <class T>
void forward_kernel(const TensorView& input, const TensorView& output, const Windows& win) {
  const int64_t channels = input.size(-3);
  if (input.stride(-3) == 1 && input.stride(-1) != 1 && channels > 1) {
    const bool batched = input.dim() == 4;
    const ChannelsLastPlan<T> plan{&win,
                                   channels,
                                   input.data<T>(),
                                   output.data<T>(),
                                   batched ? input.stride(0) : 0,
                                   input.stride(-2),
                                   input.stride(-1),
                                   batched ? output.stride(0) : 0,
                                   output.stride(-2),
                                   output.stride(-1),
                                   output.stride(-3),
                                   cast_all<AccType<T>>(win.col_factor)};
    const int64_t work_per_row = channels * std::max<int64_t>(1, win.w.in * (win.h.max_window + 1) + win.w.out);
    parallel_for(0, (batched ? input.size(0) : 1) * win.h.out, kMinWorkPerTask / work_per_row + 1,
                 [&](int64_t lo, int64_t hi) { forward_rows_channels_last(plan, lo, hi); });
    return;
  }
  const PlanePlan<T> plan(win, input, output);
  const int64_t work_per_row = std::max<int64_t>(1, win.w.in * (win.h.max_window + 1) + win.w.out);
  parallel_for(0, plan.src_planes.count * win.h.out, kMinWorkPerTask / work_per_row + 1,
               [&](int64_t lo, int64_t hi) { forward_rows(plan, lo, hi); });
}

// Gather form: each grad_input element sums the scaled gradients (g / divisor) of the windows that
// cover it and is written once. Input rows [lo, hi) (item = plane * in_h + h). Width first, as
// PyTorch's scatter adds: each scaled grad_output row is spread over the input width once per task
// into a ring buffer that holds the rows the current input row needs, and the input row is the sum
// of its covering spread rows. Cloned like forward_rows.
template <class T>
SG_SIMD_CLONES void backward_rows(const PlanePlan<T>& plan, int64_t lo, int64_t hi) {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t in_h = win.h.in, in_w = win.w.in, out_w = win.w.out;
  // A power of two, so that a row's slot is a mask, not a division.
  int64_t ring_rows = 1;
  while (ring_rows < win.h.max_cover) ring_rows *= 2;
  std::vector<Acc> ring(static_cast<size_t>(ring_rows * in_w));
  auto ring_row = [&](int64_t oh) { return ring.data() + (oh & (ring_rows - 1)) * in_w; };
  std::vector<const Acc*> covering(static_cast<size_t>(ring_rows));
  detail::BoxSpread<Acc> spread(in_w, out_w, win.kw, win.sw, win.pw);
  std::vector<Acc> row_out(static_cast<size_t>(in_w));
  const Acc* col_factor = plan.col_factor.data();
  // Sums stored as they are computed. Plain stores: non-temporal ones (DESIGN's hint for outputs beyond
  // the caches) measured 2.4x slower here with 2 threads.
  const bool direct_store = !kNarrowRows<T> && plan.dst_w == 1;
  PlaneCursor<T> cursor{plan, in_h};
  // 0 + g / divisor into spread slot oh % 2, as PyTorch's sums start from +0: no scaled value is -0,
  // so no sum of them is, and a row covered by one window is its spread row as it stands.
  auto scale_row = [&](int64_t oh) {
    Acc* __restrict scaled = spread.input(static_cast<int>(oh & 1));
    const T* g_row = cursor.src + oh * plan.src_h;
    const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
    if constexpr (kWidenRows<T>) {
      detail::widen_row(g_row, plan.src_w, out_w, scaled);
      for (int64_t ow = 0; ow < out_w; ++ow) scaled[ow] = Acc(0) + scaled[ow] / (row_factor * col_factor[ow]);
    } else if (plan.src_w == 1) {
      for (int64_t ow = 0; ow < out_w; ++ow) scaled[ow] = Acc(0) + load_as<Acc>(g_row[ow]) / (row_factor * col_factor[ow]);
    } else {
      for (int64_t ow = 0; ow < out_w; ++ow) {
        scaled[ow] = Acc(0) + load_as<Acc>(g_row[ow * plan.src_w]) / (row_factor * col_factor[ow]);
      }
    }
  };
  int64_t ring_next = 0;    // rows [.., ring_next) of this plane are in the ring
  int64_t scaled_next = 0;  // and rows [.., scaled_next) have been scaled
  for (int64_t item = lo; item < hi; ++item) {
    if (cursor.move_to(item)) ring_next = scaled_next = win.h.first[cursor.row];
    const int64_t h = cursor.row;
    const int64_t oh_first = win.h.first[h], oh_last = win.h.last[h];
    for (int64_t oh = std::max(ring_next, oh_first); oh < oh_last; ++oh) {
      if (scaled_next <= oh) {
        scale_row(oh);
        scaled_next = oh + 1;
      }
      // Row oh + 1 is scaled one row ahead of its spread (BoxSpread: its stores reach the cache first).
      if (scaled_next == oh + 1 && oh + 1 < win.h.out) scale_row(scaled_next++);
      spread.run(static_cast<int>(oh & 1), ring_row(oh));
    }
    ring_next = std::max(ring_next, oh_last);
    const int64_t count = oh_last - oh_first;
    T* dst = cursor.dst + h * plan.dst_h;
    for (int64_t k = 0; k < count; ++k) covering[k] = ring_row(oh_first + k);
    if constexpr (kNarrowRows<T>) {
      if (count > 0) {  // the sums and their rounding in one pass
        detail::narrow_sum_rows(covering.data(), count, in_w, dst, plan.dst_w);
        continue;
      }
    }
    if (count == 1) {
      store_row(covering[0], in_w, dst, plan.dst_w);
    } else if (count == 2 && direct_store) {
      const Acc* __restrict r0 = covering[0];
      const Acc* __restrict r1 = covering[1];
      for (int64_t w = 0; w < in_w; ++w) dst[w] = store_as<T>(r0[w] + r1[w]);
    } else {
      // sum_rows starts from +0, which changes no spread value (none is -0).
      sum_rows(count, in_w, 1, [&](int64_t k) { return covering[k]; }, row_out.data());
      store_row(row_out.data(), in_w, dst, plan.dst_w);
    }
  }
}

template <class T>
void backward_kernel(const TensorView& grad_output, const TensorView& grad_input, const Windows& win) {
  const PlanePlan<T> plan(win, grad_output, grad_input);
  const int64_t work_per_row = std::max<int64_t>(1, (win.w.out + win.w.in) * (win.h.max_cover + 1));
  parallel_for(0, plan.dst_planes.count * win.h.in, kMinWorkPerTask / work_per_row + 1,
               [&](int64_t lo, int64_t hi) { backward_rows(plan, lo, hi); });
}

}  // namespace

std::vector<int64_t> avg_pool2d_output_shape(const std::vector<int64_t>& input_shape, const AvgPool2dParams& params) {
  return output_shape(kForward, input_shape, params);
}

void avg_pool2d(const TensorView& input, const TensorView& output, const AvgPool2dParams& params) {
  const std::vector<int64_t> expected = output_shape(kForward, input.sizes(), params);
  detail::check_shape(kForward, "output", output, expected);
  detail::check_same_dtype(kForward, "output", output, "input", input);
  dispatch_floating(input.dtype(), kForward, "input", [&](auto tag) {
    using T = decltype(tag);
    if (output.is_empty()) return;
    const Resolved r = resolve(kForward, params);
    const Windows win = make_windows(r, params, input.size(-2), input.size(-1), output.size(-2), output.size(-1));
    forward_kernel<T>(input, output, win);
  });
}

void check_avg_pool2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grad_input,
                               const AvgPool2dParams& params) {
  SG_CHECK(grad_output.dim() == grad_input.dim() && (grad_output.dim() == 3 || grad_output.dim() == 4), kBackward,
           "(): expected grad_output and grad_input to be both 3-D or both 4-D, but got ", grad_output.dim(),
           "-D and ", grad_input.dim(), "-D");
  detail::check_shape(kBackward, "grad_input", grad_input, input.sizes());
  const std::vector<int64_t> expected = output_shape(kBackward, input.sizes(), params);
  detail::check_shape(kBackward, "grad_output", grad_output, expected);
  detail::check_same_dtype(kBackward, "input", input, "grad_output", grad_output);
  detail::check_same_dtype(kBackward, "grad_input", grad_input, "grad_output", grad_output);
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [](auto) {});
}

void avg_pool2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grad_input,
                         const AvgPool2dParams& params) {
  check_avg_pool2d_backward(grad_output, input, grad_input, params);
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [&](auto tag) {
    using T = decltype(tag);
    if (grad_input.is_empty()) return;
    const Resolved r = resolve(kBackward, params);
    const Windows win =
        make_windows(r, params, input.size(-2), input.size(-1), grad_output.size(-2), grad_output.size(-1));
    backward_kernel<T>(grad_output, grad_input, win);
  });
}

}  // namespace spatialgrad

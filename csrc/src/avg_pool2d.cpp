#include "spatialgrad/avg_pool2d.h"

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "detail/avg_pool2d_windows.h"
#include "detail/checks.h"
#include "detail/convert.h"
#include "detail/rows.h"
#include "detail/simd.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad {
namespace {

constexpr const char* kForward = "avg_pool2d";
constexpr const char* kBackward = "avg_pool2d_backward";

struct Resolved {
  int64_t kh, kw, sh, sw, ph, pw;
};

Resolved resolve(const char* op, const AvgPool2dParams& p) {
  const auto& k = p.kernel_size;
  const auto& s = p.stride;
  const auto& pad = p.padding;
  SG_CHECK(k.size() == 1 || k.size() == 2, op, "(): expected kernel_size to have 1 or 2 entries, but got ", k.size(),
           " (", format_list(k, "[", "]"), ")");
  SG_CHECK(s.size() <= 2, op, "(): expected stride to have 0, 1 or 2 entries, but got ", s.size(), " (",
           format_list(s, "[", "]"), ")");
  SG_CHECK(pad.size() == 1 || pad.size() == 2, op, "(): expected padding to have 1 or 2 entries, but got ", pad.size(),
           " (", format_list(pad, "[", "]"), ")");
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
  return r;
}

// The output length of one axis, in 128 bits: in + 2p - k + s - 1 overflows int64 for strides or
// kernels near 2^63 (UBSan flagged it, and the wrapped value gave a wrong "output 0x0" error).
int64_t pooled_size(const char* op, int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  const detail::Int128 span =
      static_cast<detail::Int128>(in) + 2 * static_cast<detail::Int128>(p) - k + (ceil_mode ? s - 1 : 0);
  detail::Int128 out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;  // floor division
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * s >= static_cast<detail::Int128>(in) + p) --out;
  SG_CHECK_KIND(out <= INT64_MAX && static_cast<detail::Int128>(in) + 2 * static_cast<detail::Int128>(p) <= INT64_MAX,
                kOverflow, op, "(): expected an output size and padded input that fit in int64, but got input length ",
                in, " with padding ", p, " and stride ", s);
  return static_cast<int64_t>(out);
}

std::vector<int64_t> output_shape(const char* op, const std::vector<int64_t>& in_shape, const AvgPool2dParams& p) {
  const Resolved r = resolve(op, p);
  SG_CHECK(in_shape.size() == 3 || in_shape.size() == 4, op,
           "(): expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, but got ", in_shape.size(), "-D shape ",
           format_list(in_shape));
  const int64_t h = in_shape[in_shape.size() - 2], w = in_shape.back();
  int64_t oh = pooled_size(op, h, r.kh, r.sh, r.ph, p.ceil_mode);
  int64_t ow = pooled_size(op, w, r.kw, r.sw, r.pw, p.ceil_mode);
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
// row_factor[oh] * col_factor[ow]: the integer product PyTorch divides by. The kernels multiply the
// two factors in Acc, exact while the largest product stays below 2^24 (float) or 2^53 (double); larger
// products (huge padded windows, a huge divisor_override) are formed exactly and rounded once, as
// PyTorch converts its int64 divisor (Windows::divisor_row).
struct Windows {
  detail::PoolAxis h, w;
  int64_t kw, sw, pw;
  std::vector<int64_t> row_factor, col_factor;
  double max_product = 0;
  // Width windows longer than the input or strides past it: the direct width passes (avg_pool2d_windows.h).
  bool direct_width = false;

  template <class Acc>
  bool products_exact() const {
    return max_product < (std::is_same_v<Acc, float> ? 0x1p24 : 0x1p53);
  }
  // The divisors of output row oh rounded once into `out` (out_w entries), or nullptr when
  // products_exact<Acc>() and the kernels multiply the factors themselves.
  template <class Acc>
  SPATIALGRAD_INLINE const Acc* divisor_row(int64_t oh, Acc* out) const {
    if (products_exact<Acc>()) return nullptr;
    for (int64_t ow = 0; ow < w.out; ++ow) {
      out[ow] = static_cast<Acc>(static_cast<detail::Int128>(row_factor[oh]) * col_factor[ow]);
    }
    return out;
  }
};

Windows make_windows(const Resolved& r, const AvgPool2dParams& p, int64_t in_h, int64_t in_w, int64_t out_h,
                     int64_t out_w) {
  Windows win{detail::make_pool_axis(in_h, out_h, r.kh, r.sh, r.ph),
              detail::make_pool_axis(in_w, out_w, r.kw, r.sw, r.pw),
              r.kw,
              r.sw,
              r.pw,
              {},
              {}};
  auto factors = [&](const detail::PoolAxis& axis, bool is_rows) {
    std::vector<int64_t> f(static_cast<size_t>(axis.out));
    for (int64_t o = 0; o < axis.out; ++o) {
      if (p.divisor_override != 0) {
        f[o] = is_rows ? p.divisor_override : 1;
      } else {
        const int64_t count = p.count_include_pad ? axis.pool[o] : axis.end[o] - axis.start[o];
        // A window with no input pixel (only possible for an empty input) sums to 0 and outputs
        // 0 / 1, not 0 / 0: so no divisor is ever 0 and the kernels divide without a test.
        f[o] = count != 0 ? count : 1;
      }
    }
    return f;
  };
  win.row_factor = factors(win.h, true);
  win.col_factor = factors(win.w, false);
  auto largest = [](const std::vector<int64_t>& f) {
    double m = 0;
    for (int64_t v : f) m = std::max(m, std::abs(static_cast<double>(v)));
    return m;
  };
  win.max_product = largest(win.row_factor) * largest(win.col_factor);
  win.direct_width = detail::windows_exceed_input(in_w, r.kw, r.sw);
  return win;
}

template <class Acc>
std::vector<Acc> cast_all(const std::vector<int64_t>& values) {
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
SPATIALGRAD_INLINE void sum_rows(int64_t count, int64_t n, int64_t stride, const RowAt& row, Acc* __restrict sums) {
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
  SPATIALGRAD_INLINE bool move_to(int64_t item) {
    if (plane >= 0 && ++row < rows) return false;
    plane = item / rows;
    row = item % rows;
    src = plan.src + plan.src_planes.offset(plane);
    dst = plan.dst + plan.dst_planes.offset(plane);
    return true;
  }
};

// The width pass of a call, strided (StridedBoxSum, BoxSpread) or direct (DirectBoxSum, DirectSpread).
template <class Pass, class Acc>
Pass make_width_pass(const Windows& win) {
  if constexpr (std::is_same_v<Pass, detail::DirectBoxSum<Acc>> || std::is_same_v<Pass, detail::DirectSpread<Acc>>) {
    return Pass(win.w);
  } else {
    return Pass(win.w.in, win.w.out, win.kw, win.sw, win.pw);
  }
}

// Calls fn(TypeTag) with the strided or the direct width pass type of the call.
template <class Strided, class Direct, class Fn>
void dispatch_width_pass(const Windows& win, Fn&& fn) {
  if (win.direct_width) {
    fn(static_cast<Direct*>(nullptr));
  } else {
    fn(static_cast<Strided*>(nullptr));
  }
}

// Every buffer of one thread of forward_rows, allocated here and not in the cloned function: an exception
// (an allocation failure) cannot leave a cloned (SG_SIMD_CLONES) function under GCC 12; it ends the process.
template <class T, class WidthSum>
struct ForwardScratch {
  using Acc = AccType<T>;
  explicit ForwardScratch(const Windows& win)
      : width(make_width_pass<WidthSum, Acc>(win)),
        sums(static_cast<size_t>(win.w.out)),
        divisors(static_cast<size_t>(win.w.out)),
        window(static_cast<size_t>(std::max<int64_t>(win.h.max_window, 1))) {}
  WidthSum width;
  std::vector<Acc> sums, divisors;
  std::vector<const T*> window;  // float16: the window's rows, widened as they are summed
};

// Output rows [lo, hi) (item = plane * out_h + oh): sum the window's input rows, then the box sums of
// those column sums along the width (the strided pass, or the direct one for huge windows). One
// function with an AVX2 clone: all its loops are unit-stride vector loops in L1-sized scratch rows.
template <class T, class WidthSum>
SG_SIMD_CLONES void forward_rows(const PlanePlan<T>& plan, ForwardScratch<T, WidthSum>& scratch, int64_t lo,
                                 int64_t hi) noexcept {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t in_w = win.w.in, out_h = win.h.out, out_w = win.w.out;
  Acc* sums = scratch.sums.data();
  Acc* column_sums = scratch.width.input();
  const Acc* col_factor = plan.col_factor.data();
  PlaneCursor<T> cursor{plan, out_h};
  for (int64_t item = lo; item < hi; ++item) {
    cursor.move_to(item);
    const int64_t oh = cursor.row;
    const T* src = cursor.src;
    const int64_t first = win.h.start[oh], count = win.h.end[oh] - first;
    if constexpr (kWidenRows<T>) {
      for (int64_t r = 0; r < count; ++r) scratch.window[r] = src + (first + r) * plan.src_h;
      if (count == 0) {
        std::fill(column_sums, column_sums + in_w, Acc(0));
      } else {
        detail::widen_sum_rows(scratch.window.data(), count, in_w, plan.src_w, column_sums);
      }
    } else {
      sum_rows(
          count, in_w, plan.src_w, [&](int64_t r) { return src + (first + r) * plan.src_h; }, column_sums);
    }
    scratch.width.run(sums);
    if (const Acc* divisors = win.divisor_row(oh, scratch.divisors.data())) {
      for (int64_t ow = 0; ow < out_w; ++ow) sums[ow] /= divisors[ow];
    } else {
      const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
      for (int64_t ow = 0; ow < out_w; ++ow) sums[ow] /= row_factor * col_factor[ow];
    }
    detail::store_row(sums, out_w, cursor.dst + oh * plan.dst_h, plan.dst_w);
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

// One thread's buffers of forward_rows_channels_last (allocated outside the clone, see ForwardScratch):
// the column sums of pixel j at columns[(j + lead) * C ..], behind `lead` = pw pixels of zeros and with
// zeros after the row, up to the last window's end; for a direct width (huge windows) only the row.
template <class T>
struct ChannelsLastScratch {
  using Acc = AccType<T>;
  ChannelsLastScratch(const Windows& win, int64_t C)
      : lead(win.direct_width ? 0 : win.pw),
        columns(static_cast<size_t>(
                    (win.direct_width ? win.w.in : std::max((win.w.out - 1) * win.sw + win.kw, win.pw + win.w.in)) * C),
                Acc(0)),
        sums(static_cast<size_t>(win.w.out * C)),
        divisors(static_cast<size_t>(win.w.out)) {}
  int64_t lead;
  std::vector<Acc> columns, sums, divisors;
};

template <class T>
SG_SIMD_CLONES void forward_rows_channels_last(const ChannelsLastPlan<T>& plan, ChannelsLastScratch<T>& scratch,
                                               int64_t lo, int64_t hi) noexcept {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t C = plan.channels, in_w = win.w.in, out_h = win.h.out, out_w = win.w.out;
  Acc* column_sums = scratch.columns.data() + scratch.lead * C;
  const Acc* col_factor = plan.col_factor.data();
  const bool dense_rows = plan.in_w == C;  // a row's pixels are back to back
  for (int64_t item = lo; item < hi; ++item) {
    const int64_t n = item / out_h, oh = item % out_h;
    const int64_t first = win.h.start[oh], count = win.h.end[oh] - first;
    const T* src = plan.in + n * plan.in_n + first * plan.in_h;
    if (dense_rows) {
      sum_rows(
          count, in_w * C, 1, [&](int64_t r) { return src + r * plan.in_h; }, column_sums);
    } else {
      for (int64_t w = 0; w < in_w; ++w) {
        sum_rows(
            count, C, 1, [&](int64_t r) { return src + r * plan.in_h + w * plan.in_w; }, column_sums + w * C);
      }
    }
    const Acc* divisors = win.divisor_row(oh, scratch.divisors.data());
    const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
    for (int64_t ow = 0; ow < out_w; ++ow) {
      Acc* __restrict sum = scratch.sums.data() + ow * C;
      // The window's taps: every padded column of it, or (direct) its clipped input columns from +0;
      // the padding's zeros change no sum, so both give the same bits.
      const Acc* window =
          win.direct_width ? column_sums + win.w.start[ow] * C : scratch.columns.data() + ow * win.sw * C;
      const int64_t taps = win.direct_width ? win.w.end[ow] - win.w.start[ow] : win.kw;
      if (win.direct_width) {
        std::fill(sum, sum + C, Acc(0));
      } else {
        for (int64_t c = 0; c < C; ++c) sum[c] = window[c];
      }
      for (int64_t t = win.direct_width ? 0 : 1; t < taps; ++t) {
        const Acc* __restrict next = window + t * C;
        for (int64_t c = 0; c < C; ++c) sum[c] += next[c];
      }
      const Acc divisor = divisors ? divisors[ow] : row_factor * col_factor[ow];
      for (int64_t c = 0; c < C; ++c) sum[c] /= divisor;
      detail::store_row(sum, C, plan.out + n * plan.out_n + oh * plan.out_h + ow * plan.out_w, plan.out_c);
    }
  }
}

template <class T>
void forward_kernel(const TensorView& input, const TensorView& output, const Windows& win) {
  using Acc = AccType<T>;
  const int64_t channels = input.size(-3);
  // Work per output row: the window's input rows, and the width pass (taps per output).
  const int64_t width_work = win.direct_width ? win.w.in * (win.w.max_cover + 1) : win.w.out * win.kw;
  const int64_t work_per_row = std::max<int64_t>(1, win.w.in * (win.h.max_window + 1) + width_work);
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
                                   cast_all<Acc>(win.col_factor)};
    parallel_chunks(0, (batched ? input.size(0) : 1) * win.h.out, grain_for(channels * work_per_row), 0,
                    [&](ChunkQueue& queue) {
                      ChannelsLastScratch<T> scratch(win, channels);
                      for (int64_t lo, hi; queue.next(lo, hi);) forward_rows_channels_last(plan, scratch, lo, hi);
                    });
    return;
  }
  const PlanePlan<T> plan(win, input, output);
  dispatch_width_pass<detail::StridedBoxSum<Acc>, detail::DirectBoxSum<Acc>>(win, [&](auto* tag) {
    using WidthSum = std::remove_pointer_t<decltype(tag)>;
    parallel_chunks(0, plan.src_planes.count * win.h.out, grain_for(work_per_row), 0, [&](ChunkQueue& queue) {
      ForwardScratch<T, WidthSum> scratch(win);
      for (int64_t lo, hi; queue.next(lo, hi);) forward_rows(plan, scratch, lo, hi);
    });
  });
}

// One thread's buffers of backward_rows (allocated outside the clone, see ForwardScratch): a ring of
// spread grad_output rows that holds the rows the current input row needs (a power of two of rows, so
// that a row's slot is a mask), the width pass, and row scratch.
template <class T, class Spread>
struct BackwardScratch {
  using Acc = AccType<T>;
  explicit BackwardScratch(const Windows& win)
      : ring_rows(ring_rows_for(win.h.max_cover)),
        ring(static_cast<size_t>(ring_rows * win.w.in)),
        covering(static_cast<size_t>(ring_rows)),
        spread(make_width_pass<Spread, Acc>(win)),
        row_out(static_cast<size_t>(win.w.in)),
        divisors(static_cast<size_t>(win.w.out)) {}
  static int64_t ring_rows_for(int64_t cover) {
    int64_t rows = 1;
    while (rows < cover) rows *= 2;
    return rows;
  }
  int64_t ring_rows;
  std::vector<Acc> ring;
  std::vector<const Acc*> covering;
  Spread spread;
  std::vector<Acc> row_out, divisors;
};

// scaled[ow] = 0 + g_row[ow] / divisor of window (oh, ow), as PyTorch's sums start from +0: no scaled
// value is -0, so no sum of them is, and a row covered by one window is its spread row as it stands.
// A function forced inline rather than a lambda: the lambda stopped being inlined into backward_rows's
// clones when it grew, and its loops then ran at the baseline ISA (15% slower).
template <class T, class Acc>
SPATIALGRAD_INLINE void scale_grad_row(const Windows& win, int64_t oh, const T* g_row, int64_t g_stride,
                                       const Acc* col_factor, Acc* divisor_scratch, Acc* __restrict scaled) {
  const int64_t out_w = win.w.out;
  if (const Acc* divisors = win.divisor_row(oh, divisor_scratch)) {
    for (int64_t ow = 0; ow < out_w; ++ow) scaled[ow] = Acc(0) + load_as<Acc>(g_row[ow * g_stride]) / divisors[ow];
    return;
  }
  const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
  if constexpr (kWidenRows<T>) {
    detail::widen_row(g_row, g_stride, out_w, scaled);
    for (int64_t ow = 0; ow < out_w; ++ow) scaled[ow] = Acc(0) + scaled[ow] / (row_factor * col_factor[ow]);
  } else if (g_stride == 1) {
    for (int64_t ow = 0; ow < out_w; ++ow)
      scaled[ow] = Acc(0) + load_as<Acc>(g_row[ow]) / (row_factor * col_factor[ow]);
  } else {
    for (int64_t ow = 0; ow < out_w; ++ow) {
      scaled[ow] = Acc(0) + load_as<Acc>(g_row[ow * g_stride]) / (row_factor * col_factor[ow]);
    }
  }
}

// Gather form: each grad_input element sums the scaled gradients (g / divisor) of the windows that
// cover it and is written once. Input rows [lo, hi) (item = plane * in_h + h). Width first, as
// PyTorch's scatter adds: each scaled grad_output row is spread over the input width once per task
// into the ring, and the input row is the sum of its covering spread rows. Cloned like forward_rows.
template <class T, class Spread>
SG_SIMD_CLONES void backward_rows(const PlanePlan<T>& plan, BackwardScratch<T, Spread>& scratch, int64_t lo,
                                  int64_t hi) noexcept {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t in_h = win.h.in, in_w = win.w.in, ring_mask = scratch.ring_rows - 1;
  Acc* const ring = scratch.ring.data();
  const Acc** const covering = scratch.covering.data();
  auto ring_row = [&](int64_t oh) { return ring + (oh & ring_mask) * in_w; };
  Spread& spread = scratch.spread;
  const Acc* col_factor = plan.col_factor.data();
  // Sums stored as they are computed. Plain stores: non-temporal ones (DESIGN's hint for outputs beyond
  // the caches) measured 2.4x slower here with 2 threads.
  const bool direct_store = !kNarrowRows<T> && plan.dst_w == 1;
  PlaneCursor<T> cursor{plan, in_h};
  auto scale_row = [&](int64_t oh) {
    scale_grad_row(win, oh, cursor.src + oh * plan.src_h, plan.src_w, col_factor, scratch.divisors.data(),
                   spread.input(static_cast<int>(oh & 1)));
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
        detail::narrow_sum_rows(covering, count, in_w, dst, plan.dst_w);
        continue;
      }
    }
    if (count == 1) {
      detail::store_row(covering[0], in_w, dst, plan.dst_w);
    } else if (count == 2 && direct_store) {
      const Acc* __restrict r0 = covering[0];
      const Acc* __restrict r1 = covering[1];
      for (int64_t w = 0; w < in_w; ++w) dst[w] = store_as<T>(r0[w] + r1[w]);
    } else {
      // sum_rows starts from +0, which changes no spread value (none is -0).
      sum_rows(
          count, in_w, 1, [&](int64_t k) { return covering[k]; }, scratch.row_out.data());
      detail::store_row(scratch.row_out.data(), in_w, dst, plan.dst_w);
    }
  }
}

template <class T>
void backward_kernel(const TensorView& grad_output, const TensorView& grad_input, const Windows& win) {
  using Acc = AccType<T>;
  const PlanePlan<T> plan(win, grad_output, grad_input);
  const int64_t width_work = win.direct_width ? win.w.in * (win.w.max_cover + 1) : win.w.out + win.w.in;
  const int64_t work_per_row = std::max<int64_t>(1, width_work * (win.h.max_cover + 1));
  dispatch_width_pass<detail::BoxSpread<Acc>, detail::DirectSpread<Acc>>(win, [&](auto* tag) {
    using Spread = std::remove_pointer_t<decltype(tag)>;
    parallel_chunks(0, plan.dst_planes.count * win.h.in, grain_for(work_per_row), 0, [&](ChunkQueue& queue) {
      BackwardScratch<T, Spread> scratch(win);
      for (int64_t lo, hi; queue.next(lo, hi);) backward_rows(plan, scratch, lo, hi);
    });
  });
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
           "(): expected grad_output and grad_input to be both 3-D or both 4-D, but got ", grad_output.dim(), "-D and ",
           grad_input.dim(), "-D");
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

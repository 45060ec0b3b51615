#include "spatialgrad/avg_pool2d.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/avg_pool2d_windows.h"
#include "detail/lanes.h"
#include "detail/checks.h"
#include "detail/convert.h"
#include "detail/entry.h"
#include "detail/narrow_rows.h"
#include "detail/parallel_for.h"
#include "detail/rows.h"
#include "detail/simd.h"
#include "detail/strategy.h"

namespace spatialgrad {
namespace {

using detail::LaneImage;

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
  detail::check_layout(op, p.layout);
  const bool nhwc = p.layout == Layout::kNHWC;
  SG_CHECK(in_shape.size() == 3 || in_shape.size() == 4, op, "(): expected a 3-D ", nhwc ? "(H, W, C)" : "(C, H, W)",
           " or 4-D ", nhwc ? "(N, H, W, C)" : "(N, C, H, W)", " input, but got ", in_shape.size(), "-D shape ",
           format_list(in_shape));
  const size_t h_dim = in_shape.size() - (nhwc ? 3 : 2);
  const int64_t h = in_shape[h_dim], w = in_shape[h_dim + 1];
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
  std::vector<int64_t> out(in_shape);
  out[h_dim] = oh;
  out[h_dim + 1] = ow;
  return out;
}

// The kernels index (N, C, H, W) or (C, H, W): a kNHWC tensor reaches them as the same memory with its
// dimensions permuted, whose channels-last strides then choose the channels-last kernels.
TensorView channels_first(const TensorView& t, Layout layout) {
  if (layout == Layout::kNCHW) return t;
  std::vector<int64_t> sizes = t.sizes(), strides = t.strides();
  std::rotate(sizes.end() - 3, sizes.end() - 1, sizes.end());  // (..., H, W, C) -> (..., C, H, W)
  std::rotate(strides.end() - 3, strides.end() - 1, strides.end());
  return TensorView(t.raw_data(), t.dtype(), std::move(sizes), std::move(strides));
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

// The factor of window o of `axis` in the divisor of a window (row_factor[o] for the rows, col_factor[o]
// for the columns): the divisor PyTorch divides by is their integer product.
template <class Table>
int64_t divisor_factor(const detail::PoolAxisOf<Table>& axis, int64_t o, const AvgPool2dParams& p, bool is_rows) {
  if (p.divisor_override != 0) return is_rows ? p.divisor_override : 1;
  const int64_t count = p.count_include_pad ? axis.pool[o] : axis.end[o] - axis.start[o];
  // A window with no input pixel (only possible for an empty input) sums to 0 and outputs 0 / 1, not
  // 0 / 0: so no divisor is ever 0 and the kernels divide without a test.
  return count != 0 ? count : 1;
}

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
    for (int64_t o = 0; o < axis.out; ++o) f[o] = divisor_factor(axis, o, p, is_rows);
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
// with a shift that vectorises inline in the kernels' levels. Both narrow whole rows.
template <class T>
constexpr bool kWidenRows = std::is_same_v<T, Half>;
template <class T>
constexpr bool kNarrowRows = detail::kIsHalfType<T>;

// sums[i] = (sums[i] or, when kFirst, +0) + rows[0][i * stride] + ... + rows[M - 1][i * stride], added in
// that order, then divided by `divisor` when kDivide: one pass for M rows.
template <int M, bool kFirst, bool kUnit, bool kDivide, class Acc, class Row>
SPATIALGRAD_INLINE void add_rows(const Row* const* rows, int64_t n, int64_t stride, Acc divisor, Acc* __restrict sums) {
  const Row* __restrict r[M];
  for (int m = 0; m < M; ++m) r[m] = rows[m];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = kUnit ? i : i * stride;
    Acc sum = (kFirst ? Acc(0) : sums[i]) + load_as<Acc>(r[0][at]);
    for (int m = 1; m < M; ++m) sum += load_as<Acc>(r[m][at]);
    sums[i] = kDivide ? sum / divisor : sum;
  }
}

// add_rows for m rows, 1 <= m <= kMax <= 4.
template <int kMax, bool kFirst, bool kUnit, bool kDivide, class Acc, class Row>
SPATIALGRAD_INLINE void add_rows_of(int m, const Row* const* rows, int64_t n, int64_t stride, Acc divisor, Acc* sums) {
  if (m == 1) return add_rows<1, kFirst, kUnit, kDivide>(rows, n, stride, divisor, sums);
  if constexpr (kMax >= 2) {
    if (m == 2) return add_rows<2, kFirst, kUnit, kDivide>(rows, n, stride, divisor, sums);
  }
  if constexpr (kMax >= 3) {
    if (m == 3) return add_rows<3, kFirst, kUnit, kDivide>(rows, n, stride, divisor, sums);
  }
  if constexpr (kMax >= 4) return add_rows<4, kFirst, kUnit, kDivide>(rows, n, stride, divisor, sums);
}

// sums[i] = 0 + row(0)[i * stride] + ... + row(count - 1)[i * stride] for i < n, added in that order from
// +0 as PyTorch's sums are (0 when count is 0); up to kRows rows per pass over sums. Four save passes (a
// load and a store of the sums each: 2 of the 4 passes of a 3x3 window's lanes); backward_rows takes two, as
// before: the four-row loops inlined into it made its other loops 18% slower (k7 s7 on 2048^2, 1 thread).
template <int kRows = 4, class Acc, class RowAt>
SPATIALGRAD_INLINE void sum_rows(int64_t count, int64_t n, int64_t stride, const RowAt& row, Acc* __restrict sums) {
  if (count == 0) {
    std::fill(sums, sums + n, Acc(0));
    return;
  }
  using Row = std::remove_const_t<std::remove_pointer_t<decltype(row(0))>>;
  const Acc none = 1;
  for (int64_t k = 0; k < count; k += kRows) {
    const int m = static_cast<int>(std::min<int64_t>(kRows, count - k));
    const Row* rows[kRows];
    for (int j = 0; j < m; ++j) rows[j] = row(k + j);
    if (k == 0) {
      stride == 1 ? add_rows_of<kRows, true, true, false>(m, rows, n, stride, none, sums)
                  : add_rows_of<kRows, true, false, false>(m, rows, n, stride, none, sums);
    } else {
      stride == 1 ? add_rows_of<kRows, false, true, false>(m, rows, n, stride, none, sums)
                  : add_rows_of<kRows, false, false, false>(m, rows, n, stride, none, sums);
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

// Calls fn(TypeTag<pass>{}) with the strided or the direct width pass type of the call.
template <class Strided, class Direct, class Fn>
void dispatch_width_pass(const Windows& win, Fn&& fn) {
  if (win.direct_width) {
    fn(TypeTag<Direct>{});
  } else {
    fn(TypeTag<Strided>{});
  }
}

// Every buffer of one thread of forward_rows, allocated here and not in the kernel: kernels do not throw
// (docs/design.md, Conventions), so an allocation failure is raised before the kernel runs.
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
// kernel: all its loops are unit-stride vector loops in L1-sized scratch rows.
template <class Isa, class T, class WidthSum>
SG_SIMD_KERNEL void forward_rows(Isa, const PlanePlan<T>& plan, ForwardScratch<T, WidthSum>& scratch, int64_t lo,
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
template <class T, class WidthSum>
void forward_rows(const PlanePlan<T>& plan, ForwardScratch<T, WidthSum>& scratch, int64_t lo, int64_t hi) noexcept {
  SG_SIMD_DISPATCH(forward_rows(isa, plan, scratch, lo, hi));
}

// ---- narrow planes: rows held in registers -----------------------------------------------------------------
// Planes whose rows hold at most detail::kLookupValues (32) floats ((2,256,32,32) k2 s2, 7x7 global pools): the
// planes' passes cost ~47 cycles a row of 16 outputs there in loop set-up and row copies. The narrow forward sums
// a window's input rows as vectors of the whole row (0 + r0 + r1 ..., the planes' order), keeps the sums as a
// table, and forms each output vector's window from lookups of it (detail::lookup32), tap by tap, a tap outside
// the input read as +0 (StridedBoxSum's padded row: first + second, then each next), then divides as forward_rows
// does: the same bits. float32, rows of unit stride, width windows within the input (not direct_width).

// Per tap t < kw and output column o: the input column o*sw - pw + t (0 where outside) and whether it is inside
// (-1 or 0); the divisors' column factors. Padded with zeros to at least detail::kNarrowPad columns.
struct NarrowTaps {
  int64_t width = 0;
  std::vector<int32_t> column, inside;
  std::vector<float> col_factor;
  explicit NarrowTaps(const Windows& win) : width(std::max(win.w.out, detail::kNarrowPad)) {
    column.assign(static_cast<size_t>(win.kw * width), 0);
    inside.assign(column.size(), 0);
    col_factor.assign(static_cast<size_t>(width), 1.0f);
    for (int64_t o = 0; o < win.w.out; ++o) {
      col_factor[o] = static_cast<float>(win.col_factor[o]);
      for (int64_t t = 0; t < win.kw; ++t) {
        const int64_t x = o * win.sw - win.pw + t;
        if (x < 0 || x >= win.w.in) continue;
        column[t * width + o] = static_cast<int32_t>(x);
        inside[t * width + o] = -1;
      }
    }
  }
};

// Rows wider than a table: windows of stride 2 (the 16 lanes' columns of one tap lie within 32 values) on rows of
// at most 256 values, or 512 where the rows are prefetched (below). Core calls, 2 threads, planes vs narrow:
// (16,16,56,56) k2 s2 0.11 vs 0.067 ms, (8,64,112,112) k3 s2 p1 1.5 vs 0.66-0.71, (2,16,256,256) k2 s2 0.134 vs
// 0.118, (8,3,512,512) k3 s2 p1 0.86-1.03 vs 0.51-0.62 (1.5-1.7 without the prefetches); but a cached 512-value
// (2,3,512,512) 0.106 vs 0.12-0.13; past 512 values the rows' prefetches outgrow L1 ((1,1,10000,10000) k2 s2
// 11-13 vs 18 ms, (1,3,4000,4000) k3 s2 p1 6.8 vs 9.9); and at stride 1, where the lookups replace plain loads,
// (4,3,600,800) k5 s1 p2 1.86 vs 3.04, (8,64,64,64) k3 s1 p1 0.49 vs 0.52.
constexpr int64_t kNarrowWideStride = 2, kNarrowWideMaxWidth = 256, kNarrowWidePrefetchedWidth = 512;
// Inputs at least this large (about half the L3 cache here) are not cached from call to call: the wide kernel
// requests each output row's new input rows one output row ahead, which the hardware prefetchers do not do in
// time for three rows read at once ((8,3,512,512) k3 s2 p1, a 25 MB input: 1.5 -> 0.6 ms; a cached 6 MB input,
// (2,3,512,512), 0.12 -> 0.13 with them: left without).
constexpr double kNarrowPrefetchBytes = 16.0 * (1 << 20);
bool narrow_prefetches(const TensorView& input) {
  return static_cast<double>(input.numel()) * sizeof(float) >= kNarrowPrefetchBytes;
}

bool narrow_pool_ok(const TensorView& input, const TensorView& output, const Windows& win) {
  const bool prefetched = narrow_prefetches(input);
  const bool wide_ok =
      win.sw == kNarrowWideStride && win.w.in <= (prefetched ? kNarrowWidePrefetchedWidth : kNarrowWideMaxWidth);
  return input.dtype() == DType::kFloat32 && input.stride(-1) == 1 && output.stride(-1) == 1 && !win.direct_width &&
         (win.w.in <= detail::kLookupValues || wide_ok);
}

// What both narrow forwards share: the window's input rows summed as vectors into sums[0, n) (from +0, in order;
// n a multiple of the vector), the division of a vector of window sums as forward_rows divides, and an output row
// stored vector by vector (window(at, out): the outputs [at, at + kStep)).
template <class V>
SPATIALGRAD_INLINE void sum_window_rows(const PlanePlan<float>& plan, const float* src, detail::RowTables& tables,
                                        int64_t first, int64_t count, int64_t n, float* __restrict sums) {
  for (int64_t c = 0; c < n; c += detail::kLanesOf<V>) {
    V sum{}, x;
    for (int64_t r = 0; r < count; ++r)
      sum = sum + detail::load_u(x, tables.table(src + (first + r) * plan.src_h, 0) + c);
    detail::store_u(sums + c, sum);
  }
}

template <class V>
SPATIALGRAD_INLINE void divide_windows(const NarrowTaps& taps, int64_t at, float row_factor, const float* divisors,
                                       const V& sum, V& out) {
  V divisor;
  if (divisors != nullptr) {
    detail::load_u(divisor, divisors + at);
  } else {
    detail::load_u(divisor, taps.col_factor.data() + at);
    divisor = row_factor * divisor;
  }
  out = sum / divisor;
}

template <class V, class Window>
SPATIALGRAD_INLINE void store_output_row(float* dst, int64_t out_w, Window&& window) {
  constexpr int64_t kStep = detail::kLanesOf<V>;
  V out;
  if (out_w < kStep) {  // one vector (its divisors padded: detail::kNarrowPad)
    window(0, out);
    detail::store_first_lanes(dst, out, out_w);
    return;
  }
  detail::for_row_vectors<kStep>(out_w, [&](int64_t at) SG_SIMD_INLINE_LAMBDA {
    window(at, out);
    detail::store_u(dst + at, out);
  });
}

// Rows wider than a table, of stride-2 windows (narrow_pool_ok): the window's row sums in `sums` behind pw zeros
// (column x at x + pw) and zeros after the row, so tap t of output columns [at, at + kStep) is the table at sums +
// at * sw + t read at lanes k * sw (a tap outside the input reads +0, as the padded row of StridedBoxSum and the
// tables above). `sums` holds pw + the row rounded up to vectors + 2 kNarrowPad values; the tables of `tables` are
// rows rounded up to vectors; prefetch_rows: narrow_prefetches.
template <class Isa>
SG_SIMD_KERNEL void narrow_wide_forward_rows(Isa isa, const PlanePlan<float>& plan, const NarrowTaps& taps,
                                             detail::RowTables& tables, float* sums, float* divisor_buffer,
                                             bool prefetch_rows, int64_t lo, int64_t hi) {
  using V = detail::Vec<float, Isa::kVecBytes>;
  using IV = detail::IndexVecOf<V>;
  constexpr int64_t kStep = detail::kLanesOf<V>;
  const Windows& win = *plan.win;
  const int64_t out_w = win.w.out, in_w = win.w.in, rounded = (in_w + kStep - 1) / kStep * kStep;
  float* row_sums = sums + win.pw;
  IV lanes;
  for (int k = 0; k < kStep; ++k) lanes[k] = static_cast<int32_t>(k * win.sw);
  auto window = [&](int64_t at, float row_factor, const float* divisors, V& out) SG_SIMD_INLINE_LAMBDA {
    V sum{}, x;
    for (int64_t t = 0; t < win.kw; ++t) {
      detail::lookup32(isa, sums + at * win.sw + t, lanes, x);
      sum = t == 0 ? x : V(sum + x);
    }
    divide_windows(taps, at, row_factor, divisors, sum, out);
  };
  PlaneCursor<float> cursor{plan, win.h.out};
  for (int64_t item = lo; item < hi; ++item) {
    cursor.move_to(item);
    const int64_t oh = cursor.row;
    const int64_t first = win.h.start[oh], count = win.h.end[oh] - first;
    if (prefetch_rows && oh + 1 < win.h.out) {  // the next output row's new input rows
      for (int64_t r = std::max(first + count, win.h.start[oh + 1]); r < win.h.end[oh + 1]; ++r)
        detail::prefetch_bytes(cursor.src + r * plan.src_h, in_w * int64_t{sizeof(float)});
    }
    sum_window_rows<V>(plan, cursor.src, tables, first, count, rounded, row_sums);
    std::fill(row_sums + in_w, row_sums + rounded, 0.0f);  // what the last vector read past the row
    const float* divisors = win.divisor_row(oh, divisor_buffer);
    const auto row_factor = static_cast<float>(win.row_factor[oh]);
    store_output_row<V>(cursor.dst + oh * plan.dst_h, out_w, [&](int64_t at, V& out) SG_SIMD_INLINE_LAMBDA {
      window(at, row_factor, divisors, out);
    });
  }
}

// Output rows [lo, hi) (item = plane * out_h + oh).
template <class Isa>
SG_SIMD_KERNEL void narrow_forward_rows(Isa isa, const PlanePlan<float>& plan, const NarrowTaps& taps,
                                        detail::RowTables& tables, float* divisor_buffer, int64_t lo, int64_t hi) {
  using V = detail::Vec<float, Isa::kVecBytes>;
  using IV = detail::IndexVecOf<V>;
  constexpr int64_t kTable = detail::kLookupValues;
  const Windows& win = *plan.win;
  const int64_t out_w = win.w.out;
  alignas(64) float sums[kTable] = {};
  // The window sums of output columns [at, at + kStep), divided.
  auto window = [&](int64_t at, float row_factor, const float* divisors, V& out) SG_SIMD_INLINE_LAMBDA {
    V sum{};
    for (int64_t t = 0; t < win.kw; ++t) {
      IV column, inside;
      V x;
      detail::load_u(column, taps.column.data() + t * taps.width + at);
      detail::load_u(inside, taps.inside.data() + t * taps.width + at);
      detail::lookup32(isa, sums, column, x);
      x = inside != 0 ? x : V{};
      sum = t == 0 ? x : V(sum + x);
    }
    divide_windows(taps, at, row_factor, divisors, sum, out);
  };
  PlaneCursor<float> cursor{plan, win.h.out};
  for (int64_t item = lo; item < hi; ++item) {
    cursor.move_to(item);
    const int64_t oh = cursor.row;
    const int64_t first = win.h.start[oh], count = win.h.end[oh] - first;
    sum_window_rows<V>(plan, cursor.src, tables, first, count, kTable, sums);
    const float* divisors = win.divisor_row(oh, divisor_buffer);
    const auto row_factor = static_cast<float>(win.row_factor[oh]);
    store_output_row<V>(cursor.dst + oh * plan.dst_h, out_w, [&](int64_t at, V& out) SG_SIMD_INLINE_LAMBDA {
      window(at, row_factor, divisors, out);
    });
  }
}

int64_t forward_work_per_row(const Windows& win);  // (the drivers' cost model, below)

void run_narrow(const TensorView& input, const TensorView& output, const Windows& win) {
  const PlanePlan<float> plan(win, input, output);
  const NarrowTaps taps(win);
  const int64_t grain = grain_for(forward_work_per_row(win));
  const bool wide = win.w.in > detail::kLookupValues;
  const bool prefetch_rows = narrow_prefetches(input);
  const int64_t rounded = (win.w.in + 15) / 16 * 16;  // (the AVX-512 vector, the only level it pays at)
  parallel_for(0, plan.src_planes.count * win.h.out, grain, [&](int64_t lo, int64_t hi) {
    // The divisors of a row where products are not exact (Windows::divisor_row), padded as the taps.
    std::vector<float> divisors(static_cast<size_t>(taps.width), 1.0f);
    if (!wide) {
      detail::RowTables tables(input);
      return SG_SIMD_DISPATCH(narrow_forward_rows(isa, plan, taps, tables, divisors.data(), lo, hi));
    }
    detail::RowTables tables(input, rounded);
    std::vector<float> sums(static_cast<size_t>(win.pw + rounded + 2 * detail::kNarrowPad), 0.0f);
    SG_SIMD_DISPATCH(
        narrow_wide_forward_rows(isa, plan, taps, tables, sums.data(), divisors.data(), prefetch_rows, lo, hi));
  });
}

// ---- lanes: many values per pixel in one vector pass (detail/lanes.h) ---------------------------------------
//
// The plane kernels above pay a fixed cost per row of a plane (a dozen short loops); on small planes
// (a 7x7 ResNet head) that cost is most of the call. The lane kernels below run every loop over the L lanes
// of a pixel instead: the channels of a channels-last tensor, or L planes packed side by side into a tile.
// Each lane gets the sums of the plane kernels in the same order, so every family gives the same bits.

// One thread's buffers of forward_lane_row (allocated outside the kernels, see ForwardScratch): the column
// sums of pixel j at columns[(j + lead) * L ..], behind `lead` = pw pixels of zeros and with zeros after
// the row up to the last window's end; for a direct width (huge windows) only the row. Its lane count is
// fixed by set_lanes (the zeros are where the count puts them).
template <class Acc>
struct LaneForwardScratch {
  LaneForwardScratch(const Windows& win, int64_t lanes)
      : lead(win.direct_width ? 0 : win.pw),
        pixels(win.direct_width ? win.w.in : std::max((win.w.out - 1) * win.sw + win.kw, win.pw + win.w.in)),
        columns(static_cast<size_t>(pixels * lanes), Acc(0)),
        divisors(static_cast<size_t>(win.w.out)),
        lanes_now(lanes) {}
  void set_lanes(int64_t lanes) {
    if (lanes != lanes_now) std::fill(columns.begin(), columns.end(), Acc(0));
    lanes_now = lanes;
  }
  int64_t lead, pixels;
  std::vector<Acc> columns, divisors;
  int64_t lanes_now;
};

// sum[k] = (window[k] + window[L + k] + ... + window[(taps - 1) * L + k]) / divisor, added in that order from
// +0 (which changes no sum: no tap is -0), for k < L: up to four taps per pass, the division in the last.
template <class Acc>
SPATIALGRAD_INLINE void divide_tap_sums(const Acc* window, int64_t taps, int64_t L, Acc divisor, Acc* __restrict sum) {
  if (taps == 0) {
    for (int64_t k = 0; k < L; ++k) sum[k] = Acc(0) / divisor;
    return;
  }
  for (int64_t t = 0; t < taps; t += 4) {
    const int m = static_cast<int>(std::min<int64_t>(4, taps - t));
    const Acc* rows[4];
    for (int j = 0; j < m; ++j) rows[j] = window + (t + j) * L;
    const bool last = t + m == taps;
    if (t == 0) {
      last ? add_rows_of<4, true, true, true>(m, rows, L, 1, divisor, sum)
           : add_rows_of<4, true, true, false>(m, rows, L, 1, divisor, sum);
    } else {
      last ? add_rows_of<4, false, true, true>(m, rows, L, 1, divisor, sum)
           : add_rows_of<4, false, true, false>(m, rows, L, 1, divisor, sum);
    }
  }
}

// sums[ow * L + k] = the mean of window (oh, ow) of lane k of `src`, for ow < out_w and k < L: the column sums
// of forward_rows, then the width taps, then the division, lane by lane.
template <class In, class Acc>
SPATIALGRAD_INLINE void forward_lane_row(const Windows& win, const Acc* col_factor, const LaneImage<const In>& src,
                                         int64_t L, int64_t oh, LaneForwardScratch<Acc>& scratch,
                                         Acc* __restrict sums) {
  const int64_t in_w = win.w.in;
  Acc* column_sums = scratch.columns.data() + scratch.lead * L;
  const int64_t first = win.h.start[oh], count = win.h.end[oh] - first;
  if (src.lane == 1 && src.pixel == L) {  // a row's pixels are back to back
    sum_rows(
        count, in_w * L, 1, [&](int64_t r) { return src.at(first + r, 0); }, column_sums);
  } else {
    for (int64_t w = 0; w < in_w; ++w) {
      sum_rows(
          count, L, src.lane, [&](int64_t r) { return src.at(first + r, w); }, column_sums + w * L);
    }
  }
  const Acc* divisors = win.divisor_row(oh, scratch.divisors.data());
  const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
  for (int64_t ow = 0; ow < win.w.out; ++ow) {
    // The window's taps: every padded column of it, or (direct) its clipped input columns, whose sum from +0
    // is the same (no column sum is -0); the padding's zeros change no sum either. So the bits are those of
    // the plane kernels' width passes.
    const Acc* window = win.direct_width ? column_sums + win.w.start[ow] * L : scratch.columns.data() + ow * win.sw * L;
    const int64_t taps = win.direct_width ? win.w.end[ow] - win.w.start[ow] : win.kw;
    const Acc divisor = divisors ? divisors[ow] : row_factor * col_factor[ow];
    divide_tap_sums(window, taps, L, divisor, sums + ow * L);
  }
}

// A 3-D or 4-D tensor's element (n, c, h, w) at data[n * batch + c * channel + h * row + w * col] (batch 0
// for 3-D), and its channels [c0, ..) of batch item n as lanes.
template <class U>
struct TensorLanes {
  explicit TensorLanes(const TensorView& t)
      : data(t.data<std::remove_const_t<U>>()),
        batch(t.dim() == 4 ? t.stride(0) : 0),
        channel(t.stride(-3)),
        row(t.stride(-2)),
        col(t.stride(-1)) {}
  LaneImage<U> lanes(int64_t n, int64_t c0) const { return {data + n * batch + c0 * channel, row, col, channel}; }
  U* data;
  int64_t batch, channel, row, col;
};

bool is_channels_last(const TensorView& t) { return t.stride(-3) == 1 && t.stride(-1) != 1 && t.size(-3) > 1; }

// The channel blocks of a channels-last call: block b of batch item n is channels [b * lanes, ..) (the last
// block may be shorter), and a task's items are ((n * blocks + b) * rows + row).
struct ChannelBlocks {
  int64_t channels, lanes, blocks;
  ChannelBlocks(int64_t c, int64_t l) : channels(c), lanes(l), blocks((c + l - 1) / l) {}
  int64_t first(int64_t image) const { return image % blocks * lanes; }
  int64_t count(int64_t image) const { return std::min(lanes, channels - first(image)); }
};

// Rows per item of a channels-last call: when the tensor it writes is channels-first, bands of rows whose
// pixels give each channel a run of at least kBandPixels values, transposed at once (fewer, longer runs than
// a row at a time: 1 thread, 1 row vs 64-pixel bands, (16,256,14,14) k3 s1 p1 0.69 vs 0.64 ms forward, 0.74
// vs 0.69 backward; (32,512,7,7) k7 backward 0.46 vs 0.27; (16,64,28,28) k2 s2 0.24 vs 0.21 forward, 0.32
// vs 0.34 backward).
constexpr int64_t kBandPixels = 64;

int64_t band_rows(const TensorView& to) {
  const int64_t rows = to.size(-2), width = std::max<int64_t>(1, to.size(-1));
  const bool runs = to.stride(-3) != 1 && to.stride(-1) == 1 && to.stride(-2) == to.size(-1);
  return runs ? std::clamp<int64_t>((kBandPixels + width - 1) / width, 1, std::max<int64_t>(rows, 1)) : 1;
}

// What a channels-last task reads (src) and writes (dst); its items are ((n * blocks + b) * bands + band),
// a band being `band` rows of the written tensor.
template <class T>
struct ChannelsLastPlan {
  ChannelsLastPlan(const Windows& windows, const TensorView& from, const TensorView& to, int64_t lanes)
      : win(&windows),
        blocks(from.size(-3), lanes),
        band(band_rows(to)),
        bands((to.size(-2) + band - 1) / band),
        src(from),
        dst(to),
        col_factor(cast_all<AccType<T>>(windows.col_factor)) {}
  const Windows* win;
  ChannelBlocks blocks;
  int64_t band, bands;
  TensorLanes<const T> src;
  TensorLanes<T> dst;
  std::vector<AccType<T>> col_factor;
};

// Output rows of a channels-last call, a band per item; each band is stored through scatter_lanes (a
// transpose when the output is channels-first). `rows` holds a band.
template <class Isa, class T>
SG_SIMD_KERNEL void forward_rows_channels_last(Isa, const ChannelsLastPlan<T>& plan,
                                               LaneForwardScratch<AccType<T>>& scratch, AccType<T>* rows,
                                               AccType<T>* moved, int64_t lo, int64_t hi) noexcept {
  const Windows& win = *plan.win;
  const int64_t out_w = win.w.out;
  for (int64_t item = lo; item < hi; ++item) {
    const int64_t image = item / plan.bands, n = image / plan.blocks.blocks;
    const int64_t oh0 = item % plan.bands * plan.band, oh1 = std::min(win.h.out, oh0 + plan.band);
    const int64_t c0 = plan.blocks.first(image), L = plan.blocks.count(image);
    scratch.set_lanes(L);
    const LaneImage<T> out = plan.dst.lanes(n, c0);
    // Into a channels-last float/double output whose pixels hold just this block, a row is written in place
    // (no band, no copy; 1 thread: (8,64,56,56) k3 s2 p1 0.24 -> 0.19 ms, (16,256,14,14) k2 s2 0.096 -> 0.079 ms).
    const bool in_place = std::is_same_v<T, AccType<T>> && out.lane == 1 && out.pixel == L;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      AccType<T>* to = in_place ? reinterpret_cast<AccType<T>*>(out.at(oh, 0)) : rows + (oh - oh0) * out_w * L;
      forward_lane_row(win, plan.col_factor.data(), plan.src.lanes(n, c0), L, oh, scratch, to);
    }
    if (!in_place) detail::scatter_lanes(rows, (oh1 - oh0) * out_w, L, L, out.at(oh0, 0), out.lane, out.pixel, moved);
  }
}
template <class T>
void forward_rows_channels_last(const ChannelsLastPlan<T>& plan, LaneForwardScratch<AccType<T>>& scratch,
                                AccType<T>* rows, AccType<T>* moved, int64_t lo, int64_t hi) noexcept {
  SG_SIMD_DISPATCH(forward_rows_channels_last(isa, plan, scratch, rows, moved, lo, hi));
}

// Blocks of `lanes` planes packed into tiles: all planes of the tensor when its batch and channel strides
// line up (one plane stride: contiguous NCHW, 3-D), else the planes of one batch item per block group.
struct PlaneBlocks {
  int64_t lanes, groups, group_planes, per_group;
  int64_t count() const { return groups * per_group; }
  int64_t group(int64_t b) const { return b / per_group; }
  int64_t first(int64_t b) const { return b % per_group * lanes; }
  int64_t planes_in(int64_t b) const { return std::min(lanes, group_planes - first(b)); }
};

bool planes_evenly_strided(const TensorView& t) {
  return t.dim() == 3 || t.size(0) == 1 || t.size(1) == 1 || t.stride(0) == t.size(1) * t.stride(1);
}

// One tensor's planes as blocks of lanes: block b's plane k at data + group * group_stride + (first + k) *
// plane, element (h, w) of a plane at h * row + w * col.
template <class U>
struct PlaneLanes {
  PlaneLanes(const TensorView& t, bool one_group)
      : data(t.data<std::remove_const_t<U>>()),
        group_stride(t.dim() == 4 ? t.stride(0) : 0),
        plane(one_group && t.dim() == 4 && t.size(1) == 1 ? t.stride(0) : t.stride(-3)),
        row(t.stride(-2)),
        col(t.stride(-1)),
        height(t.size(-2)),
        width(t.size(-1)) {}
  U* block(const PlaneBlocks& blocks, int64_t b) const {
    return data + blocks.group(b) * group_stride + blocks.first(b) * plane;
  }
  U* data;
  int64_t group_stride, plane, row, col, height, width;
};

// tile[(h * W + w) * L + k] = plane k's element (h, w), for the `count` planes of a block (whole planes at
// once when their rows are back to back).
template <class T, class Acc>
SPATIALGRAD_INLINE void pack_planes(const PlaneLanes<const T>& from, const T* planes, int64_t count, int64_t L,
                                    Acc* scratch, Acc* tile) {
  const int64_t W = from.width;
  if (from.row == W * from.col) {
    return detail::gather_lanes(planes, from.plane, from.col, from.height * W, count, L, scratch, tile);
  }
  for (int64_t h = 0; h < from.height; ++h) {
    detail::gather_lanes(planes + h * from.row, from.plane, from.col, W, count, L, scratch, tile + h * W * L);
  }
}

// The inverse of pack_planes for the `count` planes of a block.
template <class T, class Acc>
SPATIALGRAD_INLINE void unpack_planes(const Acc* tile, int64_t count, int64_t L, const PlaneLanes<T>& to, T* planes,
                                      Acc* scratch) {
  const int64_t W = to.width;
  if (to.row == W * to.col) {
    return detail::scatter_lanes(tile, to.height * W, count, L, planes, to.plane, to.col, scratch);
  }
  for (int64_t h = 0; h < to.height; ++h) {
    detail::scatter_lanes(tile + h * W * L, W, count, L, planes + h * to.row, to.plane, to.col, scratch);
  }
}

// What a plane-tile task reads (src) and writes (dst): blocks of planes, each packed into a tile of
// src's planes, computed as lanes, and unpacked into dst's planes.
template <class T>
struct TilePlan {
  TilePlan(const Windows& windows, const TensorView& from, const TensorView& to, int64_t lanes)
      : win(&windows),
        blocks(plane_blocks(from, to, lanes)),
        src(from, blocks.groups == 1),
        dst(to, blocks.groups == 1),
        col_factor(cast_all<AccType<T>>(windows.col_factor)) {}
  static PlaneBlocks plane_blocks(const TensorView& from, const TensorView& to, int64_t lanes) {
    const Planes planes = planes_of(from);
    const bool one_group = planes_evenly_strided(from) && planes_evenly_strided(to);
    const int64_t group_planes = one_group ? planes.count : planes.channels;
    return PlaneBlocks{lanes, planes.count / group_planes, group_planes, (group_planes + lanes - 1) / lanes};
  }
  const Windows* win;
  PlaneBlocks blocks;
  PlaneLanes<const T> src;
  PlaneLanes<T> dst;
  std::vector<AccType<T>> col_factor;
};

// One thread's tiles of a plane-tile task: the packed source planes, the packed results, and the moves'
// scratch (allocated outside the kernels, see ForwardScratch).
template <class Acc>
struct TileScratch {
  TileScratch(const TensorView& from, const TensorView& to, int64_t lanes)
      : source(static_cast<size_t>(from.size(-2) * from.size(-1) * lanes)),
        result(static_cast<size_t>(to.size(-2) * to.size(-1) * lanes)),
        moved(std::max(source.size(), result.size())) {}
  std::vector<Acc> source, result, moved;
};

// Zeroes the lanes a block does not fill (the last block of a group), so that they compute zeros.
template <class Acc>
void clear_unused_lanes(const PlaneBlocks& blocks, int64_t b, std::vector<Acc>& tile) {
  if (blocks.planes_in(b) < blocks.lanes) std::fill(tile.begin(), tile.end(), Acc(0));
}

// Blocks [lo, hi) of planes: each packed, every output row computed as lanes, then unpacked.
template <class Isa, class T>
SG_SIMD_KERNEL void forward_tiles(Isa, const TilePlan<T>& plan, LaneForwardScratch<AccType<T>>& scratch,
                                  TileScratch<AccType<T>>& tiles, int64_t lo, int64_t hi) noexcept {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t L = plan.blocks.lanes, in_w = win.w.in, out_w = win.w.out;
  const LaneImage<const Acc> tile{tiles.source.data(), in_w * L, L, 1};
  for (int64_t b = lo; b < hi; ++b) {
    const int64_t count = plan.blocks.planes_in(b);
    clear_unused_lanes(plan.blocks, b, tiles.source);
    pack_planes(plan.src, plan.src.block(plan.blocks, b), count, L, tiles.moved.data(), tiles.source.data());
    for (int64_t oh = 0; oh < win.h.out; ++oh) {
      forward_lane_row(win, plan.col_factor.data(), tile, L, oh, scratch, tiles.result.data() + oh * out_w * L);
    }
    unpack_planes(tiles.result.data(), count, L, plan.dst, plan.dst.block(plan.blocks, b), tiles.moved.data());
  }
}
template <class T>
void forward_tiles(const TilePlan<T>& plan, LaneForwardScratch<AccType<T>>& scratch, TileScratch<AccType<T>>& tiles,
                   int64_t lo, int64_t hi) noexcept {
  SG_SIMD_DISPATCH(forward_tiles(isa, plan, scratch, tiles, lo, hi));
}

// A ring of a power of two of rows (a row's slot is a mask) that holds `cover` rows.
int64_t ring_rows_for(int64_t cover) {
  int64_t rows = 1;
  while (rows < cover) rows *= 2;
  return rows;
}

// One thread's buffers of backward_rows (allocated outside the kernel, see ForwardScratch): a ring of
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
  int64_t ring_rows;
  std::vector<Acc> ring;
  std::vector<const Acc*> covering;
  Spread spread;
  std::vector<Acc> row_out, divisors;
};

// scaled[ow] = 0 + g_row[ow] / divisor of window (oh, ow), as PyTorch's sums start from +0: no scaled
// value is -0, so no sum of them is, and a row covered by one window is its spread row as it stands.
// A function forced inline rather than a lambda: the lambda stopped being inlined into backward_rows's
// levels when it grew, and its loops then ran at the baseline ISA (15% slower).
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
// into the ring, and the input row is the sum of its covering spread rows. A kernel like forward_rows.
template <class Isa, class T, class Spread>
SG_SIMD_KERNEL void backward_rows(Isa, const PlanePlan<T>& plan, BackwardScratch<T, Spread>& scratch, int64_t lo,
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
      sum_rows<2>(
          count, in_w, 1, [&](int64_t k) { return covering[k]; }, scratch.row_out.data());
      detail::store_row(scratch.row_out.data(), in_w, dst, plan.dst_w);
    }
  }
}
template <class T, class Spread>
void backward_rows(const PlanePlan<T>& plan, BackwardScratch<T, Spread>& scratch, int64_t lo, int64_t hi) noexcept {
  SG_SIMD_DISPATCH(backward_rows(isa, plan, scratch, lo, hi));
}

// One thread's buffers of backward_lane_row (allocated outside the kernels, see ForwardScratch): a ring of
// spread grad_output rows as in BackwardScratch, with L lanes per pixel.
template <class Acc>
struct LaneBackwardScratch {
  LaneBackwardScratch(const Windows& win, int64_t lanes)
      : ring_rows(ring_rows_for(win.h.max_cover)),
        ring(static_cast<size_t>(ring_rows * win.w.in * lanes)),
        covering(static_cast<size_t>(ring_rows)),
        scaled(static_cast<size_t>(win.w.out * lanes)),
        divisors(static_cast<size_t>(win.w.out)) {}
  int64_t ring_rows;
  std::vector<Acc> ring;
  std::vector<const Acc*> covering;
  std::vector<Acc> scaled, divisors;
};

// scaled[ow * L + k] = 0 + g(oh, ow, lane k) / divisor of window (oh, ow): scale_grad_row lane by lane.
template <class G, class Acc>
SPATIALGRAD_INLINE void scale_lane_row(const Windows& win, const Acc* col_factor, const LaneImage<const G>& g,
                                       int64_t L, int64_t oh, LaneBackwardScratch<Acc>& scratch) {
  const Acc* divisors = win.divisor_row(oh, scratch.divisors.data());
  const Acc row_factor = static_cast<Acc>(win.row_factor[oh]);
  for (int64_t ow = 0; ow < win.w.out; ++ow) {
    Acc* __restrict scaled = scratch.scaled.data() + ow * L;
    const Acc divisor = divisors ? divisors[ow] : row_factor * col_factor[ow];
    if constexpr (std::is_same_v<G, Acc>) {
      if (g.lane == 1) {
        const Acc* __restrict from = g.at(oh, ow);
        for (int64_t k = 0; k < L; ++k) scaled[k] = Acc(0) + from[k] / divisor;
        continue;
      }
    }
    detail::load_row(g.at(oh, ow), g.lane, L, scaled);
    for (int64_t k = 0; k < L; ++k) scaled[k] = Acc(0) + scaled[k] / divisor;
  }
}

// dst[w * L + k] = the sum of scaled[ow * L + k] over the windows ow that cover column w, in increasing ow
// (0 where none does): the width spread of backward_rows (BoxSpread, DirectSpread) lane by lane.
template <class Acc>
SPATIALGRAD_INLINE void spread_lane_row(const detail::PoolAxis& axis, const Acc* scaled, int64_t L,
                                        Acc* __restrict dst) {
  for (int64_t w = 0; w < axis.in; ++w) {
    Acc* __restrict sum = dst + w * L;
    const int64_t first = axis.first[w], last = axis.last[w];
    if (first == last) {
      std::fill(sum, sum + L, Acc(0));
      continue;
    }
    const Acc* __restrict window = scaled + first * L;
    if (last - first == 1) {
      for (int64_t k = 0; k < L; ++k) sum[k] = window[k];
      continue;
    }
    const Acc* __restrict second = window + L;
    for (int64_t k = 0; k < L; ++k) sum[k] = window[k] + second[k];
    for (int64_t o = first + 2; o < last; ++o) {
      const Acc* __restrict next = scaled + o * L;
      for (int64_t k = 0; k < L; ++k) sum[k] += next[k];
    }
  }
}

// The gradient of input row h of one image of lanes (row[w * L + k]): the covering grad_output rows, scaled
// and spread over the width into the ring, summed in increasing oh, as backward_rows sums them. Returns
// `row`, or the ring row itself when one row covers h. `ring_next` carries the ring between the rows of one
// image: grad_output rows [.., ring_next) are in it (0 when the image starts).
template <class G, class Acc>
SPATIALGRAD_INLINE const Acc* backward_lane_row(const Windows& win, const Acc* col_factor, const LaneImage<const G>& g,
                                                int64_t L, int64_t h, int64_t& ring_next,
                                                LaneBackwardScratch<Acc>& scratch, Acc* row) {
  const int64_t in_w = win.w.in, ring_mask = scratch.ring_rows - 1;
  auto ring_row = [&](int64_t oh) { return scratch.ring.data() + (oh & ring_mask) * in_w * L; };
  const int64_t oh_first = win.h.first[h], oh_last = win.h.last[h];
  for (int64_t oh = std::max(ring_next, oh_first); oh < oh_last; ++oh) {
    scale_lane_row(win, col_factor, g, L, oh, scratch);
    spread_lane_row(win.w, scratch.scaled.data(), L, ring_row(oh));
  }
  ring_next = std::max(ring_next, oh_last);
  const int64_t count = oh_last - oh_first;
  if (count == 1) return ring_row(oh_first);
  for (int64_t k = 0; k < count; ++k) scratch.covering[k] = ring_row(oh_first + k);
  // sum_rows starts from +0, which changes no spread value (none is -0).
  sum_rows(
      count, in_w * L, 1, [&](int64_t k) { return scratch.covering[k]; }, row);
  return row;
}

// Input rows of a channels-last call, a band per item (as forward_rows_channels_last). `rows` holds a band.
template <class Isa, class T>
SG_SIMD_KERNEL void backward_rows_channels_last(Isa, const ChannelsLastPlan<T>& plan,
                                                LaneBackwardScratch<AccType<T>>& scratch, AccType<T>* rows,
                                                AccType<T>* moved, int64_t lo, int64_t hi) noexcept {
  const Windows& win = *plan.win;
  const int64_t in_w = win.w.in;
  int64_t image_now = -1, ring_next = 0;
  for (int64_t item = lo; item < hi; ++item) {
    const int64_t image = item / plan.bands, n = image / plan.blocks.blocks;
    const int64_t h0 = item % plan.bands * plan.band, h1 = std::min(win.h.in, h0 + plan.band);
    if (image != image_now) {  // a new image: its ring starts empty
      image_now = image;
      ring_next = 0;
    }
    const int64_t c0 = plan.blocks.first(image), L = plan.blocks.count(image);
    const LaneImage<T> out = plan.dst.lanes(n, c0);
    // As the forward: a channels-last float/double grad_input of this block's channels takes its rows in place.
    const bool in_place = std::is_same_v<T, AccType<T>> && out.lane == 1 && out.pixel == L;
    const AccType<T>* band = rows;
    for (int64_t h = h0; h < h1; ++h) {
      AccType<T>* row = in_place ? reinterpret_cast<AccType<T>*>(out.at(h, 0)) : rows + (h - h0) * in_w * L;
      const AccType<T>* sums =
          backward_lane_row(win, plan.col_factor.data(), plan.src.lanes(n, c0), L, h, ring_next, scratch, row);
      if (h1 - h0 == 1 && !in_place) {
        band = sums;  // scattered from the ring row itself
      } else if (sums != row) {
        std::copy(sums, sums + in_w * L, row);
      }
    }
    if (!in_place) detail::scatter_lanes(band, (h1 - h0) * in_w, L, L, out.at(h0, 0), out.lane, out.pixel, moved);
  }
}
template <class T>
void backward_rows_channels_last(const ChannelsLastPlan<T>& plan, LaneBackwardScratch<AccType<T>>& scratch,
                                 AccType<T>* rows, AccType<T>* moved, int64_t lo, int64_t hi) noexcept {
  SG_SIMD_DISPATCH(backward_rows_channels_last(isa, plan, scratch, rows, moved, lo, hi));
}

// Blocks [lo, hi) of planes: grad_output packed, every input row computed as lanes, then unpacked.
template <class Isa, class T>
SG_SIMD_KERNEL void backward_tiles(Isa, const TilePlan<T>& plan, LaneBackwardScratch<AccType<T>>& scratch,
                                   TileScratch<AccType<T>>& tiles, int64_t lo, int64_t hi) noexcept {
  using Acc = AccType<T>;
  const Windows& win = *plan.win;
  const int64_t L = plan.blocks.lanes, in_w = win.w.in;
  const LaneImage<const Acc> tile{tiles.source.data(), win.w.out * L, L, 1};
  for (int64_t b = lo; b < hi; ++b) {
    const int64_t count = plan.blocks.planes_in(b);
    clear_unused_lanes(plan.blocks, b, tiles.source);
    pack_planes(plan.src, plan.src.block(plan.blocks, b), count, L, tiles.moved.data(), tiles.source.data());
    int64_t ring_next = 0;
    for (int64_t h = 0; h < win.h.in; ++h) {
      Acc* row = tiles.result.data() + h * in_w * L;
      const Acc* sums = backward_lane_row(win, plan.col_factor.data(), tile, L, h, ring_next, scratch, row);
      if (sums != row) std::copy(sums, sums + in_w * L, row);
    }
    unpack_planes(tiles.result.data(), count, L, plan.dst, plan.dst.block(plan.blocks, b), tiles.moved.data());
  }
}
template <class T>
void backward_tiles(const TilePlan<T>& plan, LaneBackwardScratch<AccType<T>>& scratch, TileScratch<AccType<T>>& tiles,
                    int64_t lo, int64_t hi) noexcept {
  SG_SIMD_DISPATCH(backward_tiles(isa, plan, scratch, tiles, lo, hi));
}

// ---- the cost model: which family runs a call (docs/design.md, "Shape-aware strategies", avg_pool2d) -------
//
// The constants were measured on the 2-core Xeon of docs/design.md, 1 thread, the families timed alternately
// in one process; the tables are in docs/design.md.

// A tile of packed planes (its source or its result, whichever is larger) fits this budget (16, 32 and
// 64 KiB were within 10% of each other for 7x7 to 20x20 planes; 8 KiB left 20x20 planes without tiles).
constexpr int64_t kTileBytes = 32 << 10;
// The most planes per tile: wider tiles gain nothing more (the loops are 8 vectors long).
constexpr int64_t kTileMaxLanes = 64;
// Planes up to this width run as tiles: below it the plane kernels' fixed cost per row (a dozen short
// loops) exceeds the cost of packing the planes into tiles. Planes vs tiles, ms: k2 s2 forward 0.58 vs 0.38
// at 20 columns, 0.46 vs 0.42 at 24, 0.45 vs 0.49 at 28; backward 0.77 vs 0.52 at 14, 0.61 vs 0.61 at 20,
// 0.51 vs 0.70 at 24 (k3 s1 p1: 1.66 vs 1.20 at 20, 1.36 vs 1.48 at 24). More in docs/design.md.
constexpr int64_t kTileMaxWidthForward = 24;
constexpr int64_t kTileMaxWidthBackward = 20;
// A tile computes all its lanes: with fewer planes than this the plane kernels win (1 plane of 7x7, k3 s1 p1:
// 0.9 vs 1.3 us forward; 3 planes 1.2 vs 1.4; 4 planes 1.4 vs 1.3; 8 planes 2.1 vs 1.4).
constexpr int64_t kTileMinPlanes = 4;
// Channels-last tensors run as channels-last lanes from kLaneMinChannels channels, or on planes of at most
// kSmallPlaneWidth columns; with fewer channels the lane loops are too short and the plane kernels (reading
// across the channels) win: at 3 channels and 112x112, k3 s1 p1, 1.15 vs 2.75 ms forward, 0.93 vs 4.27
// backward (planes vs lanes).
constexpr int64_t kLaneMinChannels = 8;
constexpr int64_t kSmallPlaneWidth = 16;
// The backward writes grad_input, the larger tensor; into a channels-first one the lanes write through a transpose that is
// cheap while it stays in the caches: beyond kLaneWriteBytes of grad_input the planes (reading grad_output
// across the channels, writing grad_input row by row) win, unless one image's grad_output exceeds
// kPlaneReadBytes, which the planes would read again from L3 for every channel. Below it, windows that overlap
// (where the planes' rows sum several spread rows) run as lanes from kLaneMinChannelsBackward channels or on
// planes narrower than kWidePlaneWidth, disjoint windows only with both. Measured (lanes vs planes, ms):
//   k3 s1 p1, 64 channels, 56x56: 4 images 0.73 vs 1.35, 15 images (12 MB) 7.6 vs 6.3; (1,64,112,112) 0.93
//   vs 4.2; 8 channels: 28x28 1.18 vs 2.07, 56x56 1.20 vs 1.13;
//   k2 s2, 16 channels: 28x28 0.47 vs 0.53, 56x56 0.48 vs 0.40, 112x112 0.39 vs 0.29; 8 channels, 28x28
//   0.64 vs 0.50.
constexpr int64_t kLaneMinChannelsBackward = 16;
constexpr int64_t kWidePlaneWidth = 48;
constexpr int64_t kLaneWriteBytes = 4 << 20;
constexpr int64_t kPlaneReadBytes = 1 << 20;
// A channels-last call works on blocks of channels whose row (of column sums) fits this budget, so that
// the rows a window needs stay in L2; blocks are whole cache lines of channels (64 bytes)...
constexpr int64_t kChannelRowBytes = 64 << 10;
// ...and one row of the smallest block (16 channels) may take at most this much (a plane of over 64k
// columns): wider planes run as planes, whose scratch is one plane row, so that memory stays bounded.
constexpr int64_t kMaxChannelRowBytes = 4 << 20;
// Into a channels-first tensor a block writes a stream of values per channel: at most this many (measured
// on (16,256,14,14) k3 s1 p1: 32 / 64 / 128 / 256 channels per block took 0.69 / 0.68 / 0.68 / 0.71 ms
// forward and 0.71 / 0.72 / 0.74 / 0.82 ms backward).
constexpr int64_t kMaxStoreStreams = 64;

struct Choice {
  detail::AvgPool2dStrategy strategy;
  int64_t lanes;
};

int64_t round_down(int64_t value, int64_t multiple) { return value / multiple * multiple; }

// The lanes of a tile of planes: as many as the budget allows, at most kTileMaxLanes, and few enough that
// the planes make 4 blocks or more (both threads get work); 0 when not even 8 fit.
int64_t tile_lanes(const TensorView& from, const TensorView& to, int64_t acc_bytes) {
  const int64_t pixels = std::max(from.size(-2) * from.size(-1), to.size(-2) * to.size(-1));
  const int64_t fit = round_down(kTileBytes / std::max<int64_t>(1, pixels * acc_bytes), 8);
  const int64_t planes = planes_of(from).count;
  return fit < 8 ? 0 : std::min({fit, kTileMaxLanes, std::max<int64_t>(8, round_down(planes / 4 + 7, 8))});
}

// The channels of a channels-last block: all of them when their row fits kChannelRowBytes (and, into a
// channels-first tensor, kMaxStoreStreams), else the most 16-channel multiples that fit (at least 16); 0
// when even that exceeds kMaxChannelRowBytes.
int64_t channel_lanes(int64_t channels, int64_t width, int64_t acc_bytes, bool channels_first_store) {
  const int64_t pixel_bytes = std::max<int64_t>(1, width) * acc_bytes;
  if (16 * pixel_bytes > kMaxChannelRowBytes) return 0;
  const int64_t most = std::max<int64_t>(16, round_down(kChannelRowBytes / pixel_bytes, 16));
  return std::min({channels, most, channels_first_store ? kMaxStoreStreams : channels});
}

// True when a channels-last call (from: the tensor it reads; to: the one it writes) runs faster as lanes.
bool lanes_pay_off(const TensorView& from, const TensorView& to, const Windows& win, bool forward, int64_t acc_bytes) {
  const int64_t channels = from.size(-3), width = std::max(from.size(-1), to.size(-1));
  if (channels < kLaneMinChannels) return width <= kSmallPlaneWidth && forward;
  if (forward || width <= kSmallPlaneWidth) return true;
  // A channels-last grad_input (spatialgrad.torch keeps the input's layout, as aten does) takes the lanes'
  // rows as they are, no transpose, where the planes would write it a value per channel stride:
  // (8,64,56,56) k3 s2 p1, 1 thread, 0.60 ms as lanes against 1.74 ms as planes.
  if (is_channels_last(to)) return true;
  if (channels * from.size(-2) * from.size(-1) * acc_bytes > kPlaneReadBytes) return true;
  if (to.numel() * acc_bytes > kLaneWriteBytes) return false;
  const bool many = channels >= kLaneMinChannelsBackward, narrow = width < kWidePlaneWidth;
  const bool overlapping = win.h.max_cover > 1 || win.w.max_cover > 1;
  return overlapping ? many || narrow : many && narrow;
}

// The narrow forward where the planes would take the call (rows past the tiles' width, or too few planes for
// them), at AVX-512 (at AVX2 a lookup is four permutes and three blends). 2 threads, core calls: (2,256,32,32) k2
// s2 0.060 -> 0.036 ms, (8,64,32,32) k3 s2 p1 0.103 -> 0.043, (16,16,28,28) k2 s2 0.040 -> 0.017; the tiles keep
// planes of at most 24 values, whose lanes serve many planes at once ((32,512,7,7) k7 s7: tiles 0.040 ms, narrow
// 0.156).
bool narrow_pays() { return detail::simd_level() == detail::SimdLevel::kAvx512; }

// from: the tensor a call reads (input, grad_output); to: the one it writes. The family of a call the
// direct kernels do not take (runs_direct): channels-last tensors (either one) run as channels-last lanes
// where lanes_pay_off, narrow planes as tiles, the others as planes. A pinned family takes any call with
// pixels (plane tiles of at least 8 lanes; channels-last lanes of at most 16 channels where the row is too long
// for the cost model's).
Choice choose_family(const TensorView& from, const TensorView& to, const Windows& win, bool forward,
                     int64_t acc_bytes) {
  using detail::AvgPool2dStrategy;
  const bool empty_planes = from.size(-2) * from.size(-1) == 0 || to.size(-2) * to.size(-1) == 0;
  const bool channels_last = is_channels_last(from) || (!forward && is_channels_last(to));
  const int64_t width = std::max(from.size(-1), to.size(-1));
  const int64_t channels = channel_lanes(from.size(-3), width, acc_bytes, to.stride(-3) != 1);
  const int64_t tiles = tile_lanes(from, to, acc_bytes);
  const bool narrow = forward && !empty_planes && narrow_pool_ok(from, to, win);
  const AvgPool2dStrategy strategy = detail::choose_strategy<AvgPool2dStrategy>(
      [&](AvgPool2dStrategy pinned) {
        if (pinned == AvgPool2dStrategy::kNarrow) return narrow;
        return pinned == AvgPool2dStrategy::kPlanes || (pinned != AvgPool2dStrategy::kDirect && !empty_planes);
      },
      [&] {
        if (empty_planes) return AvgPool2dStrategy::kPlanes;
        if (channels_last && channels > 0 && lanes_pay_off(from, to, win, forward, acc_bytes)) {
          return AvgPool2dStrategy::kChannelsLast;
        }
        const int64_t max_width = forward ? kTileMaxWidthForward : kTileMaxWidthBackward;
        const bool enough_planes = planes_of(from).count >= kTileMinPlanes;
        if (!channels_last && tiles > 0 && width <= max_width && enough_planes) return AvgPool2dStrategy::kPlaneTiles;
        return narrow && narrow_pays() ? AvgPool2dStrategy::kNarrow : AvgPool2dStrategy::kPlanes;
      });
  switch (strategy) {
    case AvgPool2dStrategy::kNarrow:
      return {strategy, 1};
    case AvgPool2dStrategy::kChannelsLast:
      return {strategy, channels > 0 ? channels : std::min<int64_t>(from.size(-3), 16)};
    case AvgPool2dStrategy::kPlaneTiles:
      return {strategy, std::max<int64_t>(tiles, 8)};
    default:
      return {AvgPool2dStrategy::kPlanes, 1};
  }
}

// Work per output row of the forward: the window's input rows, and the width pass (taps per output).
int64_t forward_work_per_row(const Windows& win) {
  const int64_t width_work = win.direct_width ? win.w.in * (win.w.max_cover + 1) : win.w.out * win.kw;
  return std::max<int64_t>(1, win.w.in * (win.h.max_window + 1) + width_work);
}

int64_t backward_work_per_row(const Windows& win) {
  const int64_t width_work = win.direct_width ? win.w.in * (win.w.max_cover + 1) : win.w.out + win.w.in;
  return std::max<int64_t>(1, width_work * (win.h.max_cover + 1));
}

// What the forward's and the backward's drivers differ in: their scratch, their row functions, their work per
// row, and the side of the windows a task's rows are on (output rows forward, input rows backward).
struct ForwardPass {
  static constexpr bool kForward = true;
  template <class Acc>
  using LaneScratch = LaneForwardScratch<Acc>;
  template <class Acc>
  using WidthPasses = std::pair<detail::StridedBoxSum<Acc>, detail::DirectBoxSum<Acc>>;
  template <class T, class WidthPass>
  using PlaneScratch = ForwardScratch<T, WidthPass>;
  static int64_t work_per_row(const Windows& win) { return forward_work_per_row(win); }
  static int64_t rows(const Windows& win) { return win.h.out; }
  static int64_t columns(const Windows& win) { return win.w.out; }
  template <class Plan>
  static int64_t planes(const Plan& plan) {
    return plan.src_planes.count;
  }
  template <class... Args>
  static void channels_last_rows(Args&&... args) {
    forward_rows_channels_last(std::forward<Args>(args)...);
  }
  template <class... Args>
  static void tile_rows(Args&&... args) {
    forward_tiles(std::forward<Args>(args)...);
  }
  template <class... Args>
  static void plane_rows(Args&&... args) {
    forward_rows(std::forward<Args>(args)...);
  }
};

struct BackwardPass {
  static constexpr bool kForward = false;
  template <class Acc>
  using LaneScratch = LaneBackwardScratch<Acc>;
  template <class Acc>
  using WidthPasses = std::pair<detail::BoxSpread<Acc>, detail::DirectSpread<Acc>>;
  template <class T, class WidthPass>
  using PlaneScratch = BackwardScratch<T, WidthPass>;
  static int64_t work_per_row(const Windows& win) { return backward_work_per_row(win); }
  static int64_t rows(const Windows& win) { return win.h.in; }
  static int64_t columns(const Windows& win) { return win.w.in; }
  template <class Plan>
  static int64_t planes(const Plan& plan) {
    return plan.dst_planes.count;
  }
  template <class... Args>
  static void channels_last_rows(Args&&... args) {
    backward_rows_channels_last(std::forward<Args>(args)...);
  }
  template <class... Args>
  static void tile_rows(Args&&... args) {
    backward_tiles(std::forward<Args>(args)...);
  }
  template <class... Args>
  static void plane_rows(Args&&... args) {
    backward_rows(std::forward<Args>(args)...);
  }
};

// The three families' drivers, for either pass: `src` is what the pass reads (input, grad_output), `dst`
// what it writes (output, grad_input).
template <class T, class Pass>
void run_channels_last(const TensorView& src, const TensorView& dst, const Windows& win, int64_t lanes) {
  using Acc = AccType<T>;
  const ChannelsLastPlan<T> plan(win, src, dst, lanes);
  const int64_t images = (dst.dim() == 4 ? dst.size(0) : 1) * plan.blocks.blocks;
  const int64_t work = lanes * plan.band * Pass::work_per_row(win);
  parallel_chunks(0, images * plan.bands, grain_for(work), 0, [&](ChunkQueue& queue) {
    typename Pass::template LaneScratch<Acc> scratch(win, lanes);
    std::vector<Acc> rows(static_cast<size_t>(plan.band * Pass::columns(win) * lanes)), moved(rows.size());
    for (int64_t lo, hi; queue.next(lo, hi);)
      Pass::channels_last_rows(plan, scratch, rows.data(), moved.data(), lo, hi);
  });
}

template <class T, class Pass>
void run_plane_tiles(const TensorView& src, const TensorView& dst, const Windows& win, int64_t lanes) {
  const TilePlan<T> plan(win, src, dst, lanes);
  const int64_t work = lanes * Pass::rows(win) * Pass::work_per_row(win);
  parallel_chunks(0, plan.blocks.count(), grain_for(work), 0, [&](ChunkQueue& queue) {
    typename Pass::template LaneScratch<AccType<T>> scratch(win, lanes);
    TileScratch<AccType<T>> tiles(src, dst, lanes);
    for (int64_t lo, hi; queue.next(lo, hi);) Pass::tile_rows(plan, scratch, tiles, lo, hi);
  });
}

template <class T, class Pass>
void run_planes(const TensorView& src, const TensorView& dst, const Windows& win) {
  using Passes = typename Pass::template WidthPasses<AccType<T>>;
  const PlanePlan<T> plan(win, src, dst);
  dispatch_width_pass<typename Passes::first_type, typename Passes::second_type>(win, [&](auto tag) {
    using WidthPass = typename decltype(tag)::type;
    const int64_t grain = grain_for(Pass::work_per_row(win));
    parallel_chunks(0, Pass::planes(plan) * Pass::rows(win), grain, 0, [&](ChunkQueue& queue) {
      typename Pass::template PlaneScratch<T, WidthPass> scratch(win);
      for (int64_t lo, hi; queue.next(lo, hi);) Pass::plane_rows(plan, scratch, lo, hi);
    });
  });
}

// The family of the call (choose_family), then its driver.
template <class T, class Pass>
void run_kernel(const TensorView& src, const TensorView& dst, const Windows& win) {
  const Choice choice = choose_family(src, dst, win, Pass::kForward, sizeof(AccType<T>));
  switch (choice.strategy) {
    case detail::AvgPool2dStrategy::kNarrow:
      if constexpr (std::is_same_v<T, float> && Pass::kForward) return run_narrow(src, dst, win);
      break;
    case detail::AvgPool2dStrategy::kChannelsLast:
      return run_channels_last<T, Pass>(src, dst, win, choice.lanes);
    case detail::AvgPool2dStrategy::kPlaneTiles:
      return run_plane_tiles<T, Pass>(src, dst, win, choice.lanes);
    default:
      break;
  }
  run_planes<T, Pass>(src, dst, win);
}

// ---- direct kernels: small calls ------------------------------------------------------------------------
//
// On a small call the families above cost more to set up than to run: a dozen window tables and scratch
// rows allocated, the width passes built, a task queue ((1,2,8,8) k2: 0.83 us forward, 0.93 us backward, for
// 32 outputs and 128 input gradients). The direct kernels keep the windows of both axes in arrays on
// the stack and compute each value straight from the window tables, with the sums of the plane kernels in
// their order: forward, each window's column sums (its rows, from +0, top to bottom) added left to right
// from +0, then divided; backward, each input element sums, from +0 and in increasing oh, the sums (in
// increasing ow, from +0) of the scaled gradients 0 + g / divisor of the windows that cover it. The plane
// kernels' padding zeros and their sums without a leading +0 change no value (no partial sum is -0), so
// the bits are those of every family. One thread: calls below kMinWorkPerTask run on one anyway.

// Axes up to this length (input and output) fit the stack tables.
constexpr int64_t kDirectMaxAxis = 32;
// Calls whose direct work (below) stays within this run directly. Measured (2 threads, float32, ns; direct
// against the better of planes and plane tiles): k2 (1,2,8,8) forward 370 vs 790 (work 224), backward 550 vs
// 930 (416); (1,4,8,8) 570 vs 950 (448), 840 vs 1150 (832); (1,8,8,8) 920 vs 1010 (896), 1470 vs 1180 (1664);
// (1,16,8,8) forward 1540 vs 1110 (1792); (1,1,16,16) 540 vs 900 (320), 770 vs 940 (832); (1,1,32,32) 1270
// vs 1230 (1792), 1800 vs 1370 (3328); k3 s1 p1 (1,2,8,8) 790 vs 960 (896), 960 vs 1080 (1152); (1,4,8,8)
// backward 1680 vs 1380 (2304).
constexpr int64_t kDirectMaxWork = 1024;

using SmallPoolAxis = detail::PoolAxisOf<std::array<int64_t, kDirectMaxAxis>>;

// The divisors of the windows (oh, ow) as the plane kernels divide by them: the product of the factors,
// rounded once (Windows::divisor_row; an exact product, as the kernels' Acc product of the factors is,
// converts exactly from int64 too).
template <class Acc>
using DirectDivisors = std::array<Acc, kDirectMaxAxis * kDirectMaxAxis>;

template <class Acc>
void direct_divisors(const SmallPoolAxis& h, const SmallPoolAxis& w, const AvgPool2dParams& p, DirectDivisors<Acc>& out) {
  constexpr int64_t kExact = std::is_same_v<Acc, float> ? int64_t{1} << 24 : int64_t{1} << 53;
  for (int64_t oh = 0; oh < h.out; ++oh) {
    const int64_t row = divisor_factor(h, oh, p, true);
    for (int64_t ow = 0; ow < w.out; ++ow) {
      const detail::Int128 product = static_cast<detail::Int128>(row) * divisor_factor(w, ow, p, false);
      // Converted from int64 where it fits exactly (one instruction; the 128-bit conversion is a library call).
      const bool exact = -kExact < product && product < kExact;
      out[oh * w.out + ow] = exact ? static_cast<Acc>(static_cast<int64_t>(product)) : static_cast<Acc>(product);
    }
  }
}

// Operations of a direct call: forward, the column sums of each output row's window rows and the taps of
// its windows; backward, the scaled gradients, their spread rows and the rows each input row sums. -1 when
// an axis does not fit the tables or the planes alone pass kDirectMaxWork (the products below then stay far
// from overflowing).
int64_t direct_work(const Resolved& r, int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                    bool forward) {
  if (std::max({in_h, in_w, out_h, out_w}) > kDirectMaxAxis || planes > kDirectMaxWork) return -1;
  if (forward) return planes * (out_h * in_w * std::min(r.kh, in_h) + out_h * out_w * (std::min(r.kw, in_w) + 1));
  const int64_t cover_h = std::min(out_h, (r.kh - 1) / r.sh + 1), cover_w = std::min(out_w, (r.kw - 1) / r.sw + 1);
  return planes * (out_h * out_w + out_h * in_w * (cover_w + 1) + in_h * in_w * (cover_h + 1));
}

// True when a call (src: the tensor it reads; dst: the one it writes) runs the direct kernels: pinned to
// them (when the axes fit), or by the cost model when no family is pinned.
bool runs_direct(const Resolved& r, const TensorView& src, const TensorView& dst, bool forward) {
  using detail::AvgPool2dStrategy;
  const TensorView& in = forward ? src : dst;
  const TensorView& out = forward ? dst : src;
  const int64_t work = direct_work(r, planes_of(in).count, in.size(-2), in.size(-1), out.size(-2), out.size(-1), forward);
  // The cost model's kPlanes stands for "a family": choose_family picks which.
  return detail::choose_strategy<AvgPool2dStrategy>(
             [&](AvgPool2dStrategy pinned) { return pinned != AvgPool2dStrategy::kDirect || work >= 0; },
             [&] {
               return work >= 0 && work <= kDirectMaxWork ? AvgPool2dStrategy::kDirect : AvgPool2dStrategy::kPlanes;
             }) == AvgPool2dStrategy::kDirect;
}

template <class T>
void forward_direct(const TensorView& input, const TensorView& output, const SmallPoolAxis& h, const SmallPoolAxis& w,
                    const AvgPool2dParams& p) {
  using Acc = AccType<T>;
  const Planes from = planes_of(input), to = planes_of(output);
  const int64_t in_row = input.stride(-2), in_col = input.stride(-1), out_row = output.stride(-2),
                out_col = output.stride(-1);
  DirectDivisors<Acc> divisors;
  direct_divisors(h, w, p, divisors);
  std::array<Acc, kDirectMaxAxis> columns;
  for (int64_t plane = 0; plane < from.count; ++plane) {
    const T* x = input.data<T>() + from.offset(plane);
    T* y = output.data<T>() + to.offset(plane);
    for (int64_t oh = 0; oh < h.out; ++oh) {
      // The column sums of the window's rows, from +0 top to bottom...
      std::fill(columns.begin(), columns.begin() + w.in, Acc(0));
      for (int64_t i = h.start[oh]; i < h.end[oh]; ++i) {
        for (int64_t j = 0; j < w.in; ++j) columns[j] += load_as<Acc>(x[i * in_row + j * in_col]);
      }
      // ... added left to right from +0, then divided.
      for (int64_t ow = 0; ow < w.out; ++ow) {
        Acc sum = 0;
        for (int64_t j = w.start[ow]; j < w.end[ow]; ++j) sum += columns[j];
        y[oh * out_row + ow * out_col] = store_as<T>(sum / divisors[oh * w.out + ow]);
      }
    }
  }
}

// spread[oh * w.in + j] = the sum from +0, in increasing ow, of 0 + g(oh, ow) / divisor over the windows ow
// that cover column j: the plane kernels' spread rows of one plane.
template <class T, class Acc>
void direct_spread_rows(const T* g, int64_t g_row, int64_t g_col, const SmallPoolAxis& h, const SmallPoolAxis& w,
                        const DirectDivisors<Acc>& divisors, Acc* __restrict spread) {
  std::array<Acc, kDirectMaxAxis> scaled;
  for (int64_t oh = 0; oh < h.out; ++oh) {
    for (int64_t ow = 0; ow < w.out; ++ow) {
      scaled[ow] = Acc(0) + load_as<Acc>(g[oh * g_row + ow * g_col]) / divisors[oh * w.out + ow];
    }
    for (int64_t j = 0; j < w.in; ++j) {
      Acc sum = 0;
      for (int64_t ow = w.first[j]; ow < w.last[j]; ++ow) sum += scaled[ow];
      spread[oh * w.in + j] = sum;
    }
  }
}

template <class T>
void backward_direct(const TensorView& grad_output, const TensorView& grad_input, const SmallPoolAxis& h,
                     const SmallPoolAxis& w, const AvgPool2dParams& p) {
  using Acc = AccType<T>;
  const Planes from = planes_of(grad_output), to = planes_of(grad_input);
  const int64_t g_row = grad_output.stride(-2), g_col = grad_output.stride(-1), gi_row = grad_input.stride(-2),
                gi_col = grad_input.stride(-1);
  DirectDivisors<Acc> divisors;
  direct_divisors(h, w, p, divisors);
  std::array<Acc, kDirectMaxAxis * kDirectMaxAxis> spread;
  std::array<Acc, kDirectMaxAxis> sums;
  for (int64_t plane = 0; plane < from.count; ++plane) {
    direct_spread_rows(grad_output.data<T>() + from.offset(plane), g_row, g_col, h, w, divisors, spread.data());
    T* gi = grad_input.data<T>() + to.offset(plane);
    // Input row i: the spread rows of the windows that cover it, from +0 in increasing oh.
    for (int64_t i = 0; i < h.in; ++i) {
      std::fill(sums.begin(), sums.begin() + w.in, Acc(0));
      for (int64_t oh = h.first[i]; oh < h.last[i]; ++oh) {
        for (int64_t j = 0; j < w.in; ++j) sums[j] += spread[oh * w.in + j];
      }
      for (int64_t j = 0; j < w.in; ++j) gi[i * gi_row + j * gi_col] = store_as<T>(sums[j]);
    }
  }
}

// The direct kernels' call: `src` is what it reads (input, grad_output), `dst` what it writes.
template <class T>
void run_direct(const TensorView& src, const TensorView& dst, const Resolved& r, const AvgPool2dParams& params,
                bool forward) {
  const TensorView& in = forward ? src : dst;
  const TensorView& out = forward ? dst : src;
  SmallPoolAxis h, w;  // 1.3 KB each: filled in place, not returned
  detail::fill_pool_axis(h, in.size(-2), out.size(-2), r.kh, r.sh, r.ph);
  detail::fill_pool_axis(w, in.size(-1), out.size(-1), r.kw, r.sw, r.pw);
  if (forward) return forward_direct<T>(src, dst, h, w, params);
  backward_direct<T>(src, dst, h, w, params);
}

// The validated operators on (N, C, H, W) / (C, H, W) views (half precision converted by rows as the
// kernels read and write them).
template <class T>
void run_forward(const TensorView& input, const TensorView& output, const AvgPool2dParams& params) {
  const Resolved r = resolve(kForward, params);
  const int64_t in_h = input.size(-2), in_w = input.size(-1), out_h = output.size(-2), out_w = output.size(-1);
  if (runs_direct(r, input, output, true)) return run_direct<T>(input, output, r, params, true);
  run_kernel<T, ForwardPass>(input, output, make_windows(r, params, in_h, in_w, out_h, out_w));
}

template <class T>
void run_backward(const TensorView& grad_output, const TensorView& grad_input, const AvgPool2dParams& params) {
  const Resolved r = resolve(kBackward, params);
  const int64_t in_h = grad_input.size(-2), in_w = grad_input.size(-1), out_h = grad_output.size(-2),
                out_w = grad_output.size(-1);
  if (runs_direct(r, grad_output, grad_input, false)) return run_direct<T>(grad_output, grad_input, r, params, false);
  run_kernel<T, BackwardPass>(grad_output, grad_input, make_windows(r, params, in_h, in_w, out_h, out_w));
}

}  // namespace

std::vector<int64_t> avg_pool2d_output_shape(const std::vector<int64_t>& input_shape, const AvgPool2dParams& params) {
  return output_shape(kForward, input_shape, params);
}

void avg_pool2d(const TensorView& input, const TensorView& output, const AvgPool2dParams& params) {
  const std::vector<int64_t> expected = output_shape(kForward, input.sizes(), params);
  detail::check_shape(kForward, "output", output, expected);
  detail::check_same_dtype(kForward, "output", output, "input", input);
  // Half precision converted by rows as the kernels read and write them (no staging).
  detail::run_entry(kForward, "input", input.dtype(), [&](auto tag, auto&) {
    if (output.is_empty()) return;
    run_forward<typename decltype(tag)::type>(channels_first(input, params.layout),
                                              channels_first(output, params.layout), params);
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
  detail::check_floating(kBackward, "grad_output", grad_output.dtype());
}

void avg_pool2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grad_input,
                         const AvgPool2dParams& params) {
  check_avg_pool2d_backward(grad_output, input, grad_input, params);
  detail::run_entry(kBackward, "grad_output", grad_output.dtype(), [&](auto tag, auto&) {
    if (grad_input.is_empty()) return;
    run_backward<typename decltype(tag)::type>(channels_first(grad_output, params.layout),
                                               channels_first(grad_input, params.layout), params);
  });
}

}  // namespace spatialgrad

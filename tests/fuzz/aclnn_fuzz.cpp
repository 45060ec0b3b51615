// libFuzzer target over the aclnn C API: the five operators' two phases with tensors of random shapes,
// strides, offsets, storage sizes, dtypes and formats (invalid enum codes and null tensors included),
// random scalar parameters (huge ones too) and random data (NaN and Inf included).
//
// Each input first builds a consistent problem for the chosen operator from a few small sizes, then
// perturbs some of its arguments, so that both the validation and the kernels are reached. Built with
// clang, -fsanitize=fuzzer,address,undefined (make fuzz); any crash, sanitizer report, leak or hang is a
// finding. Sizes stay small (dimensions <= 7), so each run is fast: what the library does with huge
// parameters on small data is what is tested.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_avgpool2d_backward.h"
#include "aclnnop/aclnn_grid_sampler2d_backward.h"
#include "aclnnop/aclnn_multi_scale_deformable_attention_grad.h"
#include "aclnnop/aclnn_roi_align_v2_backward.h"
#include "aclnnop/aclnn_upsample_bilinear_2d_backward_v2.h"

namespace {

constexpr int64_t kMaxStorage = 1 << 14;  // elements per tensor

// The fuzz input read front to back; past its end every read is 0.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool coin() { return byte() & 1; }
  int64_t small(int64_t lo, int64_t hi) { return lo + byte() % (hi - lo + 1); }
  // Mostly small values, sometimes the edges of int64 and powers of two near them.
  int64_t wide() {
    static const int64_t kEdges[] = {0, 1, -1, 2, 3, int64_t(1) << 31, int64_t(1) << 32, int64_t(1) << 40,
                                     int64_t(1) << 62, std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::min(), -(int64_t(1) << 33)};
    const uint8_t b = byte();
    if (b < 200) return small(-1, 9);
    return kEdges[b % (sizeof(kEdges) / sizeof(kEdges[0]))];
  }
  double real() {
    const uint8_t b = byte();
    if (b == 255) return std::numeric_limits<double>::quiet_NaN();
    if (b == 254) return std::numeric_limits<double>::infinity();
    if (b == 253) return -1e300;
    if (b == 252) return 1e-310;
    return (static_cast<double>(b) - 120.0) / 40.0;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case ACL_FLOAT16: case ACL_BF16: return 2;
    case ACL_FLOAT: case ACL_INT32: return 4;
    default: return 8;
  }
}

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t out;
  if (!__builtin_mul_overflow(a, b, &out)) return out;
  return (a < 0) == (b < 0) ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t out;
  if (!__builtin_add_overflow(a, b, &out)) return out;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

// One tensor argument: its memory (owned) and its aclTensor (or null).
struct Tensor {
  std::vector<unsigned char> storage;
  aclTensor* tensor = nullptr;
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { aclDestroyTensor(tensor); }
};

void fill(Reader& in, int32_t dtype, unsigned char* data, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    unsigned char* at = data + i * element_size(dtype);
    if (dtype == ACL_INT32 || dtype == ACL_INT64) {
      const int64_t n = in.byte() < 240 ? in.small(0, 6) : in.wide();
      if (dtype == ACL_INT32) {
        const int32_t n32 = static_cast<int32_t>(n);
        std::memcpy(at, &n32, 4);
      } else {
        std::memcpy(at, &n, 8);
      }
    } else if (dtype == ACL_DOUBLE) {
      const double v = in.real();
      std::memcpy(at, &v, 8);
    } else if (dtype == ACL_FLOAT) {
      const double v = in.real();  // +-1e300 becomes +-Inf
      const float f = std::isfinite(v) && std::fabs(v) > 3e38 ? std::copysign(INFINITY, v) : static_cast<float>(v);
      std::memcpy(at, &f, 4);
    } else if (element_size(dtype) == 2) {
      const uint16_t bits = static_cast<uint16_t>(in.byte() | (in.byte() << 8));
      std::memcpy(at, &bits, 2);
    }
  }
}

// A tensor of `shape` and `dtype` (contiguous), perturbed now and then: null, another shape, dtype or
// format (invalid codes too), odd strides, an offset, a storage too small, null data.
void make(Reader& in, Tensor& t, std::vector<int64_t> shape, int32_t dtype, int32_t format = ACL_FORMAT_ND) {
  const uint8_t mutation = in.byte() % 24;
  if (mutation == 0) return;  // a null tensor
  if (mutation == 1) {
    shape.resize(static_cast<size_t>(in.small(0, 6)));
    for (int64_t& s : shape) s = in.small(-1, 5);
  }
  if (mutation == 2) dtype = in.coin() ? 999 : static_cast<int32_t>(in.small(-1, 34));
  if (mutation == 3) format = in.coin() ? 999 : static_cast<int32_t>(in.small(-1, 30));
  if (mutation == 4 && !shape.empty()) {
    int64_t& size = shape[in.byte() % shape.size()];
    size = saturating_add(size, in.coin() ? 1 : -1);  // the size may be INT64_MAX (found by the fuzzer)
  }
  // (Saturating arithmetic: a shape may hold a huge size; the library is what must handle it.)
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = saturating_mul(strides[d], std::max<int64_t>(shape[d], 1));
  if (mutation == 5 && !strides.empty()) strides[in.byte() % strides.size()] = in.small(-3, 7);
  if (mutation == 6) std::fill(strides.begin(), strides.end(), 0);
  int64_t offset = mutation == 7 ? in.small(0, 9) : 0;
  // Elements the view reaches (when the arithmetic is sane), then the storage: sometimes one short.
  int64_t lowest = 0, highest = 0;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 0) empty = true;
    const int64_t reach = saturating_mul(std::max<int64_t>(shape[d], 1) - 1, strides[d]);
    int64_t& end = reach < 0 ? lowest : highest;
    end = std::clamp<int64_t>(end + std::clamp<int64_t>(reach, -kMaxStorage, kMaxStorage), -kMaxStorage, kMaxStorage);
  }
  offset = std::max(offset, -lowest);
  int64_t storage = empty ? in.small(0, 2) : offset + highest + 1;
  if (mutation == 8) storage = std::max<int64_t>(storage - 1, 0);
  storage = std::min(storage, kMaxStorage);
  t.storage.assign(static_cast<size_t>(storage) * element_size(dtype), 0);
  fill(in, dtype, t.storage.data(), storage);
  void* data = t.storage.empty() || mutation == 9 ? nullptr : t.storage.data();
  const std::vector<int64_t> storage_shape{storage};
  aclDataType acl_dtype;
  aclFormat acl_format;
  std::memcpy(&acl_dtype, &dtype, sizeof(dtype));  // any int: an invalid code is not loaded as the enum here
  std::memcpy(&acl_format, &format, sizeof(format));
  t.tensor = aclCreateTensor(shape.data(), shape.size(), acl_dtype, mutation == 10 ? nullptr : strides.data(), offset,
                             acl_format, storage_shape.data(), 1, data);
}

int32_t float_dtype(Reader& in) {
  static const int32_t kDtypes[] = {ACL_FLOAT, ACL_DOUBLE, ACL_FLOAT16, ACL_BF16};
  return kDtypes[in.byte() % 4];
}

std::vector<int64_t> ints(Reader& in, std::vector<int64_t> values) {
  if (in.byte() % 8 == 0) {
    values.resize(static_cast<size_t>(in.small(0, 3)));
    for (int64_t& v : values) v = in.wide();
  } else if (in.byte() % 8 == 0 && !values.empty()) {
    values[in.byte() % values.size()] = in.wide();
  }
  return values;
}

struct IntArray {
  aclIntArray* array;
  IntArray(Reader& in, const std::vector<int64_t>& values)
      : array(in.byte() % 32 == 0 ? nullptr : aclCreateIntArray(values.data(), values.size())) {}
  ~IntArray() { aclDestroyIntArray(array); }
};

// Runs phase two of a planned executor, sometimes twice as a repeatable one.
template <class Run>
void run_planned(Reader& in, aclnnStatus planned, aclOpExecutor* executor, Run run) {
  if (planned != ACLNN_SUCCESS) return;
  if (in.coin() && aclSetAclOpExecutorRepeatable(executor) == ACLNN_SUCCESS) {
    run(executor);
    run(executor);
    aclDestroyAclOpExecutor(executor);
    return;
  }
  run(executor);
}

void fuzz_avg_pool2d(Reader& in) {
  const int64_t N = in.small(0, 3), C = in.small(0, 3), H = in.small(0, 7), W = in.small(0, 7);
  const int64_t k = in.small(1, 4), s = in.small(1, 3), p = in.small(0, 2);
  const bool ceil = in.coin(), include_pad = in.coin();
  const int64_t out_h = (H + 2 * p - k + (ceil ? s - 1 : 0)) / s + 1, out_w = (W + 2 * p - k + (ceil ? s - 1 : 0)) / s + 1;
  const int32_t dtype = float_dtype(in);
  Tensor go, self, gi;
  make(in, go, {N, C, std::max<int64_t>(out_h, 0), std::max<int64_t>(out_w, 0)}, dtype);
  make(in, self, {N, C, H, W}, dtype);
  make(in, gi, {N, C, H, W}, dtype);
  IntArray kernel(in, ints(in, {k, k})), stride(in, ints(in, {s, s})), padding(in, ints(in, {p, p}));
  const int64_t divisor = in.byte() % 8 == 0 ? in.wide() : 0;
  const int8_t cube = static_cast<int8_t>(in.byte() % 8 == 0 ? in.byte() : 0);
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus planned = aclnnAvgPool2dBackwardGetWorkspaceSize(
      go.tensor, self.tensor, kernel.array, stride.array, padding.array, ceil, include_pad, divisor, cube, gi.tensor,
      &workspace, &executor);
  run_planned(in, planned, executor, [](aclOpExecutor* e) { aclnnAvgPool2dBackward(nullptr, 0, e, nullptr); });
}

void fuzz_roi_align(Reader& in) {
  const int64_t B = in.small(0, 2), C = in.small(0, 3), H = in.small(0, 7), W = in.small(0, 7), K = in.small(0, 4);
  const int64_t ph = in.small(1, 3), pw = in.small(1, 3);
  const int32_t dtype = float_dtype(in);
  Tensor go, boxes, gi;
  make(in, go, {K, C, in.byte() % 16 == 0 ? in.wide() : ph, pw}, dtype);
  make(in, boxes, {K, 5}, dtype);
  make(in, gi, {B, C, H, W}, dtype);
  IntArray shape(in, ints(in, {B, C, H, W}));
  const double scale_value = in.byte() % 8 == 0 ? in.real() : 0.5 + in.byte() / 64.0;
  const float scale = std::fabs(scale_value) > 3e38 ? std::copysign(INFINITY, scale_value) : static_cast<float>(scale_value);
  const int64_t ratio = in.byte() % 8 == 0 ? in.wide() : in.small(-1, 3);
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus planned = aclnnRoiAlignV2BackwardGetWorkspaceSize(
      go.tensor, boxes.tensor, shape.array, in.byte() % 16 == 0 ? in.wide() : ph, pw, scale, ratio, in.coin(),
      gi.tensor, &workspace, &executor);
  run_planned(in, planned, executor, [](aclOpExecutor* e) { aclnnRoiAlignV2Backward(nullptr, 0, e, nullptr); });
}

void fuzz_upsample(Reader& in) {
  const int64_t N = in.small(0, 2), C = in.small(0, 3), H = in.small(0, 6), W = in.small(0, 6);
  const int64_t oh = in.small(0, 7), ow = in.small(0, 7);
  const bool nhwc = in.coin();
  const int32_t dtype = float_dtype(in), format = nhwc ? ACL_FORMAT_NHWC : ACL_FORMAT_NCHW;
  Tensor go, out;
  make(in, go, nhwc ? std::vector<int64_t>{N, oh, ow, C} : std::vector<int64_t>{N, C, oh, ow}, dtype, format);
  make(in, out, nhwc ? std::vector<int64_t>{N, H, W, C} : std::vector<int64_t>{N, C, H, W}, dtype, format);
  IntArray output_size(in, ints(in, {oh, ow})), input_size(in, ints(in, {N, C, H, W}));
  const double sh = in.byte() % 4 == 0 ? in.real() : 0.0, sw = in.byte() % 4 == 0 ? in.real() : 0.0;
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus planned = aclnnUpsampleBilinear2dBackwardV2GetWorkspaceSize(
      go.tensor, output_size.array, input_size.array, in.coin(), sh, sw, out.tensor, &workspace, &executor);
  run_planned(in, planned, executor,
              [](aclOpExecutor* e) { aclnnUpsampleBilinear2dBackwardV2(nullptr, 0, e, nullptr); });
}

void fuzz_grid_sampler(Reader& in) {
  const int64_t N = in.small(0, 2), C = in.small(0, 3), H = in.small(0, 6), W = in.small(0, 6);
  const int64_t Ho = in.small(0, 5), Wo = in.small(0, 5);
  const int32_t dtype = float_dtype(in);
  Tensor go, input, grid, gi, gg;
  make(in, go, {N, C, Ho, Wo}, dtype);
  make(in, input, {N, C, H, W}, dtype);
  make(in, grid, {N, Ho, Wo, 2}, dtype);
  make(in, gi, {N, C, H, W}, dtype);
  make(in, gg, {N, Ho, Wo, 2}, dtype);
  bool mask_values[3] = {in.coin(), in.coin(), in.coin()};
  const uint64_t mask_size = in.byte() % 8 == 0 ? in.small(0, 3) : 2;
  aclBoolArray* mask = in.byte() % 32 == 0 ? nullptr : aclCreateBoolArray(mask_values, mask_size);
  const int64_t mode = in.byte() % 8 == 0 ? in.wide() : in.small(0, 2);
  const int64_t padding = in.byte() % 8 == 0 ? in.wide() : in.small(0, 2);
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus planned =
      aclnnGridSampler2DBackwardGetWorkspaceSize(go.tensor, input.tensor, grid.tensor, mode, padding, in.coin(), mask,
                                                 gi.tensor, gg.tensor, &workspace, &executor);
  run_planned(in, planned, executor, [](aclOpExecutor* e) { aclnnGridSampler2DBackward(nullptr, 0, e, nullptr); });
  aclDestroyBoolArray(mask);
}

void fuzz_ms_deform_attn(Reader& in) {
  const int64_t bs = in.small(0, 2), heads = in.small(0, 2), C = in.small(0, 4), Q = in.small(0, 4);
  const int64_t L = in.small(0, 3), P = in.small(0, 3);
  std::vector<int64_t> levels, starts;
  int64_t S = 0;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t h = in.small(1, 4), w = in.small(1, 4);
    levels.insert(levels.end(), {h, w});
    starts.push_back(S);
    S += h * w;
  }
  const int32_t dtype = float_dtype(in), index = in.coin() ? ACL_INT64 : ACL_INT32;
  Tensor value, shapes, start_index, loc, attn, go, gv, gl, ga;
  make(in, value, {bs, S, heads, C}, dtype);
  make(in, shapes, {L, 2}, index);
  make(in, start_index, {L}, index);
  make(in, loc, {bs, Q, heads, L, P, 2}, dtype);
  make(in, attn, {bs, Q, heads, L, P}, dtype);
  make(in, go, in.coin() ? std::vector<int64_t>{bs, Q, heads * C} : std::vector<int64_t>{bs, Q, heads, C}, dtype);
  make(in, gv, {bs, S, heads, C}, dtype);
  make(in, gl, {bs, Q, heads, L, P, 2}, dtype);
  make(in, ga, {bs, Q, heads, L, P}, dtype);
  // A consistent level table most of the time (the random data rarely is one).
  auto write_table = [&](Tensor& t, const std::vector<int64_t>& values) {
    if (t.tensor == nullptr || in.byte() % 8 == 0) return;
    const size_t count = std::min(values.size(), t.storage.size() / element_size(index));
    for (size_t i = 0; i < count; ++i) {
      if (index == ACL_INT32) {
        const int32_t v = static_cast<int32_t>(values[i]);
        std::memcpy(t.storage.data() + 4 * i, &v, 4);
      } else {
        std::memcpy(t.storage.data() + 8 * i, &values[i], 8);
      }
    }
  };
  write_table(shapes, levels);
  write_table(start_index, starts);
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus planned = aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize(
      value.tensor, shapes.tensor, start_index.tensor, loc.tensor, attn.tensor, go.tensor, gv.tensor, gl.tensor,
      ga.tensor, &workspace, &executor);
  run_planned(in, planned, executor,
              [](aclOpExecutor* e) { aclnnMultiScaleDeformableAttentionGrad(nullptr, 0, e, nullptr); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  switch (in.byte() % 5) {
    case 0: fuzz_avg_pool2d(in); break;
    case 1: fuzz_roi_align(in); break;
    case 2: fuzz_upsample(in); break;
    case 3: fuzz_grid_sampler(in); break;
    default: fuzz_ms_deform_attn(in); break;
  }
  aclGetRecentErrMsg();  // the messages are not what is tested; drop them
  return 0;
}

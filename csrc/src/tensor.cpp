#include "spatialgrad/tensor.h"

#include <cctype>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

namespace spatialgrad {

namespace {

// Name and element size of each DType, in enumerator order.
struct DTypeInfo {
  const char* name;
  int64_t size;
};
constexpr DTypeInfo kDTypes[] = {{"float16", 2}, {"bfloat16", 2}, {"float32", 4},
                                 {"float64", 8}, {"int32", 4},    {"int64", 8}};

bool is_known(DType dtype) { return static_cast<size_t>(dtype) < sizeof(kDTypes) / sizeof(kDTypes[0]); }

}  // namespace

const char* dtype_name(DType dtype) { return is_known(dtype) ? kDTypes[static_cast<size_t>(dtype)].name : "unknown"; }

int64_t dtype_size(DType dtype) { return is_known(dtype) ? kDTypes[static_cast<size_t>(dtype)].size : 0; }

const char* layout_name(Layout layout) {
  return layout == Layout::kNCHW ? "NCHW" : layout == Layout::kNHWC ? "NHWC" : "unknown";
}

Layout parse_layout(const char* op, const std::string& name) {
  std::string upper(name);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (upper == "NCHW") return Layout::kNCHW;
  if (upper == "NHWC") return Layout::kNHWC;
  detail::fail(ErrorKind::kInvalidArgument, op, "(): expected layout \"NCHW\" or \"NHWC\", but got \"", name, "\"");
}

int64_t checked_numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    SG_CHECK(s >= 0, "tensor: expected non-negative sizes, but got ", format_list(sizes));
    if (s == 0) return 0;  // empty wins over any overflow in the other sizes
  }
  for (int64_t s : sizes) {
    int64_t next;
    SG_CHECK_KIND(!__builtin_mul_overflow(n, s, &next), kOverflow,
                  "tensor: expected the number of elements to fit in int64, but got sizes ", format_list(sizes));
    n = next;
  }
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t step = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = step;
    // Saturated on overflow (no undefined behaviour): such sizes fail the numel check of whoever uses them.
    if (__builtin_mul_overflow(step, sizes[i] > 0 ? sizes[i] : 1, &step)) step = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

TensorView::TensorView(void* data, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides)
    : data_(data), dtype_(dtype), sizes_(std::move(sizes)), strides_(std::move(strides)) {
  numel_ = checked_numel(sizes_);
  if (strides_.empty() && !sizes_.empty()) strides_ = contiguous_strides(sizes_);
  SG_CHECK(strides_.size() == sizes_.size(), "tensor: expected as many strides as sizes, but got ", strides_.size(),
           " strides for sizes ", format_list(sizes_));
  SG_CHECK(data_ != nullptr || numel_ == 0, "tensor: expected a data pointer for a non-empty tensor of sizes ",
           format_list(sizes_), ", but got null");
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

std::string TensorView::shape_string() const { return format_list(sizes_); }

std::string format_list(const std::vector<int64_t>& values, const char* open, const char* close) {
  // A list a user passed can be any length; messages stay short: at most the first 6 entries and the last.
  constexpr size_t kHead = 6;
  const bool elide = values.size() > kHead + 2;
  std::ostringstream stream;
  stream << open;
  for (size_t i = 0; i < values.size(); ++i) {
    if (elide && i == kHead) {
      stream << ", ...";
      i = values.size() - 1;
    }
    stream << (i ? ", " : "") << values[i];
  }
  if (values.size() == 1 && open[0] == '(') stream << ",";
  stream << close;
  return stream.str();
}

void fill_zeros(const TensorView& view) {
  if (view.is_empty()) return;
  const int64_t dims = view.dim(), bytes = dtype_size(view.dtype());
  if (dims == 0) {
    std::memset(view.raw_data(), 0, static_cast<size_t>(bytes));
    return;
  }
  // Odometer over all but the last dimension; the last one is a strided row.
  std::vector<int64_t> index(static_cast<size_t>(dims), 0);
  const int64_t rows = view.numel() / view.size(-1), row_len = view.size(-1), step = view.stride(-1) * bytes;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (int64_t d = 0; d + 1 < dims; ++d) offset += index[static_cast<size_t>(d)] * view.stride(d);
    char* p = static_cast<char*>(view.raw_data()) + offset * bytes;
    for (int64_t i = 0; i < row_len; ++i) std::memset(p + i * step, 0, static_cast<size_t>(bytes));
    for (int64_t d = dims - 2; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < view.size(d)) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace spatialgrad

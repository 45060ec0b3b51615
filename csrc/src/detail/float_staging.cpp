#include "float_staging.h"

#include <algorithm>
#include <vector>

#include "convert.h"
#include "parallel_for.h"

namespace spatialgrad::detail {
namespace {

// Pieces of at most this many elements are the unit of parallel work (the conversions are
// memory-bound; a piece is long enough to amortise a call, short enough to split small tensors).
constexpr int64_t kPiece = 1 << 13;

// Calls fn(offset, index, n, stride) for pieces covering a tensor of the given shape and strides:
// elements offset + i * stride (in the tensor) and index + i (in C order), for i < n. Dimensions laid
// out as one are merged first, so a contiguous tensor is one long row, cut into pieces.
template <class Fn>
void for_each_piece(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, const Fn& fn) {
  std::vector<int64_t> sizes, steps;  // merged dimensions, outermost first
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (!sizes.empty() && steps.back() == strides[d] * shape[d]) {
      sizes.back() *= shape[d];
      steps.back() = strides[d];
    } else {
      sizes.push_back(shape[d]);
      steps.push_back(strides[d]);
    }
  }
  if (sizes.empty()) {  // a single element
    sizes.push_back(1);
    steps.push_back(1);
  }
  const int64_t outer = static_cast<int64_t>(sizes.size()) - 1, row_len = sizes.back(), stride = steps.back();
  const int64_t pieces_per_row = (row_len + kPiece - 1) / kPiece;
  int64_t rows = 1;
  for (int64_t d = 0; d < outer; ++d) rows *= sizes[d];
  const int64_t piece_len = std::min(kPiece, row_len);
  parallel_for(0, rows * pieces_per_row, kPiece / piece_len, [&](int64_t lo, int64_t hi) {
    // The row index of the first piece, as a multi-index over the outer dimensions, then counted up.
    std::vector<int64_t> index(static_cast<size_t>(outer));
    int64_t row = lo / pieces_per_row, rest = row, offset = 0;
    for (int64_t d = outer - 1; d >= 0; --d) {
      index[d] = rest % sizes[d];
      offset += index[d] * steps[d];
      rest /= sizes[d];
    }
    for (int64_t item = lo; item < hi;) {
      const int64_t first_piece = item - row * pieces_per_row;
      const int64_t last_piece = std::min(pieces_per_row, first_piece + (hi - item));
      for (int64_t p = first_piece; p < last_piece; ++p) {
        const int64_t begin = p * kPiece, n = std::min(kPiece, row_len - begin);
        fn(offset + begin * stride, row * row_len + begin, n, stride);
      }
      item += last_piece - first_piece;
      ++row;
      for (int64_t d = outer - 1; d >= 0; --d) {  // next row
        offset += steps[d];
        if (++index[d] < sizes[d]) break;
        offset -= index[d] * steps[d];
        index[d] = 0;
      }
    }
  });
}

}  // namespace

FloatStaging FloatStaging::like(const TensorView& t) {
  FloatStaging s;
  const size_t bytes = static_cast<size_t>(t.numel() > 0 ? t.numel() : 1) * sizeof(float);
  s.data_ = std::unique_ptr<float, Release>(static_cast<float*>(acquire_block(bytes)), Release{bytes});
  s.view_ = TensorView(s.data_.get(), DType::kFloat32, t.sizes());
  return s;
}

FloatStaging FloatStaging::copy_of(const TensorView& t) {
  FloatStaging s = like(t);
  float* dst = s.data_.get();
  auto widen = [&](const auto* src) {
    for_each_piece(t.sizes(), t.strides(),
                   [&](int64_t at, int64_t i, int64_t n, int64_t stride) { widen_row(src + at, stride, n, dst + i); });
  };
  if (t.dtype() == DType::kFloat16) {
    widen(t.data<Half>());
  } else {
    widen(t.data<BFloat16>());
  }
  return s;
}

void FloatStaging::narrow_into(const TensorView& t) const {
  const float* src = data_.get();
  auto narrow = [&](auto* dst) {
    for_each_piece(t.sizes(), t.strides(),
                   [&](int64_t at, int64_t i, int64_t n, int64_t stride) { narrow_row(src + i, n, dst + at, stride); });
  };
  if (t.dtype() == DType::kFloat16) {
    narrow(t.data<Half>());
  } else {
    narrow(t.data<BFloat16>());
  }
}

}  // namespace spatialgrad::detail

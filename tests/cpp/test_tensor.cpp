#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "spatialgrad/dtype.h"
#include "spatialgrad/error.h"
#include "spatialgrad/tensor.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::expect_error;

TEST(TensorView, ContiguousStridesByDefault) {
  float data[24] = {};
  TensorView v(data, DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(v.dim(), 3);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.size(-1), 4);
  EXPECT_EQ(v.stride(-3), 12);
  EXPECT_EQ(v.shape_string(), "(2, 3, 4)");
}

TEST(TensorView, ContiguousStridesOfHugeSizesSaturateInsteadOfOverflowing) {
  // (found by the aclnn fuzzer: aclCreateTensor without strides on such sizes overflowed int64)
  const int64_t big = int64_t(1) << 62;
  const std::vector<int64_t> strides = contiguous_strides({3, big, 5});
  EXPECT_EQ(strides[2], 1);
  EXPECT_EQ(strides[1], 5);
  EXPECT_EQ(strides[0], std::numeric_limits<int64_t>::max());
}

TEST(TensorView, StridedAndNegativeStridesAreNotContiguous) {
  float data[24] = {};
  EXPECT_FALSE(TensorView(data, DType::kFloat32, {2, 3}, {1, 2}).is_contiguous());
  EXPECT_FALSE(TensorView(data + 3, DType::kFloat32, {4}, {-1}).is_contiguous());
  EXPECT_TRUE(TensorView(data, DType::kFloat32, {1, 3}, {99, 1}).is_contiguous());
}

TEST(TensorView, EmptyTensorMayHaveNullData) {
  TensorView v(nullptr, DType::kFloat64, {0, 5});
  EXPECT_EQ(v.numel(), 0);
  EXPECT_TRUE(v.is_empty());
}

TEST(TensorView, RejectsNullDataForNonEmpty) {
  expect_error([] { TensorView(nullptr, DType::kFloat32, {2}); }, ErrorKind::kInvalidArgument, "data pointer");
}

TEST(TensorView, RejectsNegativeSizesAndStrideCountMismatch) {
  float data[4] = {};
  expect_error([&] { TensorView(data, DType::kFloat32, {2, -1}); }, ErrorKind::kInvalidArgument, "non-negative");
  expect_error([&] { TensorView(data, DType::kFloat32, {2, 2}, {1}); }, ErrorKind::kInvalidArgument, "strides");
}

TEST(TensorView, NumelOverflowIsAnOverflowError) {
  float data[1] = {};
  const int64_t big = int64_t(1) << 40;
  expect_error([&] { TensorView(data, DType::kFloat32, {big, big}); }, ErrorKind::kOverflow, "fit in int64");
  // An empty dimension makes the product 0 however large the others are.
  EXPECT_EQ(checked_numel({big, big, 0}), 0);
}

TEST(Errors, ListsInMessagesStayShort) {
  EXPECT_EQ(format_list({2, 3, 4}), "(2, 3, 4)");
  EXPECT_EQ(format_list({7}), "(7,)");
  EXPECT_EQ(format_list({0, 1, 2, 3, 4, 5, 6, 7}, "[", "]"), "[0, 1, 2, 3, 4, 5, 6, 7]");  // 8: all of them
  std::vector<int64_t> long_list(5000);
  for (size_t i = 0; i < long_list.size(); ++i) long_list[i] = static_cast<int64_t>(i);
  EXPECT_EQ(format_list(long_list, "[", "]"), "[0, 1, 2, 3, 4, 5, ..., 4999]");  // a user's list of any length
}

TEST(Errors, MessageAndKind) {
  try {
    SG_CHECK(1 == 2, "op(): expected x to be ", 3, ", but got ", 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_STREQ(e.what(), "op(): expected x to be 3, but got 4");
  }
  expect_error([] { SG_CHECK_KIND(false, kIndex, "op(): expected i < 2, but got 5"); }, ErrorKind::kIndex, "got 5");
}

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::kFloat32), "float32");
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_size(DType::kFloat16), 2);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8);
  EXPECT_EQ(dtype_size(DType::kInt32), 4);
}

TEST(DType, DispatchRejectsUnsupportedDtypes) {
  expect_error([] { dispatch_floating(DType::kInt64, "op", "input", [](auto) {}); }, ErrorKind::kType,
               "op(): expected input to be float16, bfloat16, float32 or float64, but got int64");
  EXPECT_EQ(dispatch_floating(DType::kFloat64, "op", "x", [](auto tag) { return sizeof(typename decltype(tag)::type); }), sizeof(double));
}

}  // namespace
}  // namespace spatialgrad

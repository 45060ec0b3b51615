// The scratch operator against its definition: every element copied, through any strides, on any thread
// count; its errors.
#include <gtest/gtest.h>

#include "spatialgrad/copy2d.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::at;
using testing::expect_error;
using testing::OwnedTensor;
using testing::random_tensor;

TEST(Copy2d, CopiesEveryElementThroughStrides) {
  const auto x = random_tensor<float>({2, 3, 5, 7}, 1);
  // The output written through a transposed view (strides of W and H swapped in memory).
  OwnedTensor<float> storage({2, 3, 7, 5});
  const TensorView y(storage.data(), DType::kFloat32, {2, 3, 5, 7}, {105, 35, 1, 5});
  copy2d(x.view, y);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 7; ++w) EXPECT_EQ(at<float>(y, {n, c, h, w}), at<float>(x.view, {n, c, h, w}));
}

TEST(Copy2d, BackwardIsTheSameCopyOnAnyThreadCount) {
  const auto g = random_tensor<double>({3, 4, 6, 6}, 2);
  testing::expect_same_bits_for_thread_counts({1, 2, 3}, [&] {
    OwnedTensor<double> gi({3, 4, 6, 6});
    copy2d_backward(g.view, gi.view);
    return gi.storage;
  });
}

TEST(Copy2d, Errors) {
  const auto x = random_tensor<float>({2, 3, 4}, 3);
  OwnedTensor<float> y({2, 3, 4});
  expect_error([&] { copy2d(x.view, y.view); }, ErrorKind::kInvalidArgument,
               "copy2d(): expected input to be 4-D, but got 3-D tensor of shape (2, 3, 4)");
  const auto x4 = random_tensor<float>({1, 1, 2, 2}, 4);
  OwnedTensor<float> wrong({1, 1, 2, 3});
  expect_error([&] { copy2d_backward(x4.view, wrong.view); }, ErrorKind::kInvalidArgument,
               "copy2d_backward(): expected grad_input of shape (1, 1, 2, 2), but got (1, 1, 2, 3)");
}

}  // namespace
}  // namespace spatialgrad

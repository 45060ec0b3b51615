// aclnnGridSampler2DBackward through the C API: results equal the core's grid_sampler_2d_backward for
// every mode, outputMask (unwanted outputs zero-filled), every dtype, strided outputs, empty tensors,
// and every validation rule's status and message.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn_core_util.h"
#include "aclnn_test_util.h"
#include "aclnnop/aclnn_grid_sampler2d_backward.h"
#include "spatialgrad/grid_sampler_2d.h"

namespace aclnn_testing {
namespace {

using spatialgrad::DType;

struct Mode {
  int64_t interpolation = 0, padding = 0;
  bool align_corners = false;
  std::vector<bool> mask{true, true};
};

struct BoolArray {
  aclBoolArray* array;
  explicit BoolArray(const std::vector<bool>& values) {
    bool raw[8] = {};
    for (size_t i = 0; i < values.size() && i < 8; ++i) raw[i] = values[i];
    array = aclCreateBoolArray(raw, values.size());
  }
  BoolArray(const BoolArray&) = delete;
  BoolArray& operator=(const BoolArray&) = delete;
  ~BoolArray() { aclDestroyBoolArray(array); }
};

aclnnStatus run(const aclTensor* go, const aclTensor* input, const aclTensor* grid, const Mode& m, aclTensor* ig,
                aclTensor* gg) {
  BoolArray mask(m.mask);
  uint64_t workspace = 1;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = aclnnGridSampler2DBackwardGetWorkspaceSize(
      go, input, grid, m.interpolation, m.padding, m.align_corners, mask.array, ig, gg, &workspace, &executor);
  if (status != ACLNN_SUCCESS) return status;
  EXPECT_EQ(workspace, 0u);
  return aclnnGridSampler2DBackward(nullptr, 0, executor, nullptr);
}

spatialgrad::GridSampler2dParams core_params(const Mode& m) {
  spatialgrad::GridSampler2dParams p;
  p.interpolation_mode = static_cast<spatialgrad::GridSamplerInterpolation>(m.interpolation);
  p.padding_mode = static_cast<spatialgrad::GridSamplerPadding>(m.padding);
  p.align_corners = m.align_corners;
  return p;
}

// Grid points spread over [-1.3, 1.3]^2 so that every padding mode matters.
template <class T>
std::vector<T> make_grid(int64_t n, uint32_t seed) {
  std::vector<T> g = random_values<T>(n, seed);
  for (T& v : g) v = static_cast<T>(v * T(1.3));
  return g;
}

template <class T>
void check_against_core(aclDataType acl, DType dtype, const Mode& m) {
  const std::vector<int64_t> in_shape{2, 3, 5, 7}, grid_shape{2, 4, 6, 2}, go_shape{2, 3, 4, 6};
  HostTensor<T> go(go_shape, acl, random_values<T>(numel(go_shape), 1)),
      input(in_shape, acl, random_values<T>(numel(in_shape), 2)), grid(grid_shape, acl, make_grid<T>(numel(grid_shape), 3));
  HostTensor<T> ig(in_shape, acl, std::vector<T>(static_cast<size_t>(numel(in_shape)), T(9))),
      gg(grid_shape, acl, std::vector<T>(static_cast<size_t>(numel(grid_shape)), T(9)));
  ASSERT_EQ(run(go.tensor, input.tensor, grid.tensor, m, ig.tensor, gg.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  HostTensor<T> ig_core(in_shape, acl, std::vector<T>(static_cast<size_t>(numel(in_shape)), T(-9))),
      gg_core(grid_shape, acl, std::vector<T>(static_cast<size_t>(numel(grid_shape)), T(-9)));
  spatialgrad::grid_sampler_2d_backward(core_view(go, dtype), core_view(input, dtype), core_view(grid, dtype),
                                        core_view(ig_core, dtype), core_view(gg_core, dtype), core_params(m), m.mask);
  // Wanted outputs equal the core's; unwanted ones are zeros (the core leaves them alone).
  if (m.mask[0]) {
    EXPECT_EQ(ig.storage, ig_core.storage);
  } else {
    EXPECT_EQ(ig.storage, std::vector<T>(ig.storage.size(), T(0)));
  }
  if (m.mask[1]) {
    EXPECT_EQ(gg.storage, gg_core.storage);
  } else {
    EXPECT_EQ(gg.storage, std::vector<T>(gg.storage.size(), T(0)));
  }
}

TEST(AclnnGridSampler2DBackward, EqualsCoreForEveryMode) {
  for (int64_t interpolation : {0, 1, 2}) {
    for (int64_t padding : {0, 1, 2}) {
      for (bool align : {false, true}) {
        Mode m;
        m.interpolation = interpolation;
        m.padding = padding;
        m.align_corners = align;
        SCOPED_TRACE(testing::Message() << "interpolation " << interpolation << " padding " << padding << " align "
                                        << align);
        check_against_core<float>(ACL_FLOAT, DType::kFloat32, m);
        check_against_core<double>(ACL_DOUBLE, DType::kFloat64, m);
      }
    }
  }
}

TEST(AclnnGridSampler2DBackward, OutputMaskZeroFillsUnwantedOutputs) {
  for (std::vector<bool> mask : {std::vector<bool>{true, false}, std::vector<bool>{false, true},
                                 std::vector<bool>{false, false}}) {
    for (int64_t interpolation : {0, 2}) {
      Mode m;
      m.mask = mask;
      m.interpolation = interpolation;
      SCOPED_TRACE(testing::Message() << "mask " << mask[0] << mask[1] << " interpolation " << interpolation);
      check_against_core<float>(ACL_FLOAT, DType::kFloat32, m);
    }
  }
}

// The seed page's sample values, checked against hand-derived numbers: align_corners = false over a
// 5x8 image of 1..40, grid point (0, 0) sits between pixels (2, 3), (2, 4) (half each) of row 2.
TEST(AclnnGridSampler2DBackward, SeedSampleCentrePoint) {
  std::vector<float> input(40);
  for (int i = 0; i < 40; ++i) input[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  HostTensor<float> go({1, 1, 1, 1}, ACL_FLOAT, {1.0f}), in({1, 1, 5, 8}, ACL_FLOAT, input),
      grid({1, 1, 1, 2}, ACL_FLOAT, {0.0f, 0.0f}), ig({1, 1, 5, 8}, ACL_FLOAT), gg({1, 1, 1, 2}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, in.tensor, grid.tensor, Mode{}, ig.tensor, gg.tensor), ACLNN_SUCCESS, "");
  // x = 3.5 (between columns 3 and 4), y = 2 (row 2 exactly).
  EXPECT_FLOAT_EQ(ig.at({0, 0, 2, 3}), 0.5f);
  EXPECT_FLOAT_EQ(ig.at({0, 0, 2, 4}), 0.5f);
  // d/dx: (V[2,4] - V[2,3]) * W/2 = 1 * 4; d/dy: (V[3,3.5] - V[2,3.5]) * H/2 = 8 * 2.5.
  EXPECT_FLOAT_EQ(gg.at({0, 0, 0, 0}), 4.0f);
  EXPECT_FLOAT_EQ(gg.at({0, 0, 0, 1}), 20.0f);
}

// Both outputs as strided views with offsets; nothing outside the views changes.
TEST(AclnnGridSampler2DBackward, WritesNonContiguousOutputsThroughStrides) {
  Mode m;
  m.padding = 2;
  const std::vector<int64_t> in_shape{2, 3, 5, 7}, grid_shape{2, 4, 6, 2};
  HostTensor<double> go({2, 3, 4, 6}, ACL_DOUBLE, random_values<double>(144, 5)),
      input(in_shape, ACL_DOUBLE, random_values<double>(210, 6)), grid(grid_shape, ACL_DOUBLE, make_grid<double>(96, 7));
  HostTensor<double> ig(in_shape, ACL_DOUBLE), gg(grid_shape, ACL_DOUBLE);
  ASSERT_EQ(run(go.tensor, input.tensor, grid.tensor, m, ig.tensor, gg.tensor), ACLNN_SUCCESS);
  const double sentinel = -77.0;
  // inputGrad channels-last, every other element, offset 1; gridGrad with (x, y) planes split apart.
  const std::vector<int64_t> ig_strides{2 * 105, 2 * 1, 2 * 21, 2 * 3}, gg_strides{24, 6, 1, 48};
  HostTensor<double> ig_s(in_shape, ig_strides, 1, 1 + 2 * 210, ACL_DOUBLE, sentinel),
      gg_s(grid_shape, gg_strides, 0, 96, ACL_DOUBLE, sentinel);
  ASSERT_EQ(run(go.tensor, input.tensor, grid.tensor, m, ig_s.tensor, gg_s.tensor), ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  std::vector<bool> touched(ig_s.storage.size(), false);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 7; ++w) {
          EXPECT_EQ(ig_s.at({n, c, h, w}), ig.at({n, c, h, w}));
          touched[static_cast<size_t>(1 + n * ig_strides[0] + c * ig_strides[1] + h * ig_strides[2] +
                                      w * ig_strides[3])] = true;
        }
  for (size_t i = 0; i < touched.size(); ++i) {
    if (!touched[i]) ASSERT_EQ(ig_s.storage[i], sentinel) << "wrote outside the view at " << i;
  }
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t w = 0; w < 6; ++w)
        for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(gg_s.at({n, h, w, k}), gg.at({n, h, w, k}));
  // An unwanted output is zero-filled through its strides too, and only there.
  m.mask = {false, true};
  HostTensor<double> ig_z(in_shape, ig_strides, 1, 1 + 2 * 210, ACL_DOUBLE, sentinel);
  ASSERT_EQ(run(go.tensor, input.tensor, grid.tensor, m, ig_z.tensor, gg_s.tensor), ACLNN_SUCCESS);
  for (size_t i = 0; i < touched.size(); ++i) EXPECT_EQ(ig_z.storage[i], touched[i] ? 0.0 : sentinel) << i;
}

// gradOutput and grid read through transposed strides.
TEST(AclnnGridSampler2DBackward, ReadsNonContiguousInputs) {
  Mode m;
  const std::vector<int64_t> in_shape{1, 2, 5, 7}, grid_shape{1, 4, 6, 2}, go_shape{1, 2, 4, 6};
  HostTensor<float> go(go_shape, ACL_FLOAT, random_values<float>(48, 8)),
      input(in_shape, ACL_FLOAT, random_values<float>(70, 9)), grid(grid_shape, ACL_FLOAT, make_grid<float>(48, 10));
  HostTensor<float> ig(in_shape, ACL_FLOAT), gg(grid_shape, ACL_FLOAT);
  ASSERT_EQ(run(go.tensor, input.tensor, grid.tensor, m, ig.tensor, gg.tensor), ACLNN_SUCCESS);
  HostTensor<float> go_t(go_shape, {48, 1, 12, 2}, 0, 48, ACL_FLOAT, 0.0f), grid_t(grid_shape, {48, 2, 8, 1}, 0, 48,
                                                                                 ACL_FLOAT, 0.0f);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t w = 0; w < 6; ++w) go_t.at({0, c, h, w}) = go.at({0, c, h, w});
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t w = 0; w < 6; ++w)
      for (int64_t k = 0; k < 2; ++k) grid_t.at({0, h, w, k}) = grid.at({0, h, w, k});
  HostTensor<float> ig2(in_shape, ACL_FLOAT), gg2(grid_shape, ACL_FLOAT);
  ASSERT_EQ(run(go_t.tensor, input.tensor, grid_t.tensor, m, ig2.tensor, gg2.tensor), ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  EXPECT_EQ(ig2.storage, ig.storage);
  EXPECT_EQ(gg2.storage, gg.storage);
}

// Empty batch: nothing to do. No output points (Ho = 0): inputGrad is all zeros (docs/operators.md, Common rules).
// No channels: gridGrad is all zeros.
TEST(AclnnGridSampler2DBackward, EmptyTensors) {
  Mode m;
  HostTensor<float> go({0, 2, 3, 3}, ACL_FLOAT), input({0, 2, 4, 4}, ACL_FLOAT), grid({0, 3, 3, 2}, ACL_FLOAT),
      ig({0, 2, 4, 4}, ACL_FLOAT), gg({0, 3, 3, 2}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, input.tensor, grid.tensor, m, ig.tensor, gg.tensor), ACLNN_SUCCESS, "");
  HostTensor<float> go0({1, 2, 0, 3}, ACL_FLOAT), input1({1, 2, 4, 4}, ACL_FLOAT, random_values<float>(32, 1)),
      grid0({1, 0, 3, 2}, ACL_FLOAT), ig1({1, 2, 4, 4}, ACL_FLOAT, std::vector<float>(32, 4.0f)), gg0({1, 0, 3, 2}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go0.tensor, input1.tensor, grid0.tensor, m, ig1.tensor, gg0.tensor), ACLNN_SUCCESS, "");
  EXPECT_EQ(ig1.storage, std::vector<float>(32, 0.0f));
  // No channels: nothing to sample, so gridGrad is all zeros.
  HostTensor<float> go_c0({1, 0, 3, 3}, ACL_FLOAT), input_c0({1, 0, 4, 4}, ACL_FLOAT),
      grid1({1, 3, 3, 2}, ACL_FLOAT, random_values<float>(18, 2)), ig_c0({1, 0, 4, 4}, ACL_FLOAT),
      gg1({1, 3, 3, 2}, ACL_FLOAT, std::vector<float>(18, 4.0f));
  EXPECT_ACL_STATUS(run(go_c0.tensor, input_c0.tensor, grid1.tensor, m, ig_c0.tensor, gg1.tensor), ACLNN_SUCCESS, "");
  EXPECT_EQ(gg1.storage, std::vector<float>(18, 0.0f));
}

// float16 / bfloat16: accepted, and bit-identical to the core.
TEST(AclnnGridSampler2DBackward, HalfDtypesMatchTheCore) {
  using namespace aclnn_testing;
  Mode m;
  const std::vector<int64_t> in_shape{1, 2, 5, 7}, grid_shape{1, 4, 6, 2}, go_shape{1, 2, 4, 6};
  for (const HalfCase& half : kHalfCases) {
    SCOPED_TRACE(half.name);
    std::vector<float> grid_f = exact_half_values(48, 33);
    for (float& v : grid_f) v *= 0.5f;
    HostTensor<uint16_t> go(go_shape, half.acl, half_bits(exact_half_values(48, 31), half.acl)),
        input(in_shape, half.acl, half_bits(exact_half_values(70, 32), half.acl)),
        grid(grid_shape, half.acl, half_bits(grid_f, half.acl));
    HostTensor<uint16_t> ig(in_shape, half.acl, std::vector<uint16_t>(70, 0x7777)),
        gg(grid_shape, half.acl, std::vector<uint16_t>(48, 0x7777));
    EXPECT_ACL_STATUS(run(go.tensor, input.tensor, grid.tensor, m, ig.tensor, gg.tensor), ACLNN_SUCCESS, "");
    HostTensor<uint16_t> ig_core(in_shape, half.acl, std::vector<uint16_t>(70, 0x1111)),
        gg_core(grid_shape, half.acl, std::vector<uint16_t>(48, 0x1111));
    spatialgrad::grid_sampler_2d_backward(core_view(go, half.core), core_view(input, half.core),
                                          core_view(grid, half.core), core_view(ig_core, half.core),
                                          core_view(gg_core, half.core), core_params(m));
    EXPECT_EQ(ig.storage, ig_core.storage);
    EXPECT_EQ(gg.storage, gg_core.storage);
    EXPECT_GT(count_nonzero(ig.storage), 0u);
    EXPECT_GT(count_nonzero(gg.storage), 0u);
  }
}

// ---- validation: the CANN page's rules (161001 for null tensors, 161002 rules 1-10) and docs/operators.md (Grid sampling) ----

struct Args {
  HostTensor<float> go{{2, 3, 4, 5}, ACL_FLOAT};
  HostTensor<float> input{{2, 3, 6, 7}, ACL_FLOAT};
  HostTensor<float> grid{{2, 4, 5, 2}, ACL_FLOAT};
  HostTensor<float> ig{{2, 3, 6, 7}, ACL_FLOAT};
  HostTensor<float> gg{{2, 4, 5, 2}, ACL_FLOAT};
  Mode m;
  aclnnStatus call() { return run(go.tensor, input.tensor, grid.tensor, m, ig.tensor, gg.tensor); }
};

TEST(AclnnGridSampler2DBackwardErrors, NullPointers) {
  Args a;
  BoolArray mask({true, true});
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  auto call = [&](const aclTensor* go, const aclTensor* input, const aclTensor* grid, const aclBoolArray* output_mask,
                  aclTensor* ig, aclTensor* gg) {
    return aclnnGridSampler2DBackwardGetWorkspaceSize(go, input, grid, 0, 0, false, output_mask, ig, gg, &ws, &ex);
  };
  EXPECT_ACL_STATUS(call(nullptr, a.input.tensor, a.grid.tensor, mask.array, a.ig.tensor, a.gg.tensor), kNull,
                    "aclnnGridSampler2DBackwardGetWorkspaceSize(): expected gradOutput to be non-null, but got null");
  EXPECT_ACL_STATUS(call(a.go.tensor, nullptr, a.grid.tensor, mask.array, a.ig.tensor, a.gg.tensor), kNull,
                    "expected input to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.input.tensor, nullptr, mask.array, a.ig.tensor, a.gg.tensor), kNull,
                    "expected grid to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.input.tensor, a.grid.tensor, nullptr, a.ig.tensor, a.gg.tensor), kNull,
                    "expected outputMask to be non-null");
  // Both outputs are required even when the mask does not ask for them (the page: 161001).
  BoolArray neither({false, false});
  EXPECT_ACL_STATUS(call(a.go.tensor, a.input.tensor, a.grid.tensor, neither.array, nullptr, a.gg.tensor), kNull,
                    "expected inputGrad to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.input.tensor, a.grid.tensor, neither.array, a.ig.tensor, nullptr), kNull,
                    "expected gridGrad to be non-null");
}

// Rule 1: dtypes outside the supported range, or not all equal.
TEST(AclnnGridSampler2DBackwardErrors, Dtypes) {
  Args a;
  HostTensor<int32_t> grid32({2, 4, 5, 2}, ACL_INT32);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, grid32.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected grid to have dtype " + aclnn_testing::accepted_floating() + ", but got ACL_INT32");
  HostTensor<double> grid64({2, 4, 5, 2}, ACL_DOUBLE);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, grid64.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected grid to have the dtype of grad_output (float32), but got float64");
  // An unwanted output's dtype is still checked.
  HostTensor<double> gg64({2, 4, 5, 2}, ACL_DOUBLE);
  a.m.mask = {true, false};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, gg64.tensor), kInvalid,
                    "expected grad_grid to have the dtype of grad_output (float32), but got float64");
}

// Rule 2: gradOutput, input, grid 4-D.
TEST(AclnnGridSampler2DBackwardErrors, TensorsAre4d) {
  Args a;
  HostTensor<float> input3({3, 6, 7}, ACL_FLOAT), grid3({4, 5, 2}, ACL_FLOAT), go3({3, 4, 5}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, input3.tensor, a.grid.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected input to be 4-D (N, C, H, W), but got 3-D shape (3, 6, 7)");
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, grid3.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected grid to be 4-D (N, Ho, Wo, 2), but got 3-D shape (4, 5, 2)");
  EXPECT_ACL_STATUS(run(go3.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected grad_output to be 4-D, but got 3-D tensor of shape (3, 4, 5)");
}

// Rule 3: modes in range.
TEST(AclnnGridSampler2DBackwardErrors, Modes) {
  Args a;
  for (int64_t mode : {-1, 3}) {
    a.m.interpolation = mode;
    EXPECT_ACL_STATUS(a.call(), kInvalid,
                      "expected interpolation_mode in {0 (bilinear), 1 (nearest), 2 (bicubic)}, but got " +
                          std::to_string(mode));
  }
  a.m.interpolation = 0;
  for (int64_t mode : {-1, 3}) {
    a.m.padding = mode;
    EXPECT_ACL_STATUS(a.call(), kInvalid,
                      "expected padding_mode in {0 (zeros), 1 (border), 2 (reflection)}, but got " +
                          std::to_string(mode));
  }
}

// Rule 4: batch sizes equal.
TEST(AclnnGridSampler2DBackwardErrors, BatchSizesEqual) {
  Args a;
  HostTensor<float> grid({1, 4, 5, 2}, ACL_FLOAT), gg({1, 4, 5, 2}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, grid.tensor, a.m, a.ig.tensor, gg.tensor), kInvalid,
                    "expected grid to have the batch size of input (2), but got 1");
  HostTensor<float> go({1, 3, 4, 5}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected grad_output to have the batch size of input (2), but got 1");
}

// Rule 5: channels equal.
TEST(AclnnGridSampler2DBackwardErrors, ChannelsEqual) {
  Args a;
  HostTensor<float> go({2, 2, 4, 5}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected grad_output to have the channels of input (3), but got 2");
}

// Rules 6, 7: gradOutput's (Ho, Wo) are grid's.
TEST(AclnnGridSampler2DBackwardErrors, GradOutputSpatialSizeIsGrids) {
  Args a;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 3, 5, 5}, std::vector<int64_t>{2, 3, 4, 6}}) {
    HostTensor<float> go(shape, ACL_FLOAT);
    EXPECT_ACL_STATUS(run(go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                      "expected grad_output's spatial size to equal grid's (Ho, Wo) = (4, 5), but got (" +
                          std::to_string(shape[2]) + ", " + std::to_string(shape[3]) + ")");
  }
}

// Rule 8: input H, W != 0.
TEST(AclnnGridSampler2DBackwardErrors, InputSpatialSizeNonZero) {
  Args a;
  HostTensor<float> input({2, 3, 0, 7}, ACL_FLOAT), ig({2, 3, 0, 7}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, input.tensor, a.grid.tensor, a.m, ig.tensor, a.gg.tensor), kInvalid,
                    "expected input to have non-empty spatial dimensions (H, W), but got input of shape (2, 3, 0, 7)");
}

// Rule 9: grid's last dimension is 2.
TEST(AclnnGridSampler2DBackwardErrors, GridLastDimensionIs2) {
  Args a;
  HostTensor<float> grid({2, 4, 5, 3}, ACL_FLOAT), gg({2, 4, 5, 3}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, grid.tensor, a.m, a.ig.tensor, gg.tensor), kInvalid,
                    "expected grid's last dimension to be 2 (x, y), but got grid of shape (2, 4, 5, 3)");
}

// Rule 10: output shapes are input's and grid's, whatever the mask.
TEST(AclnnGridSampler2DBackwardErrors, OutputShapes) {
  Args a;
  HostTensor<float> ig({2, 3, 6, 6}, ACL_FLOAT), gg({2, 4, 5, 1}, ACL_FLOAT);
  for (std::vector<bool> mask : {std::vector<bool>{true, true}, std::vector<bool>{false, true}}) {
    a.m.mask = mask;
    EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, a.grid.tensor, a.m, ig.tensor, a.gg.tensor), kInvalid,
                      "expected grad_input of shape (2, 3, 6, 7), but got (2, 3, 6, 6)");
  }
  a.m.mask = {true, false};
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, gg.tensor), kInvalid,
                    "expected grad_grid of shape (2, 4, 5, 2), but got (2, 4, 5, 1)");
}

// docs/operators.md (Grid sampling): outputMask has 2 entries.
TEST(AclnnGridSampler2DBackwardErrors, OutputMaskHasTwoEntries) {
  Args a;
  for (std::vector<bool> mask : {std::vector<bool>{true}, std::vector<bool>{true, true, true}}) {
    a.m.mask = mask;
    EXPECT_ACL_STATUS(a.call(), kInvalid,
                      "expected output_mask to have 2 entries (grad_input, grad_grid), but got " +
                          std::to_string(mask.size()));
  }
}

TEST(AclnnGridSampler2DBackwardErrors, Format) {
  Args a;
  HostTensor<float> input({2, 3, 6, 7}, ACL_FLOAT, {}, ACL_FORMAT_NHWC);
  EXPECT_ACL_STATUS(run(a.go.tensor, input.tensor, a.grid.tensor, a.m, a.ig.tensor, a.gg.tensor), kInvalid,
                    "expected input to have format ACL_FORMAT_ND, ACL_FORMAT_NCHW, but got ACL_FORMAT_NHWC");
}

TEST(AclnnGridSampler2DBackwardErrors, OutputElementsMustNotOverlap) {
  Args a;
  HostTensor<float> gg({2, 4, 5, 2}, {10, 2, 0, 1}, 0, 20, ACL_FLOAT, 0.0f);
  EXPECT_ACL_STATUS(a.call(), ACLNN_SUCCESS, "");
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, gg.tensor), kInvalid,
                    "expected gridGrad to have no two elements at the same address");
}

// Before, only overlap within one output was checked: gridGrad inside inputGrad's buffer returned 0
// and the two outputs overwrote each other.
TEST(AclnnGridSampler2DBackwardErrors, OutputsMustNotOverlapEachOtherOrTheInputs) {
  Args a;
  AliasTensor inside_input_grad({2, 4, 5, 2}, ACL_FLOAT, a.ig.storage.data() + 10);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, inside_input_grad.tensor),
                    kInvalid, "expected gridGrad and inputGrad to occupy separate memory");
  AliasTensor over_grid({2, 4, 5, 2}, ACL_FLOAT, a.grid.storage.data());
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, a.grid.tensor, a.m, a.ig.tensor, over_grid.tensor), kInvalid,
                    "expected gridGrad not to overlap the input grid");
  // Both outputs in one allocation, side by side: fine.
  std::vector<float> buffer(2 * 3 * 6 * 7 + 2 * 4 * 5 * 2);
  AliasTensor ig({2, 3, 6, 7}, ACL_FLOAT, buffer.data()), gg({2, 4, 5, 2}, ACL_FLOAT, buffer.data() + 2 * 3 * 6 * 7);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.input.tensor, a.grid.tensor, a.m, ig.tensor, gg.tensor), ACLNN_SUCCESS, "");
}

}  // namespace
}  // namespace aclnn_testing

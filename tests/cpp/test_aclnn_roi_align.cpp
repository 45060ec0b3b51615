// aclnnRoiAlignV2Backward through the C API: results equal the core's roi_align_backward (and docs/operators.md (RoIAlign)'s
// worked example), every dtype, strided outputs, empty tensors, and every validation rule's status and
// message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn_core_util.h"
#include "aclnn_test_util.h"
#include "aclnnop/aclnn_roi_align_v2_backward.h"
#include "spatialgrad/roi_align.h"

namespace aclnn_testing {
namespace {

using spatialgrad::DType;

struct Roi {
  int64_t pooled_height = 2, pooled_width = 3;
  float spatial_scale = 0.5f;
  int64_t sampling_ratio = 2;
  bool aligned = true;
};

spatialgrad::RoiAlignParams core_params(const Roi& r) {
  spatialgrad::RoiAlignParams p;
  p.pooled_height = r.pooled_height;
  p.pooled_width = r.pooled_width;
  p.spatial_scale = static_cast<double>(r.spatial_scale);
  p.sampling_ratio = r.sampling_ratio;
  p.aligned = r.aligned;
  return p;
}

aclnnStatus plan_only(const aclTensor* go, const aclTensor* boxes, const std::vector<int64_t>& input_shape,
                      const Roi& r, aclTensor* gi, aclOpExecutor** executor) {
  IntArray shape(input_shape);
  uint64_t workspace = 1;
  const aclnnStatus status =
      aclnnRoiAlignV2BackwardGetWorkspaceSize(go, boxes, shape.array, r.pooled_height, r.pooled_width, r.spatial_scale,
                                              r.sampling_ratio, r.aligned, gi, &workspace, executor);
  if (status == ACLNN_SUCCESS) EXPECT_EQ(workspace, 0u);
  return status;
}

aclnnStatus run(const aclTensor* go, const aclTensor* boxes, const std::vector<int64_t>& input_shape, const Roi& r,
                aclTensor* gi) {
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = plan_only(go, boxes, input_shape, r, gi, &executor);
  if (status != ACLNN_SUCCESS) return status;
  return aclnnRoiAlignV2Backward(nullptr, 0, executor, nullptr);
}

// Boxes (batch_index, x1, y1, x2, y2) over `images` images of size W x H (coordinates before scaling
// by 0.5): some inside, one partly outside, one degenerate.
template <class T>
std::vector<T> make_boxes(int64_t count, int64_t images, uint32_t seed) {
  const std::vector<double> r = random_values<double>(count * 4, seed);
  std::vector<T> boxes;
  for (int64_t k = 0; k < count; ++k) {
    const double x1 = 8 + 8 * r[static_cast<size_t>(4 * k)], y1 = 6 + 6 * r[static_cast<size_t>(4 * k + 1)];
    const double w = 2 + 10 * std::abs(r[static_cast<size_t>(4 * k + 2)]);
    const double h = k == 1 ? 0.0 : 2 + 8 * std::abs(r[static_cast<size_t>(4 * k + 3)]);
    for (double v : {static_cast<double>(k % images) + 0.25, x1, y1, x1 + w, y1 + h}) boxes.push_back(static_cast<T>(v));
  }
  return boxes;
}

template <class T>
void check_against_core(aclDataType acl, DType dtype, const Roi& r) {
  const std::vector<int64_t> input_shape{2, 3, 9, 11};
  const int64_t K = 5;
  const std::vector<int64_t> go_shape{K, 3, r.pooled_height, r.pooled_width};
  HostTensor<T> go(go_shape, acl, random_values<T>(numel(go_shape), 3)), boxes({K, 5}, acl, make_boxes<T>(K, 2, 4));
  HostTensor<T> gi(input_shape, acl, std::vector<T>(static_cast<size_t>(numel(input_shape)), T(7)));
  ASSERT_EQ(run(go.tensor, boxes.tensor, input_shape, r, gi.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  HostTensor<T> expected(input_shape, acl, std::vector<T>(static_cast<size_t>(numel(input_shape)), T(-7)));
  spatialgrad::roi_align_backward(core_view(go, dtype), core_view(boxes, dtype), input_shape,
                                  core_view(expected, dtype), core_params(r));
  EXPECT_EQ(gi.storage, expected.storage);
}

TEST(AclnnRoiAlignV2Backward, WorkedExampleOfTheSpec) {
  HostTensor<float> go({1, 1, 3, 3}, ACL_FLOAT, {4.5, 6.5, 8.5, 16.5, 18.5, 20.5, 28.5, 30.5, 32.5}, ACL_FORMAT_NCHW);
  HostTensor<float> boxes({1, 5}, ACL_FLOAT, {0, -2, -2, 22, 22});
  HostTensor<float> gi({1, 1, 6, 6}, ACL_FLOAT, {}, ACL_FORMAT_NCHW);
  Roi r;
  r.pooled_height = r.pooled_width = 3;
  r.spatial_scale = 0.25f;
  r.sampling_ratio = 2;
  r.aligned = false;
  EXPECT_ACL_STATUS(run(go.tensor, boxes.tensor, {1, 1, 6, 6}, r, gi.tensor), ACLNN_SUCCESS, "");
  const float rows[3][6] = {{1.125f, 1.125f, 1.625f, 1.625f, 2.125f, 2.125f},
                            {4.125f, 4.125f, 4.625f, 4.625f, 5.125f, 5.125f},
                            {7.125f, 7.125f, 7.625f, 7.625f, 8.125f, 8.125f}};
  for (int64_t h = 0; h < 6; ++h)
    for (int64_t w = 0; w < 6; ++w) EXPECT_FLOAT_EQ(gi.at({0, 0, h, w}), rows[h / 2][w]) << h << ", " << w;
}

TEST(AclnnRoiAlignV2Backward, EqualsCoreAcrossParameters) {
  for (bool aligned : {false, true}) {
    for (int64_t ratio : {0, 1, 3}) {
      for (float scale : {0.5f, 1.0f}) {
        Roi r;
        r.aligned = aligned;
        r.sampling_ratio = ratio;
        r.spatial_scale = scale;
        SCOPED_TRACE(testing::Message() << "aligned " << aligned << " ratio " << ratio << " scale " << scale);
        check_against_core<float>(ACL_FLOAT, DType::kFloat32, r);
        check_against_core<double>(ACL_DOUBLE, DType::kFloat64, r);
      }
    }
  }
}

// Writes gradInput through permuted strides with an offset; nothing outside the view changes.
TEST(AclnnRoiAlignV2Backward, WritesNonContiguousOutputThroughStrides) {
  Roi r;
  const std::vector<int64_t> shape{2, 3, 9, 11};
  HostTensor<double> go({4, 3, 2, 3}, ACL_DOUBLE, random_values<double>(72, 8)),
      boxes({4, 5}, ACL_DOUBLE, make_boxes<double>(4, 2, 9)), dense(shape, ACL_DOUBLE);
  ASSERT_EQ(run(go.tensor, boxes.tensor, shape, r, dense.tensor), ACLNN_SUCCESS);
  // Channels-last strides, every other element, offset 3.
  const std::vector<int64_t> strides{2 * 297, 2 * 1, 2 * 33, 2 * 3};
  const double sentinel = -55.0;
  HostTensor<double> strided(shape, strides, 3, 3 + 2 * 594, ACL_DOUBLE, sentinel);
  ASSERT_EQ(run(go.tensor, boxes.tensor, shape, r, strided.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  std::vector<bool> touched(strided.storage.size(), false);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 9; ++h)
        for (int64_t w = 0; w < 11; ++w) {
          EXPECT_EQ(strided.at({n, c, h, w}), dense.at({n, c, h, w}));
          touched[static_cast<size_t>(3 + n * strides[0] + c * strides[1] + h * strides[2] + w * strides[3])] = true;
        }
  for (size_t i = 0; i < touched.size(); ++i) {
    if (!touched[i]) ASSERT_EQ(strided.storage[i], sentinel) << "wrote outside the view at " << i;
  }
}

// Transposed gradOutput and boxes read through their strides.
TEST(AclnnRoiAlignV2Backward, ReadsNonContiguousInputs) {
  Roi r;
  const std::vector<int64_t> shape{2, 3, 9, 11};
  const std::vector<float> g = random_values<float>(4 * 3 * 2 * 3, 12), b = make_boxes<float>(4, 2, 13);
  HostTensor<float> go({4, 3, 2, 3}, ACL_FLOAT, g), boxes({4, 5}, ACL_FLOAT, b), expected(shape, ACL_FLOAT);
  ASSERT_EQ(run(go.tensor, boxes.tensor, shape, r, expected.tensor), ACLNN_SUCCESS);
  // gradOutput stored (K, PH, PW, C), boxes stored column-major.
  HostTensor<float> go_t({4, 3, 2, 3}, {18, 1, 9, 3}, 0, 72, ACL_FLOAT, 0.0f), boxes_t({4, 5}, {1, 4}, 0, 20, ACL_FLOAT, 0.0f);
  for (int64_t k = 0; k < 4; ++k) {
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t w = 0; w < 3; ++w) go_t.at({k, c, h, w}) = go.at({k, c, h, w});
    for (int64_t j = 0; j < 5; ++j) boxes_t.at({k, j}) = boxes.at({k, j});
  }
  HostTensor<float> gi(shape, ACL_FLOAT);
  ASSERT_EQ(run(go_t.tensor, boxes_t.tensor, shape, r, gi.tensor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(gi.storage, expected.storage);
}

// No ROIs: gradInput is all zeros (docs/operators.md, Common rules), whatever it held; an empty gradInput needs no data.
TEST(AclnnRoiAlignV2Backward, EmptyTensors) {
  Roi r;
  HostTensor<float> go({0, 3, 2, 3}, ACL_FLOAT), boxes({0, 5}, ACL_FLOAT);
  HostTensor<float> gi({1, 3, 4, 4}, ACL_FLOAT, std::vector<float>(48, 5.0f));
  EXPECT_ACL_STATUS(run(go.tensor, boxes.tensor, {1, 3, 4, 4}, r, gi.tensor), ACLNN_SUCCESS, "");
  EXPECT_EQ(gi.storage, std::vector<float>(48, 0.0f));
  HostTensor<float> go0({2, 0, 2, 3}, ACL_FLOAT), boxes2({2, 5}, ACL_FLOAT), gi0({1, 0, 4, 4}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go0.tensor, boxes2.tensor, {1, 0, 4, 4}, r, gi0.tensor), ACLNN_SUCCESS, "");
}

// float16 / bfloat16: accepted, and bit-identical to the core.
TEST(AclnnRoiAlignV2Backward, HalfDtypesMatchTheCore) {
  using namespace aclnn_testing;
  Roi r;
  const std::vector<int64_t> shape{2, 3, 9, 11};
  const std::vector<float> boxes_f{0, 1, 2, 14.5f, 12, 1, 4, 3, 20, 9.5f, 0, 10, 0.5f, 17, 15};
  for (const HalfCase& half : kHalfCases) {
    SCOPED_TRACE(half.name);
    HostTensor<uint16_t> go({3, 3, 2, 3}, half.acl, half_bits(exact_half_values(54, 21), half.acl));
    HostTensor<uint16_t> boxes({3, 5}, half.acl, half_bits(boxes_f, half.acl));
    HostTensor<uint16_t> gi(shape, half.acl, std::vector<uint16_t>(static_cast<size_t>(numel(shape)), 0x7777));
    EXPECT_ACL_STATUS(run(go.tensor, boxes.tensor, shape, r, gi.tensor), ACLNN_SUCCESS, "");
    HostTensor<uint16_t> expected(shape, half.acl, std::vector<uint16_t>(static_cast<size_t>(numel(shape)), 0x1111));
    spatialgrad::roi_align_backward(core_view(go, half.core), core_view(boxes, half.core), shape,
                                    core_view(expected, half.core), core_params(r));
    EXPECT_EQ(gi.storage, expected.storage);
    EXPECT_GT(count_nonzero(gi.storage), 0u);
  }
}

// ---- validation: one test per validation rule of docs/operators.md, checking the status and the message ----

struct Args {
  std::vector<int64_t> input_shape{1, 3, 8, 8};
  HostTensor<float> go{{2, 3, 2, 3}, ACL_FLOAT};
  HostTensor<float> boxes{{2, 5}, ACL_FLOAT, {0, 1, 1, 5, 5, 0, 2, 2, 7, 6}};
  HostTensor<float> gi{{1, 3, 8, 8}, ACL_FLOAT};
  Roi r;
  aclnnStatus call() { return run(go.tensor, boxes.tensor, input_shape, r, gi.tensor); }
};

TEST(AclnnRoiAlignV2BackwardErrors, NullPointers) {
  Args a;
  IntArray shape(a.input_shape);
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  auto call = [&](const aclTensor* go, const aclTensor* boxes, const aclIntArray* input_shape, aclTensor* gi) {
    return aclnnRoiAlignV2BackwardGetWorkspaceSize(go, boxes, input_shape, 2, 3, 0.5f, 2, true, gi, &ws, &ex);
  };
  EXPECT_ACL_STATUS(call(nullptr, a.boxes.tensor, shape.array, a.gi.tensor), kNull,
                    "aclnnRoiAlignV2BackwardGetWorkspaceSize(): expected gradOutput to be non-null, but got null");
  EXPECT_ACL_STATUS(call(a.go.tensor, nullptr, shape.array, a.gi.tensor), kNull, "expected boxes to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.boxes.tensor, nullptr, a.gi.tensor), kNull,
                    "expected inputShape to be non-null");
  EXPECT_ACL_STATUS(call(a.go.tensor, a.boxes.tensor, shape.array, nullptr), kNull, "expected gradInput to be non-null");
  EXPECT_ACL_STATUS(aclnnRoiAlignV2BackwardGetWorkspaceSize(a.go.tensor, a.boxes.tensor, shape.array, 2, 3, 0.5f, 2,
                                                            true, a.gi.tensor, nullptr, &ex),
                    kNull, "expected workspaceSize to be non-null");
  EXPECT_ACL_STATUS(aclnnRoiAlignV2BackwardGetWorkspaceSize(a.go.tensor, a.boxes.tensor, shape.array, 2, 3, 0.5f, 2,
                                                            true, a.gi.tensor, &ws, nullptr),
                    kNull, "expected executor to be non-null");
  // A non-empty tensor without data is a null pointer too.
  const std::vector<int64_t> dims{2, 5};
  aclTensor* no_data = aclCreateTensor(dims.data(), 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims.data(), 2, nullptr);
  EXPECT_ACL_STATUS(call(a.go.tensor, no_data, shape.array, a.gi.tensor), kNull,
                    "expected boxes to have a data address (it has 10 elements), but got null");
  aclDestroyTensor(no_data);
}

TEST(AclnnRoiAlignV2BackwardErrors, GradOutputMustBe4d) {
  Args a;
  HostTensor<float> go({2, 3, 6}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(go.tensor, a.boxes.tensor, a.input_shape, a.r, a.gi.tensor), kInvalid,
                    "expected grad_output to be 4-D, but got 3-D tensor of shape (2, 3, 6)");
}

TEST(AclnnRoiAlignV2BackwardErrors, BoxesMustBeKBy5) {
  Args a;
  HostTensor<float> boxes4({2, 4}, ACL_FLOAT), boxes3({2, 5, 1}, ACL_FLOAT);
  for (aclTensor* boxes : {boxes4.tensor, boxes3.tensor}) {
    EXPECT_ACL_STATUS(run(a.go.tensor, boxes, a.input_shape, a.r, a.gi.tensor), kInvalid,
                      "expected boxes of shape (K, 5) with rows (batch_index, x1, y1, x2, y2), but got (2, ");
  }
}

TEST(AclnnRoiAlignV2BackwardErrors, InputShapeHas4Entries) {
  Args a;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 8, 8}, std::vector<int64_t>{1, 3, 8, 8, 1}}) {
    a.input_shape = shape;
    EXPECT_ACL_STATUS(a.call(), kInvalid,
                      "expected input_shape to have 4 entries (B, C, H, W), but got " + std::to_string(shape.size()));
  }
  a.input_shape = {1, 3, -8, 8};
  EXPECT_ACL_STATUS(a.call(), kInvalid, "expected input_shape entries >= 0, but got [1, 3, -8, 8]");
}

TEST(AclnnRoiAlignV2BackwardErrors, BoxesRowsMatchGradOutputRois) {
  Args a;
  HostTensor<float> boxes({3, 5}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, boxes.tensor, a.input_shape, a.r, a.gi.tensor), kInvalid,
                    "expected boxes to have one row per ROI of grad_output (2), but got 3 rows");
}

TEST(AclnnRoiAlignV2BackwardErrors, GradOutputSpatialSizeIsPooledSize) {
  Args a;
  a.r.pooled_height = 3;
  EXPECT_ACL_STATUS(a.call(), kInvalid,
                    "expected grad_output of pooled size (pooled_height, pooled_width) = (3, 3), but got 2x3");
  a.r.pooled_height = -1;
  EXPECT_ACL_STATUS(a.call(), kInvalid, "expected pooled_height and pooled_width >= 0, but got -1 and 3");
}

TEST(AclnnRoiAlignV2BackwardErrors, GradInputShapeIsInputShapeAndChannelsMatch) {
  Args a;
  HostTensor<float> gi({1, 3, 8, 7}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.boxes.tensor, a.input_shape, a.r, gi.tensor), kInvalid,
                    "expected grad_input of shape (1, 3, 8, 8), but got (1, 3, 8, 7)");
  a.input_shape = {1, 4, 8, 8};
  HostTensor<float> gi4({1, 4, 8, 8}, ACL_FLOAT);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.boxes.tensor, a.input_shape, a.r, gi4.tensor), kInvalid,
                    "expected grad_output to have the 4 channels of input_shape (1, 4, 8, 8), but got 3");
}

TEST(AclnnRoiAlignV2BackwardErrors, SamplingRatioNonNegative) {
  Args a;
  a.r.sampling_ratio = -1;
  EXPECT_ACL_STATUS(a.call(), kInvalid, "expected sampling_ratio >= 0, but got -1");
}

TEST(AclnnRoiAlignV2BackwardErrors, SpatialScalePositiveAndFinite) {
  Args a;
  for (float scale : {0.0f, -0.5f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    a.r.spatial_scale = scale;
    EXPECT_ACL_STATUS(a.call(), kInvalid, "expected spatial_scale to be finite and > 0, but got ");
  }
}

// The batch indices are data: phase two reads them, fails with 161002 naming the ROI, writes nothing.
TEST(AclnnRoiAlignV2BackwardErrors, BatchIndexOutOfRangeFailsWhenRun) {
  Args a;
  a.boxes.at({1, 0}) = 1.0f;  // input_shape has B = 1
  std::fill(a.gi.storage.begin(), a.gi.storage.end(), 3.0f);
  aclOpExecutor* executor = nullptr;
  EXPECT_ACL_STATUS(plan_only(a.go.tensor, a.boxes.tensor, a.input_shape, a.r, a.gi.tensor, &executor), ACLNN_SUCCESS,
                    "");
  EXPECT_ACL_STATUS(aclnnRoiAlignV2Backward(nullptr, 0, executor, nullptr), kInvalid,
                    "aclnnRoiAlignV2Backward(): roi_align_backward(): expected the batch index of ROI 1 (boxes[1, 0]) "
                    "to be in [0, 1), but got 1");
  EXPECT_EQ(a.gi.storage, std::vector<float>(a.gi.storage.size(), 3.0f));
}

TEST(AclnnRoiAlignV2BackwardErrors, Dtypes) {
  Args a;
  HostTensor<double> boxes64({2, 5}, ACL_DOUBLE, {0, 1, 1, 5, 5, 0, 2, 2, 7, 6});
  EXPECT_ACL_STATUS(run(a.go.tensor, boxes64.tensor, a.input_shape, a.r, a.gi.tensor), kInvalid,
                    "expected boxes to have the dtype of grad_output (float32), but got float64");
  HostTensor<double> gi64({1, 3, 8, 8}, ACL_DOUBLE);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.boxes.tensor, a.input_shape, a.r, gi64.tensor), kInvalid,
                    "expected grad_input to have the dtype of grad_output (float32), but got float64");
  HostTensor<int32_t> boxes32({2, 5}, ACL_INT32);
  EXPECT_ACL_STATUS(run(a.go.tensor, boxes32.tensor, a.input_shape, a.r, a.gi.tensor), kInvalid,
                    "expected boxes to have dtype " + aclnn_testing::accepted_floating());
}

TEST(AclnnRoiAlignV2BackwardErrors, Format) {
  Args a;
  HostTensor<float> gi({1, 3, 8, 8}, ACL_FLOAT, {}, ACL_FORMAT_NHWC);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.boxes.tensor, a.input_shape, a.r, gi.tensor), kInvalid,
                    "expected gradInput to have format ACL_FORMAT_ND, ACL_FORMAT_NCHW, but got ACL_FORMAT_NHWC");
}

TEST(AclnnRoiAlignV2BackwardErrors, OutputElementsMustNotOverlap) {
  Args a;
  HostTensor<float> gi({1, 3, 8, 8}, {0, 0, 8, 1}, 0, 64, ACL_FLOAT, 0.0f);
  EXPECT_ACL_STATUS(run(a.go.tensor, a.boxes.tensor, a.input_shape, a.r, gi.tensor), kInvalid,
                    "expected gradInput to have no two elements at the same address");
}

}  // namespace
}  // namespace aclnn_testing

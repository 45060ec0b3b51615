// aclnnMultiScaleDeformableAttentionGrad through the C API: results equal the core's
// ms_deform_attn_backward for int32/int64 index tensors and 3-D or 4-D gradOutput, every dtype,
// strided outputs, empty tensors, and every validation rule's status and message.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn_core_util.h"
#include "aclnn_test_util.h"
#include "aclnnop/aclnn_multi_scale_deformable_attention_grad.h"
#include "spatialgrad/ms_deform_attn.h"

namespace aclnn_testing {
namespace {

using spatialgrad::DType;

// bs 2, levels (3, 4) and (2, 2) -> S = 16, nH 2, C 5, Q 3, L 2, P 3.
struct Dims {
  int64_t bs = 2, spatial = 16, heads = 2, channels = 5, queries = 3, levels = 2, points = 3;
  std::vector<int64_t> value() const { return {bs, spatial, heads, channels}; }
  std::vector<int64_t> location() const { return {bs, queries, heads, levels, points, 2}; }
  std::vector<int64_t> weight() const { return {bs, queries, heads, levels, points}; }
  std::vector<int64_t> grad_output3() const { return {bs, queries, heads * channels}; }
  std::vector<int64_t> grad_output4() const { return {bs, queries, heads, channels}; }
};

// Locations in [-0.4, 1.4]: most inside their level, some outside (zero gradients there).
template <class T>
std::vector<T> make_locations(int64_t n, uint32_t seed) {
  std::vector<T> v = random_values<T>(n, seed);
  for (T& x : v) x = static_cast<T>(0.5 + 0.9 * static_cast<double>(x));
  return v;
}

// Owns one call's tensors: the five inputs (index tensors of type I) and three outputs of type T.
template <class T, class I>
struct Problem {
  HostTensor<T> value, location, weight, grad_output;
  HostTensor<I> shapes, starts;
  HostTensor<T> grad_value, grad_location, grad_weight;
  Problem(const Dims& d, aclDataType acl, aclDataType index_acl, bool four_d_grad_output, T fill = T(3))
      : value(d.value(), acl, random_values<T>(numel(d.value()), 1)),
        location(d.location(), acl, make_locations<T>(numel(d.location()), 2)),
        weight(d.weight(), acl, random_values<T>(numel(d.weight()), 3)),
        grad_output(four_d_grad_output ? d.grad_output4() : d.grad_output3(), acl,
                    random_values<T>(numel(d.grad_output3()), 4)),
        shapes({d.levels, 2}, index_acl, std::vector<I>{3, 4, 2, 2}),
        starts({d.levels}, index_acl, std::vector<I>{0, 12}),
        grad_value(d.value(), acl, std::vector<T>(static_cast<size_t>(numel(d.value())), fill)),
        grad_location(d.location(), acl, std::vector<T>(static_cast<size_t>(numel(d.location())), fill)),
        grad_weight(d.weight(), acl, std::vector<T>(static_cast<size_t>(numel(d.weight())), fill)) {}
};

aclnnStatus plan_only(const aclTensor* value, const aclTensor* shapes, const aclTensor* starts, const aclTensor* loc,
                      const aclTensor* weight, const aclTensor* go, aclTensor* gv, aclTensor* gl, aclTensor* gw,
                      aclOpExecutor** executor) {
  uint64_t workspace = 1;
  const aclnnStatus status = aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize(
      value, shapes, starts, loc, weight, go, gv, gl, gw, &workspace, executor);
  if (status == ACLNN_SUCCESS) EXPECT_EQ(workspace, 0u);
  return status;
}

aclnnStatus run(const aclTensor* value, const aclTensor* shapes, const aclTensor* starts, const aclTensor* loc,
                const aclTensor* weight, const aclTensor* go, aclTensor* gv, aclTensor* gl, aclTensor* gw) {
  aclOpExecutor* executor = nullptr;
  const aclnnStatus status = plan_only(value, shapes, starts, loc, weight, go, gv, gl, gw, &executor);
  if (status != ACLNN_SUCCESS) return status;
  return aclnnMultiScaleDeformableAttentionGrad(nullptr, 0, executor, nullptr);
}

template <class T, class I>
aclnnStatus run(Problem<T, I>& p) {
  return run(p.value.tensor, p.shapes.tensor, p.starts.tensor, p.location.tensor, p.weight.tensor,
             p.grad_output.tensor, p.grad_value.tensor, p.grad_location.tensor, p.grad_weight.tensor);
}

// The core on the same inputs, into fresh outputs (pre-filled differently from the C API's).
template <class T, class I>
void expect_equals_core(Problem<T, I>& p, DType dtype, DType index_dtype, const Dims& d) {
  const aclDataType acl = dtype == DType::kFloat64 ? ACL_DOUBLE : ACL_FLOAT;
  Problem<T, I> q(d, acl, ACL_INT64, false, T(-3));
  const spatialgrad::TensorView go3(p.grad_output.storage.data(), dtype, d.grad_output3());
  spatialgrad::ms_deform_attn_backward(core_view(p.value, dtype), core_view(p.shapes, index_dtype),
                                       core_view(p.starts, index_dtype), core_view(p.location, dtype),
                                       core_view(p.weight, dtype), go3, core_view(q.grad_value, dtype),
                                       core_view(q.grad_location, dtype), core_view(q.grad_weight, dtype));
  EXPECT_EQ(p.grad_value.storage, q.grad_value.storage);
  EXPECT_EQ(p.grad_location.storage, q.grad_location.storage);
  EXPECT_EQ(p.grad_weight.storage, q.grad_weight.storage);
}

TEST(AclnnMultiScaleDeformableAttentionGrad, EqualsCoreForIndexDtypesAndGradOutputRanks) {
  const Dims d;
  for (bool four_d : {false, true}) {
    SCOPED_TRACE(four_d ? "gradOutput (bs, Q, nH, C)" : "gradOutput (bs, Q, nH*C)");
    {
      Problem<float, int32_t> p(d, ACL_FLOAT, ACL_INT32, four_d);
      ASSERT_EQ(run(p), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      expect_equals_core(p, DType::kFloat32, DType::kInt32, d);
    }
    {
      Problem<float, int64_t> p(d, ACL_FLOAT, ACL_INT64, four_d);
      ASSERT_EQ(run(p), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      expect_equals_core(p, DType::kFloat32, DType::kInt64, d);
    }
    {
      Problem<double, int64_t> p(d, ACL_DOUBLE, ACL_INT64, four_d);
      ASSERT_EQ(run(p), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      expect_equals_core(p, DType::kFloat64, DType::kInt64, d);
      // Not vacuous: some locations are inside and some outside their level.
      size_t zero = 0;
      for (double v : p.grad_location.storage) zero += v == 0.0;
      EXPECT_GT(zero, 0u);
      EXPECT_LT(zero, p.grad_location.storage.size());
    }
  }
}

// All three outputs as strided views with offsets; nothing outside the views changes.
TEST(AclnnMultiScaleDeformableAttentionGrad, WritesNonContiguousOutputsThroughStrides) {
  const Dims d;
  Problem<double, int64_t> dense(d, ACL_DOUBLE, ACL_INT64, false);
  ASSERT_EQ(run(dense), ACLNN_SUCCESS);
  const double sentinel = -31.0;
  // Every output: element i of the contiguous layout at 1 + 2 * i (stride doubled, offset 1).
  auto doubled = [&](const std::vector<int64_t>& shape) {
    std::vector<int64_t> strides = aclnn_testing::contiguous_strides(shape);
    for (int64_t& s : strides) s *= 2;
    return std::make_unique<HostTensor<double>>(shape, strides, 1, 1 + 2 * numel(shape), ACL_DOUBLE, sentinel);
  };
  auto gv = doubled(d.value()), gl = doubled(d.location()), gw = doubled(d.weight());
  ASSERT_EQ(run(dense.value.tensor, dense.shapes.tensor, dense.starts.tensor, dense.location.tensor,
                dense.weight.tensor, dense.grad_output.tensor, gv->tensor, gl->tensor, gw->tensor),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  auto check = [&](const HostTensor<double>& strided, const std::vector<double>& expected) {
    for (size_t i = 0; i < strided.storage.size(); ++i) {
      const double want = i % 2 == 1 && i / 2 < expected.size() ? expected[i / 2] : sentinel;
      ASSERT_EQ(strided.storage[i], want) << "at " << i;
    }
  };
  check(*gv, dense.grad_value.storage);
  check(*gl, dense.grad_location.storage);
  check(*gw, dense.grad_weight.storage);
}

// value and a 4-D gradOutput read through permuted strides (nH, C still mergeable).
TEST(AclnnMultiScaleDeformableAttentionGrad, ReadsNonContiguousInputs) {
  const Dims d;
  Problem<float, int64_t> p(d, ACL_FLOAT, ACL_INT64, true);
  ASSERT_EQ(run(p), ACLNN_SUCCESS);
  // value stored (S, bs, nH, C); gradOutput stored (Q, bs, nH, C).
  HostTensor<float> value_t(d.value(), {10, 20, 5, 1}, 0, 320, ACL_FLOAT, 0.0f),
      go_t(d.grad_output4(), {10, 20, 5, 1}, 0, 60, ACL_FLOAT, 0.0f);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < 16; ++s)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t c = 0; c < 5; ++c) value_t.at({b, s, h, c}) = p.value.at({b, s, h, c});
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t c = 0; c < 5; ++c) go_t.at({b, q, h, c}) = p.grad_output.at({b, q, h, c});
  }
  Problem<float, int64_t> out(d, ACL_FLOAT, ACL_INT64, false, -1.0f);
  ASSERT_EQ(run(value_t.tensor, p.shapes.tensor, p.starts.tensor, p.location.tensor, p.weight.tensor, go_t.tensor,
                out.grad_value.tensor, out.grad_location.tensor, out.grad_weight.tensor),
            ACLNN_SUCCESS)
      << aclGetRecentErrMsg();
  EXPECT_EQ(out.grad_value.storage, p.grad_value.storage);
  EXPECT_EQ(out.grad_location.storage, p.grad_location.storage);
  EXPECT_EQ(out.grad_weight.storage, p.grad_weight.storage);
}

// No queries: gradValue is all zeros (docs/operators.md, Common rules); no batch: nothing at all.
TEST(AclnnMultiScaleDeformableAttentionGrad, EmptyTensors) {
  Dims d;
  d.queries = 0;
  Problem<float, int64_t> p(d, ACL_FLOAT, ACL_INT64, false, 8.0f);
  EXPECT_ACL_STATUS(run(p), ACLNN_SUCCESS, "");
  EXPECT_EQ(p.grad_value.storage, std::vector<float>(p.grad_value.storage.size(), 0.0f));
  Dims e;
  e.bs = 0;
  Problem<float, int32_t> q(e, ACL_FLOAT, ACL_INT32, true);
  EXPECT_ACL_STATUS(run(q), ACLNN_SUCCESS, "");
  // No channels, gradOutput given 4-D (bs, Q, nH, 0): still a valid (empty) problem.
  Dims f;
  f.channels = 0;
  Problem<float, int64_t> r(f, ACL_FLOAT, ACL_INT64, true, 8.0f);
  EXPECT_ACL_STATUS(run(r), ACLNN_SUCCESS, "");
  EXPECT_EQ(r.grad_location.storage, std::vector<float>(r.grad_location.storage.size(), 0.0f));
  EXPECT_EQ(r.grad_weight.storage, std::vector<float>(r.grad_weight.storage.size(), 0.0f));
}

// The index tensors are read in phase one and again when the executor runs: changing them in
// between is caught, not read out of bounds.
TEST(AclnnMultiScaleDeformableAttentionGrad, LevelTableCheckedAgainWhenRun) {
  const Dims d;
  Problem<float, int64_t> p(d, ACL_FLOAT, ACL_INT64, false);
  aclOpExecutor* executor = nullptr;
  ASSERT_EQ(plan_only(p.value.tensor, p.shapes.tensor, p.starts.tensor, p.location.tensor, p.weight.tensor,
                      p.grad_output.tensor, p.grad_value.tensor, p.grad_location.tensor, p.grad_weight.tensor,
                      &executor),
            ACLNN_SUCCESS);
  p.shapes.at({0, 0}) = 9;
  EXPECT_ACL_STATUS(aclnnMultiScaleDeformableAttentionGrad(nullptr, 0, executor, nullptr), kInvalid,
                    "aclnnMultiScaleDeformableAttentionGrad(): ms_deform_attn_backward(): expected value.shape[1] to "
                    "be 40 (the sum of H*W over spatial_shapes), but got 16");
}

// float16 / bfloat16: accepted, and bit-identical to the core.
TEST(AclnnMultiScaleDeformableAttentionGrad, HalfDtypesMatchTheCore) {
  using namespace aclnn_testing;
  const Dims d;
  for (const HalfCase& half : kHalfCases) {
    SCOPED_TRACE(half.name);
    std::vector<float> loc = exact_half_values(numel(d.location()), 52);
    for (float& v : loc) v = 0.5f + v * 0.25f;  // [0, 1], still exact
    auto make = [&](uint16_t fill) {
      struct Tensors {
        HostTensor<uint16_t> value, location, weight, grad_output, gv, gl, gw;
      };
      return std::unique_ptr<Tensors>(new Tensors{
          HostTensor<uint16_t>(d.value(), half.acl, half_bits(exact_half_values(numel(d.value()), 51), half.acl)),
          HostTensor<uint16_t>(d.location(), half.acl, half_bits(loc, half.acl)),
          HostTensor<uint16_t>(d.weight(), half.acl, half_bits(exact_half_values(numel(d.weight()), 53), half.acl)),
          HostTensor<uint16_t>(d.grad_output3(), half.acl,
                               half_bits(exact_half_values(numel(d.grad_output3()), 54), half.acl)),
          HostTensor<uint16_t>(d.value(), half.acl, std::vector<uint16_t>(static_cast<size_t>(numel(d.value())), fill)),
          HostTensor<uint16_t>(d.location(), half.acl,
                               std::vector<uint16_t>(static_cast<size_t>(numel(d.location())), fill)),
          HostTensor<uint16_t>(d.weight(), half.acl,
                               std::vector<uint16_t>(static_cast<size_t>(numel(d.weight())), fill))});
    };
    HostTensor<int64_t> shapes({2, 2}, ACL_INT64, {3, 4, 2, 2}), starts({2}, ACL_INT64, {0, 12});
    auto t = make(0x7777);
    const aclnnStatus status = run(t->value.tensor, shapes.tensor, starts.tensor, t->location.tensor,
                                   t->weight.tensor, t->grad_output.tensor, t->gv.tensor, t->gl.tensor, t->gw.tensor);
    ASSERT_EQ(status, ACLNN_SUCCESS) << aclGetRecentErrMsg();
    auto c = make(0x1111);
    spatialgrad::ms_deform_attn_backward(
        core_view(t->value, half.core), core_view(shapes, DType::kInt64), core_view(starts, DType::kInt64),
        core_view(t->location, half.core), core_view(t->weight, half.core), core_view(t->grad_output, half.core),
        core_view(c->gv, half.core), core_view(c->gl, half.core), core_view(c->gw, half.core));
    EXPECT_EQ(t->gv.storage, c->gv.storage);
    EXPECT_EQ(t->gl.storage, c->gl.storage);
    EXPECT_EQ(t->gw.storage, c->gw.storage);
    EXPECT_GT(count_nonzero(t->gv.storage), 0u);
  }
}

// ---- validation: one test per validation rule of docs/operators.md, checking the status and the message ----

struct Args : Problem<float, int64_t> {
  Args() : Problem<float, int64_t>(Dims{}, ACL_FLOAT, ACL_INT64, false) {}
  // Runs with one tensor replaced (by position: 0 value ... 8 gradAttnWeight).
  aclnnStatus with(int index, aclTensor* replacement) {
    aclTensor* t[9] = {value.tensor,       shapes.tensor,         starts.tensor,
                       location.tensor,    weight.tensor,         grad_output.tensor,
                       grad_value.tensor,  grad_location.tensor,  grad_weight.tensor};
    t[index] = replacement;
    return run(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]);
  }
};

enum { kValue, kShapes, kStarts, kLocation, kWeight, kGradOutput, kGradValue, kGradLocation, kGradWeight };

TEST(AclnnMultiScaleDeformableAttentionGradErrors, NullPointers) {
  Args a;
  const char* names[] = {"value",      "spatialShape", "levelStartIndex", "location",      "attnWeight",
                         "gradOutput", "gradValue",    "gradLocation",    "gradAttnWeight"};
  for (int i = 0; i < 9; ++i) {
    EXPECT_ACL_STATUS(a.with(i, nullptr), kNull,
                      "aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize(): expected " + std::string(names[i]) +
                          " to be non-null, but got null");
  }
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, Ranks) {
  Args a;
  HostTensor<float> value3({2, 16, 10}, ACL_FLOAT), loc5({2, 3, 2, 2, 6}, ACL_FLOAT), weight4({2, 3, 2, 6}, ACL_FLOAT),
      go2({2, 30}, ACL_FLOAT);
  HostTensor<int64_t> shapes1({4}, ACL_INT64, {3, 4, 2, 2}), starts2({2, 1}, ACL_INT64, {0, 12});
  EXPECT_ACL_STATUS(a.with(kValue, value3.tensor), kInvalid, "expected value to be 4-D, but got 3-D");
  EXPECT_ACL_STATUS(a.with(kShapes, shapes1.tensor), kInvalid, "expected spatial_shapes to be 2-D, but got 1-D");
  EXPECT_ACL_STATUS(a.with(kStarts, starts2.tensor), kInvalid, "expected level_start_index to be 1-D, but got 2-D");
  EXPECT_ACL_STATUS(a.with(kLocation, loc5.tensor), kInvalid, "expected sampling_locations to be 6-D, but got 5-D");
  EXPECT_ACL_STATUS(a.with(kWeight, weight4.tensor), kInvalid, "expected attention_weights to be 5-D, but got 4-D");
  EXPECT_ACL_STATUS(a.with(kGradOutput, go2.tensor), kInvalid, "expected grad_output to be 3-D, but got 2-D");
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, LastDimensionsAre2) {
  Args a;
  HostTensor<int64_t> shapes({2, 3}, ACL_INT64, {3, 4, 1, 2, 2, 1});
  EXPECT_ACL_STATUS(a.with(kShapes, shapes.tensor), kInvalid, "expected spatial_shapes of shape (L, 2), but got (2, 3)");
  HostTensor<float> loc({2, 3, 2, 2, 3, 3}, ACL_FLOAT);
  EXPECT_ACL_STATUS(a.with(kLocation, loc.tensor), kInvalid,
                    "expected sampling_locations of shape (bs, Q, nH, L, P, 2), but got last dimension 3");
}

// bs, nH, L, Q, P consistent across value, location, attnWeight, levelStartIndex.
TEST(AclnnMultiScaleDeformableAttentionGradErrors, SizesConsistent) {
  Args a;
  HostTensor<float> loc({2, 3, 1, 2, 3, 2}, ACL_FLOAT);
  EXPECT_ACL_STATUS(a.with(kLocation, loc.tensor), kInvalid,
                    "expected sampling_locations of shape (bs, Q, nH, L, P, 2) = (2, 3, 2, 2, 3, 2) (bs, nH from "
                    "value, L from spatial_shapes), but got (2, 3, 1, 2, 3, 2)");
  HostTensor<float> weight({2, 3, 2, 2, 4}, ACL_FLOAT);
  EXPECT_ACL_STATUS(a.with(kWeight, weight.tensor), kInvalid,
                    "expected attention_weights of shape (bs, Q, nH, L, P) = (2, 3, 2, 2, 3)");
  HostTensor<int64_t> starts({3}, ACL_INT64, {0, 12, 16});
  EXPECT_ACL_STATUS(a.with(kStarts, starts.tensor), kInvalid,
                    "expected level_start_index of shape (L,) = (2,) (one entry per level of spatial_shapes), but "
                    "got (3,)");
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, GradOutputIsBsQByHeadsTimesChannels) {
  Args a;
  HostTensor<float> go({2, 3, 11}, ACL_FLOAT);
  EXPECT_ACL_STATUS(a.with(kGradOutput, go.tensor), kInvalid,
                    "expected grad_output of shape (bs, Q, nH*C) = (2, 3, 10), but got (2, 3, 11)");
  HostTensor<float> go4({2, 3, 5, 2}, ACL_FLOAT);  // 10 per query, but (C, nH) order is not checked by size
  EXPECT_ACL_STATUS(a.with(kGradOutput, go4.tensor), ACLNN_SUCCESS, "");
  HostTensor<float> go4_bad({2, 3, 2, 6}, ACL_FLOAT);
  EXPECT_ACL_STATUS(a.with(kGradOutput, go4_bad.tensor), kInvalid,
                    "expected grad_output of shape (bs, Q, nH*C) = (2, 3, 10), but got (2, 3, 12)");
  // 4-D whose (nH, C) are not one run of memory: heads interleaved with channels.
  HostTensor<float> go4_split({2, 3, 2, 5}, {30, 10, 1, 2}, 0, 60, ACL_FLOAT, 0.0f);
  EXPECT_ACL_STATUS(a.with(kGradOutput, go4_split.tensor), kInvalid,
                    "expected gradOutput (bs, Q, nH, C) whose nH and C dimensions merge into one of nH*C elements "
                    "(stride(2) == C * stride(3)), but got shape (2, 3, 2, 5) with strides (30, 10, 1, 2)");
}

// What the NPU leaves unchecked and spatialgrad must check: H, W >= 1, S == sum(H*W), start indices.
TEST(AclnnMultiScaleDeformableAttentionGradErrors, LevelTable) {
  Args a;
  a.shapes.at({1, 0}) = 0;
  EXPECT_ACL_STATUS(a.with(kShapes, a.shapes.tensor), kInvalid,
                    "expected spatial_shapes entries (H, W) >= 1, but got (0, 2) at level 1");
  a.shapes.at({1, 0}) = 1;
  EXPECT_ACL_STATUS(a.with(kShapes, a.shapes.tensor), kInvalid,
                    "expected value.shape[1] to be 14 (the sum of H*W over spatial_shapes), but got 16");
  a.shapes.at({1, 0}) = 2;
  a.starts.at({1}) = 11;
  EXPECT_ACL_STATUS(a.with(kStarts, a.starts.tensor), kInvalid,
                    "expected level_start_index[1] to be 12 (the sum of H*W over the levels before it), but got 11");
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, OutputShapes) {
  Args a;
  HostTensor<float> gv({2, 16, 2, 4}, ACL_FLOAT), gl({2, 3, 2, 2, 3, 1}, ACL_FLOAT), gw({2, 3, 2, 2, 2}, ACL_FLOAT);
  EXPECT_ACL_STATUS(a.with(kGradValue, gv.tensor), kInvalid,
                    "expected grad_value of shape (2, 16, 2, 5), but got (2, 16, 2, 4)");
  EXPECT_ACL_STATUS(a.with(kGradLocation, gl.tensor), kInvalid, "expected grad_sampling_locations of shape");
  EXPECT_ACL_STATUS(a.with(kGradWeight, gw.tensor), kInvalid, "expected grad_attention_weights of shape");
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, Dtypes) {
  Args a;
  HostTensor<double> loc64({2, 3, 2, 2, 3, 2}, ACL_DOUBLE);
  EXPECT_ACL_STATUS(a.with(kLocation, loc64.tensor), kInvalid,
                    "expected sampling_locations to have the dtype of value (float32), but got float64");
  HostTensor<double> gw64({2, 3, 2, 2, 3}, ACL_DOUBLE);
  EXPECT_ACL_STATUS(a.with(kGradWeight, gw64.tensor), kInvalid,
                    "expected grad_attention_weights to have the dtype of value (float32), but got float64");
  HostTensor<float> shapes_f({2, 2}, ACL_FLOAT, {3, 4, 2, 2});
  EXPECT_ACL_STATUS(a.with(kShapes, shapes_f.tensor), kInvalid,
                    "expected spatialShape to have dtype ACL_INT32, ACL_INT64, but got ACL_FLOAT");
  HostTensor<int32_t> value32({2, 16, 2, 5}, ACL_INT32);
  EXPECT_ACL_STATUS(a.with(kValue, value32.tensor), kInvalid,
                    "expected value to have dtype " + aclnn_testing::accepted_floating() + ", but got ACL_INT32");
  // int32 and int64 index tensors may be mixed.
  HostTensor<int32_t> starts32({2}, ACL_INT32, {0, 12});
  EXPECT_ACL_STATUS(a.with(kStarts, starts32.tensor), ACLNN_SUCCESS, "");
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, Format) {
  Args a;
  HostTensor<float> value({2, 16, 2, 5}, ACL_FLOAT, {}, ACL_FORMAT_NCHW);
  EXPECT_ACL_STATUS(a.with(kValue, value.tensor), kInvalid,
                    "expected value to have format ACL_FORMAT_ND, but got ACL_FORMAT_NCHW");
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, OutputElementsMustNotOverlap) {
  Args a;
  HostTensor<float> gw({2, 3, 2, 2, 3}, {0, 12, 6, 3, 1}, 0, 36, ACL_FLOAT, 0.0f);
  EXPECT_ACL_STATUS(a.with(kGradWeight, gw.tensor), kInvalid,
                    "expected gradAttnWeight to have no two elements at the same address");
}

TEST(AclnnMultiScaleDeformableAttentionGradErrors, OutputsMustNotOverlapEachOtherOrTheInputs) {
  Args a;
  AliasTensor inside_location({2, 3, 2, 2, 3}, ACL_FLOAT, a.grad_location.storage.data() + 5);
  EXPECT_ACL_STATUS(a.with(kGradWeight, inside_location.tensor), kInvalid,
                    "expected gradAttnWeight and gradLocation to occupy separate memory");
  AliasTensor over_value({2, 16, 2, 5}, ACL_FLOAT, a.value.storage.data());
  EXPECT_ACL_STATUS(a.with(kGradValue, over_value.tensor), kInvalid,
                    "expected gradValue not to overlap the input value");
}

}  // namespace
}  // namespace aclnn_testing

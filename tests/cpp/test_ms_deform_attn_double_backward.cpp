// ms_deform_attn_double_backward against central differences of the first-order backward: for a random
// direction d over (value, locations, weights, grad_output), the directional derivative of
//   L = sum(U * grad_value) + sum(V * grad_locations) + sum(Wt * grad_weights)
// must equal the dot product of d with the four outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "spatialgrad/ms_deform_attn.h"
#include "spatialgrad/parallel.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::expect_error;
using testing::OwnedTensor;
using testing::random_tensor;

template <class T>
struct Deform {
  int64_t bs, heads, channels, queries, levels, points, spatial = 0;
  OwnedTensor<int64_t> shapes, starts;
  OwnedTensor<T> value, loc, attn, go, u, v, wt;

  Deform(int64_t bs_, int64_t heads_, int64_t channels_, int64_t queries_, int64_t points_,
         const std::vector<std::pair<int64_t, int64_t>>& sizes, uint32_t seed)
      : bs(bs_), heads(heads_), channels(channels_), queries(queries_), levels(int64_t(sizes.size())), points(points_) {
    shapes = OwnedTensor<int64_t>({levels, 2});
    starts = OwnedTensor<int64_t>({levels});
    for (int64_t l = 0; l < levels; ++l) {
      shapes[2 * l] = sizes[size_t(l)].first;
      shapes[2 * l + 1] = sizes[size_t(l)].second;
      starts[l] = spatial;
      spatial += sizes[size_t(l)].first * sizes[size_t(l)].second;
    }
    value = random_tensor<T>({bs, spatial, heads, channels}, seed);
    loc = random_tensor<T>({bs, queries, heads, levels, points, 2}, seed + 1, -0.15, 1.15);
    attn = random_tensor<T>({bs, queries, heads, levels, points}, seed + 2);
    go = random_tensor<T>({bs, queries, heads * channels}, seed + 3);
    u = random_tensor<T>(value.view.sizes(), seed + 4);
    v = random_tensor<T>(loc.view.sizes(), seed + 5);
    wt = random_tensor<T>(attn.view.sizes(), seed + 6);
  }
  struct Outputs {
    OwnedTensor<T> value, loc, attn, go;
  };
  Outputs double_backward(bool with_u = true, bool with_v = true, bool with_wt = true) const {
    Outputs o{OwnedTensor<T>(value.view.sizes()), OwnedTensor<T>(loc.view.sizes()), OwnedTensor<T>(attn.view.sizes()),
              OwnedTensor<T>(go.view.sizes())};
    ms_deform_attn_double_backward(value.view, shapes.view, starts.view, loc.view, attn.view, go.view,
                                   with_u ? u.view : TensorView(), with_v ? v.view : TensorView(),
                                   with_wt ? wt.view : TensorView(), o.value.view, o.loc.view, o.attn.view, o.go.view);
    return o;
  }
};

double dot(const OwnedTensor<double>& a, const OwnedTensor<double>& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.storage[size_t(i)] * b.storage[size_t(i)];
  return s;
}

OwnedTensor<double> axpy(const OwnedTensor<double>& a, double t, const OwnedTensor<double>& b) {
  OwnedTensor<double> out(a.view.sizes());
  for (int64_t i = 0; i < a.numel(); ++i) out.storage[size_t(i)] = a.storage[size_t(i)] + t * b.storage[size_t(i)];
  return out;
}

// L at the point moved by t * direction (direction = a Deform with other seeds, its value/loc/attn/go).
double objective(const Deform<double>& at, const Deform<double>& dir, double t) {
  const auto value = axpy(at.value, t, dir.value), loc = axpy(at.loc, t, dir.loc);
  const auto attn = axpy(at.attn, t, dir.attn), go = axpy(at.go, t, dir.go);
  OwnedTensor<double> gv(value.view.sizes()), gl(loc.view.sizes()), ga(attn.view.sizes());
  ms_deform_attn_backward(value.view, at.shapes.view, at.starts.view, loc.view, attn.view, go.view, gv.view, gl.view,
                          ga.view);
  return dot(at.u, gv) + dot(at.v, gl) + dot(at.wt, ga);
}

TEST(MsDeformAttnDoubleBackward, MatchesCentralDifferencesOfTheBackward) {
  for (uint32_t seed : {1u, 101u, 202u}) {
    const Deform<double> at(2, 2, 3, 4, 2, {{3, 4}, {2, 3}, {1, 1}}, seed);
    const Deform<double> dir(2, 2, 3, 4, 2, {{3, 4}, {2, 3}, {1, 1}}, seed + 50);
    const auto r = at.double_backward();
    const double analytic = dot(r.value, dir.value) + dot(r.loc, dir.loc) + dot(r.attn, dir.attn) + dot(r.go, dir.go);
    const double eps = 1e-6;
    const double numeric = (objective(at, dir, eps) - objective(at, dir, -eps)) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 1e-6 * (1 + std::abs(analytic))) << "seed " << seed;
  }
}

// Each cotangent alone, against the same differences (a term lost in the sum of all three would hide).
TEST(MsDeformAttnDoubleBackward, EachCotangentAloneMatches) {
  for (int which = 0; which < 3; ++which) {
    Deform<double> at(1, 2, 2, 3, 2, {{4, 3}, {2, 2}}, 7);
    const Deform<double> dir(1, 2, 2, 3, 2, {{4, 3}, {2, 2}}, 77);
    if (which != 0) std::fill(at.u.storage.begin(), at.u.storage.end(), 0.0);
    if (which != 1) std::fill(at.v.storage.begin(), at.v.storage.end(), 0.0);
    if (which != 2) std::fill(at.wt.storage.begin(), at.wt.storage.end(), 0.0);
    const auto r = at.double_backward(which == 0, which == 1, which == 2);
    const double analytic = dot(r.value, dir.value) + dot(r.loc, dir.loc) + dot(r.attn, dir.attn) + dot(r.go, dir.go);
    const double eps = 1e-6;
    const double numeric = (objective(at, dir, eps) - objective(at, dir, -eps)) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 1e-6 * (1 + std::abs(analytic))) << "cotangent " << which;
  }
}

TEST(MsDeformAttnDoubleBackward, BitwiseIdenticalForAnyThreadCount) {
  const Deform<float> at(2, 3, 8, 37, 4, {{9, 11}, {5, 6}, {3, 3}}, 31);
  testing::expect_same_bits_for_thread_counts({1, 2, 3, 8}, [&] {
    const auto r = at.double_backward();
    return testing::concatenated({&r.value, &r.loc, &r.attn, &r.go});
  });
}

TEST(MsDeformAttnDoubleBackward, NoQueriesGiveZeroValueGradient) {
  Deform<double> at(2, 2, 3, 0, 2, {{3, 4}}, 3);
  auto r = at.double_backward();
  for (double g : r.value.storage) EXPECT_EQ(g, 0.0);
}

TEST(MsDeformAttnDoubleBackward, Validation) {
  const Deform<double> at(1, 2, 3, 2, 2, {{3, 4}}, 5);
  OwnedTensor<double> dv(at.value.view.sizes()), dl(at.loc.view.sizes()), da(at.attn.view.sizes()),
      dg(at.go.view.sizes());
  OwnedTensor<double> wrong({1, 2});
  expect_error(
      [&] {
        ms_deform_attn_double_backward(at.value.view, at.shapes.view, at.starts.view, at.loc.view, at.attn.view,
                                       at.go.view, wrong.view, TensorView(), TensorView(), dv.view, dl.view, da.view,
                                       dg.view);
      },
      ErrorKind::kInvalidArgument, "ms_deform_attn_double_backward(): expected grad_grad_value of shape");
  OwnedTensor<float> f(at.attn.view.sizes());
  expect_error(
      [&] {
        ms_deform_attn_double_backward(at.value.view, at.shapes.view, at.starts.view, at.loc.view, at.attn.view,
                                       at.go.view, TensorView(), TensorView(), f.view, dv.view, dl.view, da.view,
                                       dg.view);
      },
      ErrorKind::kType, "expected grad_grad_attention_weights to have the dtype of value (float64)");
  expect_error(
      [&] {
        ms_deform_attn_double_backward(at.value.view, at.shapes.view, at.starts.view, at.loc.view, at.attn.view,
                                       at.go.view, TensorView(), TensorView(), TensorView(), dv.view, dl.view, da.view,
                                       wrong.view);
      },
      ErrorKind::kInvalidArgument, "expected d_grad_output of shape (1, 2, 6)");
}

}  // namespace
}  // namespace spatialgrad

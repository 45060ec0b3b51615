// grid_sampler_2d_double_backward against central differences of the first-order backward: for a random
// direction d = (d_go, d_x, d_grid), the directional derivative of
//   L = sum(u * grad_input) + sum(v * grad_grid),   (grad_input, grad_grid) = backward(go, x, grid)
// must equal <d_grad_output, d_go> + <d_input, d_x> + <d_grid, d_grid>.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "spatialgrad/grid_sampler_2d.h"
#include "spatialgrad/parallel.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

// The params of the modes' aclnn integers (a value outside the enumerators is rejected by the entry).
GridSampler2dParams modes(int64_t interpolation, int64_t padding, bool align_corners) {
  GridSampler2dParams p;
  p.interpolation_mode = static_cast<GridSamplerInterpolation>(interpolation);
  p.padding_mode = static_cast<GridSamplerPadding>(padding);
  p.align_corners = align_corners;
  return p;
}

using testing::expect_error;
using testing::OwnedTensor;
using testing::random_tensor;

constexpr int64_t N = 2, C = 3, H = 5, W = 6, Ho = 3, Wo = 4;

struct Inputs {
  OwnedTensor<double> go = random_tensor<double>({N, C, Ho, Wo}, 1);
  OwnedTensor<double> x = random_tensor<double>({N, C, H, W}, 2);
  OwnedTensor<double> grid = random_tensor<double>({N, Ho, Wo, 2}, 3, -1.15, 1.15);
  OwnedTensor<double> u = random_tensor<double>({N, C, H, W}, 4);
  OwnedTensor<double> v = random_tensor<double>({N, Ho, Wo, 2}, 5);
};

double dot(const OwnedTensor<double>& a, const OwnedTensor<double>& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.storage[i] * b.storage[i];
  return s;
}

// a + t * b, elementwise.
OwnedTensor<double> axpy(const OwnedTensor<double>& a, double t, const OwnedTensor<double>& b) {
  OwnedTensor<double> out(a.view.sizes());
  for (int64_t i = 0; i < a.numel(); ++i) out.storage[i] = a.storage[i] + t * b.storage[i];
  return out;
}

double first_order_objective(const Inputs& in, const OwnedTensor<double>& go, const OwnedTensor<double>& x,
                             const OwnedTensor<double>& grid, const GridSampler2dParams& p) {
  OwnedTensor<double> gi({N, C, H, W}), gg({N, Ho, Wo, 2});
  grid_sampler_2d_backward(go.view, x.view, grid.view, gi.view, gg.view, p);
  return dot(in.u, gi) + dot(in.v, gg);
}

using Modes = std::tuple<int64_t, int64_t, bool>;

class GridSamplerDoubleBackward : public ::testing::TestWithParam<Modes> {};

TEST_P(GridSamplerDoubleBackward, MatchesCentralDifferencesOfTheBackward) {
  const auto [mode, padding, align] = GetParam();
  const GridSampler2dParams p = modes(mode, padding, align);
  const Inputs in;
  const auto d_go = random_tensor<double>({N, C, Ho, Wo}, 11);
  const auto d_x = random_tensor<double>({N, C, H, W}, 12);
  const auto d_grid = random_tensor<double>({N, Ho, Wo, 2}, 13);
  OwnedTensor<double> r_go({N, C, Ho, Wo}, 7.0), r_x({N, C, H, W}, 7.0), r_grid({N, Ho, Wo, 2}, 7.0);
  grid_sampler_2d_double_backward(in.u.view, in.v.view, in.go.view, in.x.view, in.grid.view, r_go.view, r_x.view,
                                  r_grid.view, p);
  const double analytic = dot(r_go, d_go) + dot(r_x, d_x) + dot(r_grid, d_grid);
  const double eps = 1e-6;
  const double plus =
      first_order_objective(in, axpy(in.go, eps, d_go), axpy(in.x, eps, d_x), axpy(in.grid, eps, d_grid), p);
  const double minus =
      first_order_objective(in, axpy(in.go, -eps, d_go), axpy(in.x, -eps, d_x), axpy(in.grid, -eps, d_grid), p);
  EXPECT_NEAR(analytic, (plus - minus) / (2 * eps), 1e-6 * (1 + std::abs(analytic)));
  if (mode == 1) {  // nearest: piecewise constant weights, only the grad_output term is left
    for (double g : r_grid.storage) EXPECT_EQ(g, 0.0);
    for (double g : r_x.storage) EXPECT_EQ(g, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllModes, GridSamplerDoubleBackward,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(0, 1, 2), ::testing::Bool()));

// Each output alone: d_grad_output is the forward applied to u plus the v-term, the other two vanish
// with the cotangent they depend on.
TEST(GridSamplerDoubleBackwardOutputs, AbsentCotangentsCountAsZeros) {
  const GridSampler2dParams p = modes(0, 0, false);
  const Inputs in;
  OwnedTensor<double> r_go({N, C, Ho, Wo}), r_x({N, C, H, W}, 5.0), r_grid({N, Ho, Wo, 2});
  grid_sampler_2d_double_backward(in.u.view, TensorView(), in.go.view, in.x.view, in.grid.view, r_go.view, r_x.view,
                                  r_grid.view, p);
  OwnedTensor<double> forward({N, C, Ho, Wo});
  grid_sampler_2d(in.u.view, in.grid.view, forward.view, p);
  for (int64_t i = 0; i < forward.numel(); ++i) EXPECT_NEAR(r_go.storage[i], forward.storage[i], 1e-12);
  for (double g : r_x.storage) EXPECT_EQ(g, 0.0);  // d_input needs v
}

TEST(GridSamplerDoubleBackwardOutputs, UnrequestedOutputsAreNotWritten) {
  const GridSampler2dParams p = modes(2, 1, true);
  const Inputs in;
  OwnedTensor<double> all_go({N, C, Ho, Wo}), all_x({N, C, H, W}), all_grid({N, Ho, Wo, 2});
  grid_sampler_2d_double_backward(in.u.view, in.v.view, in.go.view, in.x.view, in.grid.view, all_go.view, all_x.view,
                                  all_grid.view, p);
  OwnedTensor<double> only_x({N, C, H, W});
  grid_sampler_2d_double_backward(in.u.view, in.v.view, in.go.view, in.x.view, in.grid.view, TensorView(), only_x.view,
                                  TensorView(), p, {false, true, false});
  EXPECT_EQ(only_x.storage, all_x.storage);
}

TEST(GridSamplerDoubleBackwardOutputs, BitwiseIdenticalForAnyThreadCount) {
  const GridSampler2dParams p = modes(2, 2, false);
  const int64_t n = 3, c = 5, h = 17, w = 19, ho = 23, wo = 29;
  const auto u = random_tensor<float>({n, c, h, w}, 21), x = random_tensor<float>({n, c, h, w}, 22);
  const auto v = random_tensor<float>({n, ho, wo, 2}, 23), go = random_tensor<float>({n, c, ho, wo}, 24);
  const auto grid = random_tensor<float>({n, ho, wo, 2}, 25, -1.2, 1.2);
  testing::expect_same_bits_for_thread_counts({1, 2, 3, 7}, [&] {
    OwnedTensor<float> r_go({n, c, ho, wo}), r_x({n, c, h, w}), r_grid({n, ho, wo, 2});
    grid_sampler_2d_double_backward(u.view, v.view, go.view, x.view, grid.view, r_go.view, r_x.view, r_grid.view, p);
    return testing::concatenated({&r_go, &r_x, &r_grid});
  });
}

TEST(GridSamplerDoubleBackwardOutputs, Float32AndHalfFollowFloat64) {
  const GridSampler2dParams p = modes(0, 2, false);
  const Inputs in;
  OwnedTensor<double> r_go({N, C, Ho, Wo}), r_x({N, C, H, W}), r_grid({N, Ho, Wo, 2});
  grid_sampler_2d_double_backward(in.u.view, in.v.view, in.go.view, in.x.view, in.grid.view, r_go.view, r_x.view,
                                  r_grid.view, p);
  const auto narrow = [](const OwnedTensor<double>& t) {
    OwnedTensor<float> out(t.view.sizes());
    for (int64_t i = 0; i < t.numel(); ++i) out.storage[i] = static_cast<float>(t.storage[i]);
    return out;
  };
  OwnedTensor<float> f_go({N, C, Ho, Wo}), f_x({N, C, H, W}), f_grid({N, Ho, Wo, 2});
  grid_sampler_2d_double_backward(narrow(in.u).view, narrow(in.v).view, narrow(in.go).view, narrow(in.x).view,
                                  narrow(in.grid).view, f_go.view, f_x.view, f_grid.view, p);
  for (int64_t i = 0; i < r_x.numel(); ++i) EXPECT_NEAR(f_x.storage[i], r_x.storage[i], 1e-4);
  for (int64_t i = 0; i < r_grid.numel(); ++i) EXPECT_NEAR(f_grid.storage[i], r_grid.storage[i], 1e-3);
  // float16: operands rounded to half, computed in float32.
  const auto to_half_tensor = [](const OwnedTensor<float>& t) {
    OwnedTensor<Half> out(t.view.sizes(), Half{});
    for (int64_t i = 0; i < t.numel(); ++i) out.storage[i] = to_half(t.storage[i]);
    return out;
  };
  OwnedTensor<Half> h_go({N, C, Ho, Wo}, Half{}), h_x({N, C, H, W}, Half{}), h_grid({N, Ho, Wo, 2}, Half{});
  grid_sampler_2d_double_backward(to_half_tensor(narrow(in.u)).view, to_half_tensor(narrow(in.v)).view,
                                  to_half_tensor(narrow(in.go)).view, to_half_tensor(narrow(in.x)).view,
                                  to_half_tensor(narrow(in.grid)).view, h_go.view, h_x.view, h_grid.view, p);
  for (int64_t i = 0; i < r_go.numel(); ++i) EXPECT_NEAR(to_float(h_go.storage[i]), r_go.storage[i], 0.05);
}

TEST(GridSamplerDoubleBackwardValidation, NamesTheOperatorAndTheArgument) {
  const Inputs in;
  OwnedTensor<double> r_go({N, C, Ho, Wo}), r_x({N, C, H, W}), r_grid({N, Ho, Wo, 2});
  const auto call = [&](const TensorView& u, const TensorView& v, const GridSampler2dParams& p,
                        std::vector<bool> mask = {true, true, true}) {
    grid_sampler_2d_double_backward(u, v, in.go.view, in.x.view, in.grid.view, r_go.view, r_x.view, r_grid.view, p,
                                    mask);
  };
  expect_error(
      [&] {
        call(in.u.view, in.v.view, modes(3, 0, false));
      },
      ErrorKind::kInvalidArgument, "grid_sampler_2d_double_backward(): expected interpolation_mode");
  expect_error(
      [&] {
        call(in.u.view, in.v.view, modes(0, 0, false), {true, true});
      },
      ErrorKind::kInvalidArgument, "expected output_mask to have 3 entries");
  OwnedTensor<double> wrong({N, C, H, W + 1});
  expect_error(
      [&] {
        call(wrong.view, in.v.view, modes(0, 0, false));
      },
      ErrorKind::kInvalidArgument, "expected grad_grad_input of shape (2, 3, 5, 6)");
  expect_error(
      [&] {
        call(in.u.view, wrong.view, modes(0, 0, false));
      },
      ErrorKind::kInvalidArgument, "expected grad_grad_grid");
  OwnedTensor<float> f({N, C, H, W});
  expect_error(
      [&] {
        call(f.view, in.v.view, modes(0, 0, false));
      },
      ErrorKind::kType, "expected grad_grad_input to have the dtype of grad_output (float64)");
}

}  // namespace
}  // namespace spatialgrad

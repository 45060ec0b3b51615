#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "detail/convert.h"
#include "detail/ms_deform_attn.h"
#include "detail/strategy.h"
#include "spatialgrad/ms_deform_attn.h"
#include "spatialgrad/parallel.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

using testing::expect_error;
using testing::OwnedTensor;
using testing::random_tensor;

// A problem with contiguous float64 inputs and the results of a naive loop written straight from
// docs/operators.md (Multi-scale deformable attention) (per-corner branches, per-channel gradient terms in the the
// contract's form).
struct Case {
  int64_t bs, heads, channels, queries, points;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  int64_t spatial = 0, levels = 0;
  OwnedTensor<int64_t> spatial_shapes, level_start_index;
  OwnedTensor<double> value, loc, attn, grad_out;
  std::vector<double> out, grad_value, grad_loc, grad_attn;

  Case(int64_t bs_, int64_t heads_, int64_t channels_, int64_t queries_, int64_t points_,
       std::vector<std::pair<int64_t, int64_t>> shapes_, uint32_t seed, double lo = -0.15, double hi = 1.15)
      : bs(bs_), heads(heads_), channels(channels_), queries(queries_), points(points_), shapes(std::move(shapes_)) {
    levels = static_cast<int64_t>(shapes.size());
    spatial_shapes = OwnedTensor<int64_t>({levels, 2});
    level_start_index = OwnedTensor<int64_t>({levels});
    for (int64_t l = 0; l < levels; ++l) {
      spatial_shapes[2 * l] = shapes[static_cast<size_t>(l)].first;
      spatial_shapes[2 * l + 1] = shapes[static_cast<size_t>(l)].second;
      level_start_index[l] = spatial;
      spatial += shapes[static_cast<size_t>(l)].first * shapes[static_cast<size_t>(l)].second;
    }
    value = random_tensor<double>({bs, spatial, heads, channels}, seed);
    loc = random_tensor<double>({bs, queries, heads, levels, points, 2}, seed + 1, lo, hi);
    attn = random_tensor<double>({bs, queries, heads, levels, points}, seed + 2, 0.0, 1.0);
    grad_out = random_tensor<double>({bs, queries, heads * channels}, seed + 3);
  }

  void run_naive() {
    const int64_t C = channels;
    out.assign(static_cast<size_t>(grad_out.numel()), 0.0);
    grad_value.assign(static_cast<size_t>(value.numel()), 0.0);
    grad_loc.assign(static_cast<size_t>(loc.numel()), 0.0);
    grad_attn.assign(static_cast<size_t>(attn.numel()), 0.0);
    for (int64_t b = 0; b < bs; ++b)
      for (int64_t q = 0; q < queries; ++q)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t l = 0; l < levels; ++l)
            for (int64_t p = 0; p < points; ++p) {
              const int64_t H = shapes[static_cast<size_t>(l)].first, W = shapes[static_cast<size_t>(l)].second;
              const int64_t s0 = level_start_index[l];
              const int64_t i = (((b * queries + q) * heads + h) * levels + l) * points + p;
              const double A = attn[i];
              const double w_im = loc[2 * i] * W - 0.5, h_im = loc[2 * i + 1] * H - 0.5;
              if (!(h_im > -1 && w_im > -1 && h_im < H && w_im < W)) continue;
              const int64_t hl = static_cast<int64_t>(std::floor(h_im)), wl = static_cast<int64_t>(std::floor(w_im));
              const double lh = h_im - hl, lw = w_im - wl, hh = 1 - lh, hw = 1 - lw;
              const int64_t ys[4] = {hl, hl, hl + 1, hl + 1}, xs[4] = {wl, wl + 1, wl, wl + 1};
              const double ws[4] = {hh * hw, hh * lw, lh * hw, lh * lw};
              for (int64_t c = 0; c < C; ++c) {
                double v[4] = {0, 0, 0, 0};
                int64_t idx[4] = {-1, -1, -1, -1};
                for (int k = 0; k < 4; ++k) {
                  if (ys[k] >= 0 && ys[k] <= H - 1 && xs[k] >= 0 && xs[k] <= W - 1) {
                    idx[k] = ((b * spatial + s0 + ys[k] * W + xs[k]) * heads + h) * C + c;
                    v[k] = value[idx[k]];
                  }
                }
                const int64_t o = (b * queries + q) * heads * C + h * C + c;
                const double bilinear = ws[0] * v[0] + ws[1] * v[1] + ws[2] * v[2] + ws[3] * v[3];
                out[static_cast<size_t>(o)] += A * bilinear;
                const double tg = grad_out[o], tgv = tg * A;
                for (int k = 0; k < 4; ++k)
                  if (idx[k] >= 0) grad_value[static_cast<size_t>(idx[k])] += ws[k] * tgv;
                const double gh = -hw * v[0] - lw * v[1] + hw * v[2] + lw * v[3];
                const double gw = -hh * v[0] + hh * v[1] - lh * v[2] + lh * v[3];
                grad_attn[static_cast<size_t>(i)] += tg * bilinear;
                grad_loc[static_cast<size_t>(2 * i)] += W * tgv * gw;
                grad_loc[static_cast<size_t>(2 * i + 1)] += H * tgv * gh;
              }
            }
  }
};

template <class T>
struct Results {
  OwnedTensor<T> out, grad_value, grad_loc, grad_attn;
};

// v in T (rounded once, for float16/bfloat16).
template <class T>
T value_as(double v) {
  return store_as<T>(static_cast<AccType<T>>(v));
}

template <class T>
OwnedTensor<T> cast(const OwnedTensor<double>& t) {
  OwnedTensor<T> out(t.view.sizes(), value_as<T>(0));
  for (size_t i = 0; i < t.storage.size(); ++i) out.storage[i] = value_as<T>(t.storage[i]);
  return out;
}

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
const std::vector<double>& as_double(const std::vector<double>& v) { return v; }

// Runs both directions on the case's data converted to T; outputs are pre-filled with garbage.
template <class T>
Results<T> run(const Case& k) {
  const OwnedTensor<T> value = cast<T>(k.value), loc = cast<T>(k.loc), attn = cast<T>(k.attn), go = cast<T>(k.grad_out);
  const T garbage = value_as<T>(-9);
  Results<T> r{OwnedTensor<T>(k.grad_out.view.sizes(), garbage), OwnedTensor<T>(k.value.view.sizes(), garbage),
               OwnedTensor<T>(k.loc.view.sizes(), garbage), OwnedTensor<T>(k.attn.view.sizes(), garbage)};
  EXPECT_EQ(ms_deform_attn_output_shape(value.view.sizes(), loc.view.sizes()), r.out.view.sizes());
  ms_deform_attn(value.view, k.spatial_shapes.view, k.level_start_index.view, loc.view, attn.view, r.out.view);
  ms_deform_attn_backward(value.view, k.spatial_shapes.view, k.level_start_index.view, loc.view, attn.view, go.view,
                          r.grad_value.view, r.grad_loc.view, r.grad_attn.view);
  return r;
}

template <class T>
void expect_matches_naive(Case& k, double tol) {
  k.run_naive();
  const Results<T> r = run<T>(k);
  testing::expect_all_near(as_double(r.out.storage), k.out, tol);
  testing::expect_all_near(as_double(r.grad_value.storage), k.grad_value, tol);
  testing::expect_all_near(as_double(r.grad_attn.storage), k.grad_attn, tol);
  // Location gradients carry the factors W and H: compare relative to them.
  std::vector<double> scaled(k.grad_loc.size()), expected(k.grad_loc.size());
  for (size_t i = 0; i < scaled.size(); ++i) {
    scaled[i] = static_cast<double>(r.grad_loc.storage[i]) / 64;
    expected[i] = k.grad_loc[i] / 64;
  }
  testing::expect_all_near(scaled, expected, tol);
}

using Shapes = std::vector<std::pair<int64_t, int64_t>>;

class MsDeformAttnSweep : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(MsDeformAttnSweep, MatchesNaiveLoopFloat64AndFloat32) {
  const auto [channels, heads, points] = GetParam();
  for (const Shapes& shapes :
       {Shapes{{1, 1}}, Shapes{{5, 7}, {3, 2}, {1, 4}}, Shapes{{8, 8}, {4, 4}, {2, 2}, {1, 1}}}) {
    SCOPED_TRACE(::testing::Message() << "levels=" << shapes.size() << " C=" << channels << " nH=" << heads
                                      << " P=" << points);
    Case k(2, heads, channels, 5, points, shapes, 100 + static_cast<uint32_t>(channels));
    expect_matches_naive<double>(k, 1e-12);
    expect_matches_naive<float>(k, 2e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Params, MsDeformAttnSweep,
                         ::testing::Combine(::testing::Values(1, 3, 8, 13, 32), ::testing::Values(1, 3),
                                            ::testing::Values(1, 4)));

TEST(MsDeformAttn, LargeProblemUsesThreadsAndMatchesNaive) {
  Case k(2, 4, 20, 150, 4, {{24, 20}, {12, 10}, {6, 5}}, 7);
  set_num_threads(2);
  expect_matches_naive<double>(k, 1e-12);
  set_num_threads(0);
}

// A level large enough for the backward to visit its points sorted by row, with more points than one
// sorting chunk (kChunkPoints = 4096) holds: 1100 queries x 4 points.
TEST(MsDeformAttn, SortedLevelInSeveralChunksMatchesNaive) {
  Case k(1, 1, 8, 1100, 4, {{40, 40}}, 11);
  expect_matches_naive<double>(k, 1e-12);
  expect_matches_naive<float>(k, 2e-5);
}

TEST(MsDeformAttn, ThreadCountDoesNotChangeBits) {
  Case k(2, 8, 24, 300, 4, {{32, 32}, {16, 16}, {8, 8}, {4, 4}}, 31);
  testing::expect_same_bits_for_thread_counts({1, 2, 3}, [&] {
    const Results<float> r = run<float>(k);
    return testing::concatenated({&r.out, &r.grad_value, &r.grad_loc, &r.grad_attn});
  });
}

// ---- the two strategies (docs/design.md, "ms_deform_attn: packed or direct") ---------------------------------

using detail::MsDeformAttnStrategy;
using detail::StrategyForTesting;

constexpr MsDeformAttnStrategy kBothStrategies[] = {MsDeformAttnStrategy::kPacked, MsDeformAttnStrategy::kDirect};

// The strategy's name in the table (detail/strategy.h): the list's order, after kAuto.
std::string strategy_name(MsDeformAttnStrategy s) {
  return detail::strategy_names("ms_deform_attn").at(static_cast<size_t>(s) - 1);
}

class MsDeformAttnEachStrategy : public ::testing::TestWithParam<MsDeformAttnStrategy> {};

// Each strategy alone against the naive loops: levels of one pixel, odd sizes, a vector tail (C = 13),
// points outside the levels, and a level the backward walks sorted by row in several chunks.
TEST_P(MsDeformAttnEachStrategy, MatchesNaiveLoop) {
  const StrategyForTesting forced(GetParam());
  for (const int64_t channels : {1, 8, 13, 32}) {
    for (const Shapes& shapes :
         {Shapes{{1, 1}}, Shapes{{5, 7}, {3, 2}, {1, 4}}, Shapes{{8, 8}, {4, 4}, {2, 2}, {1, 1}}}) {
      SCOPED_TRACE(::testing::Message() << "levels=" << shapes.size() << " C=" << channels);
      Case k(2, 3, channels, 5, 4, shapes, 200 + static_cast<uint32_t>(channels));
      expect_matches_naive<double>(k, 1e-12);
      expect_matches_naive<float>(k, 2e-5);
    }
  }
  Case sorted(1, 2, 8, 1100, 4, {{40, 40}, {3, 3}}, 12);
  expect_matches_naive<double>(sorted, 1e-12);
  expect_matches_naive<float>(sorted, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Strategies, MsDeformAttnEachStrategy, ::testing::ValuesIn(kBothStrategies),
                         [](const auto& info) { return strategy_name(info.param); });

// Every output of both directions as bytes.
template <class T>
std::vector<unsigned char> result_bytes(const Case& k) {
  const Results<T> r = run<T>(k);
  std::vector<unsigned char> bytes;
  for (const OwnedTensor<T>* t : {&r.out, &r.grad_value, &r.grad_loc, &r.grad_attn}) {
    const auto* first = reinterpret_cast<const unsigned char*>(t->storage.data());
    bytes.insert(bytes.end(), first, first + t->storage.size() * sizeof(T));
  }
  return bytes;
}

// The strategies feed the channel passes the same numbers in the same order: the same bits, in every
// dtype (float16/bfloat16: the direct strategy converts corner rows one by one, the packed one whole
// slices, and sums the gradient in bands of pixels: here also bands of 1 and 7 pixels, a band cutting a
// level or holding rows of two), with non-finite locations among the points.
template <class T>
void expect_strategies_agree(const Case& k) {
  const std::vector<unsigned char> packed = [&] {
    const StrategyForTesting forced(MsDeformAttnStrategy::kPacked);
    return result_bytes<T>(k);
  }();
  for (const int64_t band_pixels : {0, 1, 7}) {
    const StrategyForTesting forced(MsDeformAttnStrategy::kDirect, band_pixels);
    EXPECT_TRUE(result_bytes<T>(k) == packed) << "packed and direct differ, bands of " << band_pixels;
  }
  EXPECT_TRUE(result_bytes<T>(k) == packed) << "packed and the cost model's choice differ";
}

template <class T>
class MsDeformAttnStrategies : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(MsDeformAttnStrategies, StorageTypes);

TYPED_TEST(MsDeformAttnStrategies, GiveTheSameBits) {
  Case levels(2, 3, 13, 40, 4, {{9, 11}, {5, 6}, {1, 3}}, 21);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  levels.loc[0] = nan;
  levels.loc[3] = inf;
  levels.loc[10] = -inf;
  expect_strategies_agree<TypeParam>(levels);
  Case sorted(1, 2, 16, 1100, 4, {{40, 40}}, 13);  // sorted by row, several chunks
  expect_strategies_agree<TypeParam>(sorted);
  Case one_head(2, 1, 24, 30, 2, {{12, 10}, {6, 5}}, 17);  // float32/float64: consecutive rows
  expect_strategies_agree<TypeParam>(one_head);
}

// A backward task takes its pair's queries in blocks of 4 MiB of points and grad_output rows: with 4 levels
// of 16 points and 256 channels that is 1638 queries, so 1700 queries take two blocks.
TEST(MsDeformAttn, QueriesInSeveralBackwardBlocksMatchNaive) {
  Case k(1, 1, 256, 1700, 16, {{6, 6}, {3, 3}, {2, 2}, {1, 1}}, 23);
  for (const MsDeformAttnStrategy strategy : kBothStrategies) {
    const StrategyForTesting forced(strategy);
    expect_matches_naive<double>(k, 1e-11);
  }
}

TEST(MsDeformAttn, DirectStrategyThreadCountDoesNotChangeBits) {
  const StrategyForTesting direct(MsDeformAttnStrategy::kDirect);
  Case k(2, 8, 24, 300, 4, {{32, 32}, {16, 16}, {8, 8}, {4, 4}}, 31);
  testing::expect_same_bits_for_thread_counts({1, 2, 3}, [&] {
    const Results<float> r = run<float>(k);
    return testing::concatenated({&r.out, &r.grad_value, &r.grad_loc, &r.grad_attn});
  });
}

TEST(MsDeformAttn, Int32IndicesGiveTheSameResult) {
  Case k(1, 2, 5, 4, 2, {{3, 5}, {2, 2}}, 3);
  const Results<double> r64 = run<double>(k);
  OwnedTensor<int32_t> shapes32({2, 2}), starts32({2});
  for (int i = 0; i < 4; ++i) shapes32[i] = static_cast<int32_t>(k.spatial_shapes[i]);
  for (int i = 0; i < 2; ++i) starts32[i] = static_cast<int32_t>(k.level_start_index[i]);
  OwnedTensor<double> out(k.grad_out.view.sizes()), gv(k.value.view.sizes()), gl(k.loc.view.sizes()),
      ga(k.attn.view.sizes());
  ms_deform_attn(k.value.view, shapes32.view, k.level_start_index.view, k.loc.view, k.attn.view, out.view);
  EXPECT_EQ(out.storage, r64.out.storage);
  ms_deform_attn_backward(k.value.view, k.spatial_shapes.view, starts32.view, k.loc.view, k.attn.view, k.grad_out.view,
                          gv.view, gl.view, ga.view);
  EXPECT_EQ(gv.storage, r64.grad_value.storage);
  EXPECT_EQ(gl.storage, r64.grad_loc.storage);
  EXPECT_EQ(ga.storage, r64.grad_attn.storage);
}

// A view with the values of `src` whose every dimension is strided by 2 in a larger buffer.
OwnedTensor<double> spread(const OwnedTensor<double>& src) {
  const auto& sizes = src.view.sizes();
  OwnedTensor<double> out;
  std::vector<int64_t> big(sizes);
  for (auto& s : big) s = 2 * s;
  out.storage.assign(static_cast<size_t>(std::max<int64_t>(checked_numel(big), 1)), 1e300);
  std::vector<int64_t> strides = contiguous_strides(big);
  for (auto& s : strides) s *= 2;
  out.view = TensorView(out.storage.data(), DType::kFloat64, sizes, strides);
  const std::vector<int64_t> src_strides = contiguous_strides(sizes);
  for (int64_t flat = 0; flat < src.view.numel(); ++flat) {
    int64_t offset = 0;
    for (size_t d = 0; d < sizes.size(); ++d) offset += (flat / src_strides[d]) % sizes[d] * strides[d];
    out.storage[static_cast<size_t>(offset)] = src.storage[static_cast<size_t>(flat)];
  }
  return out;
}

// A view with the values of `src` (bs, S, nH, C) that takes heads 0, step, 2 step, ... of a (bs, S, heads,
// C) buffer: channels contiguous, rows (and with step 2, heads) not.
OwnedTensor<double> heads_of_wider(const OwnedTensor<double>& src, int64_t heads, int64_t step) {
  const auto& sizes = src.view.sizes();
  OwnedTensor<double> out({sizes[0], sizes[1], heads, sizes[3]}, 1e300);
  const std::vector<int64_t> strides{sizes[1] * heads * sizes[3], heads * sizes[3], step * sizes[3], 1};
  out.view = TensorView(out.storage.data(), DType::kFloat64, sizes, strides);
  for (int64_t flat = 0; flat < src.view.numel(); ++flat) {
    const int64_t c = flat % sizes[3], h = flat / sizes[3] % sizes[2], rest = flat / sizes[3] / sizes[2];
    out.storage[static_cast<size_t>(rest * strides[1] + h * strides[2] + c)] = src.storage[static_cast<size_t>(flat)];
  }
  return out;
}

// Expects the strided view to hold the contiguous tensor's values, and every other element of its buffer
// to be untouched (1e300).
void expect_same_values(const OwnedTensor<double>& strided, const OwnedTensor<double>& contiguous) {
  std::vector<bool> covered(strided.storage.size(), false);
  const auto strides = contiguous_strides(contiguous.view.sizes());
  for (int64_t flat = 0; flat < contiguous.numel(); ++flat) {
    int64_t offset = 0;
    for (size_t d = 0; d < strides.size(); ++d)
      offset += (flat / strides[d]) % contiguous.view.sizes()[d] * strided.view.strides()[d];
    ASSERT_EQ(strided.storage[static_cast<size_t>(offset)], contiguous.storage[static_cast<size_t>(flat)]);
    covered[static_cast<size_t>(offset)] = true;
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    if (!covered[i]) ASSERT_EQ(strided.storage[i], 1e300) << "element " << i << " between the view's";
  }
}

// Strided inputs and outputs, under both strategies: channels strided or reversed (the direct strategy
// converts the rows it reads and sums the gradient in bands of pixels: the whole slice, or 5 pixels), or
// channels contiguous with heads or rows apart (it reads value and adds into grad_value in place, zeroing
// only the view's rows, head by head or row by row).
TEST(MsDeformAttn, StridedAndNegativeStrideViewsGiveIdenticalBits) {
  Case k(2, 3, 6, 7, 3, {{5, 6}, {3, 3}}, 41);
  const Results<double> ref = run<double>(k);
  // Every input strided (channels too), and flipped along a dimension (negative stride).
  const auto value = spread(k.value), loc = spread(k.loc), attn = spread(k.attn), go = spread(k.grad_out);
  const auto value_flip = testing::flipped_copy(k.value, 3), loc_flip = testing::flipped_copy(k.loc, 1);
  const auto attn_flip = testing::flipped_copy(k.attn, 4), go_flip = testing::flipped_copy(k.grad_out, 2);
  const int64_t heads = k.heads;
  const auto value_heads = heads_of_wider(k.value, 2 * heads, 2), value_rows = heads_of_wider(k.value, heads + 1, 1);
  OwnedTensor<int64_t> shapes_wide({2, 4}, 0);  // spatial_shapes[:, ::2]-like: column stride 2
  TensorView shapes_view(shapes_wide.data(), DType::kInt64, {2, 2}, {4, 2});
  for (int64_t l = 0; l < 2; ++l) {
    shapes_wide[4 * l] = k.spatial_shapes[2 * l];
    shapes_wide[4 * l + 2] = k.spatial_shapes[2 * l + 1];
  }
  enum class GradValue { kSpread, kEveryOtherHead, kPaddedRows };
  struct Inputs {
    const TensorView *value, *loc, *attn, *go;
    GradValue grad_value;
  };
  struct Forced {
    MsDeformAttnStrategy strategy;
    int64_t band_pixels;
  };
  for (const Forced& f : {Forced{MsDeformAttnStrategy::kPacked, 0}, Forced{MsDeformAttnStrategy::kDirect, 0},
                          Forced{MsDeformAttnStrategy::kDirect, 5}}) {
    const StrategyForTesting forced(f.strategy, f.band_pixels);
    for (const Inputs& in :
         {Inputs{&value.view, &loc.view, &attn.view, &go.view, GradValue::kSpread},
          Inputs{&value_flip.view, &loc_flip.view, &attn_flip.view, &go_flip.view, GradValue::kSpread},
          Inputs{&value_heads.view, &loc.view, &attn.view, &go.view, GradValue::kEveryOtherHead},
          Inputs{&value_rows.view, &loc.view, &attn.view, &go.view, GradValue::kPaddedRows}}) {
      SCOPED_TRACE(::testing::Message() << strategy_name(f.strategy) << " bands " << f.band_pixels << " grad_value "
                                        << static_cast<int>(in.grad_value));
      auto out = spread(OwnedTensor<double>(k.grad_out.view.sizes()));
      const OwnedTensor<double> zeros(k.value.view.sizes());
      auto gv = in.grad_value == GradValue::kSpread           ? spread(zeros)
                : in.grad_value == GradValue::kEveryOtherHead ? heads_of_wider(zeros, 2 * heads, 2)
                                                              : heads_of_wider(zeros, heads + 1, 1);
      std::fill(gv.storage.begin(), gv.storage.end(), 1e300);  // the kernel must write every element of the view
      auto gl = spread(OwnedTensor<double>(k.loc.view.sizes()));
      auto ga = spread(OwnedTensor<double>(k.attn.view.sizes()));
      ms_deform_attn(*in.value, shapes_view, k.level_start_index.view, *in.loc, *in.attn, out.view);
      ms_deform_attn_backward(*in.value, shapes_view, k.level_start_index.view, *in.loc, *in.attn, *in.go, gv.view,
                              gl.view, ga.view);
      expect_same_values(out, ref.out);
      expect_same_values(gv, ref.grad_value);
      expect_same_values(gl, ref.grad_loc);
      expect_same_values(ga, ref.grad_attn);
    }
  }
}

TEST(MsDeformAttn, OutOfRangeAndNonFinitePointsContributeNothing) {
  Case k(1, 1, 4, 1, 8, {{4, 4}}, 5);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // w_im = x*W - 0.5 must be in (-1, W), h_im = y*H - 0.5 in (-1, H): these are all outside, the
  // first four exactly on the (excluded) bounds -1 and W or H.
  const double xs[8] = {-0.125, 1.125, 0.5, 0.5, nan, 0.5, inf, -inf};
  const double ys[8] = {0.5, 0.5, -0.125, 1.125, 0.5, nan, 0.5, 0.5};
  for (int p = 0; p < 8; ++p) {
    k.loc[2 * p] = xs[p];
    k.loc[2 * p + 1] = ys[p];
  }
  for (const MsDeformAttnStrategy strategy : kBothStrategies) {
    const StrategyForTesting forced(strategy);
    const Results<double> r = run<double>(k);
    for (double v : r.out.storage) EXPECT_EQ(v, 0.0);
    for (double v : r.grad_value.storage) EXPECT_EQ(v, 0.0);
    for (double v : r.grad_loc.storage) EXPECT_EQ(v, 0.0);
    for (double v : r.grad_attn.storage) EXPECT_EQ(v, 0.0);
  }
  // Just inside the strict bounds, a point reads one corner and passes gradients.
  k.loc[0] = -0.12;  // w_im = -0.98
  k.loc[1] = 0.5;
  const Results<double> inside = run<double>(k);
  EXPECT_NE(inside.grad_attn.storage[0], 0.0);
  EXPECT_NE(inside.grad_loc.storage[0], 0.0);
  k.run_naive();
  testing::expect_all_near(inside.out.storage, k.out, 1e-12);
  testing::expect_all_near(inside.grad_loc.storage, k.grad_loc, 1e-12);
}

TEST(MsDeformAttn, EmptyProblemsGiveZeroFilledOutputs) {
  for (const auto& dims : std::vector<std::array<int64_t, 5>>{
           {0, 2, 3, 4, 2}, {2, 2, 3, 0, 2}, {2, 2, 0, 4, 2}, {2, 2, 3, 4, 0}, {2, 0, 3, 4, 2}}) {
    const auto [bs, heads, channels, queries, points] = dims;
    SCOPED_TRACE(::testing::Message() << "bs=" << bs << " nH=" << heads << " C=" << channels << " Q=" << queries
                                      << " P=" << points);
    Case k(bs, heads, channels, queries, points, {{3, 4}, {1, 2}}, 9);
    const Results<double> r = run<double>(k);  // outputs start at -9: all must be overwritten
    for (double v : r.out.storage) EXPECT_EQ(v, 0.0);
    for (double v : r.grad_value.storage) EXPECT_EQ(v, 0.0);
    for (double v : r.grad_loc.storage) EXPECT_EQ(v, 0.0);
    for (double v : r.grad_attn.storage) EXPECT_EQ(v, 0.0);
  }
  // No levels at all: S = 0, every point is absent.
  Case k(2, 2, 3, 4, 2, {}, 9);
  const Results<double> r = run<double>(k);
  EXPECT_EQ(r.out.view.sizes(), (std::vector<int64_t>{2, 4, 6}));
  for (double v : r.out.storage) EXPECT_EQ(v, 0.0);
}

// ---- validation: every rule of docs/operators.md (Multi-scale deformable attention) plus the consistency checks the
// NPU leaves out ----------------

struct Bad {
  OwnedTensor<float> value{{2, 20, 3, 4}}, loc{{2, 5, 3, 2, 2, 2}}, attn{{2, 5, 3, 2, 2}}, go{{2, 5, 12}};
  OwnedTensor<int64_t> shapes{{2, 2}}, starts{{2}};
  OwnedTensor<float> out{{2, 5, 12}}, gv{{2, 20, 3, 4}}, gl{{2, 5, 3, 2, 2, 2}}, ga{{2, 5, 3, 2, 2}};
  Bad() {
    shapes.storage = {4, 4, 2, 2};
    starts.storage = {0, 16};
  }
  void forward() const { ms_deform_attn(value.view, shapes.view, starts.view, loc.view, attn.view, out.view); }
  void backward() const {
    ms_deform_attn_backward(value.view, shapes.view, starts.view, loc.view, attn.view, go.view, gv.view, gl.view,
                            ga.view);
  }
  // Checks that both directions reject the inputs with `kind` and `text` (op name added).
  void expect_both(ErrorKind kind, const std::string& text) const {
    expect_error([&] { forward(); }, kind, text);
    expect_error([&] { forward(); }, kind, "ms_deform_attn(): expected ");
    expect_error([&] { backward(); }, kind, text);
    expect_error([&] { backward(); }, kind, "ms_deform_attn_backward(): expected ");
  }
};

TEST(MsDeformAttnErrors, ValidInputsPass) {
  Bad b;
  b.forward();
  b.backward();
}

TEST(MsDeformAttnErrors, Ranks) {
  Bad b;
  b.value = OwnedTensor<float>({2, 20, 12});
  b.expect_both(ErrorKind::kInvalidArgument, "expected value to be 4-D, but got 3-D tensor of shape (2, 20, 12)");
  b = Bad();
  b.shapes = OwnedTensor<int64_t>({4});
  b.expect_both(ErrorKind::kInvalidArgument, "expected spatial_shapes to be 2-D, but got 1-D");
  b = Bad();
  b.shapes = OwnedTensor<int64_t>({2, 3});
  b.expect_both(ErrorKind::kInvalidArgument, "expected spatial_shapes of shape (L, 2), but got (2, 3)");
  b = Bad();
  b.starts = OwnedTensor<int64_t>({2, 1});
  b.expect_both(ErrorKind::kInvalidArgument, "expected level_start_index to be 1-D, but got 2-D");
  b = Bad();
  b.loc = OwnedTensor<float>({2, 5, 3, 2, 4});
  b.expect_both(ErrorKind::kInvalidArgument, "expected sampling_locations to be 6-D, but got 5-D");
  b = Bad();
  b.loc = OwnedTensor<float>({2, 5, 3, 2, 2, 3});
  b.expect_both(ErrorKind::kInvalidArgument,
                "expected sampling_locations of shape (bs, Q, nH, L, P, 2), but got last dimension 3");
  b = Bad();
  b.attn = OwnedTensor<float>({2, 5, 3, 4});
  b.expect_both(ErrorKind::kInvalidArgument, "expected attention_weights to be 5-D, but got 4-D");
  b = Bad();
  b.go = OwnedTensor<float>({2, 5, 3, 4});
  expect_error([&] { b.backward(); }, ErrorKind::kInvalidArgument,
               "ms_deform_attn_backward(): expected grad_output to be 3-D, but got 4-D");
  expect_error(
      [&] {
        ms_deform_attn_output_shape({2, 20, 12}, {2, 5, 3, 2, 2, 2});
      },
      ErrorKind::kInvalidArgument, "ms_deform_attn(): expected value to be 4-D");
  expect_error(
      [&] {
        ms_deform_attn_output_shape({2, 20, 3, 4}, {2, 5, 3, 2, 2});
      },
      ErrorKind::kInvalidArgument, "ms_deform_attn(): expected sampling_locations to be 6-D");
}

TEST(MsDeformAttnErrors, ConsistentSizes) {
  Bad b;
  b.loc = OwnedTensor<float>({3, 5, 3, 2, 2, 2});  // batch
  b.expect_both(ErrorKind::kInvalidArgument,
                "expected sampling_locations of shape (bs, Q, nH, L, P, 2) = (2, 5, 3, 2, 2, 2) (bs, nH from value, "
                "L from spatial_shapes), but got (3, 5, 3, 2, 2, 2)");
  b.loc = OwnedTensor<float>({2, 5, 4, 2, 2, 2});  // heads
  b.expect_both(ErrorKind::kInvalidArgument, "but got (2, 5, 4, 2, 2, 2)");
  b.loc = OwnedTensor<float>({2, 5, 3, 3, 2, 2});  // levels
  b.expect_both(ErrorKind::kInvalidArgument, "but got (2, 5, 3, 3, 2, 2)");
  b = Bad();
  b.attn = OwnedTensor<float>({2, 6, 3, 2, 2});  // queries
  b.expect_both(ErrorKind::kInvalidArgument,
                "expected attention_weights of shape (bs, Q, nH, L, P) = (2, 5, 3, 2, 2) (the first five dimensions "
                "of sampling_locations), but got (2, 6, 3, 2, 2)");
  b.attn = OwnedTensor<float>({2, 5, 3, 2, 3});  // points
  b.expect_both(ErrorKind::kInvalidArgument, "but got (2, 5, 3, 2, 3)");
  b = Bad();
  b.starts = OwnedTensor<int64_t>({3});
  b.expect_both(
      ErrorKind::kInvalidArgument,
      "expected level_start_index of shape (L,) = (2,) (one entry per level of spatial_shapes), but got (3,)");
  b = Bad();
  b.go = OwnedTensor<float>({2, 5, 13});
  expect_error(
      [&] { b.backward(); }, ErrorKind::kInvalidArgument,
      "ms_deform_attn_backward(): expected grad_output of shape (bs, Q, nH*C) = (2, 5, 12), but got (2, 5, 13)");
  b.go = OwnedTensor<float>({2, 4, 12});
  expect_error([&] { b.backward(); }, ErrorKind::kInvalidArgument, "but got (2, 4, 12)");
}

TEST(MsDeformAttnErrors, LevelTable) {
  Bad b;
  b.shapes.storage = {4, 4, 0, 2};
  b.expect_both(ErrorKind::kInvalidArgument, "expected spatial_shapes entries (H, W) >= 1, but got (0, 2) at level 1");
  b.shapes.storage = {4, -4, 2, 2};
  b.expect_both(ErrorKind::kInvalidArgument, "expected spatial_shapes entries (H, W) >= 1, but got (4, -4) at level 0");
  b.shapes.storage = {4, 4, 2, 3};
  b.expect_both(ErrorKind::kInvalidArgument,
                "expected value.shape[1] to be 22 (the sum of H*W over spatial_shapes), but got 20");
  b.shapes.storage = {4, 4, 2, 2};
  b.starts.storage = {0, 15};
  b.expect_both(ErrorKind::kInvalidArgument,
                "expected level_start_index[1] to be 16 (the sum of H*W over the levels before it), but got 15");
  b.starts.storage = {1, 16};
  b.expect_both(ErrorKind::kInvalidArgument, "expected level_start_index[0] to be 0");
  b.starts.storage = {0, 16};
  b.shapes.storage = {int64_t(1) << 32, int64_t(1) << 32, 2, 2};
  b.expect_both(ErrorKind::kOverflow, "expected sizes whose product fits in int64");
}

TEST(MsDeformAttnErrors, Dtypes) {
  Bad b;
  OwnedTensor<int32_t> value_int({2, 20, 3, 4});
  expect_error(
      [&] { ms_deform_attn(value_int.view, b.shapes.view, b.starts.view, b.loc.view, b.attn.view, b.out.view); },
      ErrorKind::kType, "ms_deform_attn(): expected value to be float16, bfloat16, float32 or float64, but got int32");
  Bad d;
  OwnedTensor<double> loc64({2, 5, 3, 2, 2, 2}), attn64({2, 5, 3, 2, 2}), go64({2, 5, 12});
  d.loc.view = loc64.view;
  d.expect_both(ErrorKind::kType, "expected sampling_locations to have the dtype of value (float32), but got float64");
  d = Bad();
  d.attn.view = attn64.view;
  d.expect_both(ErrorKind::kType, "expected attention_weights to have the dtype of value (float32), but got float64");
  d = Bad();
  d.go.view = go64.view;
  expect_error([&] { d.backward(); }, ErrorKind::kType,
               "ms_deform_attn_backward(): expected grad_output to have the dtype of value (float32), but got float64");
  d = Bad();
  OwnedTensor<float> shapes_f({2, 2}), starts_f({2});
  d.shapes.view = shapes_f.view;
  d.expect_both(ErrorKind::kType, "expected spatial_shapes to be int32 or int64, but got float32");
  d = Bad();
  d.starts.view = starts_f.view;
  d.expect_both(ErrorKind::kType, "expected level_start_index to be int32 or int64, but got float32");
}

TEST(MsDeformAttnErrors, OutputShapesAndDtypes) {
  Bad b;
  b.out = OwnedTensor<float>({2, 5, 11});
  expect_error([&] { b.forward(); }, ErrorKind::kInvalidArgument,
               "ms_deform_attn(): expected output of shape (2, 5, 12), but got (2, 5, 11)");
  OwnedTensor<double> out64({2, 5, 12}), gv64({2, 20, 3, 4});
  b = Bad();
  b.out.view = out64.view;
  expect_error([&] { b.forward(); }, ErrorKind::kType,
               "expected output to have the dtype of value (float32), but got float64");
  b = Bad();
  b.gv = OwnedTensor<float>({2, 20, 3, 5});
  expect_error([&] { b.backward(); }, ErrorKind::kInvalidArgument,
               "expected grad_value of shape (2, 20, 3, 4), but got (2, 20, 3, 5)");
  b = Bad();
  b.gl = OwnedTensor<float>({2, 5, 3, 2, 1, 2});
  expect_error([&] { b.backward(); }, ErrorKind::kInvalidArgument, "expected grad_sampling_locations of shape");
  b = Bad();
  b.ga = OwnedTensor<float>({2, 5, 3, 2, 1});
  expect_error([&] { b.backward(); }, ErrorKind::kInvalidArgument, "expected grad_attention_weights of shape");
  b = Bad();
  b.gv.view = gv64.view;
  expect_error([&] { b.backward(); }, ErrorKind::kType, "expected grad_value to have the dtype of value");
}

TEST(MsDeformAttnErrors, AscendDeviceLimitsAreNotErrorsOnTheCpu) {
  // C % 8 != 0, C > 256, nH > 16, P > 16, L > 16 all run.
  Case k(1, 17, 257, 2, 17, Shapes(17, {1, 2}), 77);
  expect_matches_naive<double>(k, 1e-12);
}

}  // namespace
}  // namespace spatialgrad

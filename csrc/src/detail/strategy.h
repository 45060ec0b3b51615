// Kernel strategies: every operator's, in one table, chosen one way and pinned by one hook
// (docs/design.md, "Strategies").
//
// An operator with more than one family of kernels lists them below, in order, as
// X(enumerator, "name", "when its cost model takes it"). Each list gives the operator's enum class
// <Op>Strategy (kAuto first: the cost model chooses), the names set_strategy_for_testing takes, and the
// table of docs/design.md (scripts/render_strategies.py reads this file; tests/python/test_docs.py fails
// when the page is stale). Every strategy of an operator computes the same bits: the choice changes speed
// and scratch only, so tests compare each pinned strategy with the others.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// clang-format off
#define SG_AVG_POOL2D_STRATEGIES(X)                                                                             \
  X(kPlanes, "planes", "one plane's rows at a time: every call no other family takes, and empty planes")         \
  X(kPlaneTiles, "plane_tiles", "NCHW planes packed 8-64 to a 32 KiB tile: at least 4 planes of width <= 24 "  \
                                "(forward) or 20 (backward)")                                                     \
  X(kChannelsLast, "channels_last", "an NHWC tensor's channels as lanes: forward from 8 channels (or planes <= " \
                                    "16 wide), backward by plane size, channels and bytes written")                 \
  X(kDirect, "direct", "small calls, on one thread, straight from the window tables: planes <= 32 a side and "  \
                       "estimated work <= 1024")
#define SG_GRID_SAMPLER_2D_STRATEGIES(X)                                                                        \
  X(kTiles, "tiles", "the input packed into lane-interleaved channel tiles: channels fill half a tile (all of "  \
                     "it for the forward's point vectors), at most 4 (16 cached) tile pixels per point, scratch " \
                     "within the bound")                                                                          \
  X(kPlanes, "planes", "gathers from the planes in place, per-block tables: every other call")
#define SG_MS_DEFORM_ATTN_STRATEGIES(X)                                                                         \
  X(kPacked, "packed", "each (batch, head) slice of value copied into a padded buffer: at least 1 point per "    \
                       "pixel (0.6 in L2, backward) per 128 bytes of row, scratch within the bound")              \
  X(kDirect, "direct", "value read, and grad_value added into, in place (in bands when it cannot be added in " \
                       "place): sparse points, and one-head slices whose rows follow one another")
#define SG_ROI_ALIGN_STRATEGIES(X)                                                                              \
  X(kDirect, "direct", "the planes read and written in place, a few channels at a time: the cheapest estimate " \
                       "(samples x channel groups)")                                                              \
  X(kPacked, "packed", "channel-interleaved patches of the sampled region, 16 floats a pixel: the cheapest "    \
                       "estimate (patch pixels and samples)")                                                     \
  X(kPackedNarrow, "packed_narrow", "patches 4 floats a pixel, for few channels: backward only, the cheapest " \
                                    "estimate")
#define SG_UPSAMPLE_BILINEAR2D_STRATEGIES(X)                                                                    \
  X(kLanes, "lanes", "separable passes over 8 planes (or channels) as lanes: NCHW backward, and few channels") \
  X(kDirect, "direct", "each output from its four inputs, no intermediate rows: float32 NCHW or NHWC forward "  \
                       "reading >= 2/3 input rows per output row, or NHWC from 8 channels")                       \
  X(kRows, "rows", "NHWC rows as channel vectors, each W-interpolated input row reused: from 8 channels, "      \
                   "upsampling more than 2x in H (forward) or always (backward)")
// The operators with strategies: enumerator of StrategyOperator, aten name, list.
#define SG_STRATEGY_OPERATORS(O)                                                \
  O(kAvgPool2d, "avg_pool2d", SG_AVG_POOL2D_STRATEGIES)                         \
  O(kGridSampler2d, "grid_sampler_2d", SG_GRID_SAMPLER_2D_STRATEGIES)           \
  O(kMsDeformAttn, "ms_deform_attn", SG_MS_DEFORM_ATTN_STRATEGIES)              \
  O(kRoiAlign, "roi_align", SG_ROI_ALIGN_STRATEGIES)                            \
  O(kUpsampleBilinear2d, "upsample_bilinear2d", SG_UPSAMPLE_BILINEAR2D_STRATEGIES)
// clang-format on

namespace spatialgrad::detail {

#define SG_STRATEGY_ENUMERATOR(enumerator, name, when) enumerator,
enum class AvgPool2dStrategy { kAuto, SG_AVG_POOL2D_STRATEGIES(SG_STRATEGY_ENUMERATOR) };
enum class GridSampler2dStrategy { kAuto, SG_GRID_SAMPLER_2D_STRATEGIES(SG_STRATEGY_ENUMERATOR) };
enum class MsDeformAttnStrategy { kAuto, SG_MS_DEFORM_ATTN_STRATEGIES(SG_STRATEGY_ENUMERATOR) };
enum class RoiAlignStrategy { kAuto, SG_ROI_ALIGN_STRATEGIES(SG_STRATEGY_ENUMERATOR) };
enum class UpsampleBilinear2dStrategy { kAuto, SG_UPSAMPLE_BILINEAR2D_STRATEGIES(SG_STRATEGY_ENUMERATOR) };
#undef SG_STRATEGY_ENUMERATOR

// The operators with strategies, in SG_STRATEGY_OPERATORS' order; the index of a pin.
#define SG_STRATEGY_OPERATOR_ENUMERATOR(enumerator, name, list) enumerator,
enum class StrategyOperator { SG_STRATEGY_OPERATORS(SG_STRATEGY_OPERATOR_ENUMERATOR) kCount };
#undef SG_STRATEGY_OPERATOR_ENUMERATOR

// The operator of each strategy enum (operator_of(Strategy{}) in the templates below).
constexpr StrategyOperator operator_of(AvgPool2dStrategy) { return StrategyOperator::kAvgPool2d; }
constexpr StrategyOperator operator_of(GridSampler2dStrategy) { return StrategyOperator::kGridSampler2d; }
constexpr StrategyOperator operator_of(MsDeformAttnStrategy) { return StrategyOperator::kMsDeformAttn; }
constexpr StrategyOperator operator_of(RoiAlignStrategy) { return StrategyOperator::kRoiAlign; }
constexpr StrategyOperator operator_of(UpsampleBilinear2dStrategy) { return StrategyOperator::kUpsampleBilinear2d; }

// What a test pinned for an operator: the strategy's position in its list (0: none, the cost model
// chooses) and the band size (0: none), both read with relaxed loads on every call. Defined in strategy.cpp.
struct StrategyPin {
  int strategy;
  int64_t band;
};
StrategyPin strategy_pin(StrategyOperator op);

// The one way a call chooses its strategy: the pinned strategy where it can take the call
// (can_take(pinned)), else the cost model's choice (cost_model(): an operator's estimate of its families
// for this call, reading its sizes, dtype, layout and the scratch bound).
template <class Strategy, class CanTake, class CostModel>
Strategy choose_strategy(CanTake&& can_take, CostModel&& cost_model) {
  const auto pinned = static_cast<Strategy>(strategy_pin(operator_of(Strategy{})).strategy);
  if (pinned != Strategy::kAuto && can_take(pinned)) return pinned;
  return cost_model();
}

// The band size a test pinned with the operator's strategy (0: the operator sizes its bands itself).
// roi_align's backward cuts its planes into bands of this many rows; ms_deform_attn's direct backward, when
// it cannot add in place, sums its gradient in bands of this many pixels.
template <class Strategy>
int64_t pinned_band() {
  return strategy_pin(operator_of(Strategy{})).band;
}

// The one test hook: every later call of `op` (an aten name, "avg_pool2d") takes the strategy named
// `strategy` where it can take the call ("auto": the cost model again), and band > 0 pins the band size
// (see pinned_band). Process-wide: set it while no call runs. An unknown operator or strategy throws
// std::invalid_argument naming the known ones.
void set_strategy_for_testing(std::string_view op, std::string_view strategy, int64_t band = 0);

// The same, typed: set_strategy_for_testing(GridSampler2dStrategy::kTiles).
void pin_strategy(StrategyOperator op, int strategy, int64_t band);
template <class Strategy>
void set_strategy_for_testing(Strategy strategy, int64_t band = 0) {
  pin_strategy(operator_of(Strategy{}), static_cast<int>(strategy), band);
}

// Pins a strategy for the lifetime of the object, then restores the cost model.
class StrategyForTesting {
 public:
  template <class Strategy>
  explicit StrategyForTesting(Strategy strategy, int64_t band = 0) : op_(operator_of(Strategy{})) {
    set_strategy_for_testing(strategy, band);
  }
  StrategyForTesting(std::string_view op, std::string_view strategy, int64_t band = 0);
  ~StrategyForTesting();
  StrategyForTesting(const StrategyForTesting&) = delete;
  StrategyForTesting& operator=(const StrategyForTesting&) = delete;

 private:
  StrategyOperator op_;
};

// The table above, row by row ("avg_pool2d", "planes", "one plane's rows ..."): for docs and tests.
struct StrategyRow {
  const char* op;
  const char* strategy;
  const char* when;
};
const std::vector<StrategyRow>& strategy_table();

// The names of one operator's strategies, in order ("auto" not included); empty for an unknown operator.
std::vector<std::string> strategy_names(std::string_view op);

}  // namespace spatialgrad::detail

// The one strategy framework (detail/strategy.h): the table, the names the hook takes, its errors, and that a
// pin by name reaches the operator's enum.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "detail/strategy.h"

namespace spatialgrad {
namespace {

using detail::StrategyOperator;

const char* const kOperators[] = {"avg_pool2d", "grid_sampler_2d", "ms_deform_attn", "roi_align",
                                  "upsample_bilinear2d"};

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(Strategy, TableListsEveryOperatorWithNamesAndCostModels) {
  std::set<std::string> ops;
  for (const detail::StrategyRow& row : detail::strategy_table()) {
    ops.insert(row.op);
    EXPECT_STRNE(row.strategy, "auto") << row.op;  // "auto" means the cost model, never a strategy
    EXPECT_GT(std::string(row.when).size(), 20u) << row.op << "." << row.strategy;
  }
  EXPECT_EQ(ops, std::set<std::string>(std::begin(kOperators), std::end(kOperators)));
  for (const char* op : kOperators) {
    const auto names = detail::strategy_names(op);
    EXPECT_GE(names.size(), 2u) << op;
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << op;
  }
}

// Each enum's last enumerator is its list's length: the names and the enumerators are the same list.
TEST(Strategy, EnumsFollowTheirLists) {
  EXPECT_EQ(detail::strategy_names("avg_pool2d").size(), static_cast<size_t>(detail::AvgPool2dStrategy::kNarrow));
  EXPECT_EQ(detail::strategy_names("grid_sampler_2d").size(),
            static_cast<size_t>(detail::GridSampler2dStrategy::kPlanes));
  EXPECT_EQ(detail::strategy_names("ms_deform_attn").size(),
            static_cast<size_t>(detail::MsDeformAttnStrategy::kDirect));
  EXPECT_EQ(detail::strategy_names("roi_align").size(), static_cast<size_t>(detail::RoiAlignStrategy::kPackedNarrow));
  EXPECT_EQ(detail::strategy_names("upsample_bilinear2d").size(),
            static_cast<size_t>(detail::UpsampleBilinear2dStrategy::kNarrow));
  EXPECT_EQ(detail::strategy_names("avg_pool2d")[2], "channels_last");
  EXPECT_EQ(detail::strategy_names("roi_align")[2], "packed_narrow");
}

TEST(Strategy, PinByNameReachesTheEnumAndTheScopeRestoresTheCostModel) {
  {
    const detail::StrategyForTesting pin("roi_align", "packed_narrow", 3);
    EXPECT_EQ(detail::strategy_pin(StrategyOperator::kRoiAlign).strategy,
              static_cast<int>(detail::RoiAlignStrategy::kPackedNarrow));
    EXPECT_EQ(detail::pinned_band<detail::RoiAlignStrategy>(), 3);
    EXPECT_EQ(detail::strategy_pin(StrategyOperator::kAvgPool2d).strategy, 0);  // the others untouched
  }
  EXPECT_EQ(detail::strategy_pin(StrategyOperator::kRoiAlign).strategy, 0);
  EXPECT_EQ(detail::pinned_band<detail::RoiAlignStrategy>(), 0);
  {
    const detail::StrategyForTesting pin(detail::GridSampler2dStrategy::kTiles);
    EXPECT_EQ(detail::strategy_pin(StrategyOperator::kGridSampler2d).strategy,
              static_cast<int>(detail::GridSampler2dStrategy::kTiles));
  }
  EXPECT_EQ(detail::strategy_pin(StrategyOperator::kGridSampler2d).strategy, 0);
  detail::set_strategy_for_testing("upsample_bilinear2d", "rows");
  EXPECT_EQ(detail::strategy_pin(StrategyOperator::kUpsampleBilinear2d).strategy,
            static_cast<int>(detail::UpsampleBilinear2dStrategy::kRows));
  detail::set_strategy_for_testing("upsample_bilinear2d", "auto");
  EXPECT_EQ(detail::strategy_pin(StrategyOperator::kUpsampleBilinear2d).strategy, 0);
}

TEST(Strategy, ChooseTakesThePinWhereItCanTakeTheCallElseTheCostModel) {
  using detail::AvgPool2dStrategy;
  const auto cost_model = [] { return AvgPool2dStrategy::kPlanes; };
  const auto choose = [&](bool can_take) {
    return detail::choose_strategy<AvgPool2dStrategy>([&](AvgPool2dStrategy) { return can_take; }, cost_model);
  };
  EXPECT_EQ(choose(true), AvgPool2dStrategy::kPlanes);  // nothing pinned
  const detail::StrategyForTesting pin(AvgPool2dStrategy::kDirect);
  EXPECT_EQ(choose(true), AvgPool2dStrategy::kDirect);
  EXPECT_EQ(choose(false), AvgPool2dStrategy::kPlanes);
}

TEST(Strategy, UnknownNamesAreErrorsThatListTheKnownOnes) {
  EXPECT_EQ(message_of([] { detail::set_strategy_for_testing("avg_pool2d", "tiles"); }),
            "set_strategy_for_testing(): avg_pool2d has no strategy \"tiles\" (it has auto, planes, plane_tiles, "
            "channels_last, direct, narrow)");
  EXPECT_EQ(message_of([] { detail::set_strategy_for_testing("avg_pool", "planes"); }),
            "set_strategy_for_testing(): no operator \"avg_pool\" has strategies (these do: avg_pool2d, "
            "grid_sampler_2d, ms_deform_attn, roi_align, upsample_bilinear2d)");
  EXPECT_EQ(detail::strategy_pin(StrategyOperator::kAvgPool2d).strategy, 0);  // a refused pin changes nothing
  EXPECT_TRUE(detail::strategy_names("avg_pool").empty());
}

}  // namespace
}  // namespace spatialgrad

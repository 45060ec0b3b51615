// Kernel strategies: chosen one way and pinned by one hook (docs/design.md, "Strategies").
//
// An operator with more than one family of kernels lists them, in order, in its entry of operators.toml
// (`strategies`: name, when its cost model takes it). scripts/generate_operators.py writes from them
// strategies.h (each list as X(enumerator, "name", "when"), the operator's enum class <Op>Strategy, kAuto
// first: the cost model chooses) and the table of docs/design.md; the names are the ones
// set_strategy_for_testing takes. Every strategy of an operator computes the same bits: the choice changes
// speed and scratch only, so tests compare each pinned strategy with the others.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strategies.h"  // the lists, the enums and operator_of: generated from operators.toml

namespace spatialgrad::detail {

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

// The band size a test pinned with the operator's strategy (0: the operator sizes its bands itself): the
// backwards that sum in bands (rows of a plane, pixels of a slice) take this size, so tests can cross bands.
template <class Strategy>
int64_t pinned_band() {
  return strategy_pin(operator_of(Strategy{})).band;
}

// The one test hook: every later call of `op` (its aten name, as in operators.toml) takes the strategy named
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

// Every operator's strategies, row by row (aten name, strategy name, when): for docs and tests.
struct StrategyRow {
  const char* op;
  const char* strategy;
  const char* when;
};
const std::vector<StrategyRow>& strategy_table();

// The names of one operator's strategies, in order ("auto" not included); empty for an unknown operator.
std::vector<std::string> strategy_names(std::string_view op);

}  // namespace spatialgrad::detail

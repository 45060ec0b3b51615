#include "strategy.h"

#include <array>
#include <atomic>
#include <stdexcept>

namespace spatialgrad::detail {
namespace {

constexpr int kOperators = static_cast<int>(StrategyOperator::kCount);

// One operator's row of names, in the order of StrategyOperator.
struct OperatorStrategies {
  const char* op;
  std::vector<StrategyRow> rows;
};

#define SG_STRATEGY_ROW(enumerator, name, when) StrategyRow{kOp, name, when},
#define SG_OPERATOR_ROWS(index, op_name, LIST)                                        \
  {                                                                                   \
    constexpr const char* kOp = op_name;                                              \
    t[static_cast<size_t>(StrategyOperator::index)] = {kOp, {LIST(SG_STRATEGY_ROW)}}; \
  }
const std::array<OperatorStrategies, kOperators>& operators() {
  static const std::array<OperatorStrategies, kOperators> table = [] {
    std::array<OperatorStrategies, kOperators> t;
    SG_STRATEGY_OPERATORS(SG_OPERATOR_ROWS)
    return t;
  }();
  return table;
}
#undef SG_OPERATOR_ROWS
#undef SG_STRATEGY_ROW

// The pins, relaxed: a test sets them while no call runs (set_strategy_for_testing).
std::array<std::atomic<int>, kOperators> pinned_strategies{};
std::array<std::atomic<int64_t>, kOperators> pinned_bands{};

std::string known_operators() {
  std::string names;
  for (const OperatorStrategies& o : operators()) names += std::string(names.empty() ? "" : ", ") + o.op;
  return names;
}

std::string known_strategies(const OperatorStrategies& o) {
  std::string names = "auto";
  for (const StrategyRow& row : o.rows) names += std::string(", ") + row.strategy;
  return names;
}

}  // namespace

StrategyPin strategy_pin(StrategyOperator op) {
  const auto i = static_cast<size_t>(op);
  return {pinned_strategies[i].load(std::memory_order_relaxed), pinned_bands[i].load(std::memory_order_relaxed)};
}

void pin_strategy(StrategyOperator op, int strategy, int64_t band) {
  const auto i = static_cast<size_t>(op);
  pinned_strategies[i].store(strategy, std::memory_order_relaxed);
  pinned_bands[i].store(band > 0 ? band : 0, std::memory_order_relaxed);
}

void set_strategy_for_testing(std::string_view op, std::string_view strategy, int64_t band) {
  for (int i = 0; i < kOperators; ++i) {
    const OperatorStrategies& o = operators()[static_cast<size_t>(i)];
    if (op != o.op) continue;
    int index = strategy == "auto" ? 0 : -1;
    for (size_t k = 0; k < o.rows.size() && index < 0; ++k) {
      if (strategy == o.rows[k].strategy) index = static_cast<int>(k) + 1;
    }
    if (index < 0) {
      throw std::invalid_argument("set_strategy_for_testing(): " + std::string(op) + " has no strategy \"" +
                                  std::string(strategy) + "\" (it has " + known_strategies(o) + ")");
    }
    return pin_strategy(static_cast<StrategyOperator>(i), index, band);
  }
  throw std::invalid_argument("set_strategy_for_testing(): no operator \"" + std::string(op) +
                              "\" has strategies (these do: " + known_operators() + ")");
}

StrategyForTesting::StrategyForTesting(std::string_view op, std::string_view strategy, int64_t band)
    : op_(StrategyOperator::kCount) {
  set_strategy_for_testing(op, strategy, band);
  for (int i = 0; i < kOperators; ++i) {
    if (op == operators()[static_cast<size_t>(i)].op) op_ = static_cast<StrategyOperator>(i);
  }
}

StrategyForTesting::~StrategyForTesting() { pin_strategy(op_, 0, 0); }

const std::vector<StrategyRow>& strategy_table() {
  static const std::vector<StrategyRow> rows = [] {
    std::vector<StrategyRow> all;
    for (const OperatorStrategies& o : operators()) all.insert(all.end(), o.rows.begin(), o.rows.end());
    return all;
  }();
  return rows;
}

std::vector<std::string> strategy_names(std::string_view op) {
  std::vector<std::string> names;
  for (const OperatorStrategies& o : operators()) {
    if (op != o.op) continue;
    for (const StrategyRow& row : o.rows) names.emplace_back(row.strategy);
  }
  return names;
}

}  // namespace spatialgrad::detail

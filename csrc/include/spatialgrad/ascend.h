// What the Ascend NPU's aclnn operators accept, per chip: one table of rules (csrc/src/ascend_rules.cpp) read
// by the C API (SPATIALGRAD_ASCEND_CHIP), the Python check (spatialgrad.ascend) and so spatialgrad.torch.
// Checking never changes a result: it only reports (docs/ascend.md lists the rules and their sources).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spatialgrad::ascend {

// The chips the CANN sources name, as bits of a mask (0: no chip).
enum Chip : uint8_t { k910 = 1, k910B = 2, k910_93 = 4, k310P = 8, k950 = 16 };
constexpr uint8_t kAllChips = k910 | k910B | k910_93 | k310P | k950;

// The chip called `name` ("910", "910B", "910_93", "310P", "950"); a ValueError-kind Error listing the
// known names otherwise.
Chip chip_from_name(const std::string& name);
const char* chip_name(Chip chip);

// How a rule tests the value v of its argument.
enum class Test : uint8_t {
  kUnsupported,  // the operator does not exist on the chip (always reported)
  kDtypeIn,      // v (a spatialgrad::DType) is one of the dtypes in the mask `limit`
  kAtMost,       // v <= limit
  kAtLeast,      // v >= limit
  kAbove,        // v > limit
  kMultipleOf,   // v % limit == 0
  kAbsAtMost,    // |v| <= limit
  kHalfOf,       // 2 * v <= the argument `other`
  kEquals,       // v == the argument `other`
};

struct Rule {
  const char* op;        // the spatialgrad function, e.g. "grid_sampler_2d_backward"
  uint8_t chips;         // the chips the rule holds on
  const char* argument;  // the aclnn argument (or derived quantity) tested; "" for kUnsupported
  Test test;
  double limit;
  const char* other;     // the second argument of kHalfOf / kEquals
  bool rejects;          // true: the NPU returns 161002; false: it runs but computes differently
  const char* text;      // what the NPU requires, for messages
  const char* source;    // the CANN file the rule comes from
};

// Every rule, in table order.
const std::vector<Rule>& rules();

// The named quantities of one call: the arguments the rules test ("dtype" holds a DType as a number). A rule
// whose argument (or `other`) is missing is not tested: callers leave out what does not apply.
using Facts = std::vector<std::pair<std::string, double>>;

struct Finding {
  const Rule* rule;
  double value;  // of the rule's argument (0 for kUnsupported)
};

// The rules of `op` on `chip` the call described by `facts` breaks (none for an operator without rules).
std::vector<Finding> check(const std::string& op, Chip chip, const Facts& facts);

// "op(): on Ascend <chip> the NPU rejects this call (161002): expected <rule>, but got <argument> = <value>
// (<last two components of the source path>)"; "computes this call differently" for a rule that does not reject.
std::string message(const Finding& finding, Chip chip);

// The chip named by the environment variable SPATIALGRAD_ASCEND_CHIP, read at the first call of the process
// (0 when unset or empty; an unknown name is an Error listing the known ones, on every call).
uint8_t chip_from_environment();

}  // namespace spatialgrad::ascend

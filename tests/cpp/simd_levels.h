// Test helpers over the kernels' instruction levels (csrc/src/detail/cpu.h): every level the CPU has,
// pinned in turn.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "detail/cpu.h"

namespace spatialgrad::testing {

// The levels this build and CPU can run, baseline first.
inline std::vector<detail::SimdLevel> available_simd_levels() {
  std::vector<detail::SimdLevel> levels;
  for (detail::SimdLevel level : {detail::SimdLevel::kBaseline, detail::SimdLevel::kAvx2, detail::SimdLevel::kAvx512}) {
    if (detail::cpu_has_simd_level(level)) levels.push_back(level);
  }
  return levels;
}

// Runs fn() once per available level, that level pinned (the previous level restored after each);
// stops at the first fatal failure.
template <class Fn>
void for_each_simd_level(const Fn& fn) {
  for (detail::SimdLevel level : available_simd_levels()) {
    SCOPED_TRACE(std::string("SIMD level ") + detail::simd_level_name(level));
    const detail::PinnedSimdLevel pinned(level);
    fn();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Runs compute() (returning a std::vector of values) at each available level and expects the bits of
// every level to equal the baseline's.
template <class Compute>
void expect_same_bits_at_each_level(Compute&& compute) {
  using Values = decltype(compute());
  std::vector<Values> results;
  std::vector<detail::SimdLevel> levels = available_simd_levels();
  for (detail::SimdLevel level : levels) {
    const detail::PinnedSimdLevel pinned(level);
    results.push_back(compute());
  }
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(results[i].size(), results[0].size());
    EXPECT_EQ(0, std::memcmp(results[i].data(), results[0].data(), results[0].size() * sizeof(results[0][0])))
        << "level " << detail::simd_level_name(levels[i]) << " differs from the baseline";
  }
}

}  // namespace spatialgrad::testing

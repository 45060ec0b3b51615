// The grid sampler's two strategies (grid_sampler_2d.cpp chooses per call by a cost model; docs/design.md,
// "grid_sampler_2d: tiles or planes"), and a switch for tests that run both on the same inputs.
#pragma once

namespace spatialgrad::detail {

enum class GridSamplerStrategy { kAuto, kTiles, kPlanes };

// Forces the strategy of every later first-order call in the process (kAuto: the cost model). For tests:
// set it while no call runs.
void force_grid_sampler_strategy(GridSamplerStrategy strategy);

// Forces a strategy for the lifetime of the object.
class ForcedGridSamplerStrategy {
 public:
  explicit ForcedGridSamplerStrategy(GridSamplerStrategy s) { force_grid_sampler_strategy(s); }
  ~ForcedGridSamplerStrategy() { force_grid_sampler_strategy(GridSamplerStrategy::kAuto); }
  ForcedGridSamplerStrategy(const ForcedGridSamplerStrategy&) = delete;
  ForcedGridSamplerStrategy& operator=(const ForcedGridSamplerStrategy&) = delete;
};

}  // namespace spatialgrad::detail

// The instruction level of spatialgrad's kernels on this machine (csrc/src/detail/cpu.h decides it).
#pragma once

namespace spatialgrad {

// "baseline", "avx2" or "avx512": the most capable level this build and CPU support (x86-64 builds with
// GCC or clang have all three; the baseline is SSE2), capped by the environment variable
// SPATIALGRAD_SIMD_LEVEL (one of those names, read when the first kernel runs). Every level gives bitwise
// identical results; the level only changes the speed.
const char* simd_level();

}  // namespace spatialgrad

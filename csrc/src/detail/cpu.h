// The one test of what the running x86-64 CPU can execute: cpuid for the instruction sets, xgetbv for
// the operating system's saving of the vector registers (AVX needs YMM state, AVX-512 the ZMM and mask
// state). Detected once. Compiler builtins are not used: clang 14 rejects __builtin_cpu_supports("f16c").
// On other architectures every feature reads false.
//
// And the one place that decides the kernels' instruction level (simd.h dispatches on it): the best level
// the CPU has, capped by the environment variable SPATIALGRAD_SIMD_LEVEL (baseline, avx2 or avx512) and, in
// tests, by pin_simd_level.
#pragma once

#include <atomic>

// The builds with per-level kernels (simd.h): x86-64 with GCC or clang. Elsewhere every kernel runs at the
// baseline level.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SPATIALGRAD_NO_SIMD_LEVELS)
#define SG_SIMD_LEVELS 1
#endif

namespace spatialgrad::detail {

struct CpuFeatures {
  bool avx = false, avx2 = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false, avx512bf16 = false;
};

const CpuFeatures& cpu_features();

// The kernels' instruction levels, least capable first: the baseline ISA of the build (SSE2 on x86-64),
// AVX2 (the x86-64-v3 vector set, without FMA), AVX-512 (x86-64-v4: F, BW, VL, DQ, CD; without FMA).
enum class SimdLevel : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// True when this build has kernels of `level` and the CPU (and its OS) can run them.
bool cpu_has_simd_level(SimdLevel level);
// The level's name as SPATIALGRAD_SIMD_LEVEL spells it: "baseline", "avx2", "avx512".
const char* simd_level_name(SimdLevel level);

// The level in force: -1 until the first call decides it (simd_level_slot is constant-initialised, so
// a kernel run during static initialisation still finds a valid answer).
extern std::atomic<int> simd_level_slot;
SimdLevel decide_simd_level();

// The level the kernels run at: the best the CPU has, capped by SPATIALGRAD_SIMD_LEVEL and by a pin.
inline SimdLevel simd_level() {
  const int level = simd_level_slot.load(std::memory_order_relaxed);
  return level >= 0 ? static_cast<SimdLevel>(level) : decide_simd_level();
}

// For tests and benchmarks: runs later kernels at `level` (in place of SPATIALGRAD_SIMD_LEVEL's cap), or at
// the best level the CPU has below it. Returns the level in force before. Not meant to change while
// kernels run.
SimdLevel pin_simd_level(SimdLevel level);

// Pins a level for the lifetime of the object.
class PinnedSimdLevel {
 public:
  explicit PinnedSimdLevel(SimdLevel level) : previous_(pin_simd_level(level)) {}
  ~PinnedSimdLevel() { pin_simd_level(previous_); }
  PinnedSimdLevel(const PinnedSimdLevel&) = delete;
  PinnedSimdLevel& operator=(const PinnedSimdLevel&) = delete;

 private:
  SimdLevel previous_;
};

}  // namespace spatialgrad::detail

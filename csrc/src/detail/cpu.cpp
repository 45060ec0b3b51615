#include "cpu.h"

#include "spatialgrad/cpu.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace spatialgrad::detail {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
bool bit(unsigned value, int index) { return (value >> index) & 1u; }

// XCR0: which register states the OS saves on a context switch.
uint64_t enabled_register_states() {
  uint32_t low, high;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = bit(ecx, 27);
  const uint64_t states = osxsave ? enabled_register_states() : 0;
  const bool ymm = (states & 0x6) == 0x6;    // XMM and YMM
  const bool zmm = (states & 0xe6) == 0xe6;  // and opmask, ZMM_Hi256, Hi16_ZMM
  f.avx = ymm && bit(ecx, 28);
  f.f16c = f.avx && bit(ecx, 29);
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = f.avx && bit(ebx, 5);
    f.avx512f = zmm && bit(ebx, 16);
    f.avx512dq = f.avx512f && bit(ebx, 17);
    f.avx512cd = f.avx512f && bit(ebx, 28);
    f.avx512bw = f.avx512f && bit(ebx, 30);
    f.avx512vl = f.avx512f && bit(ebx, 31);
  }
  if (f.avx512f && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512bf16 = bit(eax, 5);
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

constexpr SimdLevel kLevels[] = {SimdLevel::kBaseline, SimdLevel::kAvx2, SimdLevel::kAvx512};

// The most capable level the CPU has, at most `cap`.
SimdLevel best_level_up_to(SimdLevel cap) {
  SimdLevel best = SimdLevel::kBaseline;
  for (SimdLevel level : kLevels) {
    if (level <= cap && cpu_has_simd_level(level)) best = level;
  }
  return best;
}

// SPATIALGRAD_SIMD_LEVEL's cap: unset or empty means none; a value that names no level is reported once
// on stderr and ignored (the library has no caller to raise to while it decides).
SimdLevel environment_cap() {
  const char* value = std::getenv("SPATIALGRAD_SIMD_LEVEL");
  if (value == nullptr || *value == '\0') return SimdLevel::kAvx512;
  for (SimdLevel level : kLevels) {
    if (std::strcmp(value, simd_level_name(level)) == 0) return level;
  }
  std::fprintf(stderr, "spatialgrad: SPATIALGRAD_SIMD_LEVEL=%s is not one of baseline, avx2, avx512: ignored\n", value);
  return SimdLevel::kAvx512;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool cpu_has_simd_level(SimdLevel level) {
  const CpuFeatures& f = cpu_features();
  switch (level) {
    case SimdLevel::kBaseline:
      return true;
#if defined(SG_SIMD_LEVELS)
    case SimdLevel::kAvx2:
      return f.avx2;
    case SimdLevel::kAvx512:
      return f.avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512cd;
#endif
    default:
      return false;
  }
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
    default:
      return "baseline";
  }
}

std::atomic<int> simd_level_slot{-1};

SimdLevel decide_simd_level() {
  static const SimdLevel decided = best_level_up_to(environment_cap());
  int undecided = -1;
  simd_level_slot.compare_exchange_strong(undecided, static_cast<int>(decided), std::memory_order_relaxed);
  return static_cast<SimdLevel>(simd_level_slot.load(std::memory_order_relaxed));
}

SimdLevel pin_simd_level(SimdLevel level) {
  const SimdLevel previous = simd_level();
  simd_level_slot.store(static_cast<int>(best_level_up_to(level)), std::memory_order_relaxed);
  return previous;
}

}  // namespace spatialgrad::detail

const char* spatialgrad::simd_level() { return detail::simd_level_name(detail::simd_level()); }

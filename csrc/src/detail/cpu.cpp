#include "cpu.h"

#include <cstdint>

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
    f.avx512bw = f.avx512f && bit(ebx, 30);
    f.avx512vl = f.avx512f && bit(ebx, 31);
  }
  if (f.avx512f && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512bf16 = bit(eax, 5);
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace spatialgrad::detail

// The one test of what the running x86-64 CPU can execute: cpuid for the instruction sets, xgetbv for
// the operating system's saving of the vector registers (AVX needs YMM state, AVX-512 the ZMM and mask
// state). Detected once. Compiler builtins are not used: clang 14 rejects __builtin_cpu_supports("f16c").
// On other architectures every feature reads false.
#pragma once

namespace spatialgrad::detail {

struct CpuFeatures {
  bool avx = false, avx2 = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512bf16 = false;
};

const CpuFeatures& cpu_features();

}  // namespace spatialgrad::detail

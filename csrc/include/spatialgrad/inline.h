// SPATIALGRAD_INLINE: the one forced-inline marker, for the dtype conversions (dtype.h) and the helpers of
// the kernels' hot loops (csrc/src/detail/simd.h). Kernels compile their hot loops once per instruction level
// (SG_SIMD_KERNEL, detail/simd.h); GCC may leave an ordinary inline function out of a function of another target,
// so a helper that is not forced inline can be compiled once, for the baseline ISA, and called per element
// from the AVX2 or AVX-512 copy instead of becoming part of its vector loop.
#pragma once

#if defined(__GNUC__)
#define SPATIALGRAD_INLINE inline __attribute__((always_inline))
#else
#define SPATIALGRAD_INLINE inline
#endif

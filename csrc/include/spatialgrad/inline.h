// SPATIALGRAD_INLINE: the one forced-inline marker, for the dtype conversions (dtype.h) and the helpers of
// the kernels' hot loops (csrc/src/detail/simd.h). Kernels compile their hot loops in per-ISA clones
// (SG_SIMD_CLONES, detail/simd.h); GCC does not inline an ordinary inline function into a clone of another target, so
// a helper that is not forced inline is compiled once, for the baseline ISA, and called per element
// from the AVX2 clone instead of becoming part of its vector loop.
#pragma once

#if defined(__GNUC__)
#define SPATIALGRAD_INLINE inline __attribute__((always_inline))
#else
#define SPATIALGRAD_INLINE inline
#endif

// Function multiversioning for the hottest loops: SG_SIMD_CLONES gives a function an AVX2 clone that
// the loader picks on CPUs that have it; portable builds stay at the baseline ISA (no -march).
// The clone performs the same IEEE operations in the same order, only wider: "avx2" does not
// enable FMA, so no multiply-add is contracted and both clones give bitwise identical results.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SPATIALGRAD_NO_SIMD_CLONES)
#define SG_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SG_SIMD_CLONES
#endif

// For the helpers of a cloned function: a helper that is not inlined is compiled once, for the
// baseline ISA, so the AVX2 clone would call SSE code in its hottest loop. Forcing the inlining
// compiles the helper into each clone with that clone's ISA.
#if defined(__GNUC__)
#define SG_INLINE inline __attribute__((always_inline))
#else
#define SG_INLINE inline
#endif

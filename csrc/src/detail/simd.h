// Function multiversioning for the hottest loops: SG_SIMD_CLONES gives a function an AVX2 clone that
// the loader picks on CPUs that have it; portable builds stay at the baseline ISA (no -march).
// The clone performs the same IEEE operations in the same order, only wider: "avx2" does not
// enable FMA, so no multiply-add is contracted and both clones give bitwise identical results.
#pragma once

//
// GCC only: clang 14 cannot multiversion function templates (and most cloned functions are templates),
// so a clang build runs these loops at the baseline ISA: correct, slower. Releases build with GCC.
//
// A cloned function must not throw: under GCC 12 an exception leaving a target_clones function ends
// the process (std::terminate), so its callers allocate every buffer it uses (avg_pool2d.cpp).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SPATIALGRAD_NO_SIMD_CLONES)
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

// Gathers: dst[i] = src[index[i]] for a list of int32 element indices, 0 where an index is negative (a
// tap outside the image). The kernels that sample at computed positions (the grid sampler's plane
// strategy) gather one channel's taps for a block of points with these, then combine them in vector
// loops. Masked gathers of the kernels' level (cpu.h simd_level(): 8 float lanes at AVX2, 16 at AVX-512), a
// portable loop at the baseline: the same values.
#pragma once

#include <cstdint>

namespace spatialgrad::detail {

void gather(const float* src, const int32_t* index, int64_t n, float* dst);
void gather(const double* src, const int32_t* index, int64_t n, double* dst);

// first[i] = src[left[i]] and second[i] = src[right[i]] (0 where an index is negative), for taps that are
// usually horizontal neighbours (right = left + 1): a run of points whose taps all are, both inside, is read
// from one window of neighbouring floats where they fit it (loads and permutes: src[0, extent) is readable),
// else as 64-bit pairs (half the loads of two gathers); any other run by two masked gathers. The same values.
void gather_adjacent(const float* src, const int32_t* left, const int32_t* right, int64_t n, int64_t extent,
                     float* first, float* second);

// dst[i] = v0 * w[0][i] + v1 * w[1][i] + v2 * w[2][i] + v3 * w[3][i] (in that order), vk = src[index[k][i]]
// or 0: four taps gathered and weighted together.
void gather4_weighted(const float* src, const int32_t* const* index, const float* const* w, int64_t n, float* dst);

}  // namespace spatialgrad::detail

// Gathers: dst[i] = src[index[i]] for a list of int32 element indices, 0 where an index is negative (a
// tap outside the image). The kernels that sample at computed positions (the grid sampler's plane
// strategy) gather one channel's taps for a block of points with these, then combine them in vector
// loops. AVX2 masked gathers where the CPU has them, a portable loop elsewhere: the same values.
#pragma once

#include <cstdint>

namespace spatialgrad::detail {

void gather(const float* src, const int32_t* index, int64_t n, float* dst);
void gather(const double* src, const int32_t* index, int64_t n, double* dst);

// For tests: false makes gather() take the portable loop (true: the CPU's best path).
void allow_vector_gathers(bool allow);

}  // namespace spatialgrad::detail

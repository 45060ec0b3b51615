// Memory for the large output arrays of the NumPy API, kept for reuse when their arrays die.
//
// A new array of tens of megabytes costs more than the kernel that fills it: the allocator maps fresh
// pages, and the kernel then takes a page fault (and the OS a page zeroing) every few kilobytes, ~3-7 ms
// for a 33 MB upsample output against ~1.6 ms for the kernel. Training loops call an operator with the
// same shapes every step, so blocks freed by the previous step's arrays are handed out again as they
// are. Only blocks of at least kMinCachedBytes are cached, at most SPATIALGRAD_OUTPUT_CACHE_MB
// megabytes of them (default 256; 0 turns the cache off), oldest first out.
#pragma once

#include <cstddef>

namespace spatialgrad::python {

constexpr size_t kMinCachedBytes = size_t(1) << 20;

// A block of `bytes` (64-byte aligned; large blocks 2 MB aligned and offered to the kernel for huge
// pages), reused from the cache when one of exactly that size is there.
void* acquire_output_block(size_t bytes);
// Hands a block of acquire_output_block(bytes) back: kept for reuse, or freed beyond the limit.
void release_output_block(void* block, size_t bytes);
// Frees every cached block (the arrays alive keep theirs).
void clear_output_cache();

}  // namespace spatialgrad::python

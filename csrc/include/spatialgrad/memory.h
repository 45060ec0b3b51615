// Large memory blocks kept for reuse: the float32 staging of half-precision tensors, kernels' scratch and
// the output arrays of the NumPy API (which hand them back when the array is freed).
//
// A fresh block of tens of megabytes costs more than the kernel that fills it: the allocator maps new
// pages, and the first touch takes a page fault (and the OS a page zeroing) every few kilobytes, ~3-7 ms
// for a 33 MB upsample output against ~1.6 ms for the kernel. Training loops call an operator with the
// same shapes every step, so blocks freed by the previous step are handed out again as they are. Blocks
// of at least kMinCachedBytes are kept, at most SPATIALGRAD_MEMORY_CACHE_MB megabytes of them (read at
// the first use; default 256, 0 turns the cache off), the oldest freed first out.
#pragma once

#include <cstddef>

namespace spatialgrad {

constexpr size_t kMinCachedBytes = size_t(1) << 20;

// An uninitialised block of `bytes` (64-byte aligned; large blocks 2 MB aligned and offered to the OS for
// huge pages): the most recently released block of exactly that size when the cache has one.
void* acquire_block(size_t bytes);
// Hands back a block of acquire_block(bytes): kept for reuse, or freed (small blocks, or beyond the limit).
void release_block(void* block, size_t bytes);
// Frees every kept block (blocks in use stay with their owners).
void clear_memory_cache();

}  // namespace spatialgrad

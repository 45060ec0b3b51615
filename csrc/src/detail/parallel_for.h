// How kernels run in parallel (parallel.cpp): the kernels' side of spatialgrad/parallel.h.
//
// parallel_for(begin, end, grain, fn) cuts [begin, end) into contiguous chunks of at least `grain`
// items (about kChunksPerThread per thread) and calls fn(chunk_begin, chunk_end) once per chunk. Each
// thread first takes the chunks of its own share of the range, in order, then helps with the others'
// (ChunkQueue). A range of at most `grain` items, a single thread, or a call from inside a parallel
// region runs inline as one fn(begin, end). Kernels make each chunk write a disjoint part of the output
// and compute each item the same way whatever chunk it is in, so results never depend on the thread
// count, on which thread took which chunk, or on the executor that ran the threads.
//
// Why not one fixed share per thread: on shared machines a thread often starts late or is preempted
// (on our 2-core CI machines a worker woken after an idle spell started up to 4 ms late); with fixed
// shares the call waits for its slowest thread, here the others take what that thread has not begun.
//
// parallel_chunks(begin, end, grain, chunk, fn) is the same with fn(queue) called once per task, for
// kernels whose per-task setup is heavy: the task keeps its scratch and takes chunks of `chunk`
// items (<= 0: the parallel_for size) from the queue until it is empty.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>

#include "spatialgrad/parallel.h"

namespace spatialgrad {

namespace detail {
int current_thread_index();  // within the running parallel region (0 outside one)
bool in_parallel_region();

// Runs task(context, i) for up to `threads` task indices on the current executor, each inside a
// parallel region (current_thread_index() = i), and returns when all have returned.
void run_parallel(int threads, void (*task)(void* context, int index) noexcept, void* context);

// Tests only: each worker of spatialgrad's pool sleeps this long after it wakes for a call, before it
// claims a place (a worker the scheduler runs late). 0 (the default) turns it off.
void set_worker_delay_for_testing(int microseconds);

// The first exception thrown by any thread of a parallel call, rethrown by the caller.
class FirstError {
 public:
  void capture() noexcept {
    if (!taken_.exchange(true)) error_ = std::current_exception();
  }
  void rethrow_if_any() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::atomic<bool> taken_{false};
  std::exception_ptr error_;
};
}  // namespace detail

// Rough element-operations per parallel task below which splitting costs more than it saves.
constexpr int64_t kMinWorkPerTask = 1 << 15;

// The grain for items of `work_per_item` element-operations each: the fewest items (>= 1) whose work
// reaches min_work. The one grain formula of the kernels (a cost model is a kernel's estimate of
// work_per_item, in named constants).
inline int64_t grain_for(double work_per_item, int64_t min_work = kMinWorkPerTask) {
  if (!(work_per_item >= 1)) return min_work;  // also NaN: treat an unknown cost as the cheapest
  return static_cast<int64_t>(static_cast<double>(min_work) / work_per_item) + 1;
}

// Chunks per thread when the kernel leaves the size to parallel_chunks: enough for a late or
// preempted thread's share to be taken by the others, few enough that per-chunk setup stays small.
constexpr int64_t kChunksPerThread = 4;

// The chunks of [begin, end), cut into one contiguous region of chunks per thread. A thread takes the
// chunks of its own region in order (the locality of a fixed split: neighbouring items, such as
// those sharing an input plane, stay on one thread), then, when its region is done, the next chunks
// of the other regions.
class ChunkQueue {
 public:
  ChunkQueue(int64_t begin, int64_t end, int64_t chunk, int regions)
      : begin_(begin),
        end_(end),
        chunk_(std::max<int64_t>(chunk, 1)),
        regions_(std::max(regions, 1)),
        region_(new Region[static_cast<size_t>(regions_)]) {
    const int64_t chunks = (end - begin + chunk_ - 1) / chunk_;
    for (int r = 0; r < regions_; ++r) {
      region_[r].next.store(chunks * r / regions_, std::memory_order_relaxed);
      region_[r].end = chunks * (r + 1) / regions_;
    }
  }
  ChunkQueue(const ChunkQueue&) = delete;
  ChunkQueue& operator=(const ChunkQueue&) = delete;

  // The calling thread's next chunk [lo, hi); false when none is left.
  bool next(int64_t& lo, int64_t& hi) {
    const int own = detail::current_thread_index() % regions_;
    for (int k = 0; k < regions_; ++k) {
      Region& region = region_[(own + k) % regions_];
      if (region.next.load(std::memory_order_relaxed) >= region.end) continue;  // no fetch_add past the end
      const int64_t index = region.next.fetch_add(1, std::memory_order_relaxed);
      if (index >= region.end) continue;
      lo = begin_ + index * chunk_;
      hi = std::min(end_, lo + chunk_);
      return true;
    }
    return false;
  }

 private:
  struct alignas(64) Region {  // one cache line each: the owners' counters do not share lines
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  const int64_t begin_, end_, chunk_;
  const int regions_;
  std::unique_ptr<Region[]> region_;
};

template <class Fn>
void parallel_chunks(int64_t begin, int64_t end, int64_t grain, int64_t chunk, const Fn& fn) {
  if (begin >= end) return;
  const int64_t count = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_tasks = (count + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), max_tasks));
  if (threads <= 1 || detail::in_parallel_region()) {
    ChunkQueue whole(begin, end, count, 1);
    fn(whole);
    return;
  }
  if (chunk <= 0) {
    const int64_t parts = threads * kChunksPerThread;
    chunk = std::max(grain, (count + parts - 1) / parts);
  }
  struct Call {
    const Fn& fn;
    ChunkQueue queue;
    detail::FirstError error;
  } call{fn, ChunkQueue(begin, end, chunk, threads), {}};
  detail::run_parallel(
      threads,
      [](void* context, int) noexcept {
        Call& c = *static_cast<Call*>(context);
        try {
          c.fn(c.queue);
        } catch (...) {
          c.error.capture();
        }
      },
      &call);
  call.error.rethrow_if_any();
}

template <class Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  parallel_chunks(begin, end, grain, 0, [&](ChunkQueue& queue) {
    for (int64_t lo, hi; queue.next(lo, hi);) fn(lo, hi);
  });
}

}  // namespace spatialgrad

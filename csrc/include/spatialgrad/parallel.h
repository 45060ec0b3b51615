// The one way kernels run in parallel. Backed by OpenMP, but kernels never include omp.h.
//
// parallel_for(begin, end, grain, fn) splits [begin, end) into at most get_num_threads() contiguous
// chunks of at least `grain` items and calls fn(chunk_begin, chunk_end) once per chunk. A range of at
// most `grain` items, a single thread, or a call from inside a parallel region runs inline. Kernels
// make each chunk write a disjoint part of the output, so results never depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>

namespace spatialgrad {

// Threads used by later kernel calls (process-wide). n <= 0 restores the default
// (OMP_NUM_THREADS, else the number of cores).
void set_num_threads(int n);
int get_num_threads();

namespace detail {
int current_thread_index();
int current_team_size();
bool in_parallel_region();
}  // namespace detail

template <class Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  if (begin >= end) return;
  const int64_t count = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_tasks = (count + grain - 1) / grain;
  const int tasks = static_cast<int>(std::min<int64_t>(get_num_threads(), max_tasks));
  if (tasks <= 1 || detail::in_parallel_region()) {
    fn(begin, end);
    return;
  }
  std::exception_ptr error = nullptr;
#pragma omp parallel num_threads(tasks)
  {
    // The runtime may grant fewer threads than asked for: split by the team actually running.
    const int64_t team = detail::current_team_size();
    const int64_t chunk = (count + team - 1) / team;
    const int64_t lo = begin + detail::current_thread_index() * chunk;
    const int64_t hi = std::min(end, lo + chunk);
    if (lo < hi) {
      try {
        fn(lo, hi);
      } catch (...) {
#pragma omp critical(spatialgrad_parallel_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace spatialgrad

#include "spatialgrad/parallel.h"

#include <atomic>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace spatialgrad {
namespace {

int default_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

std::atomic<int>& thread_setting() {
  static std::atomic<int> setting{default_threads()};
  return setting;
}

}  // namespace

void set_num_threads(int n) { thread_setting().store(n > 0 ? n : default_threads()); }

int get_num_threads() {
#ifdef _OPENMP
  return thread_setting().load();
#else
  return 1;
#endif
}

namespace detail {

int current_thread_index() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

bool in_parallel_region() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

}  // namespace detail
}  // namespace spatialgrad

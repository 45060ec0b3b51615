#include "spatialgrad/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace spatialgrad {
namespace {

// A waiting thread polls this long before it sleeps: kernels are often called back to back (a
// training step, a benchmark loop), and a sleeping thread takes tens of microseconds to wake.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

// The running thread's place in the current parallel call.
thread_local int tl_thread_index = 0;
thread_local bool tl_in_parallel = false;

int positive_from_environment(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return 0;
  try {
    const int n = std::stoi(text);  // OMP_NUM_THREADS may be a list ("4,2"): its first entry
    return n > 0 ? n : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

int machine_threads() {
  for (const char* name : {"SPATIALGRAD_NUM_THREADS", "OMP_NUM_THREADS"}) {
    if (const int n = positive_from_environment(name)) return n;
  }
  cpu_set_t cpus;  // the cores this process may run on (a container or taskset may allow fewer)
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 0) return CPU_COUNT(&cpus);
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int> g_user_threads{0};     // set_num_threads (0: unset)
std::atomic<int> g_default_threads{0};  // set_default_num_threads (0: unset)

int default_threads() {
  const int n = g_default_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  static const int machine = machine_threads();
  return machine;
}

struct Job {
  void (*task)(void*, int) noexcept = nullptr;
  void* context = nullptr;
  int threads = 0;
};

void run_as(const Job& job, int index) noexcept {
  tl_thread_index = index;
  tl_in_parallel = true;
  job.task(job.context, index);
  tl_in_parallel = false;
  tl_thread_index = 0;
}

// Workers 1..n-1 wait for a new generation of the job; the caller runs index 0, then waits until
// the workers it asked for are done. A pool is never destroyed (its threads may still be waiting at
// exit) and is abandoned in a forked child, whose copy has no threads.
class Pool {
 public:
  // False (and nothing run) when another caller is using the pool.
  bool try_run(Job job) noexcept {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    job.threads = std::min(job.threads, 1 + grow(job.threads - 1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      remaining_.store(job.threads - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    if (job.threads > 1) wake_.notify_all();
    run_as(job, 0);
    wait_until_done();
    return true;
  }

 private:
  // Starts workers until there are `wanted`; returns how many there are (fewer if the system
  // refuses a thread: the call then runs on fewer threads).
  int grow(int wanted) noexcept {
    while (static_cast<int>(workers_) < wanted) {
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        const uint64_t seen = generation_.load(std::memory_order_relaxed);
        std::thread(&Pool::work, this, static_cast<int>(workers_) + 1, seen).detach();
        ++workers_;
      } catch (...) {
        break;
      }
    }
    return static_cast<int>(workers_);
  }

  void work(int index, uint64_t seen) noexcept {
    for (;;) {
      spin_while([&] { return generation_.load(std::memory_order_acquire) == seen; });
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
        seen = generation_.load(std::memory_order_relaxed);
        job = job_;
      }
      if (index >= job.threads) continue;
      run_as(job, index);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller checks `remaining_` under it
        done_.notify_one();
      }
    }
  }

  void wait_until_done() {
    spin_while([&] { return remaining_.load(std::memory_order_acquire) != 0; });
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
  }

  template <class Pending>
  static void spin_while(const Pending& pending) {
    const auto until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
    while (pending() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }

  std::mutex busy_;   // held by the calling thread for a whole call
  std::mutex mutex_;  // guards job_ and the sleeps
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  Job job_;
  size_t workers_ = 0;  // only the thread holding busy_ changes it
};

std::atomic<Pool*> g_pool{nullptr};

// The child of a fork has only the forking thread: the parent's workers are not there to take jobs
// (and a lock one of them held stays held). The child builds a new pool on first use.
void forget_pool_in_child() { g_pool.store(nullptr, std::memory_order_relaxed); }

Pool& pool() {
  Pool* existing = g_pool.load(std::memory_order_acquire);
  if (existing != nullptr) return *existing;
  static const int registered = pthread_atfork(nullptr, nullptr, &forget_pool_in_child);
  (void)registered;
  Pool* fresh = new Pool();  // no threads yet: cheap to drop if another thread got there first
  if (g_pool.compare_exchange_strong(existing, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *existing;
}

}  // namespace

void set_num_threads(int n) { g_user_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

void set_default_num_threads(int n) { g_default_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int get_num_threads() {
  const int user = g_user_threads.load(std::memory_order_relaxed);
  return user > 0 ? user : default_threads();
}

namespace detail {

int current_thread_index() { return tl_thread_index; }

bool in_parallel_region() { return tl_in_parallel; }

void run_on_pool(int threads, void (*task)(void*, int) noexcept, void* context) {
  const Job job{task, context, threads};
  if (threads > 1) {
    try {
      if (pool().try_run(job)) return;
    } catch (...) {  // the pool could not be created: run here
    }
  }
  run_as(job, 0);
}

}  // namespace detail
}  // namespace spatialgrad

#include "spatialgrad/parallel.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "detail/parallel_for.h"

namespace spatialgrad {
namespace {

// The running thread's place in the current parallel call.
thread_local int tl_thread_index = 0;
thread_local bool tl_in_parallel = false;
// The running thread's ScopedExecutor, if any (nullptr / 0: none).
thread_local Executor* tl_scoped_executor = nullptr;
thread_local int tl_scoped_threads = 0;

std::atomic<int> g_worker_delay_us{0};  // set_worker_delay_for_testing

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

// Sleeping on a 32-bit word (Linux futex): a waiting thread takes no time slices until it is woken. A
// wait returns at once when the word no longer holds `expected`, so a wake-up between the caller's check
// and its sleep is not lost.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex is a plain 32-bit word");

void sleep_while_equal(std::atomic<uint32_t>& word, uint32_t expected) noexcept {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

// Before sleeping, a thread watches its word for kWatch, yielding the core at every look: back-to-back
// calls then find the workers awake and the caller returns as soon as the last chunk is done, where a
// futex wake-up takes tens of microseconds on a virtualised host (docs/design.md, "Beside PyTorch's OpenMP
// threads": small back-to-back calls 36 -> 14 us; calls of milliseconds did not change). The yield gives a busy
// machine's other threads the core first, and the watch ends: no thread spins while no call comes.
constexpr auto kWatch = std::chrono::microseconds(300);

// True when `word` holds a value for which done(value) within kWatch.
template <class Done>
bool watch(const std::atomic<uint32_t>& word, Done done) noexcept {
  const auto until = std::chrono::steady_clock::now() + kWatch;
  do {
    if (done(word.load(std::memory_order_acquire))) return true;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return done(word.load(std::memory_order_acquire));
}

void wake(std::atomic<uint32_t>& word, int threads) noexcept {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, threads, nullptr, nullptr, 0);
}

// A call's places as one word, so that a claim and the caller's withdrawal cannot cross: the call's
// generation (bits 32-63), the places still open (16-31) and the places claimed (0-15).
struct Places {
  static constexpr uint64_t kOne = 1, kOpenShift = 16, kMask = 0xFFFF;
  static constexpr int kMax = 0xFFFF;
  static uint64_t pack(uint32_t generation, int open) {
    return (uint64_t{generation} << 32) | (static_cast<uint64_t>(open) << kOpenShift);
  }
  static uint32_t generation(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
  static int open(uint64_t word) { return static_cast<int>((word >> kOpenShift) & kMask); }
  static int claimed(uint64_t word) { return static_cast<int>(word & kMask); }
  static uint64_t after_claim(uint64_t word) { return word - (kOne << kOpenShift) + 1; }
  static constexpr uint64_t kOpenBits = kMask << kOpenShift;
};

// The caller runs task 0 and offers the other places to the workers. A worker wakes, claims a place (and
// with it a task index) if one is still open, runs the task and reports it finished. When the caller's
// own task returns, every chunk has been taken: it closes the places nobody claimed and waits only for
// the workers that claimed one, which hold the last chunks. A pool is never destroyed (its threads may
// still be waiting at exit) and is abandoned in a forked child, whose copy has no threads.
class Pool {
 public:
  // False (and nothing run) when another caller is using the pool.
  bool try_run(int tasks, const Job& job) noexcept {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const int places = std::min({tasks - 1, grow(tasks - 1), Places::kMax});
    if (places > 0) offer(job, places);
    job(0);
    if (places > 0) wait_for(withdraw());
    return true;
  }

 private:
  // Starts workers until there are `wanted`; returns how many there are (fewer if the system
  // refuses a thread: the call then runs on fewer threads).
  int grow(int wanted) noexcept {
    while (workers_ < wanted) {
      try {
        std::thread(&Pool::work, this, generation_.load(std::memory_order_relaxed)).detach();
        ++workers_;
      } catch (...) {
        break;
      }
    }
    return workers_;
  }

  void offer(const Job& job, int places) noexcept {
    job_ = &job;  // read by a worker only after its claim, which the release below orders after this
    finished_.store(0, std::memory_order_relaxed);
    const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
    places_.store(Places::pack(generation, places), std::memory_order_release);
    generation_.store(generation, std::memory_order_release);
    wake(generation_, places);
  }

  // Closes the call's open places; returns how many workers claimed one.
  int withdraw() noexcept { return Places::claimed(places_.fetch_and(~Places::kOpenBits, std::memory_order_acq_rel)); }

  // A place of call `generation` (its task index, 1..), or 0 when the call is closed or over.
  int claim(uint32_t generation) noexcept {
    uint64_t word = places_.load(std::memory_order_acquire);
    do {
      if (Places::generation(word) != generation || Places::open(word) == 0) return 0;
    } while (!places_.compare_exchange_weak(word, Places::after_claim(word), std::memory_order_acq_rel,
                                            std::memory_order_acquire));
    return Places::claimed(word) + 1;
  }

  void work(uint32_t seen) noexcept {
    for (;;) {
      if (!watch(generation_, [seen](uint32_t g) { return g != seen; })) {
        while (generation_.load(std::memory_order_acquire) == seen) sleep_while_equal(generation_, seen);
      }
      const uint32_t generation = generation_.load(std::memory_order_acquire);
      seen = generation;
      if (const int delay = g_worker_delay_us.load(std::memory_order_relaxed)) {
        std::this_thread::sleep_for(std::chrono::microseconds(delay));
      }
      const int index = claim(generation);
      if (index == 0) continue;
      (*job_)(index);
      if (finished_.fetch_add(1, std::memory_order_acq_rel) & kCallerSleeps) wake(finished_, 1);
    }
  }

  // Waits until `claimed` workers have finished, asleep (flagged in finished_ so that they wake it).
  void wait_for(int claimed) noexcept {
    const auto expected = static_cast<uint32_t>(claimed);
    if (claimed == 0 || watch(finished_, [expected](uint32_t word) { return word == expected; })) return;
    for (uint32_t word = finished_.load(std::memory_order_acquire); (word & ~kCallerSleeps) != expected;
         word = finished_.load(std::memory_order_acquire)) {
      if ((word & kCallerSleeps) == 0 &&
          !finished_.compare_exchange_weak(word, word | kCallerSleeps, std::memory_order_acq_rel)) {
        continue;
      }
      sleep_while_equal(finished_, word | kCallerSleeps);
    }
  }

  static constexpr uint32_t kCallerSleeps = 1u << 31;
  std::mutex busy_;  // held by the calling thread for a whole call
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint64_t> places_{0};
  std::atomic<uint32_t> finished_{0};
  const Job* job_ = nullptr;
  int workers_ = 0;  // only the thread holding busy_ changes it
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

// spatialgrad's own executor: the pool, or the caller alone when another thread is using the pool.
class PoolExecutor final : public Executor {
 public:
  void run(int tasks, const Job& job) noexcept override {
    if (tasks > 1) {
      try {
        if (pool().try_run(tasks, job)) return;
      } catch (...) {  // the pool could not be created: run here
      }
    }
    job(0);
  }
};

Executor& pool_executor() {
  static Executor* const instance = new PoolExecutor();  // never destroyed: threads may call at exit
  return *instance;
}

std::atomic<Executor*> g_executor{nullptr};  // set_executor (nullptr: the pool)

// One task of a call, run inside a parallel region, noting that it ran.
struct RegionTask {
  void (*task)(void*, int) noexcept;
  void* context;
  std::atomic<bool> ran{false};

  static void run(void* self, int index) noexcept {
    auto& region = *static_cast<RegionTask*>(self);
    region.ran.store(true, std::memory_order_relaxed);
    const int outer_index = tl_thread_index;
    const bool outer_in_parallel = tl_in_parallel;
    tl_thread_index = index;
    tl_in_parallel = true;
    region.task(region.context, index);
    tl_thread_index = outer_index;
    tl_in_parallel = outer_in_parallel;
  }
};

}  // namespace

void set_num_threads(int n) { g_user_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

void set_default_num_threads(int n) { g_default_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int get_num_threads() {
  if (tl_scoped_threads > 0) return tl_scoped_threads;
  const int user = g_user_threads.load(std::memory_order_relaxed);
  return user > 0 ? user : default_threads();
}

void set_executor(Executor* executor) { g_executor.store(executor, std::memory_order_release); }

Executor& get_executor() {
  if (tl_scoped_executor != nullptr) return *tl_scoped_executor;
  Executor* executor = g_executor.load(std::memory_order_acquire);
  return executor != nullptr ? *executor : pool_executor();
}

ScopedExecutor::ScopedExecutor(Executor& executor, int threads) noexcept
    : outer_executor_(tl_scoped_executor), outer_threads_(tl_scoped_threads) {
  tl_scoped_executor = &executor;
  tl_scoped_threads = threads > 0 ? threads : 0;
}

ScopedExecutor::~ScopedExecutor() {
  tl_scoped_executor = outer_executor_;
  tl_scoped_threads = outer_threads_;
}

namespace detail {

int current_thread_index() { return tl_thread_index; }

bool in_parallel_region() { return tl_in_parallel; }

void set_worker_delay_for_testing(int microseconds) {
  g_worker_delay_us.store(std::max(microseconds, 0), std::memory_order_relaxed);
}

void run_parallel(int threads, void (*task)(void*, int) noexcept, void* context) {
  RegionTask region{task, context};
  const Job job(&RegionTask::run, &region);
  get_executor().run(threads, job);
  if (!region.ran.load(std::memory_order_relaxed)) job(0);  // an executor that ran nothing: run it here
}

}  // namespace detail
}  // namespace spatialgrad

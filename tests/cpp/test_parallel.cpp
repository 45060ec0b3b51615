#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "detail/parallel_for.h"
#include "spatialgrad/grid_sampler_2d.h"
#include "spatialgrad/parallel.h"
#include "test_util.h"

namespace spatialgrad {
namespace {

class ThreadSetting : public ::testing::Test {
 protected:
  void TearDown() override { set_num_threads(0); }
};

TEST_F(ThreadSetting, SetAndRestoreDefault) {
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  set_num_threads(0);
  EXPECT_GE(get_num_threads(), 1);
}

TEST_F(ThreadSetting, CoversRangeExactlyOnceWithDisjointChunks) {
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 5, 64, 1000}) {
      for (int64_t grain : {1, 7, 2000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
          ASSERT_LT(lo, hi);
          EXPECT_TRUE(hi - lo >= grain || hi == n) << "only the last chunk may be shorter than the grain";
          ++calls;
          for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i)];
        });
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
        EXPECT_LE(calls.load(), threads * kChunksPerThread);
        if (n > 0 && (n <= grain || threads == 1)) EXPECT_EQ(calls.load(), 1) << "this range must run inline";
      }
    }
  }
}

TEST_F(ThreadSetting, ChunkQueuesCoverRangeOnceAndCallOncePerThread) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (int64_t chunk : {-1, 0, 1, 3, 100}) {
      const int64_t n = 50;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> calls{0};
      parallel_chunks(5, 5 + n, 1, chunk, [&](ChunkQueue& queue) {
        ++calls;
        for (int64_t lo, hi; queue.next(lo, hi);) {
          ASSERT_LT(lo, hi);
          if (threads > 1 && chunk > 0) EXPECT_TRUE(hi - lo == chunk || hi == 5 + n);
          for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i - 5)];
        }
        int64_t lo = 0, hi = 0;
        EXPECT_FALSE(queue.next(lo, hi)) << "an empty queue stays empty";
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
      EXPECT_LE(calls.load(), threads);
      EXPECT_GE(calls.load(), 1);
    }
  }
}

// The point of handing chunks out: a thread that is held up does not hold back the call, the others
// take its share. (One thread sleeps in its first chunk far longer than the rest of the work takes.)
TEST_F(ThreadSetting, AHeldUpThreadLeavesItsChunksToTheOthers) {
  set_num_threads(2);
  std::atomic<bool> slept{false};
  std::mutex mutex;
  std::map<std::thread::id, int> items_by_thread;
  parallel_chunks(0, 40, 1, 1, [&](ChunkQueue& queue) {
    for (int64_t lo, hi; queue.next(lo, hi);) {
      if (!slept.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::lock_guard<std::mutex> lock(mutex);
      items_by_thread[std::this_thread::get_id()] += static_cast<int>(hi - lo);
    }
  });
  ASSERT_EQ(items_by_thread.size(), 2u) << "expected two threads";
  int fewest = 40;
  for (const auto& entry : items_by_thread) fewest = std::min(fewest, entry.second);
  EXPECT_EQ(fewest, 1) << "the sleeping thread should have done only the chunk it slept in";
}

// A thread takes its own region's chunks in order, then the other regions'. (Outside a parallel
// region the caller is thread 0, so the order is deterministic here.)
TEST(ChunkQueue, OwnRegionFirstThenTheOthers) {
  ChunkQueue queue(3, 26, 5, 3);  // chunks 3, 8, 13, 18, 23 (the last 3 long); regions {3}, {8, 13}, {18, 23}
  std::vector<int64_t> starts;
  for (int64_t lo, hi; queue.next(lo, hi);) {
    EXPECT_EQ(hi, std::min<int64_t>(lo + 5, 26));
    starts.push_back(lo);
  }
  EXPECT_EQ(starts, (std::vector<int64_t>{3, 8, 13, 18, 23}));
  ChunkQueue more_regions_than_chunks(0, 2, 1, 4);
  int64_t lo = 0, hi = 0, count = 0;
  while (more_regions_than_chunks.next(lo, hi)) ++count;
  EXPECT_EQ(count, 2);
}

TEST_F(ThreadSetting, NonZeroBegin) {
  set_num_threads(2);
  std::atomic<int64_t> sum{0};
  parallel_for(10, 20, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 145);
}

// A worker joins a call by claiming a place while chunks are left (the caller does not wait for one that
// has not): with some work in each chunk, both threads take part.
TEST_F(ThreadSetting, UsesSeveralThreads) {
  set_num_threads(2);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  parallel_chunks(0, 100, 1, 0, [&](ChunkQueue& queue) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    }
    for (int64_t lo, hi; queue.next(lo, hi);) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST_F(ThreadSetting, NestedCallsRunInline) {
  set_num_threads(2);
  std::atomic<int> inner_calls{0};
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    parallel_for(0, 100, 1, [&](int64_t lo, int64_t hi) {
      EXPECT_EQ(lo, 0);
      EXPECT_EQ(hi, 100);
      ++inner_calls;
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
}

TEST_F(ThreadSetting, ExceptionsPropagateToTheCaller) {
  set_num_threads(2);
  EXPECT_THROW(parallel_for(0, 100, 1,
                            [](int64_t lo, int64_t) {
                              if (lo > 0) throw std::runtime_error("boom");
                            }),
               std::runtime_error);
}

TEST_F(ThreadSetting, DefaultCountAppliesUntilTheUserSetsOne) {
  set_default_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2) << "the user's setting wins";
  set_num_threads(0);
  EXPECT_EQ(get_num_threads(), 3);
  set_default_num_threads(0);
  EXPECT_GE(get_num_threads(), 1);
}

// The threads of the calling parallel_for, and whether every item was covered once.
struct Coverage {
  std::set<std::thread::id> threads;
  bool each_item_once = true;
};

Coverage run_and_cover(int64_t n) {
  std::mutex mutex;
  Coverage coverage;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  parallel_chunks(0, n, 1, 1, [&](ChunkQueue& queue) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      coverage.threads.insert(std::this_thread::get_id());
    }
    for (int64_t lo, hi; queue.next(lo, hi);) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // long enough for every thread to join
      for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i)];
    }
  });
  for (auto& h : hits) coverage.each_item_once = coverage.each_item_once && h.load() == 1;
  return coverage;
}

// Forks, runs `child` in the child (its return value is the exit code) and returns the child's exit
// code, or -1 if it did not finish within 30 s (then it is killed): a hang must fail, not block ctest.
template <class Child>
int exit_code_of_forked(const Child& child) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child());
  for (int waited_ms = 0; waited_ms < 30000; waited_ms += 10) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// A child of fork has only the forking thread. With OpenMP's pool, the child's first parallel region
// waited for the parent's threads for ever (a DataLoader worker hung); spatialgrad's pool starts anew.
TEST_F(ThreadSetting, AForkedChildRunsParallelCallsOnItsOwnThreads) {
  set_num_threads(2);
  ASSERT_EQ(run_and_cover(64).threads.size(), 2u) << "the parent's pool is running";
  const int code = exit_code_of_forked([] {
    const Coverage coverage = run_and_cover(64);
    if (!coverage.each_item_once) return 3;
    return coverage.threads.size() == 2 ? 0 : 4;
  });
  EXPECT_EQ(code, 0) << "-1: the child hung; 3: items missed; 4: the child did not use two threads";
  EXPECT_TRUE(run_and_cover(64).each_item_once) << "the parent's pool still works";
}

// Fork while another thread of the parent is inside a parallel call (its pool is busy, its locks held).
TEST_F(ThreadSetting, AForkDuringAnotherThreadsCallLeavesTheChildUsable) {
  set_num_threads(2);
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) run_and_cover(16);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int code = exit_code_of_forked([] { return run_and_cover(64).each_item_once ? 0 : 3; });
  stop = true;
  busy.join();
  EXPECT_EQ(code, 0) << "-1: the child hung";
}

// A worker the scheduler runs late (here held 500 ms after its wake-up, before it takes part) must not
// hold up the caller: the caller takes every chunk, finds them done and returns.
TEST_F(ThreadSetting, ALateWorkerDoesNotHoldUpTheCaller) {
  set_num_threads(2);
  ASSERT_EQ(run_and_cover(64).threads.size(), 2u) << "the pool's worker is running";
  detail::set_worker_delay_for_testing(500000);
  const auto start = std::chrono::steady_clock::now();
  const Coverage coverage = run_and_cover(64);  // about 13 ms of work
  const auto elapsed = std::chrono::steady_clock::now() - start;
  detail::set_worker_delay_for_testing(0);
  EXPECT_TRUE(coverage.each_item_once);
  EXPECT_LT(elapsed, std::chrono::milliseconds(250)) << "the caller waited for the late worker";
  EXPECT_TRUE(run_and_cover(64).each_item_once) << "the pool still works after the late worker arrives";
}

// Executors standing in for a host framework's pool: one thread per task started in reverse order, the
// last task alone on the calling thread, and one that runs nothing (the caller then runs task 0).
class ThreadPerTask final : public Executor {
 public:
  void run(int tasks, const Job& job) noexcept override {
    std::vector<std::thread> threads;
    for (int i = tasks - 1; i >= 0; --i) threads.emplace_back([&job, i] { job(i); });
    for (auto& thread : threads) thread.join();
    calls += 1;
  }
  int calls = 0;
};

class LastTaskOnly final : public Executor {
 public:
  void run(int tasks, const Job& job) noexcept override {
    job(tasks - 1);
    calls += 1;
  }
  int calls = 0;
};

class RunsNothing final : public Executor {
 public:
  void run(int, const Job&) noexcept override { calls += 1; }
  int calls = 0;
};

// Sets an executor for one scope.
class ExecutorScope {
 public:
  explicit ExecutorScope(Executor& executor) { set_executor(&executor); }
  ~ExecutorScope() { set_executor(nullptr); }
  ExecutorScope(const ExecutorScope&) = delete;
  ExecutorScope& operator=(const ExecutorScope&) = delete;
};

// grid_sampler_2d forward and backward (bilinear, several batches and tasks per call), all outputs.
std::vector<float> grid_sample_both_ways() {
  auto x = testing::random_tensor<float>({3, 9, 13, 17}, 31);
  auto grid = testing::random_tensor<float>({3, 40, 37, 2}, 32, -1.2, 1.2);
  auto g = testing::random_tensor<float>({3, 9, 40, 37}, 33);
  testing::OwnedTensor<float> y({3, 9, 40, 37}), gi(x.view.sizes()), gg(grid.view.sizes());
  grid_sampler_2d(x.view, grid.view, y.view, GridSampler2dParams{});
  grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, GridSampler2dParams{});
  return testing::concatenated({&y, &gi, &gg});
}

TEST_F(ThreadSetting, ACustomExecutorRunsTheKernelsWithTheSameBits) {
  set_num_threads(1);
  const std::vector<float> expected = grid_sample_both_ways();
  ThreadPerTask per_task;
  LastTaskOnly last_only;
  RunsNothing nothing;
  for (Executor* executor : std::vector<Executor*>{&per_task, &last_only, &nothing}) {
    const ExecutorScope scope(*executor);
    EXPECT_EQ(&get_executor(), executor);
    for (int threads : {2, 3, 4}) {
      set_num_threads(threads);
      EXPECT_EQ(grid_sample_both_ways(), expected) << "threads " << threads;
    }
  }
  EXPECT_GT(per_task.calls, 0);
  EXPECT_GT(last_only.calls, 0);
  EXPECT_GT(nothing.calls, 0);
  EXPECT_NE(&get_executor(), &per_task) << "nullptr restores the pool";
}

// A task on the executor's thread runs inside a parallel region: it knows its index, and a nested call
// runs inline rather than going to the executor again.
TEST_F(ThreadSetting, AnExecutorsTasksRunInAParallelRegion) {
  ThreadPerTask per_task;
  const ExecutorScope scope(per_task);
  set_num_threads(3);
  std::mutex mutex;
  std::set<int> indices;
  std::atomic<int> inner_calls{0};
  parallel_chunks(0, 3, 1, 1, [&](ChunkQueue& queue) {
    EXPECT_TRUE(detail::in_parallel_region());
    {
      std::lock_guard<std::mutex> lock(mutex);
      indices.insert(detail::current_thread_index());
    }
    for (int64_t lo, hi; queue.next(lo, hi);) parallel_for(0, 100, 1, [&](int64_t, int64_t) { ++inner_calls; });
  });
  EXPECT_EQ(indices, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(inner_calls.load(), 3);
  EXPECT_EQ(per_task.calls, 1) << "nested calls do not reach the executor";
  EXPECT_FALSE(detail::in_parallel_region());
}

// A scoped executor (a host framework's pool for one call) applies to its thread only, with its own task
// count, over set_executor and set_num_threads; scopes nest and restore what was there; the bits stay.
TEST_F(ThreadSetting, AScopedExecutorRunsThisThreadsCallsOnlyWithTheSameBits) {
  set_num_threads(1);
  const std::vector<float> expected = grid_sample_both_ways();
  ThreadPerTask per_task;
  LastTaskOnly last_only;
  {
    const ScopedExecutor outer(per_task, 3);
    EXPECT_EQ(&get_executor(), &per_task);
    EXPECT_EQ(get_num_threads(), 3) << "the scope's count, not set_num_threads'";
    EXPECT_EQ(grid_sample_both_ways(), expected);
    std::thread([&] {
      EXPECT_NE(&get_executor(), &per_task) << "another thread keeps the process-wide executor";
      EXPECT_EQ(get_num_threads(), 1);
    }).join();
    {
      const ScopedExecutor inner(last_only, 2);
      EXPECT_EQ(&get_executor(), &last_only);
      EXPECT_EQ(get_num_threads(), 2);
      EXPECT_EQ(grid_sample_both_ways(), expected);
    }
    EXPECT_EQ(&get_executor(), &per_task) << "the inner scope restored the outer one";
    EXPECT_EQ(get_num_threads(), 3);
  }
  EXPECT_NE(&get_executor(), &per_task);
  EXPECT_EQ(get_num_threads(), 1);
  EXPECT_GT(per_task.calls, 0);
  EXPECT_GT(last_only.calls, 0);
}

// A scope with no count of its own (<= 0) keeps set_num_threads'; a scope wins over set_executor.
TEST_F(ThreadSetting, AScopedExecutorWithoutACountFollowsSetNumThreads) {
  ThreadPerTask process_wide;
  LastTaskOnly scoped;
  const ExecutorScope process_scope(process_wide);
  set_num_threads(4);
  {
    const ScopedExecutor scope(scoped, 0);
    EXPECT_EQ(&get_executor(), &scoped);
    EXPECT_EQ(get_num_threads(), 4);
  }
  EXPECT_EQ(&get_executor(), &process_wide);
}

// Two application threads calling at once: the second does not wait for the first's pool, it runs
// its call on its own thread; both cover their ranges exactly once.
TEST_F(ThreadSetting, ConcurrentCallersBothComplete) {
  set_num_threads(2);
  std::vector<std::thread> callers;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int round = 0; round < 20; ++round) good += run_and_cover(32).each_item_once ? 1 : 0;
    });
  }
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(good.load(), 80);
}

}  // namespace
}  // namespace spatialgrad

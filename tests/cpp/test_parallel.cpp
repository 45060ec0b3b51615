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

#include "spatialgrad/parallel.h"

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

TEST_F(ThreadSetting, UsesSeveralThreads) {
  set_num_threads(2);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  parallel_chunks(0, 100, 1, 0, [&](ChunkQueue& queue) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    }
    for (int64_t lo, hi; queue.next(lo, hi);) {
    }
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

}  // namespace
}  // namespace spatialgrad

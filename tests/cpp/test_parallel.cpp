#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
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
          ++calls;
          for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i)];
        });
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
        EXPECT_LE(calls.load(), threads);
        if (n > 0 && n <= grain) EXPECT_EQ(calls.load(), 1) << "a small range must run inline";
      }
    }
  }
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
  std::atomic<int> chunks{0};
  parallel_for(0, 100, 1, [&](int64_t, int64_t) { ++chunks; });
  EXPECT_EQ(chunks.load(), 2);
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

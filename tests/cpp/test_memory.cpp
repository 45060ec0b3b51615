// The memory cache (spatialgrad/memory.h): blocks come back newest first and only at their exact size,
// blocks in use are never handed out twice, small blocks are not kept, and every block is aligned.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "spatialgrad/memory.h"

namespace spatialgrad {
namespace {

constexpr size_t kSize = size_t(3) << 20;  // above kMinCachedBytes, below the default limit

bool aligned(const void* p, size_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

TEST(BlockCache, ReleasedBlocksComeBackNewestFirstAtTheirSize) {
  clear_memory_cache();
  void* a = acquire_block(kSize);
  void* b = acquire_block(kSize);
  ASSERT_NE(a, b);
  std::memset(a, 1, kSize);  // usable over their whole size (AddressSanitizer checks)
  std::memset(b, 2, kSize);
  release_block(a, kSize);
  release_block(b, kSize);
  void* c = acquire_block(kSize + 64);  // another size: a new block
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(acquire_block(kSize), b);  // newest first
  EXPECT_EQ(acquire_block(kSize), a);
  release_block(a, kSize);
  release_block(b, kSize);
  release_block(c, kSize + 64);
  clear_memory_cache();
}

TEST(BlockCache, BlocksInUseAreNeverHandedOutTwice) {
  clear_memory_cache();
  std::set<void*> live;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(live.insert(acquire_block(kSize)).second);
  for (void* p : live) release_block(p, kSize);
  std::set<void*> again;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(again.insert(acquire_block(kSize)).second);
  EXPECT_EQ(again, live);  // all six kept and reused
  for (void* p : again) release_block(p, kSize);
  clear_memory_cache();
}

TEST(BlockCache, AlignmentAndSmallBlocks) {
  for (size_t bytes : {size_t(4), size_t(1000), kMinCachedBytes - 1, kMinCachedBytes, kSize, size_t(33) << 20}) {
    void* p = acquire_block(bytes);
    EXPECT_TRUE(aligned(p, 64)) << bytes;
    if (bytes >= (size_t(4) << 20)) EXPECT_TRUE(aligned(p, size_t(2) << 20)) << bytes;
    std::memset(p, 0, bytes);
    release_block(p, bytes);
  }
  clear_memory_cache();
}

TEST(BlockCache, ConcurrentUse) {
  clear_memory_cache();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 50; ++i) {
        auto* p = static_cast<unsigned char*>(acquire_block(kSize));
        std::memset(p, t, kSize);
        for (size_t at = 0; at < kSize; at += 4096) ASSERT_EQ(p[at], t);  // nobody else wrote it meanwhile
        release_block(p, kSize);
      }
    });
  }
  for (auto& th : threads) th.join();
  clear_memory_cache();
}

}  // namespace
}  // namespace spatialgrad

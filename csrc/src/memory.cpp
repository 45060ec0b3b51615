#include "spatialgrad/memory.h"

#include <pthread.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace spatialgrad {
namespace {

constexpr size_t kHugeAlignment = size_t(2) << 20;

size_t limit_from_environment() {
  const char* text = std::getenv("SPATIALGRAD_MEMORY_CACHE_MB");
  if (text == nullptr || *text == '\0') return size_t(256) << 20;
  try {
    const long long megabytes = std::stoll(text);
    return megabytes > 0 ? static_cast<size_t>(megabytes) << 20 : 0;
  } catch (const std::exception&) {
    return size_t(256) << 20;  // not a number: the default, as for an unset variable
  }
}

size_t alignment_for(size_t bytes) { return bytes >= 2 * kHugeAlignment ? kHugeAlignment : 64; }

void* allocate(size_t bytes) {
  const size_t alignment = alignment_for(bytes);
  void* block = nullptr;
  if (posix_memalign(&block, alignment, bytes) != 0) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Fewer page faults on first use and fewer TLB misses; a hint the kernel may ignore.
  if (alignment == kHugeAlignment) madvise(block, bytes / kHugeAlignment * kHugeAlignment, MADV_HUGEPAGE);
#endif
  return block;
}

class Cache {
 public:
  // A fork while another thread holds the lock would leave it held for ever in the child: fork waits
  // for the lock, and both processes release it.
  Cache() : limit_(limit_from_environment()) { pthread_atfork(&lock_for_fork, &unlock_after_fork, &unlock_after_fork); }

  void* acquire(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Newest first: its lines are the likeliest still to be in the caches.
      for (size_t i = blocks_.size(); i-- > 0;) {
        if (blocks_[i].first == bytes) {
          void* block = blocks_[i].second;
          blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
          cached_ -= bytes;
          return block;
        }
      }
    }
    return allocate(bytes);
  }

  void release(void* block, size_t bytes) {
    std::vector<void*> to_free;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (bytes > limit_) {
        to_free.push_back(block);
      } else {
        blocks_.emplace_back(bytes, block);
        cached_ += bytes;
        while (cached_ > limit_) {  // oldest first
          to_free.push_back(blocks_.front().second);
          cached_ -= blocks_.front().first;
          blocks_.erase(blocks_.begin());
        }
      }
    }
    for (void* p : to_free) std::free(p);
  }

  void clear() {
    std::vector<std::pair<size_t, void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(blocks_);
      cached_ = 0;
    }
    for (const auto& entry : blocks) std::free(entry.second);
  }

 private:
  static void lock_for_fork();
  static void unlock_after_fork();

  std::mutex mutex_;
  const size_t limit_;
  size_t cached_ = 0;
  std::vector<std::pair<size_t, void*>> blocks_;  // (bytes, block), oldest first
};

// Never destroyed: arrays may die (and release their blocks) during interpreter shutdown.
Cache& cache() {
  static Cache* instance = new Cache();
  return *instance;
}

void Cache::lock_for_fork() { cache().mutex_.lock(); }
void Cache::unlock_after_fork() { cache().mutex_.unlock(); }

}  // namespace

void* acquire_block(size_t bytes) { return bytes < kMinCachedBytes ? allocate(bytes) : cache().acquire(bytes); }

void release_block(void* block, size_t bytes) {
  if (bytes < kMinCachedBytes) {
    std::free(block);
  } else {
    cache().release(block, bytes);
  }
}

void clear_memory_cache() { cache().clear(); }

}  // namespace spatialgrad

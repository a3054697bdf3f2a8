// A cache of freed host blocks, the CPU's counterpart of a CUDA caching allocator.
//
//   host_cache_stats()            bytes and blocks cached now, hits, misses, evictions
//   set_host_cache_limit(bytes)   the most bytes kept (0 turns the cache off and empties it)
//   empty_host_cache()            gives every cached block back to the system
//
// Why: every op of a prompt returns a fresh tensor, and glibc hands blocks of more than its mmap
// threshold straight back to the kernel when they are freed; the next op's output then faults
// its pages in again, one 4 KiB page at a time. In a warm F16 prompt that was about a tenth of
// the time. Keeping freed blocks for the next request of the same size turns that into a reuse
// of pages that are already mapped.
//
// Rules:
// - Only blocks of at least `min_block` bytes are cached (smaller ones are cheap in glibc's arenas),
//   rounded up to whole 4 KiB pages; a request reuses a block of exactly its rounded size, the
//   most recently freed first (its pages are the likeliest to be in cache). When a block does not
//   fit under the cap, the oldest cached blocks are given back first.
// - The default cap is 256 MiB; `ACCEL_HOST_CACHE_BYTES` sets another ("0" turns it off, "1GiB",
//   digits as bytes). Under AddressSanitizer the default is off, so that a use after free is still
//   reported; when turned on there, cached blocks are poisoned.
// - Cached bytes are not allocated bytes: memory_stats(cpu) counts what tensors hold, as
//   torch.cuda.memory_allocated does. Under a cpu memory limit the cache keeps held + cached within
//   the limit, so that the limit remains a promise about the process's memory: it gives blocks
//   back before an allocation could take the sum past it, and keeps a freed block only when it fits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/env.hpp"
#include "accel/core/memory_stats.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ACCEL_HOST_CACHE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ACCEL_HOST_CACHE_ASAN 1
#endif
#endif
#if defined(ACCEL_HOST_CACHE_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace accel {

/// Host allocations are aligned for the widest SIMD load.
inline constexpr std::size_t host_alignment = 64;

/// A snapshot of the host block cache.
struct HostCacheStats {
  std::size_t cached_bytes = 0;   ///< bytes in cached blocks now
  std::size_t cached_blocks = 0;  ///< blocks cached now
  std::size_t limit = 0;          ///< the cap (0: off)
  std::size_t hits = 0;           ///< requests served from the cache
  std::size_t misses = 0;         ///< cacheable requests that took a fresh block
  std::size_t evictions = 0;      ///< cached blocks given back to the system
};

namespace detail {

class HostBlockCache {
 public:
  static constexpr std::size_t min_block = std::size_t{64} << 10;
  static constexpr std::size_t page = 4096;
  static constexpr std::size_t default_limit = std::size_t{256} << 20;

  explicit HostBlockCache(std::size_t limit) : limit_(limit) {}
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  /// The bytes actually taken for a request of `nbytes`.
  static std::size_t block_size(std::size_t nbytes) noexcept {
    if (nbytes < min_block) return nbytes ? nbytes : 1;
    return (nbytes + page - 1) / page * page;
  }

  /// A block of at least `nbytes`, 64-byte aligned, or null when the system has none. `fresh` says
  /// whether its pages came from the system just now (and so are not yet touched).
  void* allocate(std::size_t nbytes, bool& fresh) noexcept {
    const std::size_t size = block_size(nbytes);
    fresh = true;
    if (size >= min_block) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (limit_ != 0) {
        for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
          if (it->size != size) continue;
          void* p = it->ptr;
          blocks_.erase(std::next(it).base());
          cached_ -= size;
          ++hits_;
          unpoison(p, size);
          fresh = false;
          return p;
        }
        ++misses_;
      }
    }
    return ::operator new(size, std::align_val_t(host_alignment), std::nothrow);
  }

  /// Takes back a block from allocate(nbytes). It is kept when the cache is on and it fits both
  /// the cap and `room` (the bytes the caller's memory limit still allows), else freed.
  void deallocate(void* p, std::size_t nbytes, std::size_t room) noexcept {
    const std::size_t size = block_size(nbytes);
    if (size >= min_block) {
      std::lock_guard<std::mutex> lock(mutex_);
      const std::size_t cap = std::min(limit_, room);
      if (size <= cap) {
        while (cached_ + size > cap) evict_oldest();
        poison(p, size);
        blocks_.push_back({p, size});
        cached_ += size;
        return;
      }
    }
    ::operator delete(p, std::align_val_t(host_alignment));
  }

  /// Gives back the oldest blocks until `held + cached <= limit` for a counter with a limit.
  void fit(const MemoryCounter& counter) noexcept {
    const std::size_t limit = counter.limit();
    if (limit == MemoryCounter::unlimited) return;
    std::lock_guard<std::mutex> lock(mutex_);
    while (!blocks_.empty() && counter.stats().allocated_bytes + cached_ > limit) evict_oldest();
  }

  void set_limit(std::size_t bytes) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    while (cached_ > limit_) evict_oldest();
  }

  void clear() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!blocks_.empty()) evict_oldest();
  }

  HostCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_, blocks_.size(), limit_, hits_, misses_, evictions_};
  }

 private:
  struct Block {
    void* ptr;
    std::size_t size;
  };

  void evict_oldest() noexcept {
    const Block b = blocks_.front();
    blocks_.erase(blocks_.begin());
    cached_ -= b.size;
    ++evictions_;
    unpoison(b.ptr, b.size);
    ::operator delete(b.ptr, std::align_val_t(host_alignment));
  }

  static void poison(void* p, std::size_t n) noexcept {
#if defined(ACCEL_HOST_CACHE_ASAN)
    ASAN_POISON_MEMORY_REGION(p, n);
#else
    (void)p;
    (void)n;
#endif
  }
  static void unpoison(void* p, std::size_t n) noexcept {
#if defined(ACCEL_HOST_CACHE_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
    (void)p;
    (void)n;
#endif
  }

  mutable std::mutex mutex_;
  std::vector<Block> blocks_;  // oldest first
  std::size_t cached_ = 0;
  std::size_t limit_;
  std::size_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

/// The cap from ACCEL_HOST_CACHE_BYTES, else the default (off under AddressSanitizer). A value
/// that is not a size is an error at the first host allocation, not a silent default.
inline std::size_t host_cache_limit_from_env() {
  if (const auto v = get_env("ACCEL_HOST_CACHE_BYTES")) {
    return static_cast<std::size_t>(parse_byte_size("ACCEL_HOST_CACHE_BYTES", *v).floor_bytes());
  }
#if defined(ACCEL_HOST_CACHE_ASAN)
  return 0;
#else
  return HostBlockCache::default_limit;
#endif
}

/// The process's cache. Never destroyed: storages freed during static destruction still give
/// their blocks back through it.
inline HostBlockCache& host_block_cache() {
  static HostBlockCache* cache = new HostBlockCache(host_cache_limit_from_env());
  return *cache;
}

}  // namespace detail

/// The host block cache's counters.
inline HostCacheStats host_cache_stats() { return detail::host_block_cache().stats(); }

/// Caps the bytes the host block cache keeps; 0 turns it off. Blocks over the new cap are given
/// back at once.
inline void set_host_cache_limit(std::size_t bytes) { detail::host_block_cache().set_limit(bytes); }

/// Gives every cached host block back to the system (torch.cuda.empty_cache for the CPU).
inline void empty_host_cache() { detail::host_block_cache().clear(); }

}  // namespace accel

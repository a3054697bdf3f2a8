// Per-device byte counters and optional budgets, kept by every allocator.
//
//   memory_stats(device)           current / peak bytes, allocation counts, budget
//   reset_peak_memory_stats(device)
//   set_memory_limit(device, n)    allocations that would exceed n bytes throw OutOfMemoryError
//   peak_resident_bytes()          the process's peak resident set (Linux VmHWM), 0 elsewhere
//
// Tests read these to prove that a device never held more than its budget. Memory-mapped file
// regions are not allocations (the page cache owns them) and are counted apart, as mapped bytes;
// the process's peak resident set counts what the allocators cannot see (mapped pages touched,
// memory of other libraries).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <fstream>
#include <string>
#include <limits>
#include <optional>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"

namespace accel {

/// A snapshot of one device's counters.
struct MemoryStats {
  std::size_t allocated_bytes = 0;       ///< bytes held now
  std::size_t peak_allocated_bytes = 0;  ///< most bytes held at once since the last reset
  std::size_t num_allocs = 0;
  std::size_t num_frees = 0;
  std::size_t mapped_bytes = 0;  ///< bytes of file mappings alive now (cpu only)
  std::optional<std::size_t> limit;
};

namespace detail {

/// Lock-free counter with a budget: `reserve` fails instead of exceeding the limit.
class MemoryCounter {
 public:
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

  bool reserve(std::size_t n) noexcept {
    const std::size_t lim = limit_.load(std::memory_order_relaxed);
    std::size_t cur = current_.load(std::memory_order_relaxed);
    do {
      if (n > lim || cur > lim - n) return false;
    } while (!current_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
    const std::size_t now = cur + n;
    std::size_t pk = peak_.load(std::memory_order_relaxed);
    while (now > pk && !peak_.compare_exchange_weak(pk, now, std::memory_order_relaxed)) {
    }
    allocs_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void release(std::size_t n) noexcept {
    current_.fetch_sub(n, std::memory_order_relaxed);
    frees_.fetch_add(1, std::memory_order_relaxed);
  }
  void map(std::size_t n) noexcept { mapped_.fetch_add(n, std::memory_order_relaxed); }
  void unmap(std::size_t n) noexcept { mapped_.fetch_sub(n, std::memory_order_relaxed); }
  void reset_peak() noexcept { peak_.store(current_.load()); }
  void set_limit(std::optional<std::size_t> l) noexcept { limit_.store(l ? *l : unlimited); }

  MemoryStats stats() const noexcept {
    MemoryStats s;
    s.allocated_bytes = current_.load();
    s.peak_allocated_bytes = peak_.load();
    s.num_allocs = allocs_.load();
    s.num_frees = frees_.load();
    s.mapped_bytes = mapped_.load();
    const std::size_t l = limit_.load();
    if (l != unlimited) s.limit = l;
    return s;
  }
  std::size_t limit() const noexcept { return limit_.load(); }

 private:
  std::atomic<std::size_t> current_{0}, peak_{0}, allocs_{0}, frees_{0}, mapped_{0};
  std::atomic<std::size_t> limit_{unlimited};
};

inline constexpr int max_cuda_devices = 64;

/// The counter of a device; meta has none (it never holds bytes).
inline MemoryCounter& memory_counter(Device d) {
  static MemoryCounter cpu;
  static std::array<MemoryCounter, max_cuda_devices> cuda;
  if (d.is_cpu()) return cpu;
  if (d.is_cuda() && d.index() < max_cuda_devices) return cuda[static_cast<std::size_t>(d.index())];
  throw DeviceError("no memory counter for device " + d.str());
}

/// Pinned host memory is also cpu memory; this counter tracks the pinned share alone.
inline MemoryCounter& pinned_memory_counter() {
  static MemoryCounter pinned;
  return pinned;
}

}  // namespace detail

/// Counters of `d` (meta: all zero).
inline MemoryStats memory_stats(Device d) {
  if (d.is_meta()) return {};
  return detail::memory_counter(d).stats();
}

/// Counters of the pinned (page-locked) share of host memory.
inline MemoryStats pinned_memory_stats() { return detail::pinned_memory_counter().stats(); }

/// Sets the peak of `d` to its current value.
inline void reset_peak_memory_stats(Device d) {
  if (!d.is_meta()) detail::memory_counter(d).reset_peak();
}

/// Caps the bytes `d` may hold (nullopt removes the cap). Exceeding it throws OutOfMemoryError.
inline void set_memory_limit(Device d, std::optional<std::size_t> bytes) {
  if (d.is_meta()) throw DeviceError("the meta device holds no memory and takes no limit");
  detail::memory_counter(d).set_limit(bytes);
}

/// The most bytes this process has held resident at once (VmHWM of /proc/self/status); 0 where
/// that is not readable (not Linux).
inline std::size_t peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmHWM:")) return static_cast<std::size_t>(std::stoull(line.substr(6))) * 1024;
  }
  return 0;
}

/// RAII: a memory limit for the scope, restoring the previous one at exit.
class ScopedMemoryLimit {
 public:
  ScopedMemoryLimit(Device d, std::size_t bytes) : device_(d), previous_(memory_stats(d).limit) {
    set_memory_limit(d, bytes);
  }
  ~ScopedMemoryLimit() { set_memory_limit(device_, previous_); }
  ScopedMemoryLimit(const ScopedMemoryLimit&) = delete;
  ScopedMemoryLimit& operator=(const ScopedMemoryLimit&) = delete;

 private:
  Device device_;
  std::optional<std::size_t> previous_;
};

}  // namespace accel

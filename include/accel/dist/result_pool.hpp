// Host blocks for the fresh results of reduce and gather, recycled once their caller has let go:
//
//   detail::result_pool().empty(shape, dtype)   a contiguous CPU tensor, on a recycled block when one
//                                               of the same size is idle, else on a new one
//   release_cached_results()                    frees the idle blocks now
//
// Why: reduce and gather return new tensors, as Accelerate's do, and a new host block of a few MiB
// comes from mmap, so every call paid one page fault per 4 KiB (per 2 MiB with huge pages) of its
// result before a byte arrived: against MPI_Allgather into a buffer kept across calls, a gather of
// 16 MiB per process ran at half the rate. A loop that reduces or gathers each step now writes into
// the block its previous step's result held, as a program calling MPI directly would.
//
// The rules, so that memory stays accounted for:
// - A block is reused only when nothing else holds it (its storage's use count is the pool's one),
//   so a result the caller keeps, or a view of it, is never overwritten.
// - The pool remembers the last `kept_results` results of at least `min_bytes`; an idle one among
//   them stays allocated, and counted in memory_stats(cpu), until a later result takes it, it falls
//   out of the last eight, or release_cached_results() runs.
// - Under a CPU budget (set_memory_limit on the cpu) nothing is kept: an idle block must never be
//   the reason another allocation fails. Blocks kept before the budget was set stay until the next
//   reduce / gather (which drops them) or release_cached_results(): call it when setting a budget
//   after collectives have run.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"

namespace accel::dist {

namespace detail {

class ResultPool {
 public:
  // The cpu counter first, so that it outlives the pool's blocks at exit (statics end in reverse).
  ResultPool() { (void)accel::detail::memory_counter(Device::cpu()); }

  /// How many recent results the pool remembers.
  static constexpr std::size_t kept_results = 8;
  /// Smaller results are not kept: the system allocator reuses small blocks without faults.
  static constexpr std::size_t min_bytes = std::size_t{64} << 10;

  /// A contiguous CPU tensor of `shape` and `dtype`, uninitialised.
  Tensor empty(const Shape& shape, DType dtype) {
    const std::size_t bytes = storage_nbytes(dtype, static_cast<std::size_t>(shape.numel()));
    if (bytes < min_bytes) return Tensor::empty(shape, dtype, Device::cpu());
    std::lock_guard lock(mutex_);
    if (memory_stats(Device::cpu()).limit) {
      kept_.clear();
      return Tensor::empty(shape, dtype, Device::cpu());
    }
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->nbytes() != bytes || it->use_count() != 1) continue;
      Storage block = std::move(*it);
      kept_.erase(it);
      kept_.push_back(block);
      return Tensor::from_storage(std::move(block), dtype, shape);
    }
    Tensor fresh = Tensor::empty(shape, dtype, Device::cpu());
    kept_.push_back(fresh.storage());
    if (kept_.size() > kept_results) kept_.pop_front();
    return fresh;
  }

  /// Forgets every block; the idle ones are freed.
  void clear() {
    std::lock_guard lock(mutex_);
    kept_.clear();
  }

 private:
  std::mutex mutex_;
  std::deque<Storage> kept_;  ///< oldest first
};

/// The process's pool.
inline ResultPool& result_pool() {
  static ResultPool pool;
  return pool;
}

}  // namespace detail

/// Frees the host blocks that earlier reduce / gather results left idle (dist/result_pool.hpp);
/// results still held are not touched.
inline void release_cached_results() { detail::result_pool().clear(); }

}  // namespace accel::dist

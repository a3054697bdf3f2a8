// find_executable_batch_size(function, starting_batch_size = 128, reduce_batch_size_fn = accelerate_batch_size_rule{})
//   -> ExecutableBatchSize: call(args...) runs function(batch_size, args...), retrying with a smaller
//      batch size after every out-of-memory failure
// should_reduce_batch_size(exception) -> bool        whether a failure is one that a smaller batch may avoid
// accelerate_batch_size_rule, halve_batch_size        Accelerate's two rules: int(b * 0.9) (v1.9 on), b / 2 (before)
//
// The wrapper remembers the batch size, as Accelerate's closure does: a call starts from the size
// the last retry settled on, not from starting_batch_size, so an epoch loop pays for the search
// once. Copies of the wrapper share that size (a Python closure is shared, not copied); they update
// it atomically, and it only ever goes down. A failed attempt's memory is released by unwinding
// before the retry. When the size reaches zero the call throws OutOfMemoryError "No executable
// batch size found, reached zero", and so does every later call, without running the function.
//
// reduce_batch_size_fn takes the failed size and returns the next one, or, as Accelerate's, takes
// nothing and returns the next one; either way the next size must be smaller.
//
// Differences from Accelerate:
// - Failures retried: accel::OutOfMemoryError, std::bad_alloc, and foreign exceptions (libtorch's,
//   say) whose what() holds one of the messages Accelerate's should_reduce_batch_size looks for.
//   Other accel errors are never retried, whatever their text: their type says what they are.
// - Reaching zero throws OutOfMemoryError carrying the last failure's device and size (Accelerate:
//   RuntimeError). A custom rule that returns a value not smaller than the failed size is a
//   ValueError (Accelerate loops for ever), and one that returns a negative size counts as zero
//   (Accelerate calls the function with it). starting_batch_size <= 0 is a ValueError when wrapping
//   (Accelerate: RuntimeError on the first call for 0, a call with the negative size otherwise).
// - No device cache is emptied and no garbage collector runs between attempts: accel's allocators
//   give memory back when the last tensor holding it goes, which unwinding does.
// - Accelerate's guard against passing the batch size by hand (a TypeError from inspecting the
//   signature) is the compiler's: the call must match function(batch_size, args...). There is no
//   decorator-factory form, so reduce_batch_size_fn is never lost the way
//   @find_executable_batch_size(reduce_batch_size_fn=...) loses it in Accelerate.
// - Not here: release_memory and clear_device_cache, for the same reason: nothing is cached.
#pragma once

#include <array>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "accel/core/errors.hpp"

namespace accel::utils {

/// Accelerate's rule since v1.9 (the default): int(batch_size * 0.9), so 128 -> 115 -> 103 -> ...
/// -> 10 -> 9 -> 8 -> ... -> 1 -> 0. Small steps keep the size close to the largest that fits.
struct accelerate_batch_size_rule {
  std::int64_t operator()(std::int64_t batch_size) const noexcept {
    return static_cast<std::int64_t>(static_cast<double>(batch_size) * 0.9);
  }
};

/// Accelerate's rule up to v1.8 (v0.27.2 included): batch_size / 2. Fewer retries, but it may settle
/// on half of what fits.
struct halve_batch_size {
  std::int64_t operator()(std::int64_t batch_size) const noexcept { return batch_size / 2; }
};

namespace detail {
/// The messages Accelerate's should_reduce_batch_size recognises in a RuntimeError.
inline constexpr std::array<std::string_view, 4> oom_messages{
    " out of memory.",                                    // CUDA, HIP, XPU
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",           // cuDNN with too large an input
    "DefaultCPUAllocator: can't allocate memory",         // torch's CPU allocator
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",  // HPU
};
}  // namespace detail

/// True when `e` is a failure a smaller batch may avoid: an accel::OutOfMemoryError, a
/// std::bad_alloc, or an exception from outside accel whose what() holds one of Accelerate's
/// out-of-memory messages. Other accel errors are false whatever their text.
inline bool should_reduce_batch_size(const std::exception& e) noexcept {
  if (dynamic_cast<const OutOfMemoryError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e)) return true;
  if (dynamic_cast<const Error*>(&e)) return false;
  const std::string_view what = e.what();
  for (const std::string_view m : detail::oom_messages) {
    if (what.find(m) != std::string_view::npos) return true;
  }
  return false;
}

/// A rule for the next batch size: called with the failed size, or with nothing (Accelerate's form).
template <class R>
concept BatchSizeReducer = std::is_invocable_r_v<std::int64_t, R&, std::int64_t> || std::is_invocable_r_v<std::int64_t, R&>;

/// What find_executable_batch_size returns: calls function(batch_size, args...) with the remembered
/// batch size, lowering it after each out-of-memory failure. Copies share the remembered size.
template <class F, class Reduce>
class ExecutableBatchSize {
  static_assert(BatchSizeReducer<Reduce>,
                "find_executable_batch_size: reduce_batch_size_fn must be callable as fn(batch_size) or fn() "
                "and return the next batch size");

 public:
  ExecutableBatchSize(F function, std::int64_t starting_batch_size, Reduce reduce)
      : function_(std::move(function)),
        reduce_(std::move(reduce)),
        starting_batch_size_(starting_batch_size),
        batch_size_(std::make_shared<std::atomic<std::int64_t>>(starting_batch_size)) {
    if (starting_batch_size <= 0) {
      throw ValueError("find_executable_batch_size: starting_batch_size must be > 0, got " +
                       std::to_string(starting_batch_size));
    }
  }

  /// Runs function(batch_size, args...) from the remembered size down until it succeeds; args are
  /// passed as lvalues, since a retry needs them again. Failures that should_reduce_batch_size
  /// rejects propagate unchanged (the size lowered so far stays lowered, as in Accelerate).
  template <class... Args>
  std::invoke_result_t<F&, std::int64_t, Args&...> operator()(Args&&... args) {
    std::optional<OutOfMemoryError> last;
    std::int64_t batch_size = batch_size_->load();
    for (;;) {
      if (batch_size <= 0) throw reached_zero(last);
      try {
        return function_(batch_size, args...);
      } catch (const OutOfMemoryError& e) {
        last.emplace(e);
      } catch (const std::bad_alloc&) {
        last.emplace("cpu", 0, "std::bad_alloc at batch size " + std::to_string(batch_size));
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        if (!should_reduce_batch_size(e)) throw;
        last.emplace("unknown device", 0, e.what());
      }
      const std::int64_t next = reduce(batch_size);
      if (next >= batch_size) {
        throw ValueError("find_executable_batch_size: reduce_batch_size_fn returned " + std::to_string(next) +
                         " after a failure at batch size " + std::to_string(batch_size) +
                         "; it must return a smaller value");
      }
      batch_size = lower_to(next < 0 ? 0 : next);
    }
  }

  /// The batch size the next call starts from (0 once the search has failed).
  std::int64_t batch_size() const noexcept { return batch_size_->load(); }
  std::int64_t starting_batch_size() const noexcept { return starting_batch_size_; }

 private:
  std::int64_t reduce(std::int64_t batch_size) {
    if constexpr (std::is_invocable_r_v<std::int64_t, Reduce&, std::int64_t>) {
      return static_cast<std::int64_t>(reduce_(batch_size));
    } else {
      return static_cast<std::int64_t>(reduce_());
    }
  }

  /// Stores min(shared, next) and returns it: concurrent callers only ever lower the size, and a
  /// caller that finds it already lower continues from there, as one closure variable would.
  std::int64_t lower_to(std::int64_t next) noexcept {
    std::int64_t current = batch_size_->load();
    while (next < current && !batch_size_->compare_exchange_weak(current, next)) {
    }
    return next < current ? next : current;
  }

  OutOfMemoryError reached_zero(const std::optional<OutOfMemoryError>& last) const {
    const std::string when = last ? std::string(" after starting at ") : std::string(" in an earlier call starting at ");
    return OutOfMemoryError(last ? last->device() : std::string("unknown device"), last ? last->requested_bytes() : 0,
                            "No executable batch size found, reached zero" + when +
                                std::to_string(starting_batch_size_) + (last ? "; last failure: " + std::string(last->what()) : ""));
  }

  F function_;
  Reduce reduce_;
  std::int64_t starting_batch_size_;
  std::shared_ptr<std::atomic<std::int64_t>> batch_size_;
};

/// Wraps `function(batch_size, args...)` so that out-of-memory failures retry with a smaller batch
/// size, remembered across calls (see the header). ValueError for starting_batch_size <= 0.
template <class F, class Reduce = accelerate_batch_size_rule>
ExecutableBatchSize<F, Reduce> find_executable_batch_size(F function, std::int64_t starting_batch_size = 128,
                                                          Reduce reduce_batch_size_fn = {}) {
  return ExecutableBatchSize<F, Reduce>(std::move(function), starting_batch_size, std::move(reduce_batch_size_fn));
}

}  // namespace accel::utils

namespace accel {
using utils::find_executable_batch_size, utils::should_reduce_batch_size;
}  // namespace accel

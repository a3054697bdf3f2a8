// find_executable_batch_size(function, starting_batch_size = 128, reduce = halve_batch_size{})
//   -> a callable: call(args...) runs function(batch_size, args...), retrying with a smaller batch
//      size after every accel::OutOfMemoryError or std::bad_alloc (converted to OutOfMemoryError)
//
// The default halves; accelerate_batch_size_rule{} is Accelerate's int(batch_size * 0.9). Memory
// held by a failed attempt is released by unwinding before the retry. When the batch size reaches
// zero the last OutOfMemoryError is rethrown with "No executable batch size found, reached zero".
#pragma once

#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "accel/core/errors.hpp"

namespace accel::utils {

/// batch_size / 2.
struct halve_batch_size {
  std::int64_t operator()(std::int64_t batch_size) const noexcept { return batch_size / 2; }
};

/// Accelerate's rule: int(batch_size * 0.9), so 128 -> 115 -> 103 -> ... -> 9 -> 8 -> 7 ... -> 1 -> 0.
struct accelerate_batch_size_rule {
  std::int64_t operator()(std::int64_t batch_size) const noexcept {
    return static_cast<std::int64_t>(static_cast<double>(batch_size) * 0.9);
  }
};

/// Wraps `function(batch_size, args...)` so that out-of-memory failures retry with
/// `reduce(batch_size)`; `reduce` must return a smaller value (ValueError otherwise).
template <class F, class Reduce = halve_batch_size>
auto find_executable_batch_size(F function, std::int64_t starting_batch_size = 128, Reduce reduce = {}) {
  if (starting_batch_size <= 0) {
    throw ValueError("find_executable_batch_size: starting_batch_size must be > 0, got " +
                     std::to_string(starting_batch_size));
  }
  return [function = std::move(function), starting_batch_size, reduce = std::move(reduce)](auto&&... args) mutable
         -> decltype(function(std::int64_t{}, args...)) {
    std::int64_t batch_size = starting_batch_size;
    std::optional<OutOfMemoryError> last;
    for (;;) {
      if (batch_size <= 0) {
        throw OutOfMemoryError(last ? last->device() : std::string("unknown device"), last ? last->requested_bytes() : 0,
                               "No executable batch size found, reached zero after starting at " +
                                   std::to_string(starting_batch_size));
      }
      try {
        return function(batch_size, args...);
      } catch (const OutOfMemoryError& e) {
        last.emplace(e);
      } catch (const std::bad_alloc&) {
        last.emplace("cpu", 0, "std::bad_alloc at batch size " + std::to_string(batch_size));
      }
      const std::int64_t next = reduce(batch_size);
      if (next >= batch_size) {
        throw ValueError("find_executable_batch_size: reduce_batch_size_fn returned " + std::to_string(next) +
                         " for batch size " + std::to_string(batch_size) + "; it must return a smaller value");
      }
      batch_size = next;
    }
  };
}

}  // namespace accel::utils

namespace accel {
using utils::find_executable_batch_size;
}  // namespace accel

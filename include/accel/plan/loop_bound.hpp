// LoopBound: the planner's termination arguments, checked.
//
//   detail::LoopBound guard("infer_auto_device_map walk", 3 * nodes + devices);
//   while (...) { guard.step(); ... }
//
// Each planner loop whose progress is not evident from its shape states in a comment why it ends
// and after how many iterations at most; a LoopBound counts the iterations against that number.
// A count past it is a bug in the planner, not bad input, so it throws std::logic_error rather
// than an accel::Error. The check is compiled in debug builds and wherever
// ACCEL_CHECK_LOOP_BOUNDS is defined (the planner's tests define it in optimised builds too);
// elsewhere step() is empty.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#if !defined(NDEBUG) && !defined(ACCEL_CHECK_LOOP_BOUNDS)
#define ACCEL_CHECK_LOOP_BOUNDS 1
#endif

namespace accel::plan::detail {

/// Counts a loop's iterations against the bound its comment states (see the header comment).
class LoopBound {
 public:
  LoopBound(const char* loop, std::size_t bound) noexcept : loop_(loop), bound_(bound) {}

  /// One more iteration; std::logic_error once the count passes the bound (checking builds only).
  void step() {
#ifdef ACCEL_CHECK_LOOP_BOUNDS
    if (++count_ > bound_) {
      throw std::logic_error(std::string(loop_) + ": more than " + std::to_string(bound_) +
                             " iterations, past the bound its termination argument states");
    }
#endif
  }

 private:
  [[maybe_unused]] const char* loop_;
  [[maybe_unused]] std::size_t bound_;
  [[maybe_unused]] std::size_t count_ = 0;
};

}  // namespace accel::plan::detail

// Wall-clock checks in the tests guard against costs that grow faster than their input (an insert
// that scans every key, a parse that backtracks), never against a constant factor. Two things make a
// bare bound flaky: the sanitizer build runs unoptimised code many times slower, and a shared machine
// stalls a run now and then. So a bound is stated for the optimised build and scaled for slow builds,
// and a run past it runs again: a stall does not repeat, a super-linear cost does.
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>

namespace accel_test {

#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
inline constexpr bool slow_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool slow_build = true;
#else
inline constexpr bool slow_build = false;
#endif
#else
inline constexpr bool slow_build = false;
#endif

/// How much slower the sanitizer build (-O0, ASan + UBSan) runs the tests' hot loops than -O2:
/// measured at 5-9x for the parsers, the loader and the planner; the margin covers a loaded machine.
inline constexpr double slow_build_factor = 12.0;

/// A bound of `optimised` seconds, as it applies to this build.
constexpr double seconds_bound(double optimised) { return slow_build ? optimised * slow_build_factor : optimised; }

/// The seconds `f()` took.
template <class F>
double seconds_of(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Runs `run` (which sets up its own state and returns the seconds of the part it times) until one
/// run is within `bound` or `tries` runs are spent, and returns the fastest: a check on the result
/// against `bound` then fails only when every try was slow.
template <class Run>
double fastest_within(double bound, Run&& run, int tries = 3) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < tries && best >= bound; ++i) best = std::min(best, static_cast<double>(run()));
  return best;
}

}  // namespace accel_test

// Checked integer arithmetic for sizes that come from files, configs and command lines.
//
//   checked_add(a, b, what)          a + b, or OverflowError naming `what`
//   checked_mul(a, b, what)          a * b, or OverflowError naming `what`
//   checked_numel(extents, what)     product of non-negative extents, or ShapeError / OverflowError
//   checked_nbytes(extents, bytes_per_element, what)
//
// A byte count that wraps becomes a negative size in a table or a small allocation that a
// later write overruns; every count derived from untrusted input goes through these instead
// of `*` and `+`. `what` names the file, tensor or option so the message is actionable.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "accel/core/errors.hpp"

namespace accel {

/// An integer size computed from input does not fit its type.
class OverflowError : public ValueError {
 public:
  using ValueError::ValueError;
};

namespace detail {

/// `overflowed` is a __builtin_*_overflow: true when the exact result did not fit `T`.
template <std::integral T, class Op>
constexpr T checked_op(T a, T b, std::string_view what, const char* sign, Op overflowed) {
  T r{};
  if (overflowed(a, b, &r)) {
    throw OverflowError(std::string(what) + ": " + std::to_string(a) + sign + std::to_string(b) + " overflows a " +
                        std::to_string(sizeof(T) * 8) + "-bit size");
  }
  return r;
}

}  // namespace detail

/// a + b for any integer type; throws OverflowError("<what>: ... overflows") instead of wrapping.
template <std::integral T>
constexpr T checked_add(T a, T b, std::string_view what) {
  return detail::checked_op(a, b, what, " + ", [](T x, T y, T* r) { return __builtin_add_overflow(x, y, r); });
}

/// a * b for any integer type; throws OverflowError instead of wrapping.
template <std::integral T>
constexpr T checked_mul(T a, T b, std::string_view what) {
  return detail::checked_op(a, b, what, " x ", [](T x, T y, T* r) { return __builtin_mul_overflow(x, y, r); });
}

/// Product of a range of extents (a Shape, a vector, an initializer list). A negative extent is
/// a ShapeError; a product past INT64_MAX an OverflowError. The empty product is 1.
template <class Range>
constexpr std::int64_t checked_numel(const Range& extents, std::string_view what) {
  std::int64_t n = 1;
  for (const auto e : extents) {
    const auto v = static_cast<std::int64_t>(e);
    if (v < 0) throw ShapeError(std::string(what) + ": negative extent " + std::to_string(v));
    n = checked_mul(n, v, what);
  }
  return n;
}

/// checked_numel(extents) * bytes_per_element, checked.
template <class Range>
constexpr std::int64_t checked_nbytes(const Range& extents, std::int64_t bytes_per_element, std::string_view what) {
  return checked_mul(checked_numel(extents, what), bytes_per_element, what);
}

}  // namespace accel

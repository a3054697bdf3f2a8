// Shape: up to `max_dims` extents (or strides) stored inline, so tensors never allocate for
// their metadata. Printed as torch prints sizes: [2, 3].
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"

namespace accel {

inline constexpr std::size_t max_dims = 8;

class Shape {
 public:
  using value_type = std::int64_t;

  constexpr Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(std::span<const std::int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<std::int64_t>& dims) { assign(dims.begin(), dims.end()); }

  constexpr std::size_t size() const noexcept { return n_; }
  constexpr bool empty() const noexcept { return n_ == 0; }
  constexpr std::int64_t operator[](std::size_t i) const noexcept { return d_[i]; }
  constexpr std::int64_t& operator[](std::size_t i) noexcept { return d_[i]; }
  const std::int64_t* begin() const noexcept { return d_.data(); }
  const std::int64_t* end() const noexcept { return d_.data() + n_; }
  std::int64_t* begin() noexcept { return d_.data(); }
  std::int64_t* end() noexcept { return d_.data() + n_; }
  const std::int64_t* data() const noexcept { return d_.data(); }
  std::int64_t back() const noexcept { return d_[n_ - 1]; }

  void push_back(std::int64_t v) {
    if (n_ == max_dims) throw ShapeError("tensors have at most " + std::to_string(max_dims) + " dimensions");
    d_[n_++] = v;
  }
  void insert(std::size_t pos, std::int64_t v) {
    push_back(0);
    for (std::size_t i = n_ - 1; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
  }
  void erase(std::size_t pos) {
    for (std::size_t i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }

  /// Product of the extents (1 for a scalar).
  std::int64_t numel() const noexcept {
    std::int64_t p = 1;
    for (std::size_t i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }

  std::vector<std::int64_t> vec() const { return {begin(), end()}; }
  std::string str() const {
    std::string s = "[";
    for (std::size_t i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(d_[i]);
    return s + "]";
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

 private:
  template <class It>
  void assign(It first, It last) {
    n_ = 0;
    for (; first != last; ++first) push_back(*first);
  }
  std::array<std::int64_t, max_dims> d_{};
  std::size_t n_ = 0;
};

/// Row-major strides of `shape`.
inline Shape contiguous_strides(const Shape& shape) {
  Shape s = shape;
  std::int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<std::int64_t>(shape[i], 1);
  }
  return s;
}

/// Resolves a possibly negative dimension index against `ndim`; ShapeError names `op`.
inline std::size_t wrap_dim(std::int64_t dim, std::size_t ndim, const char* op) {
  const auto n = static_cast<std::int64_t>(ndim);
  const std::int64_t d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= std::max<std::int64_t>(n, 1) || (n == 0)) {
    throw ShapeError(std::string(op) + ": dimension " + std::to_string(dim) +
                     " out of range for a tensor of " + std::to_string(ndim) + " dimensions");
  }
  return static_cast<std::size_t>(d);
}

/// torch's broadcast of two shapes (right-aligned, extent 1 stretches); ShapeError names `op`
/// and the first dimension that disagrees.
inline Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const std::int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(std::string(op) + ": shapes " + a.str() + " and " + b.str() +
                       " are not broadcastable (dimension " + std::to_string(i) + ": " +
                       std::to_string(da) + " vs " + std::to_string(db) + ")");
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace accel

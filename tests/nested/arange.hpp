// 0, 1, 2, ... as an f32 tensor: leaves whose values say where they came from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "accel/core/tensor.hpp"

namespace accel_test {

/// [0, n) as f32, shaped `shape` (default: [n]).
inline accel::Tensor arange(std::int64_t n, accel::Shape shape = {}) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return accel::Tensor::from_vector(v, shape.empty() ? accel::Shape{n} : shape);
}

}  // namespace accel_test

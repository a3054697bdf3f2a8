// Helpers shared by the ops tests: deterministic random tensors, double read-back, closeness.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "accel/core/tensor.hpp"

namespace accel::test {

/// Uniform values in [lo, hi) as f32, converted to `dtype` (a fixed seed per call site).
inline Tensor random_tensor(const Shape& shape, std::uint32_t seed, DType dtype = DType::f32,
                            double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(static_cast<float>(lo), static_cast<float>(hi));
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  Tensor t = Tensor::from_vector(v, shape);
  return dtype == DType::f32 ? t : t.to(dtype);
}

/// Row-major values of any tensor as doubles.
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

/// Every |got - want| <= atol + rtol * |want|; reports the first offender.
inline void require_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                          double rtol = 0.0) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::abs(want[i]);
    if (!(std::abs(got[i] - want[i]) <= tol)) {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i] << ", tolerance " << tol);
      REQUIRE(std::abs(got[i] - want[i]) <= tol);
    }
  }
}

inline void require_close(const Tensor& got, const std::vector<double>& want, double atol, double rtol = 0.0) {
  require_close(values(got), want, atol, rtol);
}

/// Tolerance scale for results stored in `dtype` (its rounding step near 1).
inline double dtype_eps(DType d) {
  switch (d) {
    case DType::f16: return 1e-3;
    case DType::bf16: return 8e-3;
    default: return 1e-6;
  }
}

}  // namespace accel::test

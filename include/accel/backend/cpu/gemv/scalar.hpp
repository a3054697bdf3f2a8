// The portable GEMV: each weight row converted to f32 once (the conversion kernels dispatch on
// their own), then dotted with every activation row by the build-ISA row kernel. Every CPU runs
// it; it is the reference the vector tiers are tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "accel/backend/cpu/gemv/problem.hpp"
#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/simd_arch.hpp"

namespace accel::backend::cpu::detail {

/// gemv of `p` for weights of `wd` (f32, f16 or bf16).
inline void gemv(simd::requires_arch<simd::scalar>, DType wd, const GemvProblem& problem) {
  const GemvProblem p = gemv_f32_x(problem, wd);
  const auto k = static_cast<std::size_t>(p.k);
  parallel_for(static_cast<std::size_t>(p.n), gemv_grain(p.row_bytes), [&](std::size_t j0, std::size_t j1) {
    thread_local std::vector<float> buf;
    if (buf.size() < k) buf.resize(k);
    for (std::size_t j = j0; j < j1; ++j) {
      const std::byte* row = p.w + j * p.row_bytes;
      const float* wr = reinterpret_cast<const float*>(row);
      if (wd == DType::bf16) {
        accel::detail::bf16_to_f32(reinterpret_cast<const bfloat16*>(row), buf.data(), k);
        wr = buf.data();
      } else if (wd == DType::f16) {
        accel::detail::f16_to_f32(reinterpret_cast<const half*>(row), buf.data(), k);
        wr = buf.data();
      }
      const float b = p.bias ? p.bias[j] : 0.0f;
      for (std::int64_t i = 0; i < p.m; ++i) {
        p.out[i * p.n + static_cast<std::int64_t>(j)] = dot(p.x + i * p.k, wr, k) + b;
      }
    }
  });
}

}  // namespace accel::backend::cpu::detail

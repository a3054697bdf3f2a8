// The activation rows of the CPU product kernels: a per-thread buffer for rows rearranged once
// per call, and the dispatch of a row count to a template argument (the kernels keep one sum per
// activation row in registers).
//
//   detail::activation_buffer<T>(n)    n elements of T, cache-line aligned, this thread's
//   detail::for_row_groups(rows, f)    f(t0, std::integral_constant<int, NT>) per group of <= 8 rows
//   detail::for_weight_blocks(m, row_bytes, f)  f(r0, r1) over blocks of weight rows, handed out
//                                      to the threads as they finish
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "accel/backend/cpu/gemv/problem.hpp"
#include "accel/core/parallel.hpp"

namespace accel::quant::detail {

/// n elements of T at a 64-byte boundary, in a buffer this thread keeps between calls (one per T;
/// valid until its next call): backend::cpu::detail::aligned_scratch, apart from the GEMV's own.
template <class T>
T* activation_buffer(std::size_t n) {
  struct activation_tag;
  return backend::cpu::detail::aligned_scratch<T, activation_tag>(n);
}

/// f(t0, std::integral_constant<int, NT>) for each group of up to eight of `rows` activation rows,
/// t0 the group's first row and NT its size.
template <class F>
void for_row_groups(std::size_t rows, F&& f) {
  for (std::size_t t0 = 0; t0 < rows; t0 += 8) {
    switch (std::min<std::size_t>(8, rows - t0)) {
      case 1: f(t0, std::integral_constant<int, 1>{}); break;
      case 2: f(t0, std::integral_constant<int, 2>{}); break;
      case 3: f(t0, std::integral_constant<int, 3>{}); break;
      case 4: f(t0, std::integral_constant<int, 4>{}); break;
      case 5: f(t0, std::integral_constant<int, 5>{}); break;
      case 6: f(t0, std::integral_constant<int, 6>{}); break;
      case 7: f(t0, std::integral_constant<int, 7>{}); break;
      default: f(t0, std::integral_constant<int, 8>{}); break;
    }
  }
}

/// f(r0, r1) over blocks of the m weight rows (`row_bytes` each), handed out to the threads as
/// they finish, as the float GEMV does (backend::cpu::detail::gemv_blocks): two threads streaming
/// from DRAM rarely get equal bandwidth, and the even split that LLM.int8()'s decode had left one
/// waiting 12% of the time. Blocks of about 256 KiB, or of m / (8 x threads) rows when that is
/// more: each block's call prepares the activation rows again, which a few larger blocks amortise.
template <class F>
void for_weight_blocks(std::size_t m, std::size_t row_bytes, F&& f) {
  const auto threads = static_cast<std::size_t>(std::max(1, num_threads()));
  const std::size_t grain = std::max(backend::cpu::detail::gemv_grain(row_bytes), (m / (8 * threads) + 3) / 4 * 4);
  backend::cpu::detail::gemv_blocks(m, grain, f);
}

}  // namespace accel::quant::detail

// Row-count dispatch for the CPU product kernels that keep one sum per activation row in
// registers, so take the row count as a template argument.
//
//   detail::for_row_groups(rows, f)    f(t0, std::integral_constant<int, NT>) per group of <= 8 rows
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace accel::quant::detail {

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

}  // namespace accel::quant::detail

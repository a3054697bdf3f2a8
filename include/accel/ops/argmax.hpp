// argmax(x, dim) -> int64 indices of the largest element along `dim` (the dim is removed).
//
// The first maximum wins; NaN counts as larger than everything (the first NaN wins), as torch.
// Works for every real dtype; the last-dim case (logits -> next token) reads rows directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "accel/core/convert.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::ops {

/// Index (int64) of the first maximum along `dim`; the result drops that dim. An empty
/// reduction dimension is a ShapeError.
inline Tensor argmax(const Tensor& x, std::int64_t dim = -1) {
  constexpr const char* op = "argmax";
  detail::check_defined(op, "input", x);
  if (x.dim() == 0) throw ShapeError("argmax: expected at least a 1-d input, got a scalar");
  const std::size_t d = wrap_dim(dim, x.dim(), op);
  const std::int64_t n = x.shape()[d];
  if (n == 0) {
    throw ShapeError("argmax: cannot reduce over dimension " + std::to_string(dim) + " of size 0 (shape " +
                     x.shape().str() + ")");
  }
  Shape out_shape = x.shape();
  out_shape.erase(d);
  const Device dev = detail::placement_of(op, {&x});
  if (dev.is_meta()) return Tensor::empty(out_shape, DType::i64, dev);
  if (dev.is_cuda()) return detail::run_cuda(&DeviceOps::argmax, op, out_shape, DType::i64, dev, x, d);
  Tensor out = Tensor::empty(out_shape, DType::i64);
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous();
  std::int64_t inner = 1;
  for (std::size_t i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  const std::int64_t outer = out.numel() / inner;
  std::int64_t* res = out.data_ptr<std::int64_t>();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using V = std::conditional_t<accel::detail::is_small_float_v<T>, float, T>;
    const T* p = static_cast<const T*>(xc.data_ptr());
    const auto positions = static_cast<std::size_t>(outer * inner);
    const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 14) / static_cast<std::size_t>(n));
    parallel_for(positions, grain, [&](std::size_t begin, std::size_t end) {
      for (std::size_t pos = begin; pos < end; ++pos) {
        const std::int64_t o = static_cast<std::int64_t>(pos) / inner, i = static_cast<std::int64_t>(pos) % inner;
        const T* base = p + o * n * inner + i;
        std::int64_t best = 0;
        V bv = static_cast<V>(base[0]);
        if constexpr (std::is_floating_point_v<V>) {
          if (bv != bv) {
            res[pos] = 0;
            continue;
          }
        }
        for (std::int64_t j = 1; j < n; ++j) {
          const V v = static_cast<V>(base[j * inner]);
          if constexpr (std::is_floating_point_v<V>) {
            if (v != v) {
              best = j;
              break;
            }
          }
          if (v > bv) {
            bv = v;
            best = j;
          }
        }
        res[pos] = best;
      }
    });
  });
  return out;
}

}  // namespace accel::ops

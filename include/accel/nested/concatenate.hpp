// concatenate(std::vector<Data> data, dim = 0) -> Data
//
// Leaf-wise cat: every element of `data` has the same structure; each tensor position of the
// result is the cat along `dim` of the tensors at that position. Positions are matched by walking
// every element in parallel with the first (map entries by key), so unordered maps are safe.
// Non-tensor leaves come from the first element. Uses accel::ops::cat when available.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nested/recursively_apply.hpp"

#if __has_include("accel/ops/cat.hpp")
#include "accel/ops/cat.hpp"
#define ACCEL_NESTED_HAVE_OPS_CAT 1
#endif

namespace accel::nested {

namespace detail {

/// torch.cat of same-dtype, same-device tensors (any device: each piece is a copy_ into a view).
inline Tensor cat_tensors(const std::vector<Tensor>& xs, std::int64_t dim) {
#if defined(ACCEL_NESTED_HAVE_OPS_CAT)
  return accel::ops::cat(xs, dim);
#else
  if (xs.empty()) throw ValueError("concatenate: nothing to concatenate");
  const Tensor& r = xs.front();
  const std::size_t d = wrap_dim(dim, r.dim(), "concatenate");
  Shape shape = r.shape();
  std::int64_t total = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    bool ok = t.dim() == r.dim() && t.dtype() == r.dtype() && t.device() == r.device();
    for (std::size_t j = 0; ok && j < r.dim(); ++j) ok = j == d || t.shape()[j] == r.shape()[j];
    if (!ok) {
      throw ShapeError("concatenate: tensor " + std::to_string(i) + " (" + t.shape().str() + ", " +
                       std::string(dtype_name(t.dtype())) + ", " + t.device().str() + ") does not match tensor 0 (" +
                       r.shape().str() + ", " + std::string(dtype_name(r.dtype())) + ", " + r.device().str() +
                       ") outside dimension " + std::to_string(d));
    }
    total += t.shape()[d];
  }
  shape[d] = total;
  Tensor out = Tensor::empty(shape, r.dtype(), r.device());
  if (out.is_meta()) return out;
  std::int64_t off = 0;
  for (const Tensor& t : xs) {
    out.narrow(static_cast<std::int64_t>(d), off, t.shape()[d]).copy_(t);
    off += t.shape()[d];
  }
  return out;
#endif
}

struct empty_leaf {};

}  // namespace detail

/// Leaf-wise concatenation of same-structured `data` along `dim`; ValueError when empty.
template <class Data>
Data concatenate(const std::vector<Data>& data, std::int64_t dim = 0) {
  if (data.empty()) throw ValueError("concatenate: expected a non-empty list of structures");
  std::vector<std::vector<Tensor>> columns;
  {
    std::size_t k = 0;
    (void)recursively_apply(
        [&](const Tensor& t) {
          columns.emplace_back().reserve(data.size());
          columns[k++].push_back(t);
          return detail::empty_leaf{};
        },
        data[0]);
  }
  for (std::size_t i = 1; i < data.size(); ++i) {
    std::size_t k = 0;
    (void)recursively_apply(
        [&](const Tensor&, const Tensor& t) {
          columns[k++].push_back(t);
          return detail::empty_leaf{};
        },
        data[0], data[i]);
  }
  std::size_t k = 0;
  auto out = recursively_apply([&](const Tensor&) { return detail::cat_tensors(columns[k++], dim); }, data[0]);
  static_assert(std::is_same_v<decltype(out), Data>,
                "concatenate: Data must be rebuilt as the same type (aggregates that change type are not supported)");
  return out;
}

}  // namespace accel::nested

namespace accel {
using nested::concatenate;
}  // namespace accel

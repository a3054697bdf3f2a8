// cat(xs, dim) -> the tensors joined along `dim` (torch.cat).
//
// Every tensor must have one dtype, one device and the same extents outside `dim`; 1-d empty
// tensors are skipped, as torch does for legacy reasons. The result is a fresh contiguous tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::ops {

/// Concatenates `xs` along `dim` (negative counts from the end). At least one tensor.
inline Tensor cat(const std::vector<Tensor>& xs, std::int64_t dim = 0) {
  constexpr const char* op = "cat";
  if (xs.empty()) throw ValueError("cat: expected a non-empty list of tensors");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined()) throw ValueError("cat: tensor " + std::to_string(i) + " is undefined");
  }
  // The reference tensor: the first one that is not a legacy 1-d empty tensor.
  std::size_t ref = 0;
  auto skippable = [](const Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  while (ref < xs.size() && skippable(xs[ref])) ++ref;
  if (ref == xs.size()) ref = 0;
  const Tensor& r = xs[ref];
  if (r.dim() == 0) throw ShapeError("cat: zero-dimensional tensor (at position " + std::to_string(ref) + ") cannot be concatenated");
  const std::size_t d = wrap_dim(dim, r.dim(), op);
  Shape out_shape = r.shape();
  std::int64_t total = 0;
  bool meta = false;
  Device dev = r.device();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    if (t.dtype() != r.dtype()) {
      throw DTypeError("cat: tensor " + std::to_string(i) + " is " + detail::describe(t) + " but tensor " +
                       std::to_string(ref) + " is " + detail::describe(r));
    }
    if (t.is_meta()) meta = true;
    if (i != ref && skippable(t) && r.dim() != 1) continue;
    bool ok = t.dim() == r.dim();
    for (std::size_t j = 0; ok && j < r.dim(); ++j) ok = j == d || t.shape()[j] == r.shape()[j];
    if (!ok) {
      throw ShapeError("cat: tensor " + std::to_string(i) + " has shape " + t.shape().str() + " but tensor " +
                       std::to_string(ref) + " has shape " + r.shape().str() +
                       "; they must match except in dimension " + std::to_string(d));
    }
    total += t.shape()[d];
  }
  out_shape[d] = total;
  if (meta) return Tensor::empty(out_shape, r.dtype(), Device::meta());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].device() != dev) {
      throw DeviceError("cat: tensor " + std::to_string(i) + " is on " + xs[i].device().str() + " but tensor " +
                        std::to_string(ref) + " is on " + dev.str());
    }
  }
  if (dev.is_cuda()) return detail::run_cuda(&DeviceOps::cat, op, out_shape, r.dtype(), dev, xs, d);
  Tensor out = Tensor::empty(out_shape, r.dtype(), dev);
  std::int64_t off = 0;
  for (const Tensor& t : xs) {
    if (skippable(t) && r.dim() != 1) continue;
    const std::int64_t len = t.shape()[d];
    if (len > 0) out.narrow(static_cast<std::int64_t>(d), off, len).copy_(t);
    off += len;
  }
  return out;
}

}  // namespace accel::ops

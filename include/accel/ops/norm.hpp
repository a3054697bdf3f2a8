// Row-wise normalizations.
//
//   softmax(x, dim)                    exp(x - max) / sum along dim
//   layer_norm(x, w, b, eps)           over the last dim, biased variance; w, b optional
//   rms_norm(x, w, eps)                LLaMA RMSNorm: x * rsqrt(mean(x^2) + eps) * w, in f32
//
// Each row is converted to f32 once, normalized by a vectorized kernel and stored back in the
// input dtype; rows are split over the CPU threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::ops {

namespace detail {

/// Calls f(in_row_f32, out_row_f32, n) for every row of the last dim of x, returning the result
/// in x's dtype. Rows are processed in place in a staging buffer for f16 / bf16.
template <class F>
Tensor map_rows(const Tensor& x, F&& f) {
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  const auto n = static_cast<std::size_t>(x.shape().back());
  const std::size_t rows = static_cast<std::size_t>(x.numel()) / n;
  const auto* src = static_cast<const std::byte*>(xc.data_ptr());
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  const std::size_t row_bytes = n * x.element_size();
  const DType dt = x.dtype();
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 14) / n);
  parallel_for(rows, grain, [&](std::size_t begin, std::size_t end) {
    float* buf = scratch_floats(n, 0);
    for (std::size_t r = begin; r < end; ++r) {
      const float* in = load_row(dt, src + r * row_bytes, buf, n);
      float* o = out_row(dt, dst + r * row_bytes, buf);
      f(in, o, n);
      if (dt != DType::f32) store_row(o, dt, dst + r * row_bytes, n);
    }
  });
  return out;
}

/// f32 contiguous copy of an optional per-feature parameter of length n, checked.
inline Tensor norm_param(const char* op, const char* name, const Tensor& p, const Tensor& x) {
  if (!p.defined()) return {};
  check_float(op, name, p);
  const std::int64_t n = x.dim() ? x.shape().back() : 1;
  if (p.dim() != 1 || p.size(0) != n) {
    throw ShapeError(std::string(op) + ": " + name + " of shape " + p.shape().str() +
                     " does not match the last dimension of input " + x.shape().str() +
                     " (expected [" + std::to_string(n) + "])");
  }
  return p.is_cpu() ? contiguous_f32(p) : p;
}

inline void require_rank(const char* op, const Tensor& x) {
  if (x.dim() == 0) throw ShapeError(std::string(op) + ": expected at least a 1-d input, got a scalar");
}

}  // namespace detail

/// torch.softmax along `dim` (negative counts from the end); computed in f32.
inline Tensor softmax(const Tensor& x, std::int64_t dim = -1) {
  constexpr const char* op = "softmax";
  detail::check_float(op, "input", x);
  detail::require_rank(op, x);
  const std::size_t d = wrap_dim(dim, x.dim(), op);
  const Device dev = detail::placement_of(op, {&x});
  if (dev.is_meta()) return Tensor::empty(x.shape(), x.dtype(), dev);
  if (dev.is_cuda()) return detail::run_cuda(&DeviceOps::softmax, op, x.shape(), x.dtype(), dev, x, d);
  const auto last = static_cast<std::int64_t>(x.dim() - 1);
  auto kernel = [](const float* in, float* o, std::size_t n) { backend::cpu::softmax_row(in, o, n); };
  if (static_cast<std::int64_t>(d) == last) return detail::map_rows(x, kernel);
  // Move `dim` last, normalise rows, move it back.
  const Tensor moved = x.transpose(static_cast<std::int64_t>(d), last);
  return detail::map_rows(moved, kernel).transpose(static_cast<std::int64_t>(d), last).contiguous();
}

/// torch.nn.functional.layer_norm over the last dimension; `weight` / `bias` ([D]) may be
/// undefined (no affine). Biased variance, as torch.
inline Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5) {
  constexpr const char* op = "layer_norm";
  detail::check_float(op, "input", x);
  detail::require_rank(op, x);
  const Tensor w = detail::norm_param(op, "weight", weight, x);
  const Tensor b = detail::norm_param(op, "bias", bias, x);
  const Device dev = detail::placement_of(op, {&x, &weight, &bias});
  if (dev.is_meta()) return Tensor::empty(x.shape(), x.dtype(), dev);
  if (dev.is_cuda()) return detail::run_cuda(&DeviceOps::layer_norm, op, x.shape(), x.dtype(), dev, x, weight, bias, eps);
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  const auto e = static_cast<float>(eps);
  return detail::map_rows(x, [&](const float* in, float* o, std::size_t n) {
    backend::cpu::layer_norm_row(in, wp, bp, o, n, e);
  });
}

/// LLaMA RMSNorm over the last dimension: x * rsqrt(mean(x^2) + eps) * weight, computed in f32
/// and returned in x's dtype. An undefined weight means no scale.
inline Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6) {
  constexpr const char* op = "rms_norm";
  detail::check_float(op, "input", x);
  detail::require_rank(op, x);
  const Tensor w = detail::norm_param(op, "weight", weight, x);
  const Device dev = detail::placement_of(op, {&x, &weight});
  if (dev.is_meta()) return Tensor::empty(x.shape(), x.dtype(), dev);
  if (dev.is_cuda()) return detail::run_cuda(&DeviceOps::rms_norm, op, x.shape(), x.dtype(), dev, x, weight, eps);
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  const auto e = static_cast<float>(eps);
  return detail::map_rows(x, [&](const float* in, float* o, std::size_t n) {
    backend::cpu::rms_norm_row(in, wp, o, n, e);
  });
}

}  // namespace accel::ops

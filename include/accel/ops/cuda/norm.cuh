// Row-wise normalizations on CUDA tensors (nvcc only).
//
//   ops::softmax(x, dim)                exp(x - max) / sum along any dim
//   ops::layer_norm(x, w, b, eps)       over the last dim, biased variance; w, b optional
//   ops::rms_norm(x, w, eps)            x * rsqrt(mean(x^2) + eps) * w; w optional
//
// One block per row, reductions in f32 shared by the whole block; the output keeps x's dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/ops/cuda/gemm.cuh"
#include "accel/ops/op_support.hpp"

namespace accel::cuda::ops {

namespace detail {

inline unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::min<std::int64_t>(std::max<std::int64_t>(rows, 1), std::int64_t{1} << 16));
}

// Row r covers elements (r / inner) * n * inner + r % inner + j * inner, j in [0, n).
template <int = 0>  // a template, so several .cu files may include this header
__global__ void softmax_kernel(const void* x, void* out, DType d, std::int64_t rows, std::int64_t n,
                               std::int64_t inner) {
  __shared__ float scratch[33];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = (r / inner) * n * inner + r % inner;
    float m = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, kernels::load_f32(x, base + j * inner, d));
    m = kernels::block_max(m, scratch);
    float s = 0.0f;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(kernels::load_f32(x, base + j * inner, d) - m);
    s = kernels::block_sum(s, scratch);
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const std::int64_t at = base + j * inner;
      kernels::store_f32(out, at, d, expf(kernels::load_f32(x, at, d) - m) / s);
    }
  }
}

// Optional per-feature parameters are passed as (pointer, dtype); nullptr means "none".
template <int = 0>  // a template, so several .cu files may include this header
__global__ void layer_norm_kernel(const void* x, const void* w, DType wd, const void* b, DType bd, void* out,
                                  DType d, std::int64_t rows, std::int64_t n, float eps) {
  __shared__ float scratch[33];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = r * n;
    float s = 0.0f;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) s += kernels::load_f32(x, base + j, d);
    const float mean = kernels::block_sum(s, scratch) / static_cast<float>(n);
    float v = 0.0f;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float c = kernels::load_f32(x, base + j, d) - mean;
      v += c * c;
    }
    const float var = kernels::block_sum(v, scratch) / static_cast<float>(n);
    const float rstd = 1.0f / sqrtf(var + eps);
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float y = (kernels::load_f32(x, base + j, d) - mean) * rstd;
      if (w) y *= kernels::load_f32(w, j, wd);
      if (b) y += kernels::load_f32(b, j, bd);
      kernels::store_f32(out, base + j, d, y);
    }
  }
}

template <int = 0>  // a template, so several .cu files may include this header
__global__ void rms_norm_kernel(const void* x, const void* w, DType wd, void* out, DType d, std::int64_t rows,
                                std::int64_t n, float eps) {
  __shared__ float scratch[33];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = r * n;
    float s = 0.0f;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float v = kernels::load_f32(x, base + j, d);
      s += v * v;
    }
    const float scale = 1.0f / sqrtf(kernels::block_sum(s, scratch) / static_cast<float>(n) + eps);
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float y = kernels::load_f32(x, base + j, d) * scale;
      if (w) y *= kernels::load_f32(w, j, wd);
      kernels::store_f32(out, base + j, d, y);
    }
  }
}

/// A checked, dense optional parameter of length x.size(-1) (undefined stays undefined).
inline Tensor norm_param(const char* op, const char* name, const Tensor& p, const Tensor& x) {
  if (!p.defined()) return p;
  accel::ops::detail::check_float(op, name, p);
  check_same_device(op, x, p);
  if (p.dim() != 1 || p.size(0) != x.size(-1)) {
    throw ShapeError(std::string(op) + ": " + name + " of shape " + p.shape().str() +
                     " does not match the last dimension of input " + x.shape().str() + " (expected [" +
                     std::to_string(x.size(-1)) + "])");
  }
  return cuda::contiguous(p);
}

inline void require_rank(const char* op, const Tensor& x) {
  if (x.dim() == 0) throw ShapeError(std::string(op) + ": expected at least a 1-d input, got a scalar");
}

}  // namespace detail

/// torch.softmax of a CUDA tensor along `dim` (negative counts from the end).
inline Tensor softmax(const Tensor& x, std::int64_t dim) {
  constexpr const char* op = "softmax";
  accel::ops::detail::check_float(op, "input", x);
  detail::require_rank(op, x);
  const std::size_t d = wrap_dim(dim, x.dim(), op);
  kernels::OpScope scope(x.device(), op);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), scope.device());
  if (out.numel() == 0) return out;
  const Tensor xc = cuda::contiguous(x);
  const std::int64_t n = x.shape()[d];
  std::int64_t inner = 1;
  for (std::size_t i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  const std::int64_t rows = x.numel() / n;
  detail::softmax_kernel<><<<detail::row_blocks(rows), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), out.data_ptr(), x.dtype(), rows, n, inner);
  kernels::check_launch("softmax_kernel");
  return out;
}

/// layer_norm of a CUDA tensor over its last dim; `weight` / `bias` ([D]) may be undefined.
inline Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  constexpr const char* op = "layer_norm";
  accel::ops::detail::check_float(op, "input", x);
  detail::require_rank(op, x);
  const Tensor w = detail::norm_param(op, "weight", weight, x);
  const Tensor b = detail::norm_param(op, "bias", bias, x);
  kernels::OpScope scope(x.device(), op);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), scope.device());
  if (out.numel() == 0) return out;
  const Tensor xc = cuda::contiguous(x);
  const std::int64_t n = x.size(-1), rows = x.numel() / n;
  detail::layer_norm_kernel<><<<detail::row_blocks(rows), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), w.defined() ? w.data_ptr() : nullptr, w.defined() ? w.dtype() : DType::f32,
      b.defined() ? b.data_ptr() : nullptr, b.defined() ? b.dtype() : DType::f32, out.data_ptr(), x.dtype(), rows, n,
      static_cast<float>(eps));
  kernels::check_launch("layer_norm_kernel");
  return out;
}

/// LLaMA RMSNorm of a CUDA tensor over its last dim; an undefined weight means no scale.
inline Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  constexpr const char* op = "rms_norm";
  accel::ops::detail::check_float(op, "input", x);
  detail::require_rank(op, x);
  const Tensor w = detail::norm_param(op, "weight", weight, x);
  kernels::OpScope scope(x.device(), op);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), scope.device());
  if (out.numel() == 0) return out;
  const Tensor xc = cuda::contiguous(x);
  const std::int64_t n = x.size(-1), rows = x.numel() / n;
  detail::rms_norm_kernel<><<<detail::row_blocks(rows), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), w.defined() ? w.data_ptr() : nullptr, w.defined() ? w.dtype() : DType::f32, out.data_ptr(),
      x.dtype(), rows, n, static_cast<float>(eps));
  kernels::check_launch("rms_norm_kernel");
  return out;
}

}  // namespace accel::cuda::ops

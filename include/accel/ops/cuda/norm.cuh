// Row-wise normalizations on CUDA tensors (nvcc only): slots of the device backend, called by
// accel/ops/norm.hpp with validated arguments.
//
//   ops::softmax(x, dim, out)              exp(x - max) / sum along any (wrapped) dim
//   ops::layer_norm(x, w, b, eps, out)     over the last dim, biased variance; w, b optional
//   ops::rms_norm(x, w, eps, out)          x * rsqrt(mean(x^2) + eps) * w; w optional
//
// One block per row, reductions in f32 shared by the whole block; the output keeps x's dtype.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/core/tensor.hpp"

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

/// Pointer and dtype of an optional per-feature parameter (nullptr when undefined), dense.
struct NormParam {
  Tensor dense;
  const void* data = nullptr;
  DType dtype = DType::f32;

  explicit NormParam(const Tensor& p) {
    if (!p.defined()) return;
    dense = cuda::contiguous(p);
    data = dense.data_ptr();
    dtype = p.dtype();
  }
};

}  // namespace detail

/// torch.softmax of a CUDA tensor along `dim` (already wrapped).
inline void softmax(const Tensor& x, std::size_t dim, Tensor& out) {
  assert(dim < x.dim() && x.shape() == out.shape());
  kernels::OpScope scope(out.device());
  const Tensor xc = cuda::contiguous(x);
  const std::int64_t n = x.shape()[dim];
  std::int64_t inner = 1;
  for (std::size_t i = dim + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  const std::int64_t rows = x.numel() / n;
  detail::softmax_kernel<><<<detail::row_blocks(rows), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), out.data_ptr(), x.dtype(), rows, n, inner);
  kernels::check_launch("softmax_kernel");
}

/// layer_norm of a CUDA tensor over its last dim; `weight` / `bias` ([D]) may be undefined.
inline void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& out) {
  assert(x.dim() > 0 && x.shape() == out.shape());
  kernels::OpScope scope(out.device());
  const detail::NormParam w(weight), b(bias);
  const Tensor xc = cuda::contiguous(x);
  const std::int64_t n = x.size(-1), rows = x.numel() / n;
  detail::layer_norm_kernel<><<<detail::row_blocks(rows), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), w.data, w.dtype, b.data, b.dtype, out.data_ptr(), x.dtype(), rows, n, static_cast<float>(eps));
  kernels::check_launch("layer_norm_kernel");
}

/// LLaMA RMSNorm of a CUDA tensor over its last dim; an undefined weight means no scale.
inline void rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& out) {
  assert(x.dim() > 0 && x.shape() == out.shape());
  kernels::OpScope scope(out.device());
  const detail::NormParam w(weight);
  const Tensor xc = cuda::contiguous(x);
  const std::int64_t n = x.size(-1), rows = x.numel() / n;
  detail::rms_norm_kernel<><<<detail::row_blocks(rows), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), w.data, w.dtype, out.data_ptr(), x.dtype(), rows, n, static_cast<float>(eps));
  kernels::check_launch("rms_norm_kernel");
}

}  // namespace accel::cuda::ops

// matmul and linear on CUDA tensors through cuBLAS (nvcc only): the matmul / linear slots of
// the device backend, called with arguments accel/ops/matmul.hpp has validated.
//
//   ops::matmul(a, b, batch, out)     torch.matmul for >= 2-d operands, batch dims broadcast
//   ops::linear(x, w, bias, out)      x[..., in] w[out, in]^T + bias; w is read transposed in place
//
// f32, f16 and bf16 operands accumulate in f32 (CUBLAS_COMPUTE_32F, no TF32) and the result
// keeps the operands' dtype. The bias is written into the output first and added by the GEMM
// (beta = 1), so f16 / bf16 results are rounded once, as on the CPU.
#pragma once

#include <cassert>
#include <climits>
#include <cstdint>
#include <string>

#include "accel/backend/cuda/cublas.hpp"
#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/core/tensor.hpp"

namespace accel::cuda::ops {

namespace detail {

/// cuBLAS's name for a compute dtype (f32, f16, bf16: what the host ops let through).
inline cudaDataType_t cublas_dtype(DType d) {
  assert(d == DType::f32 || d == DType::f16 || d == DType::bf16);
  return d == DType::f16 ? CUDA_R_16F : d == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

inline int gemm_int(std::int64_t v, const char* op, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw ShapeError(std::string(op) + ": " + what + " " + std::to_string(v) + " exceeds cuBLAS's 32-bit limit");
  }
  return static_cast<int>(v);
}

/// Row-major C[m, n] (+)= A[m, k] B: B is a row-major [k, n] matrix, or with `b_transposed` a
/// row-major [n, k] matrix used transposed. ld* are row strides, stride_* batch strides.
struct Gemm {
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0, stride_b = 0;
  bool b_transposed = false;
  void* c = nullptr;
  std::int64_t ldc = 0, stride_c = 0;
  std::int64_t batch = 1;
  float beta = 0.0f;
  DType dtype = DType::f32;
};

inline void run_gemm(const Gemm& g, int device, const char* op) {
  const cudaDataType_t t = cublas_dtype(g.dtype);
  cublasHandle_t h = cublas_handle(device);
  const float alpha = 1.0f, beta = g.beta;
  // cuBLAS is column-major: the row-major C is C^T there, and C^T = op(B)^T A^T.
  const cublasOperation_t op_b = g.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = gemm_int(g.n, op, "N"), n = gemm_int(g.m, op, "M"), k = gemm_int(g.k, op, "K");
  const int lda = gemm_int(g.ldb, op, "leading dimension"), ldb = gemm_int(g.lda, op, "leading dimension");
  const int ldc = gemm_int(g.ldc, op, "leading dimension");
  if (g.batch == 1) {
    check_cublas(cublasGemmEx(h, op_b, CUBLAS_OP_N, m, n, k, &alpha, g.b, t, lda, g.a, t, ldb, &beta, g.c, t, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  } else {
    check_cublas(cublasGemmStridedBatchedEx(h, op_b, CUBLAS_OP_N, m, n, k, &alpha, g.b, t, lda, g.stride_b, g.a, t, ldb,
                                            g.stride_a, &beta, g.c, t, ldc, g.stride_c,
                                            gemm_int(g.batch, op, "batch count"), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }
}

template <class W>
__global__ void broadcast_rows_kernel(const W* __restrict__ row, W* __restrict__ out, std::int64_t cols,
                                      std::int64_t total) {
  ACCEL_GRID_STRIDE(i, total) { out[i] = row[i % cols]; }
}

/// A batched GEMM operand: its matrices (dense) and the stride between them (0: one shared).
inline Tensor batch_operand(const Tensor& t, const Shape& batch, std::int64_t& stride) {
  const std::int64_t rows = t.size(-2), cols = t.size(-1);
  std::int64_t own = 1;
  for (std::size_t i = 0; i + 2 < t.dim(); ++i) own *= t.shape()[i];
  if (own == 1) {
    stride = 0;
    return cuda::contiguous(t);
  }
  stride = rows * cols;
  bool same = t.dim() - 2 == batch.size();
  for (std::size_t i = 0; same && i < batch.size(); ++i) same = t.shape()[i] == batch[i];
  if (same) return cuda::contiguous(t);
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  return cuda::contiguous(t.expand(full));  // materialises the broadcast batch dims
}

}  // namespace detail

/// torch.matmul of CUDA tensors into `out`; `batch` is the broadcast batch shape, empty when b
/// is 2-d (then a's leading dims fold into M and one GEMM runs).
inline void matmul(const Tensor& a, const Tensor& b, const Shape& batch, Tensor& out) {
  constexpr const char* op = "matmul";
  const std::int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  assert(b.size(-2) == K && a.dtype() == b.dtype() && out.dtype() == a.dtype());
  kernels::OpScope scope(out.device());
  if (K == 0) {
    out.fill_(0.0);
    return;
  }
  detail::Gemm g;
  g.k = K;
  g.n = N;
  g.lda = K;
  g.ldb = N;
  g.ldc = N;
  g.dtype = a.dtype();
  g.c = out.data_ptr();
  Tensor ae, be;
  if (batch.empty()) {
    ae = cuda::contiguous(a);
    be = cuda::contiguous(b);
    g.m = a.numel() / K;
  } else {
    ae = detail::batch_operand(a, batch, g.stride_a);
    be = detail::batch_operand(b, batch, g.stride_b);
    g.m = M;
    g.stride_c = M * N;
    g.batch = batch.numel();
  }
  g.a = ae.data_ptr();
  g.b = be.data_ptr();
  detail::run_gemm(g, scope.index(), op);
}

/// torch.nn.functional.linear of CUDA tensors into `out`; `bias` may be undefined. A weight that
/// is a transposed view ([out, in] with unit stride along out) is also used without a copy.
inline void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) {
  constexpr const char* op = "linear";
  const std::int64_t K = weight.size(1), N = weight.size(0);
  assert(x.size(-1) == K && out.size(-1) == N && (!bias.defined() || bias.numel() == N));
  kernels::OpScope scope(out.device());
  const std::int64_t total = out.numel();
  const std::int64_t M = total / N;
  if (bias.defined()) {
    const Tensor bc = cuda::contiguous(bias);
    kernels::visit_word(out.dtype(), [&](auto w) {
      using W = decltype(w);
      detail::broadcast_rows_kernel<W><<<kernels::grid_for(total), kernels::block_threads, 0, scope.stream()>>>(
          static_cast<const W*>(bc.data_ptr()), static_cast<W*>(out.data_ptr()), N, total);
    });
    kernels::check_launch("broadcast_rows_kernel");
  }
  if (K == 0) {
    if (!bias.defined()) out.fill_(0.0);
    return;
  }
  detail::Gemm g;
  std::int64_t s0 = weight.stride(0), s1 = weight.stride(1);
  if (N == 1) s0 = K;  // a single row's stride is never followed
  if (K == 1) s1 = N;  // nor a single column's
  Tensor w = weight;
  if (s1 == 1 && s0 >= K) {
    g.b_transposed = true;
    g.ldb = s0;
  } else if (s0 == 1 && s1 >= N) {
    g.b_transposed = false;
    g.ldb = s1;
  } else {
    w = cuda::contiguous(weight);
    g.b_transposed = true;
    g.ldb = K;
  }
  const Tensor x2 = cuda::contiguous(x);
  g.m = M;
  g.n = N;
  g.k = K;
  g.a = x2.data_ptr();
  g.lda = K;
  g.b = w.data_ptr();
  g.c = out.data_ptr();
  g.ldc = N;
  g.beta = bias.defined() ? 1.0f : 0.0f;
  g.dtype = x.dtype();
  detail::run_gemm(g, scope.index(), op);
}

}  // namespace accel::cuda::ops

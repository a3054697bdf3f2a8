// matmul and linear on CUDA tensors through cuBLAS (nvcc only).
//
//   ops::matmul(a, b)            torch.matmul for >= 2-d operands, batch dims broadcast
//   ops::linear(x, w, bias)      x[..., in] w[out, in]^T + bias; w is read transposed in place
//
// f32, f16 and bf16 operands accumulate in f32 (CUBLAS_COMPUTE_32F, no TF32) and the result
// keeps the operands' dtype. The bias is written into the output first and added by the GEMM
// (beta = 1), so f16 / bf16 results are rounded once, as on the CPU.
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include "accel/backend/cuda/cublas.hpp"
#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/ops/op_support.hpp"

namespace accel::cuda::ops {

namespace detail {

inline cudaDataType_t cublas_dtype(DType d, const char* op) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default:
      throw DTypeError(std::string(op) + ": cuBLAS GEMM takes float32, float16 or bfloat16, got " +
                       std::string(dtype_name(d)));
  }
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
  const cudaDataType_t t = cublas_dtype(g.dtype, op);
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

/// torch's broadcast of two shapes, ShapeError naming `op` when they do not broadcast.
inline Shape broadcast(const char* op, const Shape& a, const Shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const std::int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(std::string(op) + ": shapes " + a.str() + " and " + b.str() + " are not broadcastable");
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (b.defined() && a.device() != b.device()) {
    throw DeviceError(std::string(op) + ": inputs are on different devices (" + accel::ops::detail::describe(a) +
                      ", " + accel::ops::detail::describe(b) + ")");
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

/// torch.matmul of CUDA tensors (see the header comment).
inline Tensor matmul(const Tensor& a, const Tensor& b) {
  constexpr const char* op = "matmul";
  accel::ops::detail::check_float(op, "a", a);
  accel::ops::detail::check_float(op, "b", b);
  accel::ops::detail::check_same_dtype(op, a, b);
  detail::check_same_device(op, a, b);
  if (a.dim() < 2 || b.dim() < 2) {
    throw ShapeError(std::string(op) + ": expected operands of at least 2 dimensions, got " + a.shape().str() +
                     " and " + b.shape().str());
  }
  const std::int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (b.size(-2) != K) {
    throw ShapeError(std::string(op) + ": shapes " + a.shape().str() + " and " + b.shape().str() +
                     " cannot be multiplied (" + std::to_string(K) + " columns vs " + std::to_string(b.size(-2)) +
                     " rows)");
  }
  kernels::OpScope scope(a.device(), op);
  const DType dt = a.dtype();
  if (b.dim() == 2) {
    Shape out_shape = a.shape();
    out_shape[out_shape.size() - 1] = N;
    Tensor out = Tensor::empty(out_shape, dt, scope.device());
    if (out.numel() == 0) return out;
    if (K == 0) return out.fill_(0.0);
    // Leading dims of `a` fold into M: one GEMM.
    const Tensor a2 = cuda::contiguous(a), b2 = cuda::contiguous(b);
    detail::Gemm g;
    g.m = a.numel() / K;
    g.n = N;
    g.k = K;
    g.a = a2.data_ptr();
    g.lda = K;
    g.b = b2.data_ptr();
    g.ldb = N;
    g.c = out.data_ptr();
    g.ldc = N;
    g.dtype = dt;
    detail::run_gemm(g, scope.index(), op);
    return out;
  }
  Shape batch = detail::broadcast(op, Shape(std::span<const std::int64_t>(a.shape().data(), a.dim() - 2)),
                                  Shape(std::span<const std::int64_t>(b.shape().data(), b.dim() - 2)));
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, dt, scope.device());
  if (out.numel() == 0) return out;
  if (K == 0) return out.fill_(0.0);
  detail::Gemm g;
  const Tensor ae = detail::batch_operand(a, batch, g.stride_a);
  const Tensor be = detail::batch_operand(b, batch, g.stride_b);
  g.m = M;
  g.n = N;
  g.k = K;
  g.a = ae.data_ptr();
  g.lda = K;
  g.b = be.data_ptr();
  g.ldb = N;
  g.c = out.data_ptr();
  g.ldc = N;
  g.stride_c = M * N;
  g.batch = batch.numel();
  g.dtype = dt;
  detail::run_gemm(g, scope.index(), op);
  return out;
}

/// torch.nn.functional.linear of CUDA tensors; `bias` may be undefined. A weight that is a
/// transposed view ([out, in] with unit stride along out) is also used without a copy.
inline Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  constexpr const char* op = "linear";
  accel::ops::detail::check_float(op, "input", x);
  accel::ops::detail::check_float(op, "weight", weight);
  accel::ops::detail::check_same_dtype(op, x, weight);
  if (bias.defined()) {
    accel::ops::detail::check_float(op, "bias", bias);
    accel::ops::detail::check_same_dtype(op, x, bias);
  }
  detail::check_same_device(op, x, weight);
  detail::check_same_device(op, x, bias);
  if (weight.dim() != 2 || x.dim() < 1 || x.size(-1) != weight.size(1)) {
    throw ShapeError(std::string(op) + ": input " + x.shape().str() + " and weight " + weight.shape().str() +
                     " do not match (expected weight [out_features, in_features])");
  }
  const std::int64_t K = weight.size(1), N = weight.size(0);
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != N)) {
    throw ShapeError(std::string(op) + ": bias " + bias.shape().str() + " does not match weight " +
                     weight.shape().str() + " (expected [" + std::to_string(N) + "])");
  }
  kernels::OpScope scope(x.device(), op);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = N;
  Tensor out = Tensor::empty(out_shape, x.dtype(), scope.device());
  const std::int64_t total = out.numel();
  if (total == 0) return out;
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
  if (K == 0) return bias.defined() ? out : out.fill_(0.0);
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
  return out;
}

}  // namespace accel::cuda::ops

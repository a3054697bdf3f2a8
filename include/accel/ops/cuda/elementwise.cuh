// Element-wise ops on CUDA tensors (nvcc only).
//
//   ops::add(a, b), ops::mul(a, b)   torch broadcasting; equal dtypes keep theirs, mixed -> f32
//   ops::gelu(x, approximate)        erf form, or torch's tanh approximation
//   ops::silu(x)                     x * sigmoid(x)
//
// Inputs are read through their strides (broadcast and transposed views need no copy); every
// value is computed in f32 and rounded once into the output dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "accel/backend/cuda/launch.cuh"
#include "accel/ops/cuda/gemm.cuh"
#include "accel/ops/cuda_table.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::cuda::ops {

namespace detail {

/// Output extents with both operands' strides, dims of extent 1 dropped and mergeable
/// neighbours merged, so common cases index with one or two divisions.
struct BinaryIndex {
  int nd = 0;
  std::int64_t shape[max_dims] = {};
  std::int64_t sa[max_dims] = {};
  std::int64_t sb[max_dims] = {};
};

inline BinaryIndex coalesce(const Shape& shape, const Shape& sa, const Shape& sb) {
  BinaryIndex c;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (c.nd > 0) {
      const int j = c.nd - 1;
      if (c.sa[j] == sa[i] * shape[i] && c.sb[j] == sb[i] * shape[i]) {
        c.shape[j] *= shape[i];
        c.sa[j] = sa[i];
        c.sb[j] = sb[i];
        continue;
      }
    }
    c.shape[c.nd] = shape[i];
    c.sa[c.nd] = sa[i];
    c.sb[c.nd] = sb[i];
    ++c.nd;
  }
  return c;
}

enum class BinaryKind : unsigned char { add, mul };

template <BinaryKind Kind>
__global__ void binary_kernel(const void* a, DType da, const void* b, DType db, void* out, DType dout,
                              BinaryIndex ix, std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) {
    std::int64_t rem = i, oa = 0, ob = 0;
    for (int d = ix.nd - 1; d >= 0; --d) {
      const std::int64_t k = rem % ix.shape[d];
      rem /= ix.shape[d];
      oa += k * ix.sa[d];
      ob += k * ix.sb[d];
    }
    const float x = kernels::load_f32(a, oa, da), y = kernels::load_f32(b, ob, db);
    kernels::store_f32(out, i, dout, Kind == BinaryKind::add ? x + y : x * y);
  }
}

template <BinaryKind Kind>
Tensor binary(const char* op, const Tensor& a, const Tensor& b) {
  accel::ops::detail::check_float(op, "a", a);
  accel::ops::detail::check_float(op, "b", b);
  check_same_device(op, a, b);
  const Shape shape = broadcast(op, a.shape(), b.shape());
  const DType rdt = a.dtype() == b.dtype() ? a.dtype() : DType::f32;
  kernels::OpScope scope(a.device(), op);
  Tensor out = Tensor::empty(shape, rdt, scope.device());
  const std::int64_t n = out.numel();
  if (n == 0) return out;
  const Tensor ae = a.expand(shape), be = b.expand(shape);
  const BinaryIndex ix = coalesce(shape, ae.strides(), be.strides());
  binary_kernel<Kind><<<kernels::grid_for(n), kernels::block_threads, 0, scope.stream()>>>(
      ae.data_ptr(), a.dtype(), be.data_ptr(), b.dtype(), out.data_ptr(), rdt, ix, n);
  kernels::check_launch(op);
  return out;
}

enum class UnaryKind : unsigned char { gelu_erf, gelu_tanh, silu };

template <UnaryKind Kind>
__global__ void unary_kernel(const void* x, void* out, DType d, kernels::StridedIndex ix, std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) {
    const float v = kernels::load_f32(x, ix.offset(i), d);
    float r;
    if constexpr (Kind == UnaryKind::gelu_erf) {
      r = 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
    } else if constexpr (Kind == UnaryKind::gelu_tanh) {
      const float inner = 0.79788456080286535588f * (v + 0.044715f * v * v * v);
      r = 0.5f * v * (1.0f + tanhf(inner));
    } else {
      r = v / (1.0f + expf(-v));
    }
    kernels::store_f32(out, i, d, r);
  }
}

template <UnaryKind Kind>
Tensor unary(const char* op, const Tensor& x) {
  accel::ops::detail::check_float(op, "input", x);
  kernels::OpScope scope(x.device(), op);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), scope.device());
  const std::int64_t n = out.numel();
  if (n == 0) return out;
  kernels::StridedIndex ix;
  if (x.is_contiguous()) {
    ix.nd = 1;
    ix.shape[0] = n;
    ix.strides[0] = 1;
  } else {
    ix = kernels::StridedIndex::of(x.shape(), x.strides());
  }
  unary_kernel<Kind><<<kernels::grid_for(n), kernels::block_threads, 0, scope.stream()>>>(
      x.data_ptr(), out.data_ptr(), x.dtype(), ix, n);
  kernels::check_launch(op);
  return out;
}

}  // namespace detail

/// a + b of CUDA tensors with torch broadcasting (see the header comment for dtypes).
inline Tensor add(const Tensor& a, const Tensor& b) { return detail::binary<detail::BinaryKind::add>("add", a, b); }

/// a * b of CUDA tensors with torch broadcasting.
inline Tensor mul(const Tensor& a, const Tensor& b) { return detail::binary<detail::BinaryKind::mul>("mul", a, b); }

/// GELU of a CUDA tensor: erf form, or the tanh approximation.
inline Tensor gelu(const Tensor& x, accel::ops::GeluApproximate approximate) {
  if (approximate == accel::ops::GeluApproximate::tanh) return detail::unary<detail::UnaryKind::gelu_tanh>("gelu", x);
  return detail::unary<detail::UnaryKind::gelu_erf>("gelu", x);
}

/// SiLU of a CUDA tensor.
inline Tensor silu(const Tensor& x) { return detail::unary<detail::UnaryKind::silu>("silu", x); }

}  // namespace accel::cuda::ops

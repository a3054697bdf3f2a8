// Element-wise ops on CUDA tensors (nvcc only): slots of the device backend, called by
// accel/ops/elementwise.hpp with validated arguments.
//
//   ops::add(a, b, out), ops::mul(a, b, out)   a, b already expanded to out's (broadcast) shape
//   ops::gelu(x, tanh_approximation, out)      erf form, or torch's tanh approximation
//   ops::silu(x, out)                          x * sigmoid(x)
//
// Inputs are read through their strides (broadcast and transposed views need no copy); every
// value is computed in f32 and rounded once into the output dtype.
#pragma once

#include <cassert>
#include <cmath>
#include <cstdint>

#include "accel/backend/cuda/launch.cuh"
#include "accel/core/tensor.hpp"

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
void binary(const char* op, const Tensor& a, const Tensor& b, Tensor& out) {
  assert(a.shape() == out.shape() && b.shape() == out.shape());
  kernels::OpScope scope(out.device());
  const std::int64_t n = out.numel();
  const BinaryIndex ix = coalesce(out.shape(), a.strides(), b.strides());
  binary_kernel<Kind><<<kernels::grid_for(n), kernels::block_threads, 0, scope.stream()>>>(
      a.data_ptr(), a.dtype(), b.data_ptr(), b.dtype(), out.data_ptr(), out.dtype(), ix, n);
  kernels::check_launch(op);
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
void unary(const char* op, const Tensor& x, Tensor& out) {
  assert(x.shape() == out.shape() && x.dtype() == out.dtype());
  kernels::OpScope scope(out.device());
  const std::int64_t n = out.numel();
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
}

}  // namespace detail

/// a + b of CUDA tensors already expanded to out's shape.
inline void add(const Tensor& a, const Tensor& b, Tensor& out) {
  detail::binary<detail::BinaryKind::add>("add", a, b, out);
}

/// a * b of CUDA tensors already expanded to out's shape.
inline void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  detail::binary<detail::BinaryKind::mul>("mul", a, b, out);
}

/// GELU of a CUDA tensor: erf form, or the tanh approximation.
inline void gelu(const Tensor& x, bool tanh_approximation, Tensor& out) {
  if (tanh_approximation) {
    detail::unary<detail::UnaryKind::gelu_tanh>("gelu", x, out);
  } else {
    detail::unary<detail::UnaryKind::gelu_erf>("gelu", x, out);
  }
}

/// SiLU of a CUDA tensor.
inline void silu(const Tensor& x, Tensor& out) { detail::unary<detail::UnaryKind::silu>("silu", x, out); }

}  // namespace accel::cuda::ops

// Gathers, rotations, reductions and joins on CUDA tensors (nvcc only).
//
//   ops::embedding(ids, weight)                          rows of weight, ids checked on the GPU
//   ops::rotary_embedding(x, pos, inv_freq, scaling, layout)   RoPE on x [B, H, T, D], validated by the host op
//   ops::argmax(x, dim)                                  int64, first maximum, NaN wins
//   ops::cat(xs, dim)                                    one 2-d copy per input
//
// Semantics are those of the CPU ops in accel/ops/ (same errors, same rounding recipe).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "accel/backend/cuda/float_codec.cuh"
#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/ops/cuda/gemm.cuh"
#include "accel/ops/cuda/norm.cuh"
#include "accel/ops/cuda_table.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::cuda::ops {

namespace detail {

template <class I>
__global__ void check_ids_kernel(const I* __restrict__ ids, std::int64_t count, std::int64_t rows,
                                 unsigned long long* __restrict__ first_bad) {
  ACCEL_GRID_STRIDE(i, count) {
    const auto id = static_cast<std::int64_t>(ids[i]);
    if (id < 0 || id >= rows) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

template <class W, class I>
__global__ void embedding_kernel(const I* __restrict__ ids, const W* __restrict__ weight, W* __restrict__ out,
                                 std::int64_t total, std::int64_t dim, std::int64_t rows) {
  ACCEL_GRID_STRIDE(i, total) {
    const auto id = static_cast<std::int64_t>(ids[i / dim]);
    out[i] = (id >= 0 && id < rows) ? weight[id * dim + i % dim] : W{};
  }
}

template <int = 0>  // a template, so several .cu files may include this header
__global__ void rotary_kernel(const void* x, void* out, DType d, const void* pos, bool pos64, bool per_batch,
                              std::int64_t H, std::int64_t T, std::int64_t D, std::int64_t rd, bool interleaved,
                              const double* __restrict__ inv_freq, double scaling, std::int64_t total) {
  ACCEL_GRID_STRIDE(i, total) {
    const std::int64_t j = i % D, row = i / D;
    if (j >= rd) {
      kernels::store_f32(out, i, d, kernels::load_f32(x, i, d));
      continue;
    }
    const std::int64_t t = row % T, b = row / T / H, half = rd / 2;
    const std::int64_t pair = interleaved ? j / 2 : (j < half ? j : j - half);
    const std::int64_t i0 = interleaved ? 2 * pair : pair, i1 = interleaved ? 2 * pair + 1 : pair + half;
    const std::int64_t pi = per_batch ? b * T + t : t;
    const double p = pos64 ? static_cast<double>(static_cast<const std::int64_t*>(pos)[pi])
                           : static_cast<double>(static_cast<const std::int32_t*>(pos)[pi]);
    const double angle = p * inv_freq[pair];
    const auto c = static_cast<float>(cos(angle) * scaling), s = static_cast<float>(sin(angle) * scaling);
    const std::int64_t base = i - j;
    const float x0 = kernels::load_f32(x, base + i0, d), x1 = kernels::load_f32(x, base + i1, d);
    kernels::store_f32(out, i, d, j == i0 ? x0 * c - x1 * s : x1 * c + x0 * s);
  }
}

/// Compute type of argmax for dtype D: exact for every integer, f32 for the small floats.
template <DType D>
using argmax_value_t = std::conditional_t<D == DType::f64, double,
                                          std::conditional_t<is_floating_point(D), float, std::int64_t>>;

template <DType D>
__device__ inline argmax_value_t<D> argmax_load(const void* p, std::int64_t i) {
  if constexpr (D == DType::f64) return static_cast<const double*>(p)[i];
  else if constexpr (D == DType::f32) return static_cast<const float*>(p)[i];
  else if constexpr (D == DType::f16) return codec::decode<codec::f16>(static_cast<const std::uint16_t*>(p)[i]);
  else if constexpr (D == DType::bf16) return codec::decode<codec::bf16>(static_cast<const std::uint16_t*>(p)[i]);
  else if constexpr (D == DType::f8_e4m3fn) return codec::decode<codec::e4m3fn>(static_cast<const std::uint8_t*>(p)[i]);
  else if constexpr (D == DType::f8_e5m2) return codec::decode<codec::e5m2>(static_cast<const std::uint8_t*>(p)[i]);
  else if constexpr (D == DType::i64) return static_cast<const std::int64_t*>(p)[i];
  else if constexpr (D == DType::i32) return static_cast<const std::int32_t*>(p)[i];
  else if constexpr (D == DType::i16) return static_cast<const std::int16_t*>(p)[i];
  else if constexpr (D == DType::i8) return static_cast<const std::int8_t*>(p)[i];
  else return static_cast<const std::uint8_t*>(p)[i];  // u8 and bool (one byte, 0 or 1)
}

/// True when candidate (v, i) beats (bv, bi): NaN beats numbers, then larger, then lower index.
template <class V>
__device__ inline bool argmax_better(V v, std::int64_t i, V bv, std::int64_t bi) {
  if (bi < 0) return true;
  if constexpr (std::is_floating_point_v<V>) {
    const bool vn = v != v, bn = bv != bv;
    if (vn || bn) return vn && (!bn || i < bi);
  }
  return v > bv || (v == bv && i < bi);
}

inline constexpr int argmax_threads = 256;

// One block per output position; each thread scans a strided subset, then a tree reduction.
template <DType D>
__global__ void argmax_kernel(const void* x, std::int64_t* out, std::int64_t positions, std::int64_t n,
                              std::int64_t inner) {
  using V = argmax_value_t<D>;
  __shared__ V sv[argmax_threads];
  __shared__ std::int64_t si[argmax_threads];
  for (std::int64_t pos = blockIdx.x; pos < positions; pos += gridDim.x) {
    const std::int64_t base = (pos / inner) * n * inner + pos % inner;
    V best{};
    std::int64_t bi = -1;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const V v = argmax_load<D>(x, base + j * inner);
      if (argmax_better(v, j, best, bi)) {
        best = v;
        bi = j;
      }
    }
    __syncthreads();  // the previous position's result has been written
    sv[threadIdx.x] = best;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s && si[threadIdx.x + s] >= 0 &&
          argmax_better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
        sv[threadIdx.x] = sv[threadIdx.x + s];
        si[threadIdx.x] = si[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[pos] = si[0];
  }
}

/// Calls f(std::integral_constant<DType, d>{}) for any dtype.
template <class F>
void visit_dtype_constant(DType d, F&& f) {
  switch (d) {
    case DType::f64: f(std::integral_constant<DType, DType::f64>{}); break;
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); break;
    case DType::f16: f(std::integral_constant<DType, DType::f16>{}); break;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); break;
    case DType::f8_e4m3fn: f(std::integral_constant<DType, DType::f8_e4m3fn>{}); break;
    case DType::f8_e5m2: f(std::integral_constant<DType, DType::f8_e5m2>{}); break;
    case DType::i64: f(std::integral_constant<DType, DType::i64>{}); break;
    case DType::i32: f(std::integral_constant<DType, DType::i32>{}); break;
    case DType::i16: f(std::integral_constant<DType, DType::i16>{}); break;
    case DType::i8: f(std::integral_constant<DType, DType::i8>{}); break;
    case DType::u8: f(std::integral_constant<DType, DType::u8>{}); break;
    case DType::boolean: f(std::integral_constant<DType, DType::boolean>{}); break;
  }
}

inline void check_index_dtype(const char* op, const char* name, const Tensor& t) {
  accel::ops::detail::check_defined(op, name, t);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32) {
    throw DTypeError(std::string(op) + ": " + name + " must be int64 or int32, got " + accel::ops::detail::describe(t));
  }
}

}  // namespace detail

/// torch.nn.functional.embedding of CUDA tensors; an id outside [0, rows) is a ValueError
/// (checked on the GPU; reading the verdict waits for the op's stream).
inline Tensor embedding(const Tensor& ids, const Tensor& weight) {
  constexpr const char* op = "embedding";
  detail::check_index_dtype(op, "ids", ids);
  accel::ops::detail::check_defined(op, "weight", weight);
  detail::check_same_device(op, ids, weight);
  if (weight.dim() != 2) throw ShapeError(std::string(op) + ": weight must be [num_embeddings, dim], got " + weight.shape().str());
  kernels::OpScope scope(ids.device(), op);
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(out_shape, weight.dtype(), scope.device());
  const std::int64_t count = ids.numel(), dim = weight.size(1), rows = weight.size(0);
  if (count == 0) return out;
  const Tensor idc = cuda::contiguous(ids), wc = cuda::contiguous(weight);
  Tensor flag = Tensor::empty(Shape{1}, DType::i64, scope.device());
  check(cudaMemsetAsync(flag.data_ptr(), 0xff, sizeof(unsigned long long), scope.stream()), "cudaMemsetAsync");
  auto* bad = static_cast<unsigned long long*>(flag.data_ptr());
  const std::int64_t total = count * dim;
  auto launch = [&](auto id_tag) {
    using I = decltype(id_tag);
    const I* idp = static_cast<const I*>(idc.data_ptr());
    detail::check_ids_kernel<I><<<kernels::grid_for(count), kernels::block_threads, 0, scope.stream()>>>(idp, count, rows, bad);
    if (total == 0) return;
    kernels::visit_word(weight.dtype(), [&](auto w) {
      using W = decltype(w);
      detail::embedding_kernel<W, I><<<kernels::grid_for(total), kernels::block_threads, 0, scope.stream()>>>(
          idp, static_cast<const W*>(wc.data_ptr()), static_cast<W*>(out.data_ptr()), total, dim, rows);
    });
  };
  if (ids.dtype() == DType::i64) launch(std::int64_t{});
  else launch(std::int32_t{});
  kernels::check_launch("embedding_kernel");
  unsigned long long first_bad = 0;
  check(cudaMemcpyAsync(&first_bad, bad, sizeof first_bad, cudaMemcpyDeviceToHost, scope.stream()), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(scope.stream()), "cudaStreamSynchronize");
  if (first_bad != ULLONG_MAX) {
    const auto at = static_cast<std::int64_t>(first_bad);
    const std::int64_t id = idc.flatten().at<std::int64_t>({at});
    throw ValueError(std::string(op) + ": id " + std::to_string(id) + " at flat position " + std::to_string(at) +
                     " is out of range for a table of " + std::to_string(rows) + " rows (weight " +
                     weight.shape().str() + ")");
  }
  return out;
}

/// Rotary position embedding of a CUDA x [B, H, T, D] (see accel::ops::rotary_embedding).
/// RoPE on a CUDA x [B, H, T, D] with the frequencies the host op computed. The host op
/// (accel/ops/embedding.hpp) has validated every argument: this slot only launches.
inline Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const std::vector<double>& inv_freq,
                               double attention_scaling, accel::ops::RopeLayout layout) {
  constexpr const char* op = "rotary_embedding";
  const std::int64_t H = x.size(1), T = x.size(2), D = x.size(3);
  const auto rd = static_cast<std::int64_t>(2 * inv_freq.size());
  kernels::OpScope scope(x.device(), op);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), scope.device());
  const std::int64_t total = out.numel();
  if (total == 0) return out;
  const Tensor xc = cuda::contiguous(x), pc = cuda::contiguous(positions);
  const Tensor freqs = inv_freq.empty() ? Tensor::zeros({1}, DType::f64, scope.device())
                                        : Tensor::from_vector(inv_freq).to(scope.device());
  detail::rotary_kernel<><<<kernels::grid_for(total), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), out.data_ptr(), x.dtype(), pc.data_ptr(), positions.dtype() == DType::i64, positions.dim() == 2, H,
      T, D, rd, layout == accel::ops::RopeLayout::interleaved, static_cast<const double*>(freqs.data_ptr()),
      attention_scaling, total);
  kernels::check_launch("rotary_kernel");
  return out;
}

/// Index (int64) of the first maximum along `dim` of a CUDA tensor; the dim is dropped.
inline Tensor argmax(const Tensor& x, std::int64_t dim) {
  constexpr const char* op = "argmax";
  accel::ops::detail::check_defined(op, "input", x);
  if (x.dim() == 0) throw ShapeError(std::string(op) + ": expected at least a 1-d input, got a scalar");
  const std::size_t d = wrap_dim(dim, x.dim(), op);
  const std::int64_t n = x.shape()[d];
  if (n == 0) {
    throw ShapeError(std::string(op) + ": cannot reduce over dimension " + std::to_string(dim) + " of size 0 (shape " +
                     x.shape().str() + ")");
  }
  kernels::OpScope scope(x.device(), op);
  Shape out_shape = x.shape();
  out_shape.erase(d);
  Tensor out = Tensor::empty(out_shape, DType::i64, scope.device());
  const std::int64_t positions = out.numel();
  if (positions == 0) return out;
  const Tensor xc = cuda::contiguous(x);
  std::int64_t inner = 1;
  for (std::size_t i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  detail::visit_dtype_constant(x.dtype(), [&](auto tag) {
    detail::argmax_kernel<decltype(tag)::value>
        <<<detail::row_blocks(positions), detail::argmax_threads, 0, scope.stream()>>>(
            xc.data_ptr(), out.data_ptr<std::int64_t>(), positions, n, inner);
  });
  kernels::check_launch("argmax_kernel");
  return out;
}

/// torch.cat of CUDA tensors along `dim`; 1-d empty tensors are skipped, as torch does.
inline Tensor cat(const std::vector<Tensor>& xs, std::int64_t dim) {
  constexpr const char* op = "cat";
  if (xs.empty()) throw ValueError(std::string(op) + ": expected a non-empty list of tensors");
  auto skippable = [](const Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  std::size_t ref = 0;
  while (ref < xs.size() && xs[ref].defined() && skippable(xs[ref])) ++ref;
  if (ref == xs.size()) ref = 0;
  const Tensor& r = xs[ref];
  accel::ops::detail::check_defined(op, "xs[ref]", r);
  if (r.dim() == 0) throw ShapeError(std::string(op) + ": zero-dimensional tensors cannot be concatenated");
  const std::size_t d = wrap_dim(dim, r.dim(), op);
  Shape out_shape = r.shape();
  std::int64_t total = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    accel::ops::detail::check_defined(op, "xs[i]", t);
    if (t.dtype() != r.dtype()) {
      throw DTypeError(std::string(op) + ": tensor " + std::to_string(i) + " is " + accel::ops::detail::describe(t) +
                       " but tensor " + std::to_string(ref) + " is " + accel::ops::detail::describe(r));
    }
    detail::check_same_device(op, r, t);
    if (i != ref && skippable(t) && r.dim() != 1) continue;
    bool ok = t.dim() == r.dim();
    for (std::size_t j = 0; ok && j < r.dim(); ++j) ok = j == d || t.shape()[j] == r.shape()[j];
    if (!ok) {
      throw ShapeError(std::string(op) + ": tensor " + std::to_string(i) + " has shape " + t.shape().str() +
                       " but tensor " + std::to_string(ref) + " has shape " + r.shape().str() +
                       "; they must match except in dimension " + std::to_string(d));
    }
    total += t.shape()[d];
  }
  out_shape[d] = total;
  kernels::OpScope scope(r.device(), op);
  Tensor out = Tensor::empty(out_shape, r.dtype(), scope.device());
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= out_shape[i];
  for (std::size_t i = d + 1; i < out_shape.size(); ++i) inner *= out_shape[i];
  if (out.numel() == 0) return out;
  const std::size_t isz = out.element_size();
  const std::size_t dst_pitch = static_cast<std::size_t>(total * inner) * isz;
  std::int64_t off = 0;
  for (const Tensor& t : xs) {
    if (skippable(t) && r.dim() != 1) continue;
    const std::int64_t len = t.shape()[d];
    if (len > 0) {
      const Tensor tc = cuda::contiguous(t);
      const std::size_t width = static_cast<std::size_t>(len * inner) * isz;
      check(cudaMemcpy2DAsync(static_cast<std::byte*>(out.data_ptr()) + static_cast<std::size_t>(off * inner) * isz,
                              dst_pitch, tc.data_ptr(), width, width, static_cast<std::size_t>(outer),
                              cudaMemcpyDeviceToDevice, scope.stream()),
            "cudaMemcpy2DAsync (cat)");
    }
    off += len;
  }
  return out;
}

}  // namespace accel::cuda::ops

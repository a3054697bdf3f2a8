// Gathers, rotations, reductions and joins on CUDA tensors (nvcc only): slots of the device
// backend, called by the host ops in accel/ops/ with validated arguments.
//
//   ops::embedding(ids, weight, out)                  rows of weight, ids range-checked on the GPU
//   ops::rotary_embedding(x, pos, inv_freq, scaling, interleaved, out)   RoPE on x [B, H, T, D]
//   ops::argmax(x, dim, out)                          int64, first maximum, NaN wins
//   ops::cat(xs, dim, out)                            one 2-d copy per input with elements
//
// Semantics are those of the CPU ops (same errors, same rounding recipe).
#pragma once

#include <cassert>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/core/dtype.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/cuda/norm.cuh"

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

/// Element i of a dtype-D array in argmax's compute type (small floats decode exactly).
template <DType D>
__device__ inline argmax_value_t<D> argmax_load(const void* p, std::int64_t i) {
  return static_cast<argmax_value_t<D>>(static_cast<const cpp_type_t<D>*>(p)[i]);
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

}  // namespace detail

/// torch.nn.functional.embedding of CUDA tensors into `out`; an id outside [0, rows) is a
/// ValueError (checked on the GPU; reading the verdict waits for the op's stream). Called
/// whenever there are ids, even for rows of width 0, so that bad ids are always reported.
inline void embedding(const Tensor& ids, const Tensor& weight, Tensor& out) {
  assert((ids.dtype() == DType::i64 || ids.dtype() == DType::i32) && weight.dim() == 2);
  kernels::OpScope scope(out.device());
  const std::int64_t count = ids.numel(), dim = weight.size(1), rows = weight.size(0);
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
    throw ValueError("embedding: id " + std::to_string(id) + " at flat position " + std::to_string(at) +
                     " is out of range for a table of " + std::to_string(rows) + " rows (weight " +
                     weight.shape().str() + ")");
  }
}

/// RoPE on a CUDA x [B, H, T, D] into `out`, with the frequencies the host op computed.
inline void rotary_embedding(const Tensor& x, const Tensor& positions, const std::vector<double>& inv_freq,
                             double attention_scaling, bool interleaved, Tensor& out) {
  const std::int64_t H = x.size(1), T = x.size(2), D = x.size(3);
  const auto rd = static_cast<std::int64_t>(2 * inv_freq.size());
  assert(x.dim() == 4 && rd <= D && x.shape() == out.shape());
  kernels::OpScope scope(out.device());
  const std::int64_t total = out.numel();
  const Tensor xc = cuda::contiguous(x), pc = cuda::contiguous(positions);
  const Tensor freqs = inv_freq.empty() ? Tensor::zeros({1}, DType::f64, scope.device())
                                        : Tensor::from_vector(inv_freq).to(scope.device());
  detail::rotary_kernel<><<<kernels::grid_for(total), kernels::block_threads, 0, scope.stream()>>>(
      xc.data_ptr(), out.data_ptr(), x.dtype(), pc.data_ptr(), positions.dtype() == DType::i64, positions.dim() == 2, H,
      T, D, rd, interleaved, static_cast<const double*>(freqs.data_ptr()), attention_scaling, total);
  kernels::check_launch("rotary_kernel");
}

/// Index (int64) of the first maximum along `dim` (already wrapped) of a CUDA tensor into `out`.
inline void argmax(const Tensor& x, std::size_t dim, Tensor& out) {
  const std::int64_t n = x.shape()[dim];
  assert(dim < x.dim() && n > 0 && out.dtype() == DType::i64);
  kernels::OpScope scope(out.device());
  const std::int64_t positions = out.numel();
  const Tensor xc = cuda::contiguous(x);
  std::int64_t inner = 1;
  for (std::size_t i = dim + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  visit_dtype_constant(x.dtype(), [&](auto tag) {
    detail::argmax_kernel<decltype(tag)::value>
        <<<detail::row_blocks(positions), detail::argmax_threads, 0, scope.stream()>>>(
            xc.data_ptr(), out.data_ptr<std::int64_t>(), positions, n, inner);
  });
  kernels::check_launch("argmax_kernel");
}

/// torch.cat of CUDA tensors along `dim` (already wrapped) into `out`; one 2-d copy per input.
inline void cat(const std::vector<Tensor>& xs, std::size_t dim, Tensor& out) {
  assert(dim < out.dim());
  kernels::OpScope scope(out.device());
  const Shape& out_shape = out.shape();
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < dim; ++i) outer *= out_shape[i];
  for (std::size_t i = dim + 1; i < out_shape.size(); ++i) inner *= out_shape[i];
  const std::size_t isz = out.element_size();
  const std::size_t dst_pitch = static_cast<std::size_t>(out_shape[dim] * inner) * isz;
  std::int64_t off = 0;
  for (const Tensor& t : xs) {
    if (t.numel() == 0) continue;  // legacy 1-d empties, and inputs of extent 0 along dim
    assert(t.dim() == out.dim() && t.dtype() == out.dtype());
    const std::int64_t len = t.shape()[dim];
    const Tensor tc = cuda::contiguous(t);
    const std::size_t width = static_cast<std::size_t>(len * inner) * isz;
    check(cudaMemcpy2DAsync(static_cast<std::byte*>(out.data_ptr()) + static_cast<std::size_t>(off * inner) * isz,
                            dst_pitch, tc.data_ptr(), width, width, static_cast<std::size_t>(outer),
                            cudaMemcpyDeviceToDevice, scope.stream()),
          "cudaMemcpy2DAsync (cat)");
    off += len;
  }
}

}  // namespace accel::cuda::ops

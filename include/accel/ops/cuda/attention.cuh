// scaled_dot_product_attention on CUDA tensors (nvcc only): the slot of the device backend,
// called by accel/ops/attention.hpp with validated shapes and a resolved scale.
//
//   ops::scaled_dot_product_attention(q [B,Hq,T,D], k [B,Hkv,S,D], v [B,Hkv,S,Dv], is_causal, scale,
//                                     window, out [B,Hq,T,Dv])
//
// One block per query row (b, h, t). Keys are visited in tiles of `sdpa_tile`: scores of a tile
// go to shared memory, and a running max / sum rescale the f32 accumulator (online softmax), so
// any S fits. The causal mask is end-aligned (query t sees keys s <= S - T + t); a query that
// sees no key gets a zero row. Grouped heads: query head h reads kv head h / (Hq / Hkv).
#pragma once

#include <cassert>
#include <cmath>
#include <cstdint>
#include <string>

#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/core/tensor.hpp"
#include "accel/ops/cuda/norm.cuh"

namespace accel::cuda::ops {

namespace detail {

inline constexpr int sdpa_threads = 128;
inline constexpr int sdpa_tile = 128;

// Dynamic shared memory: q row [D] | tile scores [sdpa_tile] | accumulator [Dv] | scratch [33].
template <int = 0>  // a template, so several .cu files may include this header
__global__ void sdpa_kernel(const void* q, const void* k, const void* v, void* out, DType dt, std::int64_t Hq,
                            std::int64_t Hkv, std::int64_t T, std::int64_t S, std::int64_t D, std::int64_t Dv,
                            float scale, bool causal, std::int64_t window, std::int64_t rows) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* sc = qs + D;
  float* acc = sc + sdpa_tile;
  float* scratch = acc + Dv;
  const std::int64_t group = Hq / Hkv;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t t = r % T, bh = r / T, h = bh % Hq, b = bh / Hq;
    const std::int64_t kv = b * Hkv + h / group;
    std::int64_t visible = S;
    if (causal) {
      const std::int64_t last = S - T + t + 1;  // keys [0, last) are visible
      visible = last < 0 ? 0 : (last > S ? S : last);
    }
    const std::int64_t first = window > 0 && visible > window ? visible - window : 0;  // sliding window
    __syncthreads();  // the previous row is done with shared memory
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) qs[j] = kernels::load_f32(q, r * D + j, dt);
    for (std::int64_t j = threadIdx.x; j < Dv; j += blockDim.x) acc[j] = 0.0f;
    __syncthreads();
    float m = -INFINITY, l = 0.0f;  // identical in every thread: both come from block reductions
    for (std::int64_t s0 = first; s0 < visible; s0 += sdpa_tile) {
      const std::int64_t cnt = visible - s0 < sdpa_tile ? visible - s0 : sdpa_tile;
      float local_max = -INFINITY;
      for (std::int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
        const std::int64_t kb = (kv * S + s0 + i) * D;
        float dot = 0.0f;
        for (std::int64_t j = 0; j < D; ++j) dot += qs[j] * kernels::load_f32(k, kb + j, dt);
        sc[i] = dot * scale;
        local_max = fmaxf(local_max, sc[i]);
      }
      const float new_m = fmaxf(m, kernels::block_max(local_max, scratch));
      const float correction = expf(m - new_m);
      float local_sum = 0.0f;
      for (std::int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
        const float p = expf(sc[i] - new_m);
        sc[i] = p;
        local_sum += p;
      }
      l = l * correction + kernels::block_sum(local_sum, scratch);  // also publishes sc[]
      for (std::int64_t j = threadIdx.x; j < Dv; j += blockDim.x) {
        float a = acc[j] * correction;
        for (std::int64_t i = 0; i < cnt; ++i) a += sc[i] * kernels::load_f32(v, (kv * S + s0 + i) * Dv + j, dt);
        acc[j] = a;
      }
      m = new_m;
      __syncthreads();  // sc[] is rewritten by the next tile
    }
    for (std::int64_t j = threadIdx.x; j < Dv; j += blockDim.x) {
      kernels::store_f32(out, r * Dv + j, dt, visible > first ? acc[j] / l : 0.0f);
    }
  }
}

}  // namespace detail

/// Attention softmax(q k^T * scale [+ causal mask, sliding window]) v of CUDA tensors into `out`.
/// Head dims past what the kernel keeps in shared memory are a ValueError: that limit is this
/// kernel's own, not the op's.
inline void scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                         double scale, std::int64_t sliding_window, Tensor& out) {
  const std::int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const std::int64_t Hkv = k.size(1), S = k.size(2), Dv = v.size(3);
  assert(Hkv > 0 && Hq % Hkv == 0 && k.size(3) == D && out.numel() == B * Hq * T * Dv);
  const std::size_t smem = static_cast<std::size_t>(D + detail::sdpa_tile + Dv + 33) * sizeof(float);
  if (smem > 48 * 1024) {
    throw ValueError("scaled_dot_product_attention: head dims D = " + std::to_string(D) + ", Dv = " +
                     std::to_string(Dv) + " exceed what the CUDA kernel keeps in shared memory (D + Dv <= 12000)");
  }
  kernels::OpScope scope(out.device());
  const std::int64_t rows = B * Hq * T;
  const Tensor qc = cuda::contiguous(q), kc = cuda::contiguous(k), vc = cuda::contiguous(v);
  detail::sdpa_kernel<><<<detail::row_blocks(rows), detail::sdpa_threads, smem, scope.stream()>>>(
      qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), q.dtype(), Hq, Hkv, T, S, D, Dv,
      static_cast<float>(scale), is_causal, sliding_window, rows);
  kernels::check_launch("sdpa_kernel");
}

}  // namespace accel::cuda::ops

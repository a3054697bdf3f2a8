// What the packed-weight GEMVs of quant/kernels/cuda/ share (nvcc only): the launch shape (a warp per
// output row, up to gemv_max_rows activation rows), activations read eight at a time as float32
// from float32 or bfloat16, the dot product of a decoded run of weights with those rows, and the
// store that adds the bias and rounds once to x's dtype.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "accel/backend/cuda/launch.cuh"
#include "accel/core/float_types.hpp"

namespace accel::cuda::quant_kernels {

using kernels::block_threads;
using kernels::check_launch;
using kernels::grid_for;
using kernels::OpScope;
using kernels::store_f32;
using kernels::warp_sum;

/// Activation rows a GEMV launch takes (the slots' contract).
inline constexpr int gemv_max_rows = 8;
/// Output rows per thread block of the GEMVs: one warp each.
inline constexpr int gemv_warps = 4;

inline unsigned gemv_grid(std::int64_t out) { return static_cast<unsigned>((out + gemv_warps - 1) / gemv_warps); }

/// Eight activations from x (float32 or bfloat16, 16-byte aligned at p) as float32.
__device__ inline void load8(const float* p, float* v) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ inline void load8(const accel::bfloat16* p, float* v) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);  // bfloat16 is the top half of a float32
    v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

/// The warp's sums for output row r, plus the bias, rounded once into y (x's dtype).
template <class XT>
__device__ inline void gemv_store(float (&acc)[gemv_max_rows], int n, int lane, std::int64_t r, std::int64_t out,
                                  const void* bias, DType bias_dtype, XT* y) {
  const float b = bias ? kernels::load_f32(bias, r, bias_dtype) : 0.0f;
#pragma unroll
  for (int t = 0; t < gemv_max_rows; ++t) {
    if (t < n) {
      const float s = warp_sum(acc[t]);
      if (lane == 0) y[t * out + r] = static_cast<XT>(s + b);
    }
  }
}

/// Dots `v` (G decoded weights) with activations [k0, k0 + G) of up to 8 rows of x.
template <int G, class XT>
__device__ inline void dot_rows(const float* v, const XT* x, std::int64_t in, std::int64_t k0, int n,
                                float (&acc)[gemv_max_rows]) {
#pragma unroll
  for (int t = 0; t < gemv_max_rows; ++t) {
    if (t < n) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < G; j += 8) {
        float xv[8];
        load8(x + t * in + k0 + j, xv);
#pragma unroll
        for (int i = 0; i < 8; ++i) s += v[j + i] * xv[i];
      }
      acc[t] += s;
    }
  }
}

/// Calls f(XT*) with x's element type (float32 or bfloat16: the slots' contract).
template <class F>
void with_x_type(DType d, F&& f) {
  if (d == DType::bf16) {
    f(static_cast<accel::bfloat16*>(nullptr));
  } else {
    f(static_cast<float*>(nullptr));
  }
}

}  // namespace accel::cuda::quant_kernels

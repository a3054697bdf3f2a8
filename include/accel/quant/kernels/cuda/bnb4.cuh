// bitsandbytes NF4 / FP4 on a GPU (nvcc only): decoding and the GEMV (16 bytes a lane a step).
#pragma once

#include <cstdint>
#include <cstring>

#include "accel/quant/kernels/cuda/gemv.cuh"

namespace accel::cuda::quant_kernels {

/// The 16 decoded code values, passed by value into the kernels' parameter space.
struct Lut16 {
  float v[16];
};

inline Lut16 make_lut(const float* lut) {
  Lut16 l;
  std::memcpy(l.v, lut, sizeof(l.v));
  return l;
}

__global__ void bnb4_dequantize_kernel(const std::uint8_t* p, const float* absmax, Lut16 lut, int shift,
                                       std::int64_t n, void* out, DType dt) {
  ACCEL_GRID_STRIDE(i, (n + 1) / 2) {
    const std::uint8_t b = p[i];
    const std::int64_t e = 2 * i;
    store_f32(out, e, dt, lut.v[b >> 4] * absmax[e >> shift]);
    if (e + 1 < n) store_f32(out, e + 1, dt, lut.v[b & 0x0F] * absmax[(e + 1) >> shift]);
  }
}

/// Each lane takes 32 weights (16 bytes) per step; needs in % 32 == 0 (the caller checks), so a
/// step stays in its row and its absmax block (blocks are >= 32 and powers of two).
template <class XT>
__global__ void bnb4_gemv_kernel(const std::uint8_t* p, const float* absmax, Lut16 lut, int shift, std::int64_t in,
                                 std::int64_t out, const XT* x, int n, const void* bias, DType bias_dtype, XT* y) {
  __shared__ float table[16];
  if (threadIdx.x < 16) table[threadIdx.x] = lut.v[threadIdx.x];
  __syncthreads();
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * gemv_warps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (r >= out) return;
  float acc[gemv_max_rows] = {};
  for (std::int64_t k = 32 * lane; k < in; k += 32 * 32) {
    const std::int64_t e = r * in + k;
    const uint4 raw = *reinterpret_cast<const uint4*>(p + e / 2);
    const float a = absmax[e >> shift];
    const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    float wv[32];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int byte = 0; byte < 4; ++byte) {
        const std::uint32_t b = (words[q] >> (8 * byte)) & 0xFFu;
        wv[8 * q + 2 * byte] = table[b >> 4] * a;
        wv[8 * q + 2 * byte + 1] = table[b & 0x0F] * a;
      }
    }
    dot_rows<32>(wv, x, in, k, n, acc);
  }
  gemv_store(acc, n, lane, r, out, bias, bias_dtype, y);
}

inline int log2_of(std::int64_t v) {
  int s = 0;
  while ((std::int64_t{1} << s) < v) ++s;
  return s;
}

inline void bnb4_dequantize(const Tensor& packed, const Tensor& absmax, const float* lut, std::int64_t blocksize,
                            Tensor& out) {
  OpScope scope(packed.device());
  const std::int64_t n = out.numel();
  bnb4_dequantize_kernel<<<grid_for((n + 1) / 2), block_threads, 0, scope.stream()>>>(
      static_cast<const std::uint8_t*>(packed.data_ptr()), static_cast<const float*>(absmax.data_ptr()), make_lut(lut),
      log2_of(blocksize), n, out.data_ptr(), out.dtype());
  check_launch("bnb4_dequantize");
}

inline void bnb4_gemv(const Tensor& x, const Tensor& packed, const Tensor& absmax, const float* lut,
                      std::int64_t blocksize, const Tensor& bias, Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  with_x_type(x.dtype(), [&](auto* xt) {
    using XT = std::remove_pointer_t<decltype(xt)>;
    bnb4_gemv_kernel<XT><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(
        static_cast<const std::uint8_t*>(packed.data_ptr()), static_cast<const float*>(absmax.data_ptr()),
        make_lut(lut), log2_of(blocksize), in, rows, static_cast<const XT*>(x.data_ptr()), static_cast<int>(n),
        bias.defined() ? bias.data_ptr() : nullptr, bias.defined() ? bias.dtype() : DType::f32,
        static_cast<XT*>(out.data_ptr()));
  });
  check_launch("bnb4_gemv");
}

}  // namespace accel::cuda::quant_kernels

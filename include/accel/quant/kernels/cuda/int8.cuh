// Row-scaled int8 weights on a GPU (nvcc only): W[r, k] = codes[r, k] * scale[r] * multiplier, the
// layout of LLM.int8 (CB, SCB / 127) and of Quanto / TorchAO int8 per channel (multiplier 1).
#pragma once

#include <cstdint>

#include "accel/quant/kernels/cuda/gemv.cuh"

namespace accel::cuda::quant_kernels {

__global__ void int8_dequantize_kernel(const std::int8_t* codes, const float* scale, float multiplier, std::int64_t in,
                                       std::int64_t n, void* out, DType dt) {
  ACCEL_GRID_STRIDE(i, n) store_f32(out, i, dt, static_cast<float>(codes[i]) * scale[i / in] * multiplier);
}

/// Each lane takes 16 codes per step when in % 16 == 0, one otherwise.
template <bool Wide, class XT>
__global__ void int8_gemv_kernel(const std::int8_t* codes, const float* scale, float multiplier, std::int64_t in,
                                 std::int64_t out, const XT* x, int n, const void* bias, DType bias_dtype, XT* y) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * gemv_warps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (r >= out) return;
  const std::int8_t* row = codes + r * in;
  float acc[gemv_max_rows] = {};
  if constexpr (Wide) {
    for (std::int64_t k = 16 * lane; k < in; k += 16 * 32) {
      const int4 raw = *reinterpret_cast<const int4*>(row + k);
      const int words[4] = {raw.x, raw.y, raw.z, raw.w};
      float wv[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) wv[j] = static_cast<float>(static_cast<std::int8_t>((words[j / 4] >> (8 * (j % 4))) & 0xFF));
      dot_rows<16>(wv, x, in, k, n, acc);
    }
  } else {
    for (std::int64_t k = lane; k < in; k += 32) {
      const float wv = static_cast<float>(row[k]);
#pragma unroll
      for (int t = 0; t < gemv_max_rows; ++t) {
        if (t < n) acc[t] += wv * static_cast<float>(x[t * in + k]);
      }
    }
  }
  const float rs = scale[r] * multiplier;
#pragma unroll
  for (int t = 0; t < gemv_max_rows; ++t) acc[t] *= rs;
  gemv_store(acc, n, lane, r, out, bias, bias_dtype, y);
}

inline void int8_dequantize(const Tensor& codes, const Tensor& scale, float multiplier, Tensor& out) {
  OpScope scope(codes.device());
  const std::int64_t n = out.numel();
  int8_dequantize_kernel<<<grid_for(n), block_threads, 0, scope.stream()>>>(
      static_cast<const std::int8_t*>(codes.data_ptr()), static_cast<const float*>(scale.data_ptr()), multiplier,
      codes.size(1), n, out.data_ptr(), out.dtype());
  check_launch("int8_dequantize");
}

inline void int8_gemv(const Tensor& x, const Tensor& codes, const Tensor& scale, float multiplier, const Tensor& bias,
                      Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  const auto* c = static_cast<const std::int8_t*>(codes.data_ptr());
  const auto* s = static_cast<const float*>(scale.data_ptr());
  const void* b = bias.defined() ? bias.data_ptr() : nullptr;
  const DType bd = bias.defined() ? bias.dtype() : DType::f32;
  with_x_type(x.dtype(), [&](auto* xt) {
    using XT = std::remove_pointer_t<decltype(xt)>;
    const auto* xs = static_cast<const XT*>(x.data_ptr());
    auto* ys = static_cast<XT*>(out.data_ptr());
    if (in % 16 == 0) {
      int8_gemv_kernel<true, XT><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(c, s, multiplier, in, rows, xs,
                                                                                        static_cast<int>(n), b, bd, ys);
    } else {
      int8_gemv_kernel<false, XT><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(c, s, multiplier, in, rows, xs,
                                                                                         static_cast<int>(n), b, bd, ys);
    }
  });
  check_launch("int8_gemv");
}

}  // namespace accel::cuda::quant_kernels

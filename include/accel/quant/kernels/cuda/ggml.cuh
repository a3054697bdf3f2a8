// ggml blocks on a GPU (nvcc only): decoding to a float tensor and the GEMV, both through io's own
// dequantize_block / dequantize_group (see quant/kernels/cuda/kernels.cuh for why).
#pragma once

#include <cstdint>
#include <type_traits>

#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/quant/kernels/cuda/gemv.cuh"

namespace accel::cuda::quant_kernels {

using io::GgmlType;

/// Stores eight float32 values at element i of out (f32 / f16 / bf16, i a multiple of 8, out
/// 16-byte aligned) with one or two 16-byte stores, rounding as the host does.
__device__ inline void store8(void* out, std::int64_t i, DType dt, const float* v) {
  if (dt == DType::f32) {
    float4* o = reinterpret_cast<float4*>(static_cast<float*>(out) + i);
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  std::uint16_t h[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    h[j] = dt == DType::bf16 ? accel::bfloat16(v[j]).bits : accel::half(v[j]).bits;
  }
  uint4 packed;
  packed.x = h[0] | (static_cast<std::uint32_t>(h[1]) << 16);
  packed.y = h[2] | (static_cast<std::uint32_t>(h[3]) << 16);
  packed.z = h[4] | (static_cast<std::uint32_t>(h[5]) << 16);
  packed.w = h[6] | (static_cast<std::uint32_t>(h[7]) << 16);
  *reinterpret_cast<uint4*>(static_cast<std::uint16_t*>(out) + i) = packed;
}

/// One thread per group of G weights. Blocks are read in place: the host passes a base aligned to
/// 4 bytes, and rows are whole blocks, so every block is aligned for B.
template <class B, int QK, int G>
__global__ void ggml_dequantize_kernel(const std::uint8_t* src, std::int64_t ngroups, void* out, DType dt) {
  constexpr int groups = QK / G;
  const B* blocks = reinterpret_cast<const B*>(src);
  ACCEL_GRID_STRIDE(i, ngroups) {
    float v[G];
    io::dequantize_group(blocks[i / groups], static_cast<int>(i % groups), v);
#pragma unroll
    for (int j = 0; j < G; j += 8) store8(out, i * G + j, dt, v + j);
  }
}

/// How a warp walks a row of blocks: 32 groups per step (4 blocks of a grouped K type, 32 blocks
/// of the others), their bytes first copied to shared memory with the widest loads the step's size
/// allows, so the warp's global loads are whole, coalesced words whatever the block's size.
/// (Padding blocks to 4-byte slots there, for the decoders' word loads, cost more in the byte-wise
/// copy than it saved: Q6_K 0.6x, Q4_0 / Q8_0 0.75x of the unpadded step on an H100.)
template <class B, int QK, int G>
struct GemvStep {
  static constexpr int groups = QK / G;
  static constexpr int blocks = 32 / groups;
  static constexpr int bytes = blocks * static_cast<int>(sizeof(B));
  static constexpr int width = bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : bytes % 4 == 0 ? 4 : 1;
  static constexpr int stage_bytes = (bytes + 15) / 16 * 16;
};

template <int W>
struct Word;
template <> struct Word<16> { using type = uint4; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<4> { using type = std::uint32_t; };
template <> struct Word<1> { using type = std::uint8_t; };

/// The warp copies nbytes from src to dst (shared), in W-byte words while both allow it.
template <int W>
__device__ inline void stage_copy(std::uint8_t* dst, const std::uint8_t* src, int nbytes, bool aligned, int lane) {
  using V = typename Word<W>::type;
  const int nv = aligned ? nbytes / W : 0;
  for (int i = lane; i < nv; i += 32) reinterpret_cast<V*>(dst)[i] = reinterpret_cast<const V*>(src)[i];
  for (int i = nv * W + lane; i < nbytes; i += 32) dst[i] = src[i];
}

template <class B, int QK, int G, class XT>
__global__ void ggml_gemv_kernel(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t in, std::int64_t out,
                                 const XT* x, int n, const void* bias, DType bias_dtype, XT* y) {
  using S = GemvStep<B, QK, G>;
  __shared__ __align__(16) std::uint8_t stage[gemv_warps][S::stage_bytes];
  const int warp = static_cast<int>(threadIdx.x / 32);
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * gemv_warps + warp;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (r >= out) return;  // the whole warp leaves together; the kernel synchronizes warps only
  const std::uint8_t* row = w + r * row_bytes;
  std::uint8_t* st = stage[warp];
  const bool aligned = reinterpret_cast<std::uintptr_t>(row) % S::width == 0;
  const std::int64_t nb = in / QK;
  float acc[gemv_max_rows] = {};
  for (std::int64_t b0 = 0; b0 < nb; b0 += S::blocks) {
    const int nblk = static_cast<int>(nb - b0 < S::blocks ? nb - b0 : S::blocks);
    stage_copy<S::width>(st, row + b0 * static_cast<std::int64_t>(sizeof(B)), nblk * static_cast<int>(sizeof(B)),
                         aligned, lane);
    __syncwarp();
    if (lane < nblk * S::groups) {
      const int blk = lane / S::groups, g = lane % S::groups;
      float v[G];
      io::dequantize_group(*reinterpret_cast<const B*>(st + blk * sizeof(B)), g, v);
      dot_rows<G>(v, x, in, (b0 + blk) * QK + g * G, n, acc);
    }
    __syncwarp();  // the stage is read before the next step overwrites it
  }
  gemv_store(acc, n, lane, r, out, bias, bias_dtype, y);
}

inline bool ggml_dequantize(const Tensor& packed, std::uint32_t type, Tensor& out) {
  OpScope scope(packed.device());
  const auto* src = static_cast<const std::uint8_t*>(packed.data_ptr());
  return io::with_ggml_block(static_cast<GgmlType>(type), [&](auto t) {
    constexpr GgmlType T = decltype(t)::value;
    using B = io::ggml_block_t<T>;
    constexpr int qk = static_cast<int>(io::ggml_type_info(T).block_size), group = io::ggml_group_size<T>;
    const std::int64_t ngroups = out.numel() / group;
    ggml_dequantize_kernel<B, qk, group><<<grid_for(ngroups), block_threads, 0, scope.stream()>>>(
        src, ngroups, out.data_ptr(), out.dtype());
    check_launch("ggml_dequantize");
  });
}

inline bool ggml_gemv(const Tensor& x, const Tensor& packed, std::uint32_t type, const Tensor& bias, Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  return io::with_ggml_block(static_cast<GgmlType>(type), [&](auto t) {
    constexpr GgmlType T = decltype(t)::value;
    using B = io::ggml_block_t<T>;
    constexpr int qk = static_cast<int>(io::ggml_type_info(T).block_size), group = io::ggml_group_size<T>;
    with_x_type(x.dtype(), [&](auto* xt) {
      using XT = std::remove_pointer_t<decltype(xt)>;
      ggml_gemv_kernel<B, qk, group, XT><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(
          static_cast<const std::uint8_t*>(packed.data_ptr()), packed.size(1), in, rows,
          static_cast<const XT*>(x.data_ptr()), static_cast<int>(n), bias.defined() ? bias.data_ptr() : nullptr,
          bias.defined() ? bias.dtype() : DType::f32, static_cast<XT*>(out.data_ptr()));
    });
    check_launch("ggml_gemv");
  });
}

}  // namespace accel::cuda::quant_kernels

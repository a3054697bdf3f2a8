// The quant slots of the device backend (core/device_backend.hpp): packed weights decoded and
// multiplied on a GPU (nvcc only). Including this header in one .cu translation unit registers
// them; tools/cuda_ops.cu does so for the CLI and the GPU benchmarks.
//
//   ggml_dequantize / ggml_gemv     every ggml block type that dequantizes (io/ggml_dequantize.hpp)
//   bnb4_dequantize / bnb4_gemv     bitsandbytes NF4 / FP4 (quant/bnb_4bit.hpp's packing)
//   int8_dequantize / int8_gemv     row-scaled int8 (LLM.int8's CB * SCB / 127)
//
// Why the ggml kernels call io::dequantize_block: one definition of each block format serves the
// CPU and the GPU, so a GPU decodes the same bits (every block value is one rounding of exact
// products, so nvcc's FMA contraction cannot move it). A GEMV thread decodes whole blocks into
// registers / local memory and dots them with up to 8 activation rows; a warp owns an output row,
// its lanes stride over the row's blocks, and adjacent lanes read adjacent blocks, so a warp's
// loads cover contiguous bytes. The 4-bit and int8 GEMVs read 16 bytes per lane per step.
// Decoding is never rounded to a narrower type in the GEMVs: products and sums are float32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "accel/backend/cuda/launch.cuh"
#include "accel/core/device_backend.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_dequantize.hpp"

namespace accel::cuda::quant_kernels {

using io::GgmlType;
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

// ---- ggml blocks ------------------------------------------------------------------------------

template <class B, int QK>
__global__ void ggml_dequantize_kernel(const std::uint8_t* src, std::int64_t nblocks, void* out, DType dt) {
  ACCEL_GRID_STRIDE(i, nblocks) {
    B blk;
    memcpy(&blk, src + i * static_cast<std::int64_t>(sizeof(B)), sizeof(B));
    float v[QK];
    io::dequantize_block(blk, v);
    for (int j = 0; j < QK; ++j) store_f32(out, i * QK + j, dt, v[j]);
  }
}

template <class B, int QK>
__global__ void ggml_gemv_kernel(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t in, std::int64_t out,
                                 const float* x, int n, float* y) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * gemv_warps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (r >= out) return;  // the whole warp leaves together
  const std::uint8_t* row = w + r * row_bytes;
  const std::int64_t nb = in / QK;
  float acc[gemv_max_rows] = {};
  for (std::int64_t b = lane; b < nb; b += 32) {
    B blk;
    memcpy(&blk, row + b * static_cast<std::int64_t>(sizeof(B)), sizeof(B));
    float v[QK];
    io::dequantize_block(blk, v);
    const float* xb = x + b * QK;
#pragma unroll
    for (int t = 0; t < gemv_max_rows; ++t) {
      if (t < n) {
        float s = 0.0f;
        for (int j = 0; j < QK; ++j) s += v[j] * xb[t * in + j];
        acc[t] += s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < gemv_max_rows; ++t) {
    if (t < n) {
      const float s = warp_sum(acc[t]);
      if (lane == 0) y[t * out + r] = s;
    }
  }
}

/// Calls f(block_struct_tag, qk_constant) for a type with a device kernel; false otherwise.
template <class F>
bool with_ggml_block(GgmlType t, F&& f) {
  switch (t) {
#define ACCEL_GGML_CASE(T)                                                                      \
  case GgmlType::T:                                                                             \
    f(static_cast<io::ggml_block_t<GgmlType::T>*>(nullptr),                                     \
      std::integral_constant<int, static_cast<int>(io::ggml_type_info(GgmlType::T).block_size)>{}); \
    return true;
    ACCEL_GGML_CASE(q4_0)
    ACCEL_GGML_CASE(q4_1)
    ACCEL_GGML_CASE(q5_0)
    ACCEL_GGML_CASE(q5_1)
    ACCEL_GGML_CASE(q8_0)
    ACCEL_GGML_CASE(q8_1)
    ACCEL_GGML_CASE(q2_k)
    ACCEL_GGML_CASE(q3_k)
    ACCEL_GGML_CASE(q4_k)
    ACCEL_GGML_CASE(q5_k)
    ACCEL_GGML_CASE(q6_k)
    ACCEL_GGML_CASE(q8_k)
    ACCEL_GGML_CASE(iq4_nl)
    ACCEL_GGML_CASE(iq4_xs)
    ACCEL_GGML_CASE(tq1_0)
    ACCEL_GGML_CASE(tq2_0)
#undef ACCEL_GGML_CASE
    default: return false;
  }
}

inline bool ggml_dequantize(const Tensor& packed, std::uint32_t type, Tensor& out) {
  OpScope scope(packed.device());
  const auto* src = static_cast<const std::uint8_t*>(packed.data_ptr());
  return with_ggml_block(static_cast<GgmlType>(type), [&](auto* tag, auto qk) {
    using B = std::remove_pointer_t<decltype(tag)>;
    const std::int64_t nblocks = out.numel() / qk;
    ggml_dequantize_kernel<B, qk><<<grid_for(nblocks), block_threads, 0, scope.stream()>>>(src, nblocks, out.data_ptr(),
                                                                                           out.dtype());
    check_launch("ggml_dequantize");
  });
}

inline bool ggml_gemv(const Tensor& x, const Tensor& packed, std::uint32_t type, Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  return with_ggml_block(static_cast<GgmlType>(type), [&](auto* tag, auto qk) {
    using B = std::remove_pointer_t<decltype(tag)>;
    ggml_gemv_kernel<B, qk><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(
        static_cast<const std::uint8_t*>(packed.data_ptr()), packed.size(1), in, rows,
        static_cast<const float*>(x.data_ptr()), static_cast<int>(n), static_cast<float*>(out.data_ptr()));
    check_launch("ggml_gemv");
  });
}

// ---- bitsandbytes 4-bit -----------------------------------------------------------------------

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
__global__ void bnb4_gemv_kernel(const std::uint8_t* p, const float* absmax, Lut16 lut, int shift, std::int64_t in,
                                 std::int64_t out, const float* x, int n, float* y) {
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
#pragma unroll
    for (int t = 0; t < gemv_max_rows; ++t) {
      if (t < n) {
        const float4* xv = reinterpret_cast<const float4*>(x + t * in + k);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float4 xx = xv[j];
          s += wv[4 * j] * xx.x + wv[4 * j + 1] * xx.y + wv[4 * j + 2] * xx.z + wv[4 * j + 3] * xx.w;
        }
        acc[t] += s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < gemv_max_rows; ++t) {
    if (t < n) {
      const float s = warp_sum(acc[t]);
      if (lane == 0) y[t * out + r] = s;
    }
  }
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
                      std::int64_t blocksize, Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  bnb4_gemv_kernel<<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(
      static_cast<const std::uint8_t*>(packed.data_ptr()), static_cast<const float*>(absmax.data_ptr()), make_lut(lut),
      log2_of(blocksize), in, rows, static_cast<const float*>(x.data_ptr()), static_cast<int>(n),
      static_cast<float*>(out.data_ptr()));
  check_launch("bnb4_gemv");
}

// ---- row-scaled int8 --------------------------------------------------------------------------

__global__ void int8_dequantize_kernel(const std::int8_t* codes, const float* scale, float multiplier, std::int64_t in,
                                       std::int64_t n, void* out, DType dt) {
  ACCEL_GRID_STRIDE(i, n) store_f32(out, i, dt, static_cast<float>(codes[i]) * scale[i / in] * multiplier);
}

/// Each lane takes 16 codes per step when in % 16 == 0, one otherwise.
template <bool Wide>
__global__ void int8_gemv_kernel(const std::int8_t* codes, const float* scale, float multiplier, std::int64_t in,
                                 std::int64_t out, const float* x, int n, float* y) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * gemv_warps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (r >= out) return;
  const std::int8_t* row = codes + r * in;
  float acc[gemv_max_rows] = {};
  constexpr int step = Wide ? 16 : 1;
  for (std::int64_t k = step * lane; k < in; k += step * 32) {
    float wv[step];
    if constexpr (Wide) {
      const int4 raw = *reinterpret_cast<const int4*>(row + k);
      const int words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 16; ++j) wv[j] = static_cast<float>(static_cast<std::int8_t>((words[j / 4] >> (8 * (j % 4))) & 0xFF));
    } else {
      wv[0] = static_cast<float>(row[k]);
    }
#pragma unroll
    for (int t = 0; t < gemv_max_rows; ++t) {
      if (t < n) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < step; ++j) s += wv[j] * x[t * in + k + j];
        acc[t] += s;
      }
    }
  }
  const float rs = scale[r] * multiplier;
#pragma unroll
  for (int t = 0; t < gemv_max_rows; ++t) {
    if (t < n) {
      const float s = warp_sum(acc[t]);
      if (lane == 0) y[t * out + r] = s * rs;
    }
  }
}

inline void int8_dequantize(const Tensor& codes, const Tensor& scale, float multiplier, Tensor& out) {
  OpScope scope(codes.device());
  const std::int64_t n = out.numel();
  int8_dequantize_kernel<<<grid_for(n), block_threads, 0, scope.stream()>>>(
      static_cast<const std::int8_t*>(codes.data_ptr()), static_cast<const float*>(scale.data_ptr()), multiplier,
      codes.size(1), n, out.data_ptr(), out.dtype());
  check_launch("int8_dequantize");
}

inline void int8_gemv(const Tensor& x, const Tensor& codes, const Tensor& scale, float multiplier, Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  const auto* c = static_cast<const std::int8_t*>(codes.data_ptr());
  const auto* s = static_cast<const float*>(scale.data_ptr());
  const auto* xs = static_cast<const float*>(x.data_ptr());
  auto* ys = static_cast<float*>(out.data_ptr());
  if (in % 16 == 0) {
    int8_gemv_kernel<true><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(c, s, multiplier, in, rows, xs,
                                                                                    static_cast<int>(n), ys);
  } else {
    int8_gemv_kernel<false><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(c, s, multiplier, in, rows, xs,
                                                                                     static_cast<int>(n), ys);
  }
  check_launch("int8_gemv");
}

/// Start-up registration of the quant slots.
inline const bool quant_registered = [] {
  DeviceQuantOps& t = cuda_backend().quant;
  t.ggml_dequantize = &ggml_dequantize;
  t.ggml_gemv = &ggml_gemv;
  t.bnb4_dequantize = &bnb4_dequantize;
  t.bnb4_gemv = &bnb4_gemv;
  t.int8_dequantize = &int8_dequantize;
  t.int8_gemv = &int8_gemv;
  return true;
}();

}  // namespace accel::cuda::quant_kernels

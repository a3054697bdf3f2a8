// The quant slots of the device backend (core/device_backend.hpp): packed weights decoded and
// multiplied on a GPU (nvcc only). Including this header in one .cu translation unit registers
// them; tools/cuda_ops.cu does so for the CLI and the GPU benchmarks.
//
//   ggml_dequantize / ggml_gemv     every ggml block type that dequantizes (io/ggml_dequantize.hpp)
//   bnb4_dequantize / bnb4_gemv     bitsandbytes NF4 / FP4 (quant/bnb_4bit.hpp's packing)
//   int8_dequantize / int8_gemv     row-scaled int8 (LLM.int8's CB * SCB / 127)
//   affine_dequantize / affine_gemv Quanto / TorchAO codes (quant/affine_scheme.hpp's affine_value)
//
// Why the ggml kernels call io::dequantize_block / dequantize_group: one definition of each block
// format serves the CPU and the GPU, so a GPU decodes the same bits (every block value is one
// rounding of exact products, so nvcc's FMA contraction cannot move it). A GEMV lane decodes one
// group (32 weights for Q4_K / Q6_K and the 32-weight types; the whole block for the other K
// types) into registers and dots it with up to 8 activation rows; a warp owns an output row, its
// lanes stride over the row's groups, so a warp's loads cover contiguous bytes. The 4-bit and int8
// GEMVs read 16 bytes per lane per step. Decoding is never rounded to a narrower type in the GEMVs:
// products and sums are float32, and the bias is added before the one rounding to x's dtype.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "accel/backend/cuda/launch.cuh"
#include "accel/core/device_backend.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/quant/affine_scheme.hpp"

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

/// Calls f(block_struct_tag, qk_constant, group_constant) for a type with a device kernel; false
/// otherwise.
template <class F>
bool with_ggml_block(GgmlType t, F&& f) {
  switch (t) {
#define ACCEL_GGML_CASE(T)                                                                      \
  case GgmlType::T:                                                                             \
    f(static_cast<io::ggml_block_t<GgmlType::T>*>(nullptr),                                     \
      std::integral_constant<int, static_cast<int>(io::ggml_type_info(GgmlType::T).block_size)>{}, \
      std::integral_constant<int, io::ggml_group_size<GgmlType::T>>{});                           \
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
  return with_ggml_block(static_cast<GgmlType>(type), [&](auto* tag, auto qk, auto group) {
    using B = std::remove_pointer_t<decltype(tag)>;
    const std::int64_t ngroups = out.numel() / group;
    ggml_dequantize_kernel<B, qk, group><<<grid_for(ngroups), block_threads, 0, scope.stream()>>>(
        src, ngroups, out.data_ptr(), out.dtype());
    check_launch("ggml_dequantize");
  });
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

inline bool ggml_gemv(const Tensor& x, const Tensor& packed, std::uint32_t type, const Tensor& bias, Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  return with_ggml_block(static_cast<GgmlType>(type), [&](auto* tag, auto qk, auto group) {
    using B = std::remove_pointer_t<decltype(tag)>;
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

// ---- row-scaled int8 --------------------------------------------------------------------------

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

// ---- Quanto / TorchAO codes -------------------------------------------------------------------

/// Where element (r, c) of an affine weight finds its codes, scale and min. Groups are powers of
/// two in practice (TorchAO's 32..256, Quanto's 128), so the group of a column is a shift; 64-bit
/// division would cost more than the rest of the decoding.
struct AffineRows {
  const std::uint8_t* codes;
  std::int64_t row_bytes;
  const float* scale;
  const float* min;  ///< null unless zero_point
  std::int64_t groups, group;
  int group_shift;   ///< log2(group) when a power of two, else -1

  __device__ std::int64_t group_of(std::int64_t c) const {
    return groups == 1 ? 0 : group_shift >= 0 ? c >> group_shift : c / group;
  }
};

/// Element (r, c) with the scheme's kind and code width known at compile time.
template <int Kind, int Bits>
__device__ inline float affine_at(const AffineRows& w, std::int64_t r, std::int64_t c) {
  constexpr auto kind = static_cast<quant::AffineKind>(Kind);
  const std::int64_t g = r * w.groups + w.group_of(c);
  return quant::affine_value(kind, Bits, w.codes + r * w.row_bytes, c, w.scale[g],
                             kind == quant::AffineKind::zero_point ? w.min[g] : 0.0f);
}

inline AffineRows affine_rows(const Tensor& codes, const Tensor& scale, const Tensor& min, std::int64_t group) {
  int shift = -1;
  for (int s = 0; s < 62; ++s) {
    if ((std::int64_t{1} << s) == group) shift = s;
  }
  return {static_cast<const std::uint8_t*>(codes.data_ptr()), codes.size(1), static_cast<const float*>(scale.data_ptr()),
          min.defined() ? static_cast<const float*>(min.data_ptr()) : nullptr, scale.size(1), group, shift};
}

/// Calls f(integral_constant kind, integral_constant bits) for the schemes' (kind, bits) pairs.
template <class F>
void with_affine_kind(int kind, int bits, F&& f) {
  using quant::AffineKind;
  using std::integral_constant;
  if (kind == static_cast<int>(AffineKind::float8)) {
    f(integral_constant<int, static_cast<int>(AffineKind::float8)>{}, integral_constant<int, 8>{});
  } else if (kind == static_cast<int>(AffineKind::symmetric) && bits == 8) {
    f(integral_constant<int, static_cast<int>(AffineKind::symmetric)>{}, integral_constant<int, 8>{});
  } else if (kind == static_cast<int>(AffineKind::zero_point) && bits == 4) {
    f(integral_constant<int, static_cast<int>(AffineKind::zero_point)>{}, integral_constant<int, 4>{});
  } else if (kind == static_cast<int>(AffineKind::zero_point) && bits == 2) {
    f(integral_constant<int, static_cast<int>(AffineKind::zero_point)>{}, integral_constant<int, 2>{});
  } else {
    throw DTypeError("affine codes of kind " + std::to_string(kind) + " and " + std::to_string(bits) +
                     " bits have no CUDA kernel");
  }
}

/// Rows in grid y, columns in grid x: no division per element.
template <int Kind, int Bits>
__global__ void affine_dequantize_kernel(AffineRows w, std::int64_t in, std::int64_t out, void* y, DType dt) {
  for (std::int64_t r = blockIdx.y; r < out; r += gridDim.y) {
    for (std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < in;
         c += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
      store_f32(y, r * in + c, dt, affine_at<Kind, Bits>(w, r, c));
    }
  }
}

/// One warp per output row, lanes over its columns (adjacent lanes, adjacent codes).
template <int Kind, int Bits, class XT>
__global__ void affine_gemv_kernel(AffineRows w, std::int64_t in, std::int64_t out, const XT* x, int n,
                                   const void* bias, DType bias_dtype, XT* y) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * gemv_warps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (r >= out) return;
  float acc[gemv_max_rows] = {};
  for (std::int64_t c = lane; c < in; c += 32) {
    const float v = affine_at<Kind, Bits>(w, r, c);
#pragma unroll
    for (int t = 0; t < gemv_max_rows; ++t) {
      if (t < n) acc[t] += v * static_cast<float>(x[t * in + c]);
    }
  }
  gemv_store(acc, n, lane, r, out, bias, bias_dtype, y);
}

inline void affine_dequantize(const Tensor& codes, const Tensor& scale, const Tensor& min, int kind, int bits,
                              std::int64_t group, Tensor& out) {
  OpScope scope(codes.device());
  const std::int64_t rows = out.size(0), in = out.size(1);
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((in + block_threads - 1) / block_threads, 64)),
                  static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)));
  with_affine_kind(kind, bits, [&](auto k, auto b) {
    affine_dequantize_kernel<k, b><<<grid, block_threads, 0, scope.stream()>>>(affine_rows(codes, scale, min, group), in,
                                                                              rows, out.data_ptr(), out.dtype());
  });
  check_launch("affine_dequantize");
}

inline void affine_gemv(const Tensor& x, const Tensor& codes, const Tensor& scale, const Tensor& min, int kind,
                        int bits, std::int64_t group, const Tensor& bias, Tensor& out) {
  OpScope scope(x.device());
  const std::int64_t n = x.size(0), in = x.size(1), rows = out.size(1);
  with_affine_kind(kind, bits, [&](auto k, auto b) {
    with_x_type(x.dtype(), [&](auto* xt) {
      using XT = std::remove_pointer_t<decltype(xt)>;
      affine_gemv_kernel<k, b, XT><<<gemv_grid(rows), 32 * gemv_warps, 0, scope.stream()>>>(
          affine_rows(codes, scale, min, group), in, rows, static_cast<const XT*>(x.data_ptr()), static_cast<int>(n),
          bias.defined() ? bias.data_ptr() : nullptr, bias.defined() ? bias.dtype() : DType::f32,
          static_cast<XT*>(out.data_ptr()));
    });
  });
  check_launch("affine_gemv");
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
  t.affine_dequantize = &affine_dequantize;
  t.affine_gemv = &affine_gemv;
  return true;
}();

}  // namespace accel::cuda::quant_kernels

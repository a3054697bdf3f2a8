// Quanto / TorchAO codes on a GPU (nvcc only): int4 / int2 with groups and float8, decoded by the
// CPU's own affine_value (quant/formats/affine_scheme.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "accel/core/errors.hpp"
#include "accel/quant/formats/affine_scheme.hpp"
#include "accel/quant/kernels/cuda/gemv.cuh"

namespace accel::cuda::quant_kernels {

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

}  // namespace accel::cuda::quant_kernels

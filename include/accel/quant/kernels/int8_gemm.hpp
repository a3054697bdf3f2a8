// C = A B^T over int8 codes into int32: LLM.int8()'s product (layers/bnb_products.hpp) and TorchAO's
// int8 dynamic-activation scheme (layers/affine_linear.hpp) share these kernels, one tier to a file
// in int8_gemm/ (scalar, avx2, avx512_vnni, neon with and without the dot-product extension).
//
//   int8_linear_matmul(arch, a, rows, b, k, out, r0, r1, c)   output columns [r0, r1)
//   int8_ladder                                              the tiers, best first
#pragma once

#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/int8_gemm/avx2.hpp"
#include "accel/quant/kernels/int8_gemm/avx512_vnni.hpp"
#include "accel/quant/kernels/int8_gemm/neon.hpp"
#include "accel/quant/kernels/int8_gemm/scalar.hpp"

namespace accel::quant {

/// The tags the int8 product dispatches over, best first.
using int8_ladder = xsimd::arch_list<simd::neon_dotprod, simd::neon, simd::avx512_vnni, simd::avx2, simd::scalar>;

}  // namespace accel::quant

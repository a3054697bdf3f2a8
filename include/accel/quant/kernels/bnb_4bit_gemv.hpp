// The bitsandbytes 4-bit product's kernels, one tier to a file in bnb_4bit_gemv/ (scalar, avx2,
// avx512, neon), and the ladder gemv_4bit (layers/bnb_products.hpp) picks one from, once per call,
// by CPUID or HWCAP under ACCEL_CPU_ARCH.
//
//   gemv_4bit_rows(arch, x, rows, w, absmax, lut, bs, in, out, r0, r1, y)   output rows [r0, r1)
//   bnb_4bit_ladder                                                        the tiers, best first
#pragma once

#include "accel/core/simd_arch.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/avx2.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/avx512.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/neon.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv/scalar.hpp"

namespace accel::quant {

/// The tags the 4-bit product dispatches over, best first.
using bnb_4bit_ladder = xsimd::arch_list<simd::neon, simd::avx512, simd::avx2, simd::scalar>;

}  // namespace accel::quant

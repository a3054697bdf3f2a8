// Dot products of ggml-quantized weight rows with quantized activations, as ggml computes them:
// the activation row is quantized once to the weight type's partner (Q8_0 for the 32-element
// types, Q8_K for the 256-element ones) and each block's integer dot product is scaled by the two scales.
//
//   ActivationRow                           a quantized row and the per-block sums of its ints
//   has_quantized_dot(t)                    Q4_0 .. Q5_1, Q8_0, Q2_K .. Q6_K, IQ2_XXS .. IQ3_S, IQ4_NL, IQ4_XS, TQ2_0:
//                                           integer kernels
//   vec_dot(arch, t, n, w_row, x)           one weight row (n elements) times one activation row
//   vec_dot_rows(arch, t, n, w_row, xs, k, out)  one weight row times k activation rows
//
// Kernels are overloads on the simd tags (core/simd_arch.hpp), one room per tier in ggml_dot/:
// scalar.hpp (portable C++, every CPU), avx2.hpp (VPMADDUBSW / VPMADDWD), avx512_vnni.hpp
// (VPDPBUSD: unsigned x signed bytes into int32), neon.hpp (SDOT, or SMULL + SADALP), and for the
// code-book and ternary types scalar_iq.hpp, avx2_iq.hpp and neon_iq.hpp, for the lattice types
// scalar_lattice.hpp, avx2_lattice.hpp and neon_lattice.hpp, chosen by CPUID (HWCAP
// on ARM) under ACCEL_CPU_ARCH. Integer sums are exact, so the tiers give the same result up to
// the order of the float accumulation.
// Weight rows are read through unaligned loads: GGUF promises only a tensor's alignment.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "accel/core/errors.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/quant/kernels/ggml_dot/activation.hpp"
#include "accel/quant/kernels/ggml_dot/avx2.hpp"
#include "accel/quant/kernels/ggml_dot/avx2_iq.hpp"
#include "accel/quant/kernels/ggml_dot/avx2_lattice.hpp"
#include "accel/quant/kernels/ggml_dot/avx512_vnni.hpp"
#include "accel/quant/kernels/ggml_dot/neon.hpp"
#include "accel/quant/kernels/ggml_dot/neon_iq.hpp"
#include "accel/quant/kernels/ggml_dot/neon_lattice.hpp"
#include "accel/quant/kernels/ggml_dot/scalar.hpp"
#include "accel/quant/kernels/ggml_dot/scalar_iq.hpp"
#include "accel/quant/kernels/ggml_dot/scalar_lattice.hpp"

namespace accel::quant {

/// The kernel tags quantized dot products dispatch over, best first.
using quant_ladder = xsimd::arch_list<simd::neon_dotprod, simd::neon, simd::avx512_vnni, simd::avx2, simd::scalar>;

/// One weight row of `n` elements of type `t` at `w` times the quantized activation `x`, on the
/// kernels of `Arch` (falling back to its parents). `t` must satisfy has_quantized_dot.
template <class Arch>
float vec_dot(const Arch& arch, GgmlType t, std::size_t n, const std::byte* w, const ActivationRow& x) {
  switch (t) {
    case GgmlType::q8_0: return dot_q8_0(arch, n, w, x);
    case GgmlType::q4_0: return dot_q4_0(arch, n, w, x);
    case GgmlType::q4_1: return dot_q4_1(arch, n, w, x);
    case GgmlType::q5_0: return dot_q5_0(arch, n, w, x);
    case GgmlType::q5_1: return dot_q5_1(arch, n, w, x);
    case GgmlType::q2_k: return dot_q2_k(arch, n, w, x);
    case GgmlType::q3_k: return dot_q3_k(arch, n, w, x);
    case GgmlType::q4_k: return dot_q4_k(arch, n, w, x);
    case GgmlType::q5_k: return dot_q5_k(arch, n, w, x);
    case GgmlType::q6_k: return dot_q6_k(arch, n, w, x);
    case GgmlType::iq4_nl: return dot_iq4_nl(arch, n, w, x);
    case GgmlType::iq4_xs: return dot_iq4_xs(arch, n, w, x);
    case GgmlType::tq2_0: return dot_tq2_0(arch, n, w, x);
    case GgmlType::iq2_xxs: return dot_iq2_xxs(arch, n, w, x);
    case GgmlType::iq2_xs: return dot_iq2_xs(arch, n, w, x);
    case GgmlType::iq2_s: return dot_iq2_s(arch, n, w, x);
    case GgmlType::iq3_xxs: return dot_iq3_xxs(arch, n, w, x);
    case GgmlType::iq3_s: return dot_iq3_s(arch, n, w, x);
    default: break;
  }
  throw DTypeError("vec_dot: no integer kernel for " + std::string(io::ggml_type_name(t)));
}

/// One weight row times `count` activation rows (out[i] = vec_dot(arch, t, n, w, *x[i])): on VNNI
/// (Q8_0, Q4_0, Q4_K, Q6_K) and AVX2 (every type but Q8_0 / Q4_0, which take the 16-row kernels of
/// ggml_dot_x16.hpp there) each block is decoded once for up to four rows at a time (IQ4's code-book
/// lookups, the lattice types' points and TQ2_0's bit pairs too); the portable kernels call vec_dot.
template <class Arch>
void vec_dot_rows(const Arch& arch, GgmlType t, std::size_t n, const std::byte* w, const ActivationRow* const* x,
                  std::size_t count, float* out) {
#if ACCEL_SIMD_X86
  if constexpr (std::is_base_of_v<simd::avx512_vnni, Arch>) {
    if (t == GgmlType::q8_0 || t == GgmlType::q4_0 || t == GgmlType::q4_k || t == GgmlType::q6_k) {
      detail::in_groups<4>([&](auto r, const ActivationRow* const* xs, float* o) {
        constexpr int R = decltype(r)::value;
        if (t == GgmlType::q6_k) detail::dot_q6_k_rows<R>(n, w, xs, o);
        else if (t == GgmlType::q4_k) detail::dot_q4_k_rows<R>(n, w, xs, o);
        else if (t == GgmlType::q4_0) detail::dot_q8_q4_rows<R, true>(n, w, xs, o);
        else detail::dot_q8_q4_rows<R, false>(n, w, xs, o);
      }, x, count, out);
      return;
    }
  }
  if constexpr (std::is_base_of_v<simd::avx2, Arch>) {
    if (t == GgmlType::q4_k || t == GgmlType::q6_k) {
      detail::in_groups<4>([&](auto r, const ActivationRow* const* xs, float* o) {
        constexpr int R = decltype(r)::value;
        if (t == GgmlType::q6_k) detail::dot_q6_k_rows_avx2<R>(n, w, xs, o);
        else detail::dot_q4_k_rows_avx2<R>(n, w, xs, o);
      }, x, count, out);
      return;
    }
    if (t == GgmlType::q4_1 || t == GgmlType::q5_0 || t == GgmlType::q5_1 || t == GgmlType::q2_k || t == GgmlType::q3_k ||
        t == GgmlType::q5_k || t == GgmlType::iq4_nl || t == GgmlType::iq4_xs || t == GgmlType::tq2_0 ||
        t == GgmlType::iq2_xxs || t == GgmlType::iq2_xs || t == GgmlType::iq2_s || t == GgmlType::iq3_xxs ||
        t == GgmlType::iq3_s) {
      detail::in_groups<4>([&](auto r, const ActivationRow* const* xs, float* o) {
        constexpr int R = decltype(r)::value;
        switch (t) {
          case GgmlType::q4_1: detail::dot32_rows_avx2<GgmlType::q4_1, R>(n, w, xs, o); break;
          case GgmlType::q5_0: detail::dot32_rows_avx2<GgmlType::q5_0, R>(n, w, xs, o); break;
          case GgmlType::q5_1: detail::dot32_rows_avx2<GgmlType::q5_1, R>(n, w, xs, o); break;
          case GgmlType::q2_k: detail::dot_q2_k_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::q3_k: detail::dot_q3_k_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::iq4_nl: detail::dot_iq4_nl_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::iq4_xs: detail::dot_iq4_xs_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::tq2_0: detail::dot_tq2_0_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::iq2_xxs: detail::dot_iq2_xxs_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::iq2_xs: detail::dot_iq2_xs_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::iq2_s: detail::dot_iq2_s_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::iq3_xxs: detail::dot_iq3_xxs_rows_avx2<R>(n, w, xs, o); break;
          case GgmlType::iq3_s: detail::dot_iq3_s_rows_avx2<R>(n, w, xs, o); break;
          default: detail::dot_q5_k_rows_avx2<R>(n, w, xs, o); break;
        }
      }, x, count, out);
      return;
    }
  }
#endif
  for (std::size_t i = 0; i < count; ++i) out[i] = vec_dot(arch, t, n, w, *x[i]);
}

}  // namespace accel::quant

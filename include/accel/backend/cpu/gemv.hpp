// gemv_rows: the decode-time product of a few activation rows with a weight matrix read once.
//
//   gemv_rows(x, m, k, w, wdtype, w_row_bytes, n, bias, out, x_exact = false)
//     out[i, j] = sum_k x[i, k] * w[j, k] (+ bias[j]),  i < m, j < n
//   gemv_rows_half(x, ...)    the same with x in the weight's dtype (f16 / bf16), as it is
//   gemv_kernels()            the tier this CPU runs (name, whether bf16 goes by bf16 pairs)
//   gemv_at(arch, ...)        gemv_rows with one tier's kernels, for tests and benchmarks
//
// Decoding one token streams every weight from memory once, so the kernel's job is to keep up
// with DRAM: each weight row is loaded once, in its own dtype, widened in registers and dotted
// with every x row there (no f32 copy of a half-precision weight). More than gemv_max_rows
// activation rows go in tiles of that many, each tile meeting a block of weight rows (about 256
// KiB) in turn: the first reads it from memory, the others from the cache.
//
// One room per tier (backend/cpu/gemv/): scalar.hpp (a row converted to f32, then the build-ISA
// dot product: every CPU), avx2.hpp, avx512.hpp (`avx512` widening, `avx512_bf16` bf16 pairs by
// VDPBF16PS), neon.hpp (AArch64). The tier is chosen once at run time from CPUID or HWCAP under
// ACCEL_CPU_ARCH (core/simd_arch.hpp); a new ISA adds a file and a rung of gemv_ladder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "accel/backend/cpu/gemv/avx2.hpp"
#include "accel/backend/cpu/gemv/avx512.hpp"
#include "accel/backend/cpu/gemv/neon.hpp"
#include "accel/backend/cpu/gemv/problem.hpp"
#include "accel/backend/cpu/gemv/scalar.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/simd_arch.hpp"

namespace accel::backend::cpu {

/// The tiers the GEMV has kernels for, best first (each CPU finds its own architecture's).
using gemv_ladder = xsimd::arch_list<simd::neon, simd::avx512_bf16, simd::avx512, simd::avx2, simd::scalar>;

/// The GEMV of one tier, resolved once.
struct GemvKernels {
  const char* arch = "scalar";
  void (*run)(DType, const GemvProblem&) = nullptr;
  /// bf16 weights go by bf16 pairs (x rounded to bf16, VDPBF16PS), a prompt's rows in chunks of k
  /// (avx512.hpp): faster than oneDNN 2.6's bf16 matmul at every row count measured, so linear
  /// sends bf16 activations here too (64 rows of 2048 x 5632, 5632 x 2048 and 2048 x 2048: 560-660
  /// GFLOPS against 475-575; 512 rows of 5632 x 2048: 700-735 against 690; Zen 5, 2 threads).
  bool bf16_pairs = false;
  /// Half-precision weights go through these tiles at any row count, not widened for oneDNN's f32
  /// GEMM: on AVX-512 the tiles ran 64 / 512 x 2048 x 5632 f16 at 210 / 213 GFLOPS against 168 /
  /// 207 (Zen 4, 2 threads); on AVX2 they lost (150 / 157 against 166 / 185).
  bool half_tiles = false;
  /// The same on AVX2 when x has the weight's dtype (GemvProblem::x_exact; linear's activations
  /// always do). f16 x is read narrowed: 64 rows of 2048 x 5632, 5632 x 2048 and 2048 x 2048 f16
  /// ran 193-200 GFLOPS against oneDNN's 147-167 (Zen 4, 2 threads). bf16 tiles keep x in f32
  /// (widening bf16 takes two operations where F16C takes one): on Zen 5 they ran 169-172 GFLOPS
  /// against 96-161 for oneDNN's f32 GEMM on widened blocks of the weight; on Zen 4 they had lost
  /// (141-145 against 155-158), by less than they win here.
  bool half_tiles_exact = false;
};

namespace detail {
template <class Arch>
GemvKernels gemv_kernels_for() {
  return {Arch::name(), [](DType wd, const GemvProblem& p) { gemv(Arch{}, wd, p); },
          std::is_base_of_v<simd::avx512_bf16, Arch>, std::is_base_of_v<simd::avx512, Arch>,
          std::is_base_of_v<simd::avx2, Arch>};
}
}  // namespace detail

/// The GEMV this CPU runs (under ACCEL_CPU_ARCH).
inline const GemvKernels& gemv_kernels() {
  static const GemvKernels kernels =
      simd::dispatch<gemv_ladder>([](auto arch) { return detail::gemv_kernels_for<decltype(arch)>(); });
  return kernels;
}

/// gemv_rows with tier `arch`'s kernels (the caller checked that this CPU runs it).
template <class Arch>
void gemv_at(Arch arch, const float* x, std::int64_t m, std::int64_t k, const void* w, DType wd, std::size_t row_bytes,
             std::int64_t n, const float* bias, float* out, bool x_exact = false) {
  detail::gemv(arch, wd, GemvProblem{x, m, k, static_cast<const std::byte*>(w), row_bytes, n, bias, out, x_exact});
}

/// out[i, j] = x[i, :] . w[j, :] (+ bias[j]) for i < m, j < n; `x` dense f32 [m, k], `w` rows of k
/// elements of `wd` (f32, f16 or bf16) `row_bytes` apart, `out` dense [m, n]. `x_exact`: every x
/// value is a value of `wd` (activations of the weight's dtype), which lets the kernels read x
/// narrowed where that is faster (GemvProblem::x_exact); the result is the same.
inline void gemv_rows(const float* x, std::int64_t m, std::int64_t k, const void* w, DType wd, std::size_t row_bytes,
                      std::int64_t n, const float* bias, float* out, bool x_exact = false) {
  gemv_kernels().run(wd, GemvProblem{x, m, k, static_cast<const std::byte*>(w), row_bytes, n, bias, out, x_exact});
}

/// gemv_rows with x in the weight's dtype `wd` (f16 or bf16; dense [m, k] of its bits): a
/// half-precision model's activations, read as they are by the kernels that read x narrowed
/// (GemvProblem::x_half) and widened once by the others. The result is gemv_rows' on x widened.
inline void gemv_rows_half(const void* x, std::int64_t m, std::int64_t k, const void* w, DType wd,
                           std::size_t row_bytes, std::int64_t n, const float* bias, float* out) {
  GemvProblem p{nullptr, m, k, static_cast<const std::byte*>(w), row_bytes, n, bias, out, true};
  p.x_half = static_cast<const std::uint16_t*>(x);
  gemv_kernels().run(wd, p);
}

/// gemv_rows_half with tier `arch`'s kernels (the caller checked that this CPU runs it).
template <class Arch>
void gemv_at_half(Arch arch, const void* x, std::int64_t m, std::int64_t k, const void* w, DType wd,
                  std::size_t row_bytes, std::int64_t n, const float* bias, float* out) {
  GemvProblem p{nullptr, m, k, static_cast<const std::byte*>(w), row_bytes, n, bias, out, true};
  p.x_half = static_cast<const std::uint16_t*>(x);
  detail::gemv(arch, wd, p);
}

}  // namespace accel::backend::cpu

// What every tier's GEMV kernel takes, and the work split they share (backend/cpu/gemv.hpp is
// the interface).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "accel/core/convert.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/parallel.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace accel::backend::cpu {

/// The most activation rows a kernel keeps in registers (a tile of gemv_rows).
inline constexpr std::int64_t gemv_max_rows = 4;

/// out[i, j] = x[i, :] . w[j, :] (+ bias[j]) for i < m, j < n: x dense f32 [m, k], w rows of k
/// elements `row_bytes` apart, out dense [m, n].
struct GemvProblem {
  const float* x = nullptr;
  std::int64_t m = 0, k = 0;
  const std::byte* w = nullptr;
  std::size_t row_bytes = 0;
  std::int64_t n = 0;
  const float* bias = nullptr;
  float* out = nullptr;
  /// Every x value is a value of the weight's dtype (the activations are a tensor of that dtype,
  /// widened): the x86 kernels then read x narrowed to it, which loses nothing, gives the same
  /// sums in the same order, and halves what x takes of the L1 beside the weight rows. One row of
  /// 5632 f32 (22 KB) or a tile of four rows of 2048 (32 KB) fill it: 2048 x 5632 f16 streamed
  /// from DRAM at 27 GB/s with x in f32 and 41 with x in f16, and 64 rows of it ran 158 against 193
  /// GFLOPS on AVX2 (Zen 4, 2 threads).
  bool x_exact = false;
  /// x given in the weight's dtype (f16 / bf16 bits, dense [m, k]) instead of `x`, which is then
  /// null: a half-precision model's activations as they are (implies x_exact). Kernels that read x
  /// narrowed take it as it is; the others widen it once per call (gemv_f32_x).
  const std::uint16_t* x_half = nullptr;
};

namespace detail {

/// Prefetches (into L1) `bytes` of each of the R weight rows, from `ahead` bytes past `at` on:
/// what a decode tile streams next, where the hardware prefetcher alone falls short (the tiers'
/// prefetch distances and which CPUs take them are in their rooms).
template <int R>
inline void prefetch_rows(const std::byte* const (&rows)[R], std::size_t at, std::ptrdiff_t ahead, std::size_t bytes) noexcept {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (std::size_t l = 0; l < bytes; l += 64) __builtin_prefetch(rows[r] + at + ahead + l, 0, 3);
  }
}

/// Runs f(begin, end) over blocks of about `grain` rows of [0, n), handed out to the threads as
/// they finish: two threads streaming from DRAM rarely get equal bandwidth, and a static split
/// leaves the faster one waiting at the barrier. One thread (or a call from a parallel region)
/// runs the blocks in turn: as one block of all n rows, a prompt's tiles each streamed the whole
/// weight from DRAM instead of a block from L2 (64 rows of 2048 x 5632 f16 on one thread of a Zen
/// 3: 45 GFLOPS, 60 in blocks).
template <class F>
void gemv_blocks(std::size_t n, std::size_t grain, F&& f) {
  grain = std::max<std::size_t>(grain, 1);
  const std::size_t blocks = (n + grain - 1) / grain;
#if defined(_OPENMP)
  if (blocks > 1 && num_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(blocks); ++i) {
      const std::size_t b = static_cast<std::size_t>(i) * grain;
      f(b, std::min(n, b + grain));
    }
    return;
  }
#endif
  for (std::size_t i = 0; i < std::max<std::size_t>(blocks, 1); ++i) f(i * grain, std::min(n, (i + 1) * grain));
}

/// Weight rows per block of the split: about 256 KiB of weights (a multiple of `multiple` rows, the
/// weight rows a kernel's tile takes), enough to amortise scheduling, small enough that the threads
/// end together. Tiles of gemv_max_rows activation rows meet each block in turn: the first reads it
/// from memory, the others from the cache.
inline std::size_t gemv_grain(std::size_t row_bytes, std::size_t multiple = 4) {
  return std::max(multiple, (std::size_t{1} << 18) / std::max<std::size_t>(row_bytes, 1) / multiple * multiple);
}

/// `grain` rows per block made even: blocks of [0, n), a multiple of `multiple` rows each, whose
/// count fills every thread alike, so that no thread is left with one block alone at the end (2048
/// rows in blocks of 136 were fifteen full blocks and one of eight). Of the block counts just
/// under and over n / grain that are multiples of the thread count, the one whose busiest thread
/// gets fewer rows (256 rows in multiples of 20 on two threads: two blocks of 140 and 116, not
/// three of 80 and one of 16).
inline std::size_t balanced_grain(std::size_t n, std::size_t grain, std::size_t multiple) {
  const auto threads = static_cast<std::size_t>(std::max(1, num_threads()));
  const std::size_t want = (n + grain - 1) / std::max<std::size_t>(grain, 1);
  std::size_t best = grain, best_load = 0;
  for (const std::size_t blocks : {std::max(threads, want / threads * threads), (want + threads - 1) / threads * threads}) {
    const std::size_t g = std::max(multiple, ((n + blocks - 1) / blocks + multiple - 1) / multiple * multiple);
    const std::size_t load = ((n + g - 1) / g + threads - 1) / threads * g;  // rows of the busiest thread
    if (best_load == 0 || load < best_load || (load == best_load && g < best)) best = g, best_load = load;
  }
  return best;
}

/// Runs tile(x_tile, rows, j0, j1, out_tile) for every tile of up to gemv_max_rows rows of x and
/// every block of weight rows (a multiple of `multiple` rows: gemv_grain), blocks split over the
/// threads.
template <class Tile>
void gemv_tiles(const GemvProblem& p, std::int64_t x_row_stride, const Tile& tile, std::size_t multiple = 4) {
  const auto n = static_cast<std::size_t>(p.n);
  gemv_blocks(n, balanced_grain(n, gemv_grain(p.row_bytes, multiple), multiple), [&](std::size_t b, std::size_t e) {
    for (std::int64_t i = 0; i < p.m; i += gemv_max_rows) {
      tile(i * x_row_stride, std::min(gemv_max_rows, p.m - i), b, e, p.out + i * p.n);
    }
  });
}

/// Elements of k a pass over a prompt's tiles takes at most: a tile's four x rows (32 KB in f32,
/// 16 KB as bf16 pairs) stay in L1, and the chunks of a block's weight rows (about 512 KB,
/// prompt_block_bytes) in L2, for every tile. Unchunked, 64 bf16 rows of 2048 x 5632 ran 360-430
/// GFLOPS against 560-660 chunked (Zen 5, 2 threads).
inline constexpr std::int64_t prompt_chunk = 2048;
inline constexpr std::size_t prompt_block_bytes = std::size_t{1} << 19;

/// The chunks of k a prompt's tiles take: about equal, and whole 32-element steps but the last.
inline std::int64_t prompt_chunk_elements(std::int64_t k) noexcept {
  const std::int64_t chunks = (k + prompt_chunk - 1) / prompt_chunk;
  return ((k + chunks - 1) / chunks + 31) / 32 * 32;
}

/// Runs tile(i, rows, k0, len, j0, j1, accumulate) for a prompt (more than gemv_max_rows x rows):
/// blocks of about prompt_block_bytes of weight rows (chunk_row_bytes each, a multiple of
/// `rows_multiple` rows) split over the threads, each meeting every tile of up to gemv_max_rows x
/// rows from row i one chunk [k0, k0 + len) of k at a time; `accumulate` is false for the first
/// chunk, whose sums are written with the bias, and true for the ones added to them.
template <class Tile>
void gemv_prompt_tiles(const GemvProblem& p, std::int64_t kc, std::size_t chunk_row_bytes, std::size_t rows_multiple,
                       const Tile& tile) {
  const auto n = static_cast<std::size_t>(p.n);
  const std::size_t grain = std::max(rows_multiple, prompt_block_bytes / chunk_row_bytes / rows_multiple * rows_multiple);
  gemv_blocks(n, balanced_grain(n, grain, rows_multiple), [&](std::size_t j0, std::size_t j1) {
    for (std::int64_t k0 = 0; k0 < p.k; k0 += kc) {
      for (std::int64_t i = 0; i < p.m; i += gemv_max_rows) {
        tile(i, std::min(gemv_max_rows, p.m - i), k0, std::min(kc, p.k - k0), j0, j1, k0 > 0);
      }
    }
  });
}

/// Runs Blocks::block<M>(x, k, w, row_bytes, j0, j1, n, bias, out) over the tiles of `p`, M the
/// tile's activation rows (1 to gemv_max_rows) as a template argument, so that a kernel keeps its
/// M x R accumulators in registers. x: the activation rows, `x_bytes` a value (p.x's f32, or the
/// weight's dtype narrowed by gemv_narrowed_x). Blocks::rows_multiple, where it is declared, is the
/// multiple of weight rows its tiles take whole (else 4): the blocks are cut to it.
template <class Blocks>
void gemv_by_rows(const GemvProblem& p, const std::byte* x, std::size_t x_bytes) {
  std::size_t multiple = 4;
  if constexpr (requires { Blocks::rows_multiple; }) multiple = Blocks::rows_multiple;
  gemv_tiles(p, p.k, [&](std::int64_t x0, std::int64_t rows, std::size_t j0, std::size_t j1, float* out) {
    const std::byte* xt = x + static_cast<std::size_t>(x0) * x_bytes;
    switch (rows) {
      case 1: Blocks::template block<1>(xt, p.k, p.w, p.row_bytes, j0, j1, p.n, p.bias, out); break;
      case 2: Blocks::template block<2>(xt, p.k, p.w, p.row_bytes, j0, j1, p.n, p.bias, out); break;
      case 3: Blocks::template block<3>(xt, p.k, p.w, p.row_bytes, j0, j1, p.n, p.bias, out); break;
      default: Blocks::template block<4>(xt, p.k, p.w, p.row_bytes, j0, j1, p.n, p.bias, out); break;
    }
  }, multiple);
}
template <class Blocks>
void gemv_by_rows(const GemvProblem& p) {
  gemv_by_rows<Blocks>(p, reinterpret_cast<const std::byte*>(p.x), sizeof(float));
}

/// n elements of T at a 64-byte boundary, in a buffer this thread keeps between calls (one per T
/// and Tag; valid until its next call with them). Aligned because vector loads that straddle two
/// cache lines cost the NF4 tile kernel 1.7x at k = 14336, and a 64-row bf16 prompt at the AVX2
/// tier a fifth of its time, with x widened into a plain vector (16-byte aligned).
template <class T, class Tag = void>
T* aligned_scratch(std::size_t n) {
  static_assert(64 % sizeof(T) == 0);
  constexpr std::size_t pad = 64 / sizeof(T);
  thread_local std::vector<T> buffer;
  buffer.resize(n + pad);
  const auto misaligned = reinterpret_cast<std::uintptr_t>(buffer.data()) % 64 / sizeof(T);
  return buffer.data() + (pad - misaligned) % pad;
}

/// p.x narrowed to `wd` (f16 or bf16) in a buffer of this thread's: exact when p.x_exact; p.x_half
/// itself when given.
inline const std::byte* gemv_narrowed_x(const GemvProblem& p, DType wd) {
  if (p.x_half) return reinterpret_cast<const std::byte*>(p.x_half);
  const auto n = static_cast<std::size_t>(p.m * p.k);
  std::uint16_t* buf = aligned_scratch<std::uint16_t, GemvProblem>(n);
  if (wd == DType::f16) {
    accel::detail::f32_to_f16(p.x, reinterpret_cast<half*>(buf), n);
  } else {
    accel::detail::f32_to_bf16(p.x, reinterpret_cast<bfloat16*>(buf), n);
  }
  return reinterpret_cast<const std::byte*>(buf);
}

/// `p` with x in f32: p itself, or with p.x_half widened into a buffer of this thread's.
inline GemvProblem gemv_f32_x(const GemvProblem& p, DType wd) {
  if (!p.x_half) return p;
  const auto n = static_cast<std::size_t>(p.m * p.k);
  float* buf = aligned_scratch<float, GemvProblem>(n);
  if (wd == DType::f16) {
    accel::detail::f16_to_f32(reinterpret_cast<const half*>(p.x_half), buf, n);
  } else {
    accel::detail::bf16_to_f32(reinterpret_cast<const bfloat16*>(p.x_half), buf, n);
  }
  GemvProblem q = p;
  q.x = buf;
  q.x_half = nullptr;
  q.x_exact = true;
  return q;
}

}  // namespace detail
}  // namespace accel::backend::cpu

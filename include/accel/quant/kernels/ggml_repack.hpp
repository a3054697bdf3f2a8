// Q4_0 and Q8_0 weights rewritten once, when they are loaded, into rows-in-lanes groups the x86
// kernels read as one stream (llama.cpp repacks them too, in layouts of its own):
//
//   has_repacked_kernels(arch, type)                  arch has kernels for type's repacked layout
//   repacked_bytes(type, in, out)                     the size of that layout
//   repack_ggml(type, w, in, out) -> Tensor           the repacked copy of a u8 [out, row bytes] weight
//   repacked_dot(arch, type, n, m, packed, x, count, out)   its product with `count` activation rows
//   release_mapped_pages(t)                           hands a read-only mapped view's pages back
//
// The layout: rows in groups of eight, the rows padded with zero rows to a multiple of sixteen; a
// group is its n / 32 blocks one after another, eight GGUF blocks' bytes each (144 for Q4_0, 272
// for Q8_0): the eight rows' f16 scales, then 32-byte words j (four for Q4_0, eight for Q8_0)
// whose 4-byte lane i holds bytes 4j..4j+3 of row i's code bytes (as GGUF stores them: Q4_0's
// byte t holds element t in its low nibble and t + 16 in its high one, Q8_0's byte t element t).
// AVX2 loads a word as one register of eight rows (quant/kernels/ggml_dot/avx2_rows.hpp), AVX-512 VNNI two
// neighbouring groups' words as one of sixteen (quant/kernels/ggml_dot_x16.hpp).
//
// Why: GGUF's layout keeps each row's blocks together, so a kernel taking several rows at once
// either reads several streams (slower from DRAM: ggml_dot_x16.hpp) or transposes every block as
// it reads it; one row at a time spends most of a block on scalar work. From the repacked layout
// one activation row (decoding) runs the rows-in-lanes kernels off one stream: 2048 x 5632 Q4_0
// streamed from DRAM at 43.8 GB/s against 27.6 for the AVX2 one-row kernel and 35.0 for the VNNI
// one (Zen 4, 2 threads, one process); a prompt expands the stored words without transposing.
// The copy replaces the GGUF bytes in memory rather than adding to them: the GGUF layer keeps its weight (state dicts, offload and devices see GGUF's
// bytes), and the mapped pages the copy was made from are handed back (release_mapped_pages),
// to be read from the file again only if something reads the weight itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/quant/kernels/ggml_dot.hpp"
#include "accel/quant/kernels/ggml_dot_x16.hpp"

namespace accel::quant {

/// Rows per repacked group, and per step of repacked_dot (two groups).
inline constexpr std::size_t repacked_group_rows = 8;
inline constexpr std::size_t repacked_step_rows = 16;

template <class Arch>
constexpr bool has_repacked_kernels(const Arch&, GgmlType t) noexcept {
#if ACCEL_SIMD_X86
  if constexpr (std::is_base_of_v<simd::avx2, Arch>) return t == GgmlType::q4_0 || t == GgmlType::q8_0;
#endif
  (void)t;
  return false;
}

/// Whether the tier this CPU runs (under ACCEL_CPU_ARCH) has repacked kernels for `t`.
inline bool cpu_has_repacked_kernels(GgmlType t) {
  return simd::dispatch<quant_ladder>([&](auto arch) { return has_repacked_kernels(arch, t); });
}

/// Bytes of the repacked layout of an `out` x `in` weight of type `t` (Q4_0, Q8_0).
inline std::size_t repacked_bytes(GgmlType t, std::int64_t in, std::int64_t out) {
  const auto rows = (static_cast<std::size_t>(out) + repacked_step_rows - 1) / repacked_step_rows * repacked_step_rows;
  return rows * static_cast<std::size_t>(io::ggml_row_nbytes(t, static_cast<std::uint64_t>(in)));
}

/// The repacked copy (u8, repacked_bytes) of the Q4_0 or Q8_0 weight `w` (u8 [out, row bytes] on
/// the CPU).
inline Tensor repack_ggml(GgmlType t, const Tensor& w, std::int64_t in, std::int64_t out) {
  if (t != GgmlType::q4_0 && t != GgmlType::q8_0) {
    throw DTypeError("repack_ggml: no repacked layout for " + std::string(io::ggml_type_name(t)));
  }
  const std::size_t row_bytes = io::ggml_row_nbytes(t, static_cast<std::uint64_t>(in));
  if (!w.is_cpu() || w.dtype() != DType::u8 || w.dim() != 2 || w.size(0) != out ||
      static_cast<std::size_t>(w.size(1)) != row_bytes || !w.is_contiguous()) {
    throw ShapeError("repack_ggml: expected a contiguous CPU uint8 [" + std::to_string(out) + ", " +
                     std::to_string(row_bytes) + "] " + std::string(io::ggml_type_name(t)) + " weight, got " +
                     std::string(dtype_name(w.dtype())) + " " + w.shape().str() + " on " + w.device().str());
  }
  // A block: its f16 scale, then the code bytes (16 or 32), which go out as 4-byte words.
  const std::size_t block = io::ggml_type_info(t).type_size, words = (block - 2) / 4;
  const std::size_t group_block = repacked_group_rows * block;
  const std::size_t blocks = static_cast<std::size_t>(in) / 32, m = static_cast<std::size_t>(out);
  const std::size_t bytes = repacked_bytes(t, in, out), groups = bytes / (repacked_group_rows * row_bytes);
  Tensor packed = Tensor::empty(Shape{static_cast<std::int64_t>(bytes)}, DType::u8);
  const auto* src = static_cast<const std::byte*>(w.data_ptr());
  auto* dst = static_cast<std::byte*>(packed.data_ptr());
  parallel_for(groups, 1, [&](std::size_t g0, std::size_t g1) {
    for (std::size_t g = g0; g < g1; ++g) {
      std::byte* out_group = dst + g * blocks * group_block;
      for (std::size_t b = 0; b < blocks; ++b) {
        std::byte* o = out_group + b * group_block;
        for (std::size_t i = 0; i < repacked_group_rows; ++i) {
          const std::size_t row = g * repacked_group_rows + i;
          if (row >= m) {  // padding: scale 0, codes 0 add nothing
            std::memset(o + 2 * i, 0, 2);
            for (std::size_t j = 0; j < words; ++j) std::memset(o + 16 + 32 * j + 4 * i, 0, 4);
            continue;
          }
          const std::byte* blk = src + row * row_bytes + b * block;
          std::memcpy(o + 2 * i, blk, 2);
          for (std::size_t j = 0; j < words; ++j) std::memcpy(o + 16 + 32 * j + 4 * i, blk + 2 + 4 * j, 4);
        }
      }
    }
  });
  return packed;
}

/// out[j * m + r] = weight row r (of `m`, n elements each, repacked at `packed`) times activation
/// row x[j], for j < count; the work split over the threads in steps of sixteen rows. Requires
/// has_repacked_kernels(arch, t). The integer sums are exact, so results match vec_dot's up to the
/// order of the float accumulation.
///
/// Up to four activation rows (decoding) run AVX2's eight-row kernel off the layout as it is, one
/// group after the other (its stream prefetched on Intel CPUs), on VNNI too: its sixteen-row kernel reads two groups at once and chains
/// eight VPDPBUSD a block, and streamed 2048 x 5632 at 24 GB/s against 43 (Zen 4, 2 threads). More
/// rows than that expand each step's blocks once into this thread's buffer (the nibbles split into
/// bytes) for every pass over the activation rows, as ggml_dot_x16.hpp does from GGUF's layout.
template <class Arch>
void repacked_dot(const Arch& arch, GgmlType t, std::size_t n, std::size_t m, const std::byte* packed,
                  const ActivationRow* const* x, std::size_t count, float* out) {
  if (!has_repacked_kernels(arch, t)) {
    throw DTypeError("repacked_dot: no repacked kernel for " + std::string(io::ggml_type_name(t)) + " on " + Arch::name());
  }
#if ACCEL_SIMD_X86
  constexpr std::size_t step = repacked_step_rows;
  // Intel's prefetchers leave this one stream at half the DRAM's speed: prefetched 4 KB ahead, a
  // 2048 x 135168 Q4_0 matrix decoded at 20 GB/s against 12.5 (Sapphire Rapids, 2 threads). On
  // Zen 4 it streamed at 43.8 GB/s without, where software prefetch had slowed the bf16 GEMV.
  const bool intel = simd::cpu_is_intel();
  const auto run = [&](auto q4) {
    constexpr bool Q4 = decltype(q4)::value;
    constexpr std::size_t group_block = detail::x8_repacked<Q4>::bytes;
    const std::size_t blocks = n / 32, group_bytes = blocks * group_block, steps = (m + step - 1) / step;
    parallel_for(steps, 1, [&](std::size_t s0, std::size_t s1) {
      thread_local std::vector<float> tile;
      tile.resize(step * count);
      for (std::size_t s = s0; s < s1; ++s) {
        const std::byte* lo = packed + 2 * s * group_bytes;
        const std::size_t r0 = s * step, nr = std::min(step, m - r0);
        if (count <= 4) {
          for (std::size_t h = 0; h < 2; ++h) {
            detail::in_groups<4>([&](auto r, const ActivationRow* const* xs, float* o) {
              constexpr int R = decltype(r)::value;
              if (intel) detail::dot_x8_avx2<R, Q4>(n, detail::x8_repacked<Q4, true>{lo + h * group_bytes}, xs, o, step);
              else detail::dot_x8_avx2<R, Q4>(n, detail::x8_repacked<Q4, false>{lo + h * group_bytes}, xs, o, step);
            }, x, count, tile.data() + 8 * h, step);
          }
        } else if constexpr (std::is_base_of_v<simd::avx512_vnni, Arch>) {
          thread_local std::vector<detail::x16_block> expanded;
          if (expanded.size() < blocks) expanded.resize(blocks);
          for (std::size_t b = 0; b < blocks; ++b) {
            const std::byte* at = lo + group_block * b;
            if constexpr (Q4) detail::load_x16_q4_0(at, at + group_bytes, expanded[b]);
            else detail::load_x16_q8_0(at, at + group_bytes, expanded[b]);
          }
          detail::in_groups<dot_x16_activations>([&](auto r, const ActivationRow* const* xs, float* o) {
            detail::dot_x16<decltype(r)::value, Q4>(n, detail::x16_expanded{expanded.data()}, xs, o);
          }, x, count, tile.data(), step);
        } else {
          thread_local std::vector<detail::x8_block> expanded;
          if (expanded.size() < blocks) expanded.resize(blocks);
          for (std::size_t h = 0; h < 2; ++h) {
            for (std::size_t b = 0; b < blocks; ++b) detail::x8_repacked<Q4>{lo + h * group_bytes}(b, expanded[b]);
            detail::in_groups<4>([&](auto r, const ActivationRow* const* xs, float* o) {
              detail::dot_x8_avx2<decltype(r)::value, Q4>(n, detail::x8_expanded{expanded.data()}, xs, o, step);
            }, x, count, tile.data() + 8 * h, step);
          }
        }
        for (std::size_t j = 0; j < count; ++j) std::memcpy(out + j * m + r0, tile.data() + j * step, nr * sizeof(float));
      }
    });
  };
  if (t == GgmlType::q4_0) run(std::true_type{});
  else run(std::false_type{});
#else
  (void)n, (void)m, (void)packed, (void)x, (void)count, (void)out;
#endif
}

/// Hands back the pages of `t` when it views a read-only file mapping (core/mapped_file.hpp): the
/// process then holds a repacked copy instead of both.
inline void release_mapped_pages(const Tensor& t) noexcept {
  if (!t.defined() || !t.is_cpu() || t.storage().kind() != MemoryKind::mapped || t.storage().writable()) return;
  accel::release_mapped_pages(t.data_ptr(), t.nbytes());
}

}  // namespace accel::quant

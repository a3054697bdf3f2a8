// The conversion kernels of convert_span's hot pairs, one table per instruction set, and the
// table for this CPU.
//
//   convert_table                  f32 <-> f16 / bf16 / f8 e4m3fn / f8 e5m2 kernels of one ISA
//   convert_table_for<Arch>()      the table tag Arch selects (tests run every available one)
//   convert_kernels()              the best table this CPU runs, chosen on first use
//
// Every table returns core/float_types.hpp's bits for every input; they differ only in speed.
// The kernels are overloads over simd::requires_arch<A> (core/convert_lanes.hpp: scalar and
// the lane code, core/convert_kernels_x86.hpp: AVX2, AVX-512, AVX512-BF16,
// core/convert_kernels_neon.hpp: AArch64 NEON), so a tag without its own overload takes its
// parent's: the xsimd fallback ladder. The x86 overloads carry `target` attributes, which is how
// a program built without -march flags still gets the AVX-512 kernels on a CPU that has them;
// simd::dispatch reads CPUID (HWCAP on AArch64) once to pick the tag.
#pragma once

#include <cstddef>
#include <tuple>

#include "accel/core/convert_kernels_neon.hpp"
#include "accel/core/convert_kernels_x86.hpp"
#include "accel/core/convert_lanes.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/simd_arch.hpp"

namespace accel::detail {

template <class T>
using widen_fn = void (*)(const T*, float*, std::size_t) noexcept;
template <class T>
using narrow_fn = void (*)(const float*, T*, std::size_t) noexcept;

/// The formats with kernels: everything convert_span widens to f32 or narrows from it.
using small_float_types = std::tuple<half, bfloat16, float8_e4m3fn, float8_e5m2>;

template <class Formats>
struct kernel_set;
template <class... T>
struct kernel_set<std::tuple<T...>> {
  std::tuple<widen_fn<T>...> widens;
  std::tuple<narrow_fn<T>...> narrows;
};

/// One ISA's kernels for the small formats, both directions.
struct convert_table : kernel_set<small_float_types> {
  const char* arch = "";

  template <class T>
  widen_fn<T> widen() const noexcept {
    return std::get<widen_fn<T>>(widens);
  }
  template <class T>
  narrow_fn<T> narrow() const noexcept {
    return std::get<narrow_fn<T>>(narrows);
  }
};

// Entry points with one signature per pair; overload resolution inside picks the nearest ISA.
template <class Arch, class T>
void widen_entry(const T* src, float* dst, std::size_t n) noexcept {
  widen(Arch{}, src, dst, n);
}
template <class Arch, class T>
void narrow_entry(const float* src, T* dst, std::size_t n) noexcept {
  narrow(Arch{}, src, dst, n);
}

template <class Arch, class... T>
constexpr convert_table make_convert_table(std::tuple<T...>*) noexcept {
  convert_table table;
  table.widens = {&widen_entry<Arch, T>...};
  table.narrows = {&narrow_entry<Arch, T>...};
  table.arch = Arch::name();
  return table;
}

/// The kernels tag Arch selects (the fallback ladder fills what it does not specialize).
template <class Arch>
constexpr convert_table convert_table_for() noexcept {
  return make_convert_table<Arch>(static_cast<small_float_types*>(nullptr));
}

/// This CPU's kernels: the best tag of simd::ladder it runs, found on first use.
inline const convert_table& convert_kernels() noexcept {
  static const convert_table table =
      simd::dispatch([](auto arch) { return convert_table_for<decltype(arch)>(); });
  return table;
}

}  // namespace accel::detail


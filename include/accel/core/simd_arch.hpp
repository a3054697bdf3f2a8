// CPU instruction-set tags in xsimd's style, and the run-time choice among them.
//
//   simd::scalar < simd::avx2 < simd::avx512 < simd::avx512_bf16     x86 tags, each derived from the one below
//   simd::avx512_vnni (derived from avx512)                          int8 dot products, for quantized kernels
//   simd::scalar < simd::neon < simd::neon_dotprod                   AArch64 tags (SDOT / UDOT: int8 dot products)
//   simd::requires_arch<A>                                           a kernel overload's tag parameter
//   simd::x86_ladder, simd::arm_ladder, simd::ladder                 xsimd::arch_lists, best first
//   simd::dispatch<List>(f)                                          f(best available tag of List)
//   simd::tier_names, simd::active_tier()                            the tiers ACCEL_CPU_ARCH names; the one that runs
//   simd::cpu_is_intel()                                             the vendor, for tuning choices that differ by it
//
// ACCEL_CPU_ARCH=scalar|avx2|avx512|avx512_vnni|avx512_bf16|neon|neon_dotprod caps the choice, as
// ONEDNN_MAX_CPU_ISA caps oneDNN, so that one machine tests and measures every tier it has. On
// each architecture a cap admits every tier of that architecture up to its own (x86: scalar,
// avx2, avx512, avx512_vnni, avx512_bf16 in that order; AArch64: scalar, neon, neon_dotprod); a
// cap that names the other architecture's tier admits scalar only ("neon" on x86, "avx2" on ARM).
// The library's oneDNN engine takes the same cap when ONEDNN_MAX_CPU_ISA is unset
// (backend/cpu/dnnl_matmul.hpp). A value that names no tier is a ValueError at the first
// dispatch; a cap above what the CPU has changes nothing.
//
// A kernel is an overload set over `requires_arch<A>`: calling it with the machine's tag picks
// the most derived overload, so a new ISA adds only the kernels that differ. Each tag's overloads
// carry ACCEL_TARGET_<ISA> (GCC / Clang `target` attributes), which lets one header compile
// AVX-512 code in a program built for baseline x86-64, or SDOT in one built for baseline ARMv8-A;
// only a CPU that has the ISA runs it. The x86 tags are chosen by CPUID, the AArch64 ones by the
// kernel's HWCAP bits (getauxval(AT_HWCAP)).
//
// Why not xsimd's own tags and `xsimd::dispatch`: xsimd 8.1 defines `batch<T, avx512bw>` and its
// kernels only when the translation unit is compiled with -mavx512bw, and a header cannot turn
// that on for its users; its CPU check also skips the OS's register-state check (XGETBV) and
// knows neither F16C nor AVX512-BF16 nor ARM's dot product. So the wider kernels are
// target-attributed intrinsics and GCC vector extensions, chosen by the detection below, and the
// ladder is an xsimd::arch_list.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>

#include <xsimd/config/xsimd_arch.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define ACCEL_SIMD_X86 1
#define ACCEL_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2")))
#define ACCEL_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2")))
#define ACCEL_TARGET_AVX512_BF16 \
  __attribute__((target("avx512bf16,avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2")))
#define ACCEL_TARGET_AVX512_VNNI \
  __attribute__((target("avx512vnni,avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2")))
#else
#define ACCEL_SIMD_X86 0
#endif

/// Around x86 kernels whose vectors are held in memory (blocks of registers, reductions): GCC 12
/// reports its own intrinsics' undefined pass-through operands (_mm256_undefined_pd() in
/// _mm512_reduce_add_ps, the masked forms' sources) as used uninitialized once they are inlined
/// there, in target-attributed functions; the register is never read.
#if defined(__GNUC__) && !defined(__clang__)
#define ACCEL_SIMD_QUIET_BEGIN                                  \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define ACCEL_SIMD_QUIET_END _Pragma("GCC diagnostic pop")
#else
#define ACCEL_SIMD_QUIET_BEGIN
#define ACCEL_SIMD_QUIET_END
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define ACCEL_SIMD_ARM 1
#if defined(__linux__)
#include <sys/auxv.h>
#endif
// Advanced SIMD is part of every AArch64 CPU: its kernels need no attribute beyond the baseline,
// which this one names. The dot-product extension (SDOT / UDOT, optional from ARMv8.2-A) needs one;
// GCC's arm_neon.h defines vdotq_s32 under armv8.2-a+dotprod, and a caller must have all of that
// to inline it (a CPU with the extension implements ARMv8.2-A). Clang spells features without '+'.
#if defined(__clang__)
#define ACCEL_TARGET_NEON __attribute__((target("neon")))
#define ACCEL_TARGET_NEON_DOTPROD __attribute__((target("neon,dotprod")))
#else
#define ACCEL_TARGET_NEON __attribute__((target("+simd")))
#define ACCEL_TARGET_NEON_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#else
#define ACCEL_SIMD_ARM 0
#endif

#include "accel/core/errors.hpp"

namespace accel::simd {

/// The tiers ACCEL_CPU_ARCH can name: x86's lowest first, then AArch64's (each architecture's
/// cap admits only its own tiers above scalar).
inline constexpr std::string_view tier_names[] = {"scalar",      "avx2", "avx512",      "avx512_vnni",
                                                  "avx512_bf16", "neon", "neon_dotprod"};

/// `name`'s place in tier_names, or std::size(tier_names) when it names no tier.
constexpr std::size_t tier_rank(std::string_view name) noexcept {
  std::size_t i = 0;
  while (i < std::size(tier_names) && tier_names[i] != name) ++i;
  return i;
}

namespace detail {

/// What this CPU and its OS can run: the CPUID bits, and XCR0 saying the OS saves the registers.
struct cpu_features {
  bool avx2 = false;         // with FMA and F16C, which every AVX2 CPU has (x86-64-v3)
  bool avx512 = false;       // F, BW, DQ, VL (x86-64-v4)
  bool avx512_bf16 = false;  // VCVTNEPS2BF16
  bool avx512_vnni = false;  // VPDPBUSD: int8 dot products
  bool neon = false;         // AArch64 Advanced SIMD
  bool neon_dotprod = false;  // SDOT / UDOT: int8 dot products (ARMv8.2-A's optional dot product)

  /// The CPU's features, capped by `cap` (ACCEL_CPU_ARCH's value; null for none).
  explicit cpu_features(const char* cap) {
    detect();
    if (!cap || !*cap) return;
    const std::size_t rank = tier_rank(cap);
    if (rank == std::size(tier_names)) {
      std::string valid;
      for (auto n : tier_names) valid += (valid.empty() ? "" : ", ") + std::string(n);
      throw ValueError("ACCEL_CPU_ARCH=" + std::string(cap) + " names no CPU tier: expected one of " + valid);
    }
    // A cap names one architecture's tier; on the other, it admits scalar only.
    const std::size_t neon_rank = tier_rank("neon");
    const std::size_t x86_rank = rank < neon_rank ? rank : 0;
    avx2 = avx2 && x86_rank >= 1;
    avx512 = avx512 && x86_rank >= 2;
    avx512_vnni = avx512_vnni && x86_rank >= 3;
    avx512_bf16 = avx512_bf16 && x86_rank >= 4;
    neon = neon && rank >= neon_rank;
    neon_dotprod = neon_dotprod && rank >= tier_rank("neon_dotprod");
  }

 private:
  void detect() noexcept {
#if ACCEL_SIMD_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = (c >> 27) & 1u, fma = (c >> 12) & 1u, f16c = (c >> 29) & 1u;
    if (!osxsave) return;
    unsigned xcr0_lo = 0;
    [[maybe_unused]] unsigned xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    const bool ymm_state = (xcr0_lo & 0x6u) == 0x6u;     // SSE + AVX
    const bool zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;   // + opmask, ZMM0-15 upper, ZMM16-31
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    avx2 = ymm_state && ((b >> 5) & 1u) && fma && f16c;
    const bool f = (b >> 16) & 1u, dq = (b >> 17) & 1u, bw = (b >> 30) & 1u, vl = (b >> 31) & 1u;
    avx512 = avx2 && zmm_state && f && dq && bw && vl;
    avx512_vnni = avx512 && ((c >> 11) & 1u);
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512_bf16 = avx512 && ((a >> 5) & 1u);
#elif ACCEL_SIMD_ARM && defined(__linux__)
    // The kernel's HWCAP bits (arch/arm64/include/uapi/asm/hwcap.h), which also say that it saves
    // the registers; glibc names them in <sys/auxv.h>.
    constexpr unsigned long hwcap_asimd = 1ul << 1, hwcap_asimddp = 1ul << 20;
    const unsigned long hwcap = getauxval(AT_HWCAP);
    neon = (hwcap & hwcap_asimd) != 0;
    neon_dotprod = neon && (hwcap & hwcap_asimddp) != 0;
#elif ACCEL_SIMD_ARM
    // No HWCAP to read: Advanced SIMD is architectural, the dot product what the build targets.
    neon = true;
#if defined(__ARM_FEATURE_DOTPROD)
    neon_dotprod = true;
#endif
#endif
  }
};

/// What the dispatch may use: this CPU's features under ACCEL_CPU_ARCH, read once.
inline const cpu_features& cpu() {
  static const cpu_features features(std::getenv("ACCEL_CPU_ARCH"));
  return features;
}

}  // namespace detail

/// Portable C++: every CPU; the rounding is core/float_types.hpp's.
struct scalar {
  static constexpr bool supported() noexcept { return true; }
  static bool available() { return true; }
  static constexpr unsigned version() noexcept { return 0; }
  static constexpr std::size_t alignment() noexcept { return sizeof(float); }  // register bytes
  static constexpr const char* name() noexcept { return "scalar"; }
};

/// An x86 tag one rung above Parent, with registers of Bytes, available where the CPU and OS
/// run `Feature`.
template <class Parent, unsigned Version, std::size_t Bytes, bool detail::cpu_features::*Feature>
struct x86_tag : Parent {
  static constexpr bool supported() noexcept { return ACCEL_SIMD_X86; }
  static bool available() { return supported() && detail::cpu().*Feature; }
  static constexpr unsigned version() noexcept { return Version; }
  static constexpr std::size_t alignment() noexcept { return Bytes; }
};

/// AVX2 with FMA and F16C (Haswell, Zen 1 and later).
struct avx2 : x86_tag<scalar, 1, 32, &detail::cpu_features::avx2> {
  static constexpr const char* name() noexcept { return "avx2"; }
};
/// AVX-512 F, BW, DQ and VL (Skylake-SP, Zen 4 and later).
struct avx512 : x86_tag<avx2, 2, 64, &detail::cpu_features::avx512> {
  static constexpr const char* name() noexcept { return "avx512"; }
};
/// AVX-512 with the BF16 conversions (Cooper Lake, Sapphire Rapids, Zen 4).
struct avx512_bf16 : x86_tag<avx512, 3, 64, &detail::cpu_features::avx512_bf16> {
  static constexpr const char* name() noexcept { return "avx512_bf16"; }
};

/// AVX-512 with VNNI's int8 dot products (Cascade Lake, Ice Lake, Zen 4 and later). Outside the
/// conversion ladder (a branch beside avx512_bf16): only the quantized kernels' list names it.
struct avx512_vnni : x86_tag<avx512, 3, 64, &detail::cpu_features::avx512_vnni> {
  static constexpr const char* name() noexcept { return "avx512_vnni"; }
};

/// An AArch64 tag one rung above Parent (128-bit registers), available where the CPU runs `Feature`.
/// Its Version is its place in tier_names, above every x86 tag's: xsimd wants a list's tags sorted
/// by version, and a list names the ARM tags first (tags of two architectures never meet on a CPU).
template <class Parent, unsigned Version, bool detail::cpu_features::*Feature>
struct arm_tag : Parent {
  static constexpr bool supported() noexcept { return ACCEL_SIMD_ARM; }
  static bool available() { return supported() && detail::cpu().*Feature; }
  static constexpr unsigned version() noexcept { return Version; }
  static constexpr std::size_t alignment() noexcept { return 16; }
};

/// AArch64 Advanced SIMD (every 64-bit ARM CPU): 128-bit registers, FMA, f16 conversions.
struct neon : arm_tag<scalar, 5, &detail::cpu_features::neon> {
  static constexpr const char* name() noexcept { return "neon"; }
};
/// Advanced SIMD with the dot product (SDOT / UDOT: four int8 products into an int32 lane;
/// Cortex-A55 / A76, Neoverse N1 and later). Only the int8 kernels' lists name it.
struct neon_dotprod : arm_tag<neon, 6, &detail::cpu_features::neon_dotprod> {
  static constexpr const char* name() noexcept { return "neon_dotprod"; }
};

/// The tag parameter of a kernel overload; a derived tag converts to it (the fallback).
template <class Arch>
using requires_arch = const Arch&;

/// The x86 tags the conversion kernels have, best first; scalar ends it so that dispatch always finds one.
using x86_ladder = xsimd::arch_list<avx512_bf16, avx512, avx2, scalar>;
/// The AArch64 tags the conversion kernels have, best first.
using arm_ladder = xsimd::arch_list<neon, scalar>;
/// Both: the default of dispatch. A tag of the other architecture is never available (nor compiled
/// into the dispatch), so each CPU takes its own ladder.
using ladder = xsimd::arch_list<neon, avx512_bf16, avx512, avx2, scalar>;

namespace detail {
template <class F, class Arch, class... Rest>
decltype(auto) dispatch_first(F&& f, xsimd::arch_list<Arch, Rest...>) {
  if constexpr (sizeof...(Rest) == 0) {
    return f(Arch{});
  } else if constexpr (!Arch::supported()) {
    // Another architecture's tag: not instantiated here.
    return dispatch_first(static_cast<F&&>(f), xsimd::arch_list<Rest...>{});
  } else {
    if (Arch::available()) return f(Arch{});
    return dispatch_first(static_cast<F&&>(f), xsimd::arch_list<Rest...>{});
  }
}
}  // namespace detail

/// Calls f with the first tag of List that this CPU runs (the last tag is taken regardless): what
/// xsimd::dispatch does, with the detection above. Callers resolve once and keep the result.
template <class List = ladder, class F>
decltype(auto) dispatch(F&& f) {
  return detail::dispatch_first(static_cast<F&&>(f), List{});
}

/// The highest tier of `tier_names` that `f` admits.
inline std::string_view tier_of(const detail::cpu_features& f) noexcept {
  if (f.neon_dotprod) return "neon_dotprod";
  if (f.neon) return "neon";
  if (f.avx512_bf16) return "avx512_bf16";
  if (f.avx512_vnni) return "avx512_vnni";
  if (f.avx512) return "avx512";
  if (f.avx2) return "avx2";
  return "scalar";
}

/// The highest tier the dispatch picks on this CPU under ACCEL_CPU_ARCH: what a benchmark or
/// `accel run --json` reports as "cpu_tier".
inline std::string_view active_tier() { return tier_of(detail::cpu()); }

/// True on an Intel CPU (CPUID's vendor string "GenuineIntel"), read once. For the kernels whose
/// software prefetch Intel's cores gain from and AMD's measured slower with: a tuning choice, not a
/// feature (the code is the same ISA either way).
inline bool cpu_is_intel() noexcept {
#if ACCEL_SIMD_X86
  static const bool intel = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    return b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;  // "Genu", "ineI", "ntel"
  }();
  return intel;
#else
  return false;
#endif
}

}  // namespace accel::simd

// check_convert_table(table): one ISA's conversion kernels give core/float_types.hpp's bits.
//
// Widening: every code of every format, NaN bits included (f16 NaNs quietened, as F16C does).
// Narrowing: every code's value and its neighbours one f32 ulp away, every midpoint between
// neighbouring codes and its neighbours, signed zeros, infinities, NaNs with assorted payloads,
// f32 subnormals, the largest finites, and a million random f32 patterns. Each runs at several
// destination misalignments and lengths, through the vector body, the scalar head and tail, and
// the streaming stores.
#pragma once

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "accel/core/convert_kernels.hpp"

namespace accel::test {

template <class T>
float reference_widen(T v) {
  if constexpr (std::is_same_v<T, half>) {
    return detail::decode_f16_quiet(v.bits);
  } else {
    return static_cast<float>(v);
  }
}

template <class T>
std::vector<float> narrowing_inputs() {
  using bits_t = typename T::bits_type;
  constexpr std::uint32_t codes = 1u << (8 * sizeof(bits_t));
  std::vector<float> in;
  auto add_around = [&](float x) {
    for (float y : {x, std::nextafter(x, -INFINITY), std::nextafter(x, INFINITY)}) {
      in.push_back(y);
      in.push_back(-y);
    }
  };
  float prev = 0.0f;
  for (std::uint32_t c = 0; c < codes / 2; ++c) {
    const float v = static_cast<float>(T::from_bits(static_cast<bits_t>(c)));
    if (std::isnan(v) || std::isinf(v)) continue;
    add_around(v);
    if (c > 0) add_around(static_cast<float>((static_cast<double>(prev) + v) / 2));  // exact midpoint
    prev = v;
  }
  const float edges[] = {0.0f, INFINITY, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                         std::numeric_limits<float>::denorm_min(), 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f,
                         65504.0f, 65520.0f, 3.3895314e38f};
  for (float e : edges) add_around(e);
  for (std::uint32_t u : {0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0x7f812345u, 0x7fe00001u, 0x00000001u,
                          0x007fffffu, 0x00400000u, 0x00000100u, 0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu}) {
    in.push_back(std::bit_cast<float>(u));
    in.push_back(std::bit_cast<float>(u | 0x80000000u));
  }
  std::mt19937 rng(20240611);
  for (int i = 0; i < 1'000'000; ++i) in.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  return in;
}

/// Runs `run(dst_offset, length)` over lengths that exercise every part of a kernel's loop.
template <class Run>
void over_layouts(std::size_t n, Run&& run) {
  for (std::size_t offset : {0, 1, 3, 13}) {
    for (std::size_t len : {n, std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{17}, std::size_t{63}}) {
      run(offset, std::min(len, n));
    }
  }
}

template <class T>
void check_widen(const detail::convert_table& table) {
  using bits_t = typename T::bits_type;
  constexpr std::uint32_t codes = 1u << (8 * sizeof(bits_t));
  // Repeated past streaming_store_bytes of output, so the streaming path runs too.
  const std::size_t n = std::max<std::size_t>(codes, (std::size_t{1} << 20) / 4 + 77);
  std::vector<T> src(n);
  for (std::size_t i = 0; i < n; ++i) src[i] = T::from_bits(static_cast<bits_t>(i % codes));
  std::vector<float> out(n + 16);
  over_layouts(n, [&](std::size_t offset, std::size_t len) {
    std::fill(out.begin(), out.end(), -1.0f);
    table.widen<T>()(src.data(), out.data() + offset, len);
    for (std::size_t i = 0; i < len; ++i) {
      const auto got = std::bit_cast<std::uint32_t>(out[offset + i]);
      const auto want = std::bit_cast<std::uint32_t>(reference_widen(src[i]));
      if (got != want) {
        INFO(table.arch << " widen code " << src[i].bits << " at " << i << " of " << len << " offset " << offset);
        REQUIRE(got == want);
      }
    }
  });
}

template <class T>
void check_narrow(const detail::convert_table& table) {
  const std::vector<float> in = narrowing_inputs<T>();
  std::vector<T> out(in.size() + 16);
  over_layouts(in.size(), [&](std::size_t offset, std::size_t len) {
    table.narrow<T>()(in.data(), out.data() + offset, len);
    for (std::size_t i = 0; i < len; ++i) {
      const auto want = T(in[i]).bits;
      if (out[offset + i].bits != want) {
        INFO(table.arch << " narrow f32 0x" << std::hex << std::bit_cast<std::uint32_t>(in[i]) << " at " << std::dec
                        << i << " offset " << offset);
        REQUIRE(out[offset + i].bits == want);
      }
    }
  });
}

inline void check_convert_table(const detail::convert_table& table) {
  check_widen<half>(table);
  check_widen<bfloat16>(table);
  check_widen<float8_e4m3fn>(table);
  check_widen<float8_e5m2>(table);
  check_narrow<half>(table);
  check_narrow<bfloat16>(table);
  check_narrow<float8_e4m3fn>(table);
  check_narrow<float8_e5m2>(table);
}

/// Every tag of the ladder this CPU runs, checked table by table; returns how many ran.
inline int check_every_available_table() {
  int checked = 0;
  simd::ladder::for_each([&](auto arch) {
    using A = decltype(arch);
    if (!A::supported() || !A::available()) return;
    INFO("arch " << A::name());
    check_convert_table(detail::convert_table_for<A>());
    ++checked;
  });
  return checked;
}

}  // namespace accel::test

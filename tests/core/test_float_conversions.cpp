// Exhaustive checks of the small float formats: every bit pattern decodes exactly, round trips,
// and f32 -> format rounds to nearest even (checked against an independent nearest-value search
// and at every midpoint), in the scalar and the vectorized paths alike.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <cstring>
#include <vector>

#include "accel/core/convert.hpp"
#include "accel/core/float_types.hpp"

using namespace accel;

namespace {

template <class T>
using bits_t = typename T::bits_type;

template <class T>
constexpr std::uint32_t pattern_count() {
  return 1u << (8 * sizeof(bits_t<T>));
}

// Independent decoder: sign * mantissa * 2^exponent in double, straight from the definition.
template <class T>
double reference_decode(std::uint32_t code) {
  using F = typename T::format;
  const bool neg = code & F::sign_bit;
  const std::uint32_t a = code & F::abs_mask;
  const int e = static_cast<int>(a >> F::man_bits);
  const std::uint32_t m = a & ((1u << F::man_bits) - 1);
  const int all_ones = (1 << F::exp_bits) - 1;
  double v;
  if (F::has_inf && e == all_ones) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!F::has_inf && a == F::abs_mask) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), F::emin - F::man_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -F::man_bits), e - F::bias);
  }
  return neg ? -v : v;
}

// Nearest representable value by search over the sorted non-negative finite codes; ties to the
// even code; beyond the largest finite value, the format's overflow rule.
template <class T>
struct NearestTable {
  std::vector<std::pair<double, std::uint32_t>> values;  // ascending, non-negative finite
  double overflow_threshold;                             // first magnitude that overflows
  NearestTable() {
    using F = typename T::format;
    for (std::uint32_t c = 0; c <= F::max_finite; ++c) values.emplace_back(reference_decode<T>(c), c);
    const double maxv = values.back().first;
    const double next = std::ldexp(1.0, static_cast<int>(std::log2(maxv))) *
                        std::ldexp(1.0, -F::man_bits);  // one ulp at the top binade
    overflow_threshold = maxv + next / 2;               // the tie rounds away (max code is odd)
  }
  std::uint32_t nearest(double x) const {
    using F = typename T::format;
    const std::uint32_t sign = std::signbit(x) ? F::sign_bit : 0;
    const double a = std::fabs(x);
    if (a >= overflow_threshold) return sign | (F::has_inf ? F::inf_code : F::abs_mask);
    auto it = std::lower_bound(values.begin(), values.end(), std::make_pair(a, 0u),
                               [](auto& l, auto& r) { return l.first < r.first; });
    if (it == values.end()) return sign | values.back().second;
    if (it->first == a || it == values.begin()) return sign | it->second;
    auto lo = std::prev(it);
    const double dl = a - lo->first, dh = it->first - a;
    if (dl < dh) return sign | lo->second;
    if (dh < dl) return sign | it->second;
    return sign | ((lo->second & 1u) ? it->second : lo->second);
  }
};

template <class T>
bool is_nan_code(std::uint32_t c) {
  return std::isnan(reference_decode<T>(c));
}

template <class T>
void check_format() {
  using F = typename T::format;
  NearestTable<T> table;
  // 1. Every pattern decodes to the reference value and (non-NaN) round trips exactly.
  for (std::uint32_t c = 0; c < pattern_count<T>(); ++c) {
    const T v = T::from_bits(static_cast<bits_t<T>>(c));
    const float f = static_cast<float>(v);
    const double ref = reference_decode<T>(c);
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_nan_code<T>(T(f).bits));
      continue;
    }
    REQUIRE(std::bit_cast<std::uint64_t>(static_cast<double>(f)) == std::bit_cast<std::uint64_t>(ref));
    REQUIRE(T(f).bits == c);
    REQUIRE(T(static_cast<double>(f)).bits == c);
  }
  // 2. Midpoints between neighbours, and one f32 ulp either side, round as specified.
  for (std::size_t i = 0; i + 1 < table.values.size(); ++i) {
    const double lo = table.values[i].first, hi = table.values[i + 1].first;
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: midpoints fit in f32
    REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      REQUIRE(T(x).bits == table.nearest(x));
      REQUIRE(T(-x).bits == table.nearest(-static_cast<double>(x)));
    }
    // f64 just above the midpoint must round up, not through a tie in f32.
    const double above = (lo + hi) / 2 + (hi - lo) * 1e-9;
    REQUIRE(T(above).bits == table.values[i + 1].second);
  }
  // 3. Overflow, infinity and NaN.
  const float big = std::numeric_limits<float>::max();
  REQUIRE(T(big).bits == (F::has_inf ? F::inf_code : F::abs_mask));
  REQUIRE(T(std::numeric_limits<float>::infinity()).bits == (F::has_inf ? F::inf_code : F::abs_mask));
  REQUIRE(is_nan_code<T>(T(std::numeric_limits<float>::quiet_NaN()).bits));
  // 4. A million spread f32 patterns against the nearest-value search.
  std::mt19937 rng(1234);
  for (int i = 0; i < 1'000'000; ++i) {
    const auto u = static_cast<std::uint32_t>(rng());
    const float x = std::bit_cast<float>(u);
    if (std::isnan(x)) continue;
    REQUIRE(T(x).bits == table.nearest(x));
  }
}

}  // namespace

TEST_CASE("half: every pattern exact, f32 rounding to nearest even") { check_format<half>(); }
TEST_CASE("bfloat16: every pattern exact, f32 rounding to nearest even") { check_format<bfloat16>(); }
TEST_CASE("float8_e4m3fn: every pattern exact, overflow is NaN") {
  check_format<float8_e4m3fn>();
  REQUIRE(float(float8_e4m3fn(448.0f)) == 448.0f);
  REQUIRE(float8_e4m3fn(464.0f).bits == 0x7e);          // tie to even stays finite
  REQUIRE(std::isnan(float(float8_e4m3fn(470.0f))));  // rounds to the NaN code
  REQUIRE(float8_e4m3fn(-1e9f).bits == 0xff);
}
TEST_CASE("float8_e5m2: every pattern exact, overflow is infinity") {
  check_format<float8_e5m2>();
  REQUIRE(float(float8_e5m2(57344.0f)) == 57344.0f);
  REQUIRE(std::isinf(float(float8_e5m2(61440.0f))));  // tie rounds to the even code: infinity
}

TEST_CASE("NaN payloads survive half and bfloat16 round trips, quietened") {
  const float snan = std::bit_cast<float>(0x7f812345u);
  const half h(snan);
  REQUIRE((h.bits & 0x7e00) == 0x7e00);
  const bfloat16 b(snan);
  REQUIRE(b.bits == ((0x7f812345u | 0x00400000u) >> 16));
}

template <class T>
static void check_vector_path(DType dt) {
  // Every pattern through the vectorized span conversion equals the scalar one.
  const std::uint32_t n = pattern_count<T>();
  std::vector<T> src(n);
  for (std::uint32_t c = 0; c < n; ++c) src[c] = T::from_bits(static_cast<bits_t<T>>(c));
  std::vector<float> out(n);
  convert_elements(dt, src.data(), DType::f32, out.data(), n);
  for (std::uint32_t c = 0; c < n; ++c) {
    const float s = static_cast<float>(src[c]);
    if (std::isnan(s)) {
      REQUIRE(std::isnan(out[c]));
    } else {
      REQUIRE(std::bit_cast<std::uint32_t>(out[c]) == std::bit_cast<std::uint32_t>(s));
    }
  }
  // f32 -> format, vectorized vs scalar, on random patterns including NaNs and subnormals.
  std::mt19937 rng(99);
  std::vector<float> f(1 << 20);
  for (auto& x : f) x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  for (std::size_t i = 0; i < 64; ++i) f[i] = std::bit_cast<float>(static_cast<std::uint32_t>(i));  // subnormals
  std::vector<T> back(f.size());
  convert_elements(DType::f32, f.data(), dt, back.data(), f.size());
  for (std::size_t i = 0; i < f.size(); ++i) REQUIRE(back[i].bits == T(f[i]).bits);
}

TEST_CASE("vectorized conversions equal the scalar ones bit for bit") {
  check_vector_path<half>(DType::f16);
  check_vector_path<bfloat16>(DType::bf16);
  check_vector_path<float8_e4m3fn>(DType::f8_e4m3fn);
  check_vector_path<float8_e5m2>(DType::f8_e5m2);
}

TEST_CASE("conversions between every pair of dtypes") {
  // Values exact in every float format (e5m2 has two mantissa bits).
  const std::vector<double> values = {0.0, 1.0, -2.0, 3.5, 96.0, 0.25};
  // Model of one conversion step: float -> integer saturates toward zero, integer -> integer
  // wraps, anything -> bool is != 0.
  auto step = [](double v, const DTypeInfo& from, const DTypeInfo& to) {
    if (to.dtype == DType::boolean) return v != 0.0 ? 1.0 : 0.0;
    if (to.is_floating) return v;
    if (to.dtype == DType::u8) {
      if (from.is_floating) return v < 0 ? 0.0 : std::trunc(v);
      return v < 0 ? v + 256.0 : v;
    }
    return std::trunc(v);
  };
  const DTypeInfo& f64 = dtype_info(DType::f64);
  for (const auto& from : dtype_table) {
    for (const auto& to : dtype_table) {
      std::vector<std::byte> a(values.size() * from.itemsize), b(values.size() * to.itemsize);
      std::vector<std::byte> back(values.size() * 8);
      convert_elements(DType::f64, values.data(), from.dtype, a.data(), values.size());
      convert_elements(from.dtype, a.data(), to.dtype, b.data(), values.size());
      convert_elements(to.dtype, b.data(), DType::f64, back.data(), values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        double got;
        std::memcpy(&got, back.data() + i * 8, 8);
        const double expect = step(step(values[i], f64, from), from, to);
        INFO(from.name << " -> " << to.name << " value " << values[i]);
        REQUIRE(got == expect);
      }
    }
  }
  // Saturation and NaN to integer are defined (and sanitizer-clean).
  REQUIRE(convert_value<std::int8_t>(1e10f) == 127);
  REQUIRE(convert_value<std::int8_t>(-1e10) == -128);
  REQUIRE(convert_value<std::int32_t>(std::numeric_limits<float>::quiet_NaN()) == 0);
  REQUIRE(convert_value<std::uint8_t>(half(300.0f)) == 255);
  REQUIRE(convert_value<bool>(bfloat16(0.5f)) == true);
  REQUIRE(convert_value<std::int8_t>(std::int32_t{300}) == static_cast<std::int8_t>(44));  // wraps like torch
}

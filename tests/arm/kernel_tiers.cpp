// Every CPU kernel family at every tier this CPU runs, against its scalar reference, in a program
// that needs no oneDNN (only the kernel headers, xsimd and Catch2), so that a cross compiler can
// build it: scripts/run-arm-tests.sh builds it for AArch64 and runs it under qemu-user on emulated
// CPUs with and without the dot product, and under the caps `neon` and `scalar`. On x86 it checks
// the same things the layer tests do.
//
// The integer kernels must return the scalar kernel's integers; the ggml dot products on AArch64
// its float bits too (their float sums follow the scalar kernel's operations, which compile to the
// same roundings with -ffp-contract=off, as the run script builds this). The float kernels, and the
// x86 ggml kernels, are held to the bounds of the layer tests (tests/ops/test_matmul.cpp,
// tests/quant/test_ggml_linear.cpp, tests/quant/test_bnb.cpp).
//
// ACCEL_TEST_EXPECT_TIER, when set, names the tier the dispatch must pick here (under
// ACCEL_CPU_ARCH's cap): the run script says what each emulated CPU has.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "accel/backend/cpu/gemv.hpp"
#include "accel/backend/cpu/int8_gemm.hpp"
#include "accel/core/convert_kernels.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"
#include "accel/quant/formats/ggml_quantize.hpp"
#include "accel/quant/kernels/ggml_dot.hpp"
#include "accel/quant/layers/bnb_products.hpp"
#include "convert_table_checks.hpp"

using namespace accel;
namespace cpu = accel::backend::cpu;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

/// Uniform in [-1, 1), as tests/ops/test_util.hpp's random_tensor: the GEMV bounds assume it.
std::vector<float> uniform_floats(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

/// `blocks` blocks of `type` where the library has no quantizer for it (tests/quant's recipe):
/// random bytes with the f16 scales and mins set small and finite, Q6_K's group scales signed.
void random_blocks(quant::GgmlType type, std::byte* p, std::size_t blocks, unsigned seed) {
  std::mt19937 g(seed);
  const std::size_t size = io::ggml_type_info(type).type_size;
  for (std::size_t i = 0; i < blocks * size; ++i) p[i] = static_cast<std::byte>(g() & 0xFF);
  const auto settle = [&](auto t) {
    using B = io::ggml_block_t<decltype(t)::value>;
    for (std::size_t b = 0; b < blocks; ++b) {
      B blk;
      std::memcpy(&blk, p + b * size, size);
      const float d = 0.01f * static_cast<float>(1 + b % 3);
      if constexpr (requires { requires std::is_same_v<decltype(B::d), std::uint16_t>; }) blk.d = half(d).bits;
      if constexpr (requires { B::dmin; }) blk.dmin = half(0.5f * d).bits;
      if constexpr (requires { B::m; }) blk.m = half(-4.0f * d).bits;
      if constexpr (std::is_same_v<B, io::block_q6_k>) {
        for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<std::int8_t>(j % 8 + 1 - (j % 3 == 0 ? 9 : 0));
      }
      std::memcpy(p + b * size, &blk, size);
    }
  };
  // The lattice types have their own dispatcher (host only).
  if (!io::with_ggml_block(type, settle)) io::with_ggml_lattice_block(type, settle);
}

/// The float values an activation row stands for after quantization.
std::vector<float> activation_values(quant::GgmlType t, const quant::ActivationRow& a, std::size_t n) {
  std::vector<float> v(n);
  if (io::ggml_type_info(t).block_size == 256) {
    for (std::size_t i = 0; i < n; ++i) v[i] = a.q8_k[i / 256].d * a.q8_k[i / 256].qs[i % 256];
  } else {
    for (std::size_t i = 0; i < n; ++i) v[i] = io::f16_scale(a.q8_0[i / 32].d) * a.q8_0[i / 32].qs[i % 32];
  }
  return v;
}

/// The names of the tags of List that this CPU runs, best first.
template <class List>
std::vector<std::string> available_tiers() {
  std::vector<std::string> names;
  List::for_each([&](auto arch) {
    using A = decltype(arch);
    if (A::supported() && A::available()) names.emplace_back(A::name());
  });
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

/// One line per family in the program's output: which tiers ran.
void report(const char* family, const std::vector<std::string>& tiers) {
  std::printf("  %-22s %s\n", family, joined(tiers).c_str());
}

template <class A>
constexpr bool is_arm_tier = std::is_base_of_v<simd::neon, A>;

}  // namespace

TEST_CASE("the dispatch picks this CPU's tier, and ACCEL_CPU_ARCH caps it on either architecture") {
  using simd::detail::cpu_features;
  const cpu_features machine(nullptr);
  const std::string_view tier = simd::active_tier();
  std::printf("  %-22s %s (this CPU's best: %s)\n", "active tier", std::string(tier).c_str(),
              std::string(simd::tier_of(machine)).c_str());
  if (const char* want = std::getenv("ACCEL_TEST_EXPECT_TIER"); want && *want) CHECK(tier == want);
  // A cap of the other architecture's tier admits scalar only.
#if ACCEL_SIMD_ARM
  CHECK(machine.neon);  // Advanced SIMD is part of every AArch64 CPU
  CHECK_FALSE((machine.avx2 || machine.avx512 || machine.avx512_vnni || machine.avx512_bf16));
  for (const char* x86 : {"avx2", "avx512", "avx512_vnni", "avx512_bf16"}) CHECK(simd::tier_of(cpu_features(x86)) == "scalar");
  const cpu_features neon("neon"), dotprod("neon_dotprod");
  CHECK(neon.neon);
  CHECK_FALSE(neon.neon_dotprod);
  CHECK(dotprod.neon_dotprod == machine.neon_dotprod);
  CHECK(simd::tier_of(cpu_features("scalar")) == "scalar");
#else
  CHECK_FALSE((machine.neon || machine.neon_dotprod));
  CHECK(simd::tier_of(cpu_features("neon")) == "scalar");
  CHECK(simd::tier_of(cpu_features("neon_dotprod")) == "scalar");
#endif
  CHECK_THROWS_WITH(cpu_features("sve"), Catch::Contains("neon, neon_dotprod"));
  // The tier that runs is no higher than the cap, in tier_names' order.
  if (const char* cap = std::getenv("ACCEL_CPU_ARCH"); cap && *cap) {
    CHECK(simd::tier_rank(tier) <= simd::tier_rank(cap));
  }
  // Each family's dispatch takes the best tag of its ladder that this CPU runs.
  CHECK(std::string(cpu::gemv_kernels().arch) == available_tiers<cpu::gemv_ladder>().front());
  CHECK(std::string(detail::convert_kernels().arch) == available_tiers<simd::ladder>().front());
  CHECK(simd::dispatch<quant::quant_ladder>([](auto a) { return std::string(decltype(a)::name()); }) ==
        available_tiers<quant::quant_ladder>().front());
  CHECK(simd::dispatch<quant::int8_ladder>([](auto a) { return std::string(decltype(a)::name()); }) ==
        available_tiers<quant::int8_ladder>().front());
}

TEST_CASE("the dtype conversion tables give the scalar rounding's bits") {
  report("conversions", available_tiers<simd::ladder>());
  REQUIRE(test::check_every_available_table() >= 1);
}

TEST_CASE("GEMV: every tier matches a double reference for f32, f16 and bf16 weights") {
  // tests/ops/test_matmul.cpp's cases and bound: k = 300 leaves a tail past every vector width, 7
  // is shorter than one; n = 50 ends two past a group of four weight rows; rows 310 apart; 1-9
  // activation rows are a tile, two tiles and a partial one.
  for (const std::int64_t k : {300, 7, 1024}) {
    const std::int64_t n = 50, stride = k + 10;
    for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const auto wf = uniform_floats(static_cast<std::size_t>(n * stride), 90);
      std::vector<std::byte> w(static_cast<std::size_t>(n * stride) * itemsize(dt));
      std::vector<double> wv(wf.size());  // the weights' values in their dtype
      for (std::size_t i = 0; i < wf.size(); ++i) {
        if (dt == DType::f32) {
          std::memcpy(&w[4 * i], &wf[i], 4), wv[i] = wf[i];
        } else if (dt == DType::f16) {
          const half h(wf[i]);
          std::memcpy(&w[2 * i], &h.bits, 2), wv[i] = static_cast<float>(h);
        } else {
          const bfloat16 h(wf[i]);
          std::memcpy(&w[2 * i], &h.bits, 2), wv[i] = static_cast<float>(h);
        }
      }
      const auto bias = uniform_floats(static_cast<std::size_t>(n), 91);
      for (const std::int64_t m : {1, 2, 3, 4, 5, 9}) {
        const auto x = uniform_floats(static_cast<std::size_t>(m * k), 92 + static_cast<unsigned>(m));
        std::vector<double> want(static_cast<std::size_t>(m * n));
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double s = bias[j];
            for (std::int64_t t = 0; t < k; ++t) s += double(x[i * k + t]) * wv[j * stride + 3 + t];
            want[i * n + j] = s;
          }
        }
        std::vector<std::string> tiers;
        cpu::gemv_ladder::for_each([&](auto arch) {
          using A = decltype(arch);
          if (!A::supported() || !A::available()) return;
          INFO(A::name() << " " << dtype_name(dt) << " m = " << m << " k = " << k);
          std::vector<float> out(want.size(), -1.0f);
          cpu::gemv_at(arch, x.data(), m, k, w.data() + 3 * itemsize(dt), dt, static_cast<std::size_t>(stride) * itemsize(dt),
                       n, bias.data(), out.data());
          const bool pairs = dt == DType::bf16 && std::is_base_of_v<simd::avx512_bf16, A>;
          const double atol = pairs ? 2e-2 * std::sqrt(double(k)) / 8 : 1e-4, rtol = pairs ? 1e-2 : 1e-5;
          // xsimd's for_each is noexcept: a REQUIRE here would end the program, so the first element
          // out of bounds is reported, and the rest of the run goes on.
          std::size_t bad = 0;
          while (bad < want.size() && std::abs(out[bad] - want[bad]) <= atol + rtol * std::abs(want[bad])) ++bad;
          if (bad < want.size()) FAIL_CHECK("element " << bad << ": got " << out[bad] << ", want " << want[bad]);
          if (dt != DType::f32) {
            // x given in the weight's dtype (gemv_at_half) gives the bits of x widened to f32.
            std::vector<std::uint16_t> xh(x.size());
            std::vector<float> xr(x.size());
            for (std::size_t i = 0; i < x.size(); ++i) {
              if (dt == DType::f16) {
                const half h(x[i]);
                xh[i] = h.bits, xr[i] = static_cast<float>(h);
              } else {
                const bfloat16 h(x[i]);
                xh[i] = h.bits, xr[i] = static_cast<float>(h);
              }
            }
            std::vector<float> wide(want.size()), given(want.size());
            cpu::gemv_at(arch, xr.data(), m, k, w.data() + 3 * itemsize(dt), dt, static_cast<std::size_t>(stride) * itemsize(dt),
                         n, bias.data(), wide.data(), true);
            cpu::gemv_at_half(arch, xh.data(), m, k, w.data() + 3 * itemsize(dt), dt,
                              static_cast<std::size_t>(stride) * itemsize(dt), n, bias.data(), given.data());
            if (std::memcmp(wide.data(), given.data(), wide.size() * 4) != 0) FAIL_CHECK("x_half differs from x widened");
          }
          tiers.emplace_back(A::name());
        });
        REQUIRE(!tiers.empty());
        if (k == 300 && dt == DType::f32 && m == 1) report("gemv", tiers);
      }
    }
  }
}

TEST_CASE("gemm_u8s8: every tier gives the exact sums, where 16-bit pairs would saturate") {
  // tests/ops/test_matmul.cpp's cases: 255 x 127 and 255 x -128 everywhere, odd k (a zero-padded
  // last pair), two panels and a partial one, a k long enough to need more than 16 bits per lane.
  for (const auto& shape : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>>{
           {5, 37, 9, false}, {3, 301, 70, true}, {1, 1, 1, true}, {17, 2048, 33, false}}) {
    // Plain variables: Clang 14 cannot capture structured bindings in a lambda.
    const std::int64_t m = std::get<0>(shape), k = std::get<1>(shape), n = std::get<2>(shape);
    const bool extreme = std::get<3>(shape);
    std::vector<std::uint8_t> av(static_cast<std::size_t>(m * k));
    std::vector<std::int8_t> bv(static_cast<std::size_t>(k * n));
    for (std::size_t i = 0; i < av.size(); ++i) av[i] = extreme ? 255 : static_cast<std::uint8_t>((i * 37 + 11) % 256);
    for (std::size_t i = 0; i < bv.size(); ++i) {
      bv[i] = extreme ? static_cast<std::int8_t>(i % 3 == 0 ? -128 : 127)
                      : static_cast<std::int8_t>(static_cast<int>((i * 53 + 7) % 256) - 128);
    }
    std::vector<std::int32_t> want(static_cast<std::size_t>(m * n));
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        std::int64_t sum = 0;
        for (std::int64_t q = 0; q < k; ++q) sum += std::int64_t(av[i * k + q]) * bv[q * n + j];
        want[i * n + j] = static_cast<std::int32_t>(sum);
      }
    }
    std::vector<std::string> tiers;
    cpu::u8s8_ladder::for_each([&](auto arch) {
      using A = decltype(arch);
      if (!A::supported() || !A::available()) return;
      INFO(A::name() << " " << m << " x " << k << " x " << n);
      std::vector<std::int32_t> got(want.size(), -1);
      cpu::gemm_u8s8(arch, m, k, n, av.data(), bv.data(), got.data());
      CHECK(got == want);
      tiers.emplace_back(A::name());
    });
    REQUIRE(!tiers.empty());
    if (m == 5) report("gemm_u8s8", tiers);
  }
}

TEST_CASE("ggml dot products of every integer type and length: every tier against the scalar") {
  // tests/quant/test_ggml_linear.cpp's types and lengths (1-9 blocks and 131), eight rows whose
  // last ends the allocation. AArch64's kernels give the scalar bits (the types
  // without NEON kernels run the scalar ones); x86's are held to that test's bound, a share of the
  // terms' magnitude.
  using quant::ActivationRow;
  using quant::GgmlType;
  std::vector<std::string> tiers;
  for (const auto type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,
                          GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k,
                          GgmlType::iq4_nl, GgmlType::iq4_xs, GgmlType::tq2_0, GgmlType::iq2_xxs, GgmlType::iq2_xs, GgmlType::iq2_s, GgmlType::iq3_xxs, GgmlType::iq3_s}) {
    REQUIRE(quant::has_quantized_dot(type));
    for (const std::size_t blocks : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 9u, 131u}) {
      const std::size_t n = blocks * io::ggml_type_info(type).block_size;
      INFO(io::ggml_type_name(type) << " n = " << n);
      const std::size_t row_bytes = io::ggml_row_nbytes(type, n);
      const std::size_t rows = 8;
      const auto packed = std::make_unique<std::byte[]>(rows * row_bytes);
      for (std::size_t r = 0; r < rows; ++r) {
        const unsigned seed = 5 + static_cast<unsigned>(n + 1000 * r);
        if (quant::can_quantize_to(type)) {
          quant::quantize_rows(type, random_floats(n, seed).data(), packed.get() + r * row_bytes, n);
        } else {
          random_blocks(type, packed.get() + r * row_bytes, blocks, seed);
        }
      }
      const auto x = random_floats(n, 9, 3.0f), x2 = random_floats(n, 10, 0.5f);
      ActivationRow a, a2;
      quant::quantize_activation(type, x.data(), n, a);
      quant::quantize_activation(type, x2.data(), n, a2);
      const ActivationRow* both[2] = {&a, &a2};
      std::vector<float> portable(rows);
      for (std::size_t r = 0; r < rows; ++r) portable[r] = quant::vec_dot(simd::scalar{}, type, n, packed.get() + r * row_bytes, a);
      const std::byte* last = packed.get() + (rows - 1) * row_bytes;
      const float portable2 = quant::vec_dot(simd::scalar{}, type, n, last, a2);
      // The x86 bound: sum |w x| over the last row, with either activation row.
      std::vector<float> wv(n);
      io::dequantize_row(type, last, wv.data(), n);
      const auto xv = activation_values(type, a, n), xv2 = activation_values(type, a2, n);
      double magnitude = 0;
      for (std::size_t i = 0; i < n; ++i) magnitude += std::fabs(double(wv[i])) * (std::fabs(xv[i]) + std::fabs(xv2[i]));
      const double bound = 1e-5 * magnitude + 1e-4;
      tiers.clear();
      quant::quant_ladder::for_each([&](auto arch) {
        using A = decltype(arch);
        if (!A::supported() || !A::available()) return;
        INFO(A::name());
        float each[8], two[2];
        for (std::size_t r = 0; r < rows; ++r) each[r] = quant::vec_dot(arch, type, n, packed.get() + r * row_bytes, a);
        quant::vec_dot_rows(arch, type, n, last, both, 2, two);
        const float one = quant::vec_dot(arch, type, n, last, a);
        if constexpr (is_arm_tier<A>) {
          CHECK(one == portable[rows - 1]);
          CHECK(two[0] == portable[rows - 1]);
          CHECK(two[1] == portable2);
          for (std::size_t r = 0; r < rows; ++r) CHECK(each[r] == portable[r]);
        } else {
          CHECK(std::fabs(double(one) - portable[rows - 1]) <= bound);
          CHECK(std::fabs(double(two[0]) - portable[rows - 1]) <= bound);
          CHECK(std::fabs(double(two[1]) - portable2) <= bound);
          CHECK(std::fabs(double(each[rows - 1]) - portable[rows - 1]) <= bound);
        }
        tiers.emplace_back(A::name());
      });
      REQUIRE(!tiers.empty());
    }
  }
  report("ggml dot", tiers);
}

TEST_CASE("bitsandbytes NF4 / FP4: every tier against the portable kernel") {
  // tests/quant/test_bnb.cpp's shapes and bound: 1-9 rows (groups of four, eight, one alone), all
  // output rows and rows 5..63 only, blocks of 64 and 32, a width of 48 (blocks straddle rows, a
  // width that is no multiple of 32) and 40 (no multiple of 16: the portable path).
  using quant::BnbQuantType;
  std::vector<std::string> tiers;
  for (const auto type : {BnbQuantType::nf4, BnbQuantType::fp4}) {
    for (const auto& shape : std::vector<std::pair<std::size_t, std::size_t>>{{512, 64}, {512, 32}, {48, 64}, {40, 32}}) {
      const std::size_t in = shape.first, bs = shape.second;
      const std::size_t out = 64;
      std::vector<std::uint8_t> bytes((out * in + 1) / 2);
      std::mt19937 g(31 + static_cast<unsigned>(in + bs));
      for (auto& b : bytes) b = static_cast<std::uint8_t>(g() & 0xFF);
      std::vector<float> absmax((out * in + bs - 1) / bs);
      std::uniform_real_distribution<float> am(0.01f, 0.1f);
      for (auto& v : absmax) v = am(g);
      const float* lut = quant::bnb_4bit_info(type).decode.data();
      const auto xv = random_floats(9 * in, 32);
      for (const std::size_t rows : {1u, 2u, 5u, 9u}) {
        for (const std::size_t r0 : {0u, 5u}) {
          std::vector<float> ys(9 * out, 0.0f);
          quant::gemv_4bit_rows(simd::scalar{}, xv.data(), rows, bytes.data(), absmax.data(), lut, bs, in, out, r0, out, ys.data());
          tiers.clear();
          quant::bnb_4bit_ladder::for_each([&](auto arch) {
            using A = decltype(arch);
            if (!A::supported() || !A::available()) return;
            INFO(A::name() << " " << quant::bnb_quant_type_name(type) << " in " << in << " block " << bs << " rows " << rows
                           << " from " << r0);
            std::vector<float> yv(9 * out, 0.0f);
            quant::gemv_4bit_rows(arch, xv.data(), rows, bytes.data(), absmax.data(), lut, bs, in, out, r0, out, yv.data());
            std::size_t bad = 0;
            while (bad < ys.size() && yv[bad] == Approx(ys[bad]).epsilon(1e-4).margin(1e-5)) ++bad;
            if (bad < ys.size()) FAIL_CHECK("element " << bad << ": got " << yv[bad] << ", portable " << ys[bad]);
            tiers.emplace_back(A::name());
          });
          REQUIRE(!tiers.empty());
        }
      }
    }
  }
  report("bnb 4-bit", tiers);
}

TEST_CASE("LLM.int8(): every tier gives the portable kernel's integers") {
  // tests/quant/test_bnb.cpp's cases: one row, a group of six, a group of eight then five; k = 200
  // ends in a partial step; columns 3..36 leave a tail; -128 on both sides, and both at once.
  std::mt19937 g(3);
  std::uniform_int_distribution<int> d(-127, 127);
  std::vector<std::string> tiers;
  for (const std::size_t rows : {1, 6, 13}) {
    for (const std::size_t k : {200, 16, 5}) {
      const std::size_t out = 37, r0 = 3;
      std::vector<std::int8_t> a(rows * k), b(out * k);
      for (auto& x : a) x = static_cast<std::int8_t>(d(g));
      for (auto& x : b) x = static_cast<std::int8_t>(d(g));
      b[4] = b[5] = -128;
      a[4] = a[std::min<std::size_t>(5, k - 1)] = a[rows * k - 1] = -128;
      std::vector<std::int32_t> c0(rows * out, -1), c1(rows * out, -1);
      quant::int8_linear_matmul(simd::scalar{}, a.data(), rows, b.data(), k, out, r0, out, c0.data());
      tiers.clear();
      quant::int8_ladder::for_each([&](auto arch) {
        using A = decltype(arch);
        if (!A::supported() || !A::available()) return;
        INFO(A::name() << " rows " << rows << " k " << k);
        std::fill(c1.begin(), c1.end(), -1);
        quant::int8_linear_matmul(arch, a.data(), rows, b.data(), k, out, r0, out, c1.data());
        CHECK(c0 == c1);  // columns below r0 untouched by both
        tiers.emplace_back(A::name());
      });
      REQUIRE(!tiers.empty());
    }
  }
  report("bnb int8", tiers);
}

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <string>
#include <tuple>
#include <vector>

#include "accel/backend/cpu/dnnl_matmul.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/ops/matmul.hpp"
#include "test_util.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;
using accel::test::random_tensor;
using accel::test::require_close;
using accel::test::values;
namespace ops = accel::ops;

namespace {

// c[b] = a[b] x b[b] on row-major double copies; batch strides of 0 broadcast.
std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, std::int64_t batch,
                               std::int64_t m, std::int64_t k, std::int64_t n, bool a_shared = false,
                               bool b_shared = false) {
  std::vector<double> c(static_cast<std::size_t>(batch * m * n), 0.0);
  for (std::int64_t p = 0; p < batch; ++p) {
    const std::int64_t ao = a_shared ? 0 : p * m * k, bo = b_shared ? 0 : p * k * n;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t q = 0; q < k; ++q) s += a[ao + i * k + q] * b[bo + q * n + j];
        c[p * m * n + i * n + j] = s;
      }
    }
  }
  return c;
}

std::vector<double> transpose_values(const std::vector<double>& w, std::int64_t rows, std::int64_t cols) {
  std::vector<double> t(w.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) t[j * rows + i] = w[i * cols + j];
  return t;
}

}  // namespace

TEST_CASE("matmul 2-d f32 matches a double reference", "[ops][matmul]") {
  const Tensor a = random_tensor({7, 13}, 1), b = random_tensor({13, 5}, 2);
  const Tensor c = ops::matmul(a, b);
  REQUIRE(c.shape() == Shape{7, 5});
  REQUIRE(c.dtype() == DType::f32);
  require_close(c, ref_matmul(values(a), values(b), 1, 7, 13, 5), 1e-5, 1e-5);
}

TEST_CASE("matmul reads transposed, sliced and strided operands", "[ops][matmul]") {
  const Tensor at = random_tensor({13, 7}, 3).t();          // [7, 13], column-major
  const Tensor bt = random_tensor({5, 13}, 4).t();          // [13, 5], column-major
  require_close(ops::matmul(at, bt), ref_matmul(values(at), values(bt), 1, 7, 13, 5), 1e-5, 1e-5);
  const Tensor wide = random_tensor({7, 20}, 5);
  const Tensor a_slice = wide.narrow(1, 3, 13);             // row stride 20
  const Tensor b = random_tensor({13, 5}, 6);
  require_close(ops::matmul(a_slice, b), ref_matmul(values(a_slice), values(b), 1, 7, 13, 5), 1e-5, 1e-5);
  // Column stride 2: no unit stride, so it is copied first; the answer must not change.
  const Tensor every_other = random_tensor({7, 26}, 7).view(Shape{7, 13, 2}).select(2, 0);
  require_close(ops::matmul(every_other, b), ref_matmul(values(every_other), values(b), 1, 7, 13, 5), 1e-5, 1e-5);
  // A broadcast (stride 0) operand.
  const Tensor row = random_tensor({1, 13}, 8).expand(Shape{7, 13});
  require_close(ops::matmul(row, b), ref_matmul(values(row), values(b), 1, 7, 13, 5), 1e-5, 1e-5);
}

TEST_CASE("matmul batched, broadcast batch dims and [...,M,K]x[K,N]", "[ops][matmul]") {
  SECTION("[B,M,K] x [B,K,N]") {
    const Tensor a = random_tensor({3, 4, 6}, 10), b = random_tensor({3, 6, 5}, 11);
    const Tensor c = ops::matmul(a, b);
    REQUIRE(c.shape() == Shape{3, 4, 5});
    require_close(c, ref_matmul(values(a), values(b), 3, 4, 6, 5), 1e-5, 1e-5);
  }
  SECTION("[...,M,K] x [K,N] folds the leading dims into M") {
    const Tensor a = random_tensor({2, 3, 4, 6}, 12), b = random_tensor({6, 5}, 13);
    const Tensor c = ops::matmul(a, b);
    REQUIRE(c.shape() == Shape{2, 3, 4, 5});
    require_close(c, ref_matmul(values(a), values(b), 1, 24, 6, 5), 1e-5, 1e-5);
  }
  SECTION("[M,K] shared by [B,K,N]") {
    const Tensor a = random_tensor({4, 6}, 14), b = random_tensor({3, 6, 5}, 15);
    const Tensor c = ops::matmul(a, b);
    REQUIRE(c.shape() == Shape{3, 4, 5});
    require_close(c, ref_matmul(values(a), values(b), 3, 4, 6, 5, /*a_shared=*/true), 1e-5, 1e-5);
  }
  SECTION("batch dims broadcast both ways: [2,1,M,K] x [3,K,N]") {
    const Tensor a = random_tensor({2, 1, 4, 6}, 16), b = random_tensor({3, 6, 5}, 17);
    const Tensor c = ops::matmul(a, b);
    REQUIRE(c.shape() == Shape{2, 3, 4, 5});
    const auto av = values(a), bv = values(b), cv = values(c);
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t j = 0; j < 3; ++j) {
        const std::vector<double> ai(av.begin() + i * 24, av.begin() + (i + 1) * 24);
        const std::vector<double> bj(bv.begin() + j * 30, bv.begin() + (j + 1) * 30);
        const auto want = ref_matmul(ai, bj, 1, 4, 6, 5);
        const std::vector<double> got(cv.begin() + (i * 3 + j) * 20, cv.begin() + (i * 3 + j + 1) * 20);
        require_close(got, want, 1e-5, 1e-5);
      }
    }
  }
  SECTION("non-contiguous batched operands (attention-style transposes)") {
    const Tensor q = random_tensor({2, 5, 3, 8}, 18).transpose(1, 2);  // [2,3,5,8]
    const Tensor k = random_tensor({2, 5, 3, 8}, 19).permute({0, 2, 3, 1});  // [2,3,8,5]
    const Tensor c = ops::matmul(q, k);
    REQUIRE(c.shape() == Shape{2, 3, 5, 5});
    require_close(c, ref_matmul(values(q), values(k), 6, 5, 8, 5), 1e-5, 1e-5);
  }
}

TEST_CASE("matmul in f16 and bf16 computes in f32 and returns the input dtype", "[ops][matmul]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor a = random_tensor({9, 33}, 20, dt), b = random_tensor({33, 4}, 21, dt);
    const Tensor c = ops::matmul(a, b);
    REQUIRE(c.dtype() == dt);
    // Inputs are exact in both paths; only the output rounding differs.
    require_close(c, ref_matmul(values(a), values(b), 1, 9, 33, 4), 1e-4, 2 * accel::test::dtype_eps(dt));
  }
}

TEST_CASE("matmul edge sizes and errors", "[ops][matmul]") {
  REQUIRE(ops::matmul(Tensor::ones({3, 0}), Tensor::ones({0, 4})).to_vector<float>() == std::vector<float>(12, 0.0f));
  REQUIRE(ops::matmul(Tensor::ones({0, 3}), Tensor::ones({3, 4})).shape() == Shape{0, 4});
  REQUIRE_THROWS_AS(ops::matmul(Tensor::ones({2, 3}), Tensor::ones({4, 5})), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::matmul(Tensor::ones({3}), Tensor::ones({3, 5})), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::matmul(Tensor::ones({2, 3, 4}), Tensor::ones({5, 4, 2})), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::matmul(Tensor::ones({2, 3}), Tensor::ones({3, 5}, DType::f16)), accel::DTypeError);
  REQUIRE_THROWS_AS(ops::matmul(Tensor::ones({2, 3}, DType::i32), Tensor::ones({3, 5}, DType::i32)),
                    accel::DTypeError);
  REQUIRE_THROWS_AS(ops::matmul(Tensor(), Tensor::ones({3, 5})), accel::ValueError);
  try {
    ops::matmul(Tensor::ones({2, 3}), Tensor::ones({4, 5}));
  } catch (const accel::ShapeError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("matmul") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  }
}

TEST_CASE("matmul and linear on meta give meta results of the right shape", "[ops][matmul]") {
  const Tensor a = Tensor::empty({2, 7, 16}, DType::bf16, accel::Device::meta());
  const Tensor w = Tensor::empty({32, 16}, DType::bf16, accel::Device::meta());
  const Tensor y = ops::linear(a, w);
  REQUIRE(y.is_meta());
  REQUIRE(y.shape() == Shape{2, 7, 32});
  REQUIRE(y.dtype() == DType::bf16);
  const Tensor c = ops::matmul(a, w.t());
  REQUIRE(c.is_meta());
  REQUIRE(c.shape() == Shape{2, 7, 32});
  const Tensor i = ops::matmul_u8s8(Tensor::empty({3, 4}, DType::u8, accel::Device::meta()),
                                    Tensor::empty({4, 5}, DType::i8, accel::Device::meta()));
  REQUIRE((i.is_meta() && i.dtype() == DType::i32 && i.shape() == Shape{3, 5}));
}

TEST_CASE("linear = x W^T + b, weight read through a transposed view", "[ops][matmul][linear]") {
  const Tensor x = random_tensor({2, 3, 10}, 30), w = random_tensor({6, 10}, 31), b = random_tensor({6}, 32);
  const auto wt = transpose_values(values(w), 6, 10);
  auto want = ref_matmul(values(x), wt, 1, 6, 10, 6);
  const Tensor plain = ops::linear(x, w);
  REQUIRE(plain.shape() == Shape{2, 3, 6});
  require_close(plain, want, 1e-5, 1e-5);
  const auto bv = values(b);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 6];
  require_close(ops::linear(x, w, b), want, 1e-5, 1e-5);
  // A weight that is itself a transposed view, and a 1-d input (GEMV).
  const Tensor w_view = random_tensor({10, 6}, 33).t();
  const Tensor x1 = random_tensor({10}, 34);
  const Tensor y1 = ops::linear(x1, w_view, b);
  REQUIRE(y1.shape() == Shape{6});
  auto want1 = ref_matmul(values(x1), transpose_values(values(w_view), 6, 10), 1, 1, 10, 6);
  for (std::size_t i = 0; i < want1.size(); ++i) want1[i] += bv[i];
  require_close(y1, want1, 1e-5, 1e-5);
}

TEST_CASE("linear with few rows (the decode GEMV path) matches the GEMM path", "[ops][matmul][linear]") {
  const Tensor w = random_tensor({50, 300}, 35), b = random_tensor({50}, 36);
  const auto wt = transpose_values(values(w), 50, 300);
  for (std::int64_t m : {1, 3, 4, 5}) {
    const Tensor x = random_tensor({m, 300}, 37);
    auto want = ref_matmul(values(x), wt, 1, m, 300, 50);
    const auto bv = values(b);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 50];
    require_close(ops::linear(x, w, b), want, 1e-5, 1e-5);
    // Rows of a wider weight (row stride 310) are read in place as well.
    const Tensor wide = random_tensor({50, 310}, 38).narrow(1, 5, 300);
    auto want_wide = ref_matmul(values(x), transpose_values(values(wide), 50, 300), 1, m, 300, 50);
    require_close(ops::linear(x, wide), want_wide, 1e-5, 1e-5);
  }
}

TEST_CASE("every GEMV tier this CPU runs matches a double reference for f32, f16 and bf16 weights", "[ops][matmul][gemv]") {
  // k = 300 leaves a tail past every vector width; 7 is shorter than one; n = 50 ends two past a
  // group of four weight rows; the rows of a wider weight are 310 apart; 1-9 activation rows are a
  // tile, two tiles and a partial one; 4200 takes a prompt's bf16 pairs in three chunks of k, the
  // last with a tail.
  namespace cpu = accel::backend::cpu;
  for (const std::int64_t k : {300, 7, 1024, 4200}) {
    const std::int64_t n = 50;
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const Tensor w = random_tensor({n, k + 10}, 90, dt).narrow(1, 3, k), bias = random_tensor({n}, 91);
      const auto wt = transpose_values(values(w), n, k);
      const auto bv = values(bias);
      for (std::int64_t m : {1, 2, 3, 4, 5, 9}) {
        const Tensor x = random_tensor({m, k}, 92 + static_cast<std::uint32_t>(m));
        auto want = ref_matmul(values(x), wt, 1, m, k, n);
        for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % n];
        int tiers = 0;
        cpu::gemv_ladder::for_each([&](auto arch) {
          using A = decltype(arch);
          if (!A::supported() || !A::available()) return;
          INFO(A::name() << " " << accel::dtype_name(dt) << " m = " << m << " k = " << k);
          Tensor out = Tensor::empty({m, n}, DType::f32);
          cpu::gemv_at(arch, x.data_ptr<float>(), m, k, w.data_ptr(), dt, static_cast<std::size_t>(w.stride(0)) * w.element_size(),
                       n, bias.data_ptr<float>(), out.data_ptr<float>());
          // bf16 pairs round x to bf16 (a relative 2^-9 per element): the bound scales with sum |x w|.
          const bool pairs = dt == DType::bf16 && std::is_base_of_v<accel::simd::avx512_bf16, A>;
          require_close(out, want, pairs ? 2e-2 * std::sqrt(double(k)) / 8 : 1e-4, pairs ? 1e-2 : 1e-5);
          if (dt != DType::f32) {
            // Activations of the weight's dtype: the kernels may read x narrowed to it, and must
            // give the same bits as with x in f32.
            const Tensor xr = x.to(dt).to(DType::f32);
            Tensor wide = Tensor::empty({m, n}, DType::f32), narrow = Tensor::empty({m, n}, DType::f32);
            for (const bool exact : {false, true}) {
              cpu::gemv_at(arch, xr.data_ptr<float>(), m, k, w.data_ptr(), dt,
                           static_cast<std::size_t>(w.stride(0)) * w.element_size(), n, bias.data_ptr<float>(),
                           (exact ? narrow : wide).data_ptr<float>(), exact);
            }
            CHECK(std::memcmp(wide.data_ptr(), narrow.data_ptr(), static_cast<std::size_t>(m * n) * 4) == 0);
            // ... and the same bits again with x given in that dtype, as linear passes it.
            const Tensor xh = x.to(dt).contiguous();
            Tensor given = Tensor::empty({m, n}, DType::f32);
            cpu::gemv_at_half(arch, xh.data_ptr(), m, k, w.data_ptr(), dt,
                              static_cast<std::size_t>(w.stride(0)) * w.element_size(), n, bias.data_ptr<float>(),
                              given.data_ptr<float>());
            CHECK(std::memcmp(wide.data_ptr(), given.data_ptr(), static_cast<std::size_t>(m * n) * 4) == 0);
          }
          ++tiers;
        });
        REQUIRE(tiers >= 1);
      }
    }
  }
  std::string best;  // the dispatch takes the highest rung this CPU runs under the cap
  cpu::gemv_ladder::for_each([&](auto arch) {
    using A = decltype(arch);
    if (best.empty() && A::supported() && A::available()) best = A::name();
  });
  CHECK(std::string(cpu::gemv_kernels().arch) == best);
}

TEST_CASE("a prompt on half-precision weights at every tier: blocks, chunks of k, one thread or two", "[ops][matmul][gemv]") {
  // 21 rows: five tiles of four and one of one. n = 200 is several blocks of weight rows (which
  // one thread takes in turn); k = 4200 is chunks of k with accumulation, 1029 two chunks with a
  // tail of five, 300 one chunk with a tail.
  namespace cpu = accel::backend::cpu;
  const std::int64_t m = 21, n = 200;
  const int threads = accel::num_threads();
  for (const std::int64_t k : {300, 1029, 4200}) {
    for (DType dt : {DType::f16, DType::bf16}) {
      const Tensor w = random_tensor({n, k}, 95, dt), bias = random_tensor({n}, 96);
      const Tensor x = random_tensor({m, k}, 97).to(dt).contiguous();
      auto want = ref_matmul(values(x), transpose_values(values(w), n, k), 1, m, k, n);
      const auto bv = values(bias);
      for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % n];
      cpu::gemv_ladder::for_each([&](auto arch) {
        using A = decltype(arch);
        if (!A::supported() || !A::available()) return;
        INFO(A::name() << " " << accel::dtype_name(dt) << " k = " << k);
        Tensor one = Tensor::empty({m, n}, DType::f32), two = Tensor::empty({m, n}, DType::f32);
        for (Tensor* out : {&one, &two}) {
          accel::set_num_threads(out == &one ? 1 : std::max(2, threads));
          cpu::gemv_at_half(arch, x.data_ptr(), m, k, w.data_ptr(), dt, static_cast<std::size_t>(k) * 2, n,
                            bias.data_ptr<float>(), out->data_ptr<float>());
        }
        accel::set_num_threads(threads);
        const bool pairs = dt == DType::bf16 && std::is_base_of_v<accel::simd::avx512_bf16, A>;
        require_close(one, want, pairs ? 2e-2 * std::sqrt(double(k)) / 8 : 1e-4, pairs ? 1e-2 : 1e-5);
        require_close(two, want, pairs ? 2e-2 * std::sqrt(double(k)) / 8 : 1e-4, pairs ? 1e-2 : 1e-5);
        // AVX2's prompt sums each output alike in any block; AVX-512 finishes four rows of a
        // group together, and where the groups fall depends on the blocks.
        if constexpr (std::is_same_v<A, accel::simd::avx2>) {
          CHECK(std::memcmp(one.data_ptr(), two.data_ptr(), static_cast<std::size_t>(m * n) * 4) == 0);
        }
      });
    }
  }
}

TEST_CASE("linear on a bf16 weight with 1-17 rows (GEMV tiles of four up to 16, then oneDNN)", "[ops][matmul][linear]") {
  // 50 weight rows (two past the last group of four) of 300 columns (a masked last step).
  const Tensor w = random_tensor({50, 300}, 60, DType::bf16), b = random_tensor({50}, 61, DType::bf16);
  const auto wt = transpose_values(values(w), 50, 300);
  const auto bv = values(b);
  for (std::int64_t m = 1; m <= 17; ++m) {
    INFO("rows " << m);
    const Tensor x = random_tensor({m, 300}, 62 + static_cast<std::uint32_t>(m), DType::bf16);
    auto want = ref_matmul(values(x), wt, 1, m, 300, 50);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 50];
    const Tensor y = ops::linear(x, w, b);
    REQUIRE(y.dtype() == DType::bf16);
    require_close(y, want, 1e-3, 2 * accel::test::dtype_eps(DType::bf16));
  }
}

TEST_CASE("linear in f16 / bf16 and its errors", "[ops][matmul][linear]") {
  for (DType dt : {DType::f16, DType::bf16})
  for (std::int64_t m : {2, 9}) {
    const Tensor x = random_tensor({m, 24}, 40, dt), w = random_tensor({8, 24}, 41, dt), b = random_tensor({8}, 42, dt);
    const Tensor y = ops::linear(x, w, b);
    REQUIRE(y.dtype() == dt);
    auto want = ref_matmul(values(x), transpose_values(values(w), 8, 24), 1, x.size(0), 24, 8);
    const auto bv = values(b);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 8];
    require_close(y, want, 1e-3, 2 * accel::test::dtype_eps(dt));
  }
  REQUIRE_THROWS_AS(ops::linear(Tensor::ones({2, 5}), Tensor::ones({3, 4})), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::linear(Tensor::ones({2, 4}), Tensor::ones({3, 4}), Tensor::ones({4})), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::linear(Tensor::ones({2, 4}), Tensor::ones({3, 4}, DType::bf16)), accel::DTypeError);
}

TEST_CASE("matmul_u8s8 is exact int32 accumulation", "[ops][matmul][int8]") {
  const std::int64_t M = 5, K = 37, N = 9;
  std::vector<std::uint8_t> av(static_cast<std::size_t>(M * K));
  std::vector<std::int8_t> bv(static_cast<std::size_t>(K * N));
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<std::int8_t>(static_cast<int>((i * 53 + 7) % 256) - 128);
  const Tensor a = Tensor::from_vector(av, Shape{M, K}), b = Tensor::from_vector(bv, Shape{K, N});
  const Tensor c = ops::matmul_u8s8(a, b);
  REQUIRE(c.dtype() == DType::i32);
  const auto cv = c.to_vector<std::int32_t>();
  for (std::int64_t i = 0; i < M; ++i) {
    for (std::int64_t j = 0; j < N; ++j) {
      std::int64_t s = 0;
      for (std::int64_t q = 0; q < K; ++q) s += std::int64_t(av[i * K + q]) * bv[q * N + j];
      REQUIRE(cv[static_cast<std::size_t>(i * N + j)] == s);
    }
  }
  REQUIRE_THROWS_AS(ops::matmul_u8s8(b, b), accel::DTypeError);
  REQUIRE_THROWS_AS(ops::matmul_u8s8(a, Tensor::zeros({K + 1, N}, DType::i8)), accel::ShapeError);
}

TEST_CASE("gemm_u8s8 is exact at every tier this CPU runs, where oneDNN's 16-bit pairs saturate", "[ops][matmul][int8]") {
  // 255 x 127 and 255 x -128 everywhere: a pair of products is 64,770 / -65,280, past int16; odd
  // k (a zero-padded last pair), two panels and a partial one (n = 70), a k long enough to need
  // more than 16 bits per lane.
  for (const auto& [m, k, n, extreme] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>>{
           {5, 37, 9, false}, {3, 301, 70, true}, {1, 1, 1, true}, {17, 2048, 33, false}}) {
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
    int tiers = 0;
    accel::backend::cpu::u8s8_ladder::for_each([&](auto arch) {
      using A = decltype(arch);
      if (!A::supported() || !A::available()) return;
      INFO(A::name() << " " << m << " x " << k << " x " << n);
      std::vector<std::int32_t> got(want.size(), -1);
      accel::backend::cpu::gemm_u8s8(arch, m, k, n, av.data(), bv.data(), got.data());
      CHECK(got == want);
      ++tiers;
    });
    REQUIRE(tiers >= 1);
    const Tensor c = ops::matmul_u8s8(Tensor::from_vector(av, Shape{m, k}), Tensor::from_vector(bv, Shape{k, n}));
    CHECK(c.to_vector<std::int32_t>() == want);
  }
}

TEST_CASE("a half-precision linear through f32 blocks of weight rows matches the reference", "[ops][matmul][linear]") {
  // What linear runs for f16 weights past the GEMV's rows, and for bf16 where oneDNN has no bf16
  // matmul (below AVX-512). k = 4096 makes a block of 128 weight rows: 300 rows are two blocks and
  // a partial one, each written into its columns of the result; the weight is a narrowed view.
  for (DType dt : {DType::bf16, DType::f16}) {
    const std::int64_t m = 6, k = 4096, n = 300;
    const Tensor w = random_tensor({n, k + 8}, 70, dt).narrow(1, 4, k), b = random_tensor({n}, 71);
    const Tensor x = random_tensor({m, k}, 72);
    std::vector<double> want = ref_matmul(values(x), transpose_values(values(w), n, k), 1, m, k, n);
    const auto bvals = values(b);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += bvals[i % n];
    Tensor out = Tensor::empty({m, n}, DType::f32);
    ops::detail::linear_half_weight_blocks(x, {0, k, 1}, w, b.data_ptr<float>(), out.data_ptr<float>());
    require_close(out, want, 1e-3, 1e-4);
    // linear on the same operands in the weight's dtype: more rows than the GEMV takes, and no
    // f32 copy of the weight (4.9 MB) while it runs, whichever path this CPU takes.
    const Tensor xh = x.to(dt), bh = b.to(dt);
    const Tensor x3 = xh.expand({3, m, k}).reshape({3 * m, k}).contiguous();
    const std::size_t before = accel::memory_stats(accel::Device::cpu()).allocated_bytes;
    accel::reset_peak_memory_stats(accel::Device::cpu());
    const Tensor y = ops::linear(x3, w, bh);
    CHECK(accel::memory_stats(accel::Device::cpu()).peak_allocated_bytes - before < std::size_t(4) << 20);
    std::vector<double> want_h = ref_matmul(values(xh), transpose_values(values(w), n, k), 1, m, k, n);
    const auto bhv = values(bh);
    for (std::size_t i = 0; i < want_h.size(); ++i) want_h[i] += bhv[i % n];
    const auto got = values(y);
    for (int r = 0; r < 3; ++r) {
      require_close(std::vector<double>(got.begin() + r * m * n, got.begin() + (r + 1) * m * n), want_h,
                    2e-2, 2 * accel::test::dtype_eps(dt));
    }
  }
  using dt = dnnl::memory::data_type;
  CHECK(accel::backend::cpu::dnnl_has_matmul(dt::f32, dt::f32, dt::f32));
}

TEST_CASE("oneDNN runs under ACCEL_CPU_ARCH's cap, and bf16 linear works at every tier", "[ops][matmul]") {
  namespace cpu = accel::backend::cpu;
  using dt = dnnl::memory::data_type;
  (void)cpu::dnnl_engine();
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto has = [isa](dnnl::cpu_isa i) { return (isa & static_cast<unsigned>(i)) == static_cast<unsigned>(i); };
  const char* cap = std::getenv("ACCEL_CPU_ARCH");
  const std::string tier(accel::simd::active_tier());
  INFO("ACCEL_CPU_ARCH=" << (cap ? cap : "(unset)") << ", tier " << tier << ", oneDNN ISA 0x" << std::hex << isa);
  if (cap && *cap && !std::getenv("ONEDNN_MAX_CPU_ISA") && !std::getenv("DNNL_MAX_CPU_ISA")) {
    // The library's tier and oneDNN's agree on what AVX-512 there is.
    CHECK(has(dnnl::cpu_isa::avx512_core) == (tier != "scalar" && tier != "avx2"));
    if (tier == "avx2" || tier == "scalar") CHECK_FALSE(cpu::dnnl_has_matmul(dt::bf16, dt::bf16, dt::f32));
    if (tier == "scalar") CHECK_FALSE(has(dnnl::cpu_isa::avx2));
  }
  // Whichever path this tier takes (oneDNN's bf16 matmul, or f32 blocks), 9 rows of bf16 give the
  // reference's values.
  const Tensor x = random_tensor({9, 64}, 80, DType::bf16), w = random_tensor({40, 64}, 81, DType::bf16);
  const auto want = ref_matmul(values(x), transpose_values(values(w), 40, 64), 1, 9, 64, 40);
  require_close(ops::linear(x, w), want, 1e-3, 2 * accel::test::dtype_eps(DType::bf16));
}

TEST_CASE("matmul primitives are cached by shape", "[ops][matmul]") {
  const Tensor a = random_tensor({3, 11}, 50), b = random_tensor({11, 2}, 51);
  ops::matmul(a, b);
  const std::size_t n = accel::backend::cpu::dnnl_matmul_cache_size();
  for (int i = 0; i < 3; ++i) ops::matmul(a, b);
  REQUIRE(accel::backend::cpu::dnnl_matmul_cache_size() == n);
  ops::matmul(random_tensor({4, 11}, 52), b);
  REQUIRE(accel::backend::cpu::dnnl_matmul_cache_size() == n + 1);
}

TEST_CASE("matmul_out writes into the caller's buffer", "[ops][matmul]") {
  const Tensor a = random_tensor({7, 13}, 21), b = random_tensor({13, 5}, 22);
  const std::vector<double> expect = values(ops::matmul(a, b));

  SECTION("f32 contiguous: oneDNN writes the buffer, nothing is allocated") {
    Tensor out = Tensor::empty({7, 5}, DType::f32);
    const void* where = out.data_ptr();
    const auto before = accel::memory_stats(accel::Device::cpu());
    Tensor& r = ops::matmul_out(out, a, b);
    const auto after = accel::memory_stats(accel::Device::cpu());
    CHECK(&r == &out);
    CHECK(out.data_ptr() == where);
    CHECK(after.num_allocs == before.num_allocs);
    require_close(out, expect, 0, 0);
  }
  SECTION("batched and broadcast") {
    const Tensor ab = random_tensor({3, 7, 13}, 23), bb = random_tensor({1, 13, 5}, 24);
    Tensor out = Tensor::empty({3, 7, 5}, DType::f32);
    ops::matmul_out(out, ab, bb);
    require_close(out, values(ops::matmul(ab, bb)), 0, 0);
  }
  SECTION("a strided out and a bf16 out receive a copy of the result") {
    Tensor wide = Tensor::zeros({7, 9}, DType::f32);
    Tensor view = wide.narrow(1, 2, 5);
    ops::matmul_out(view, a, b);
    require_close(view, expect, 0, 0);
    CHECK(values(wide.narrow(1, 0, 2)) == std::vector<double>(14, 0.0));
    const Tensor a16 = a.to(DType::bf16), b16 = b.to(DType::bf16);
    Tensor out16 = Tensor::empty({7, 5}, DType::bf16);
    ops::matmul_out(out16, a16, b16);
    CHECK(values(out16) == values(ops::matmul(a16, b16)));
  }
  SECTION("an out of the wrong shape, dtype or device is refused, naming both") {
    Tensor wrong = Tensor::empty({5, 7}, DType::f32);
    CHECK_THROWS_AS(ops::matmul_out(wrong, a, b), accel::ShapeError);
    CHECK_THROWS_WITH(ops::matmul_out(wrong, a, b), Catch::Contains("[5, 7]") && Catch::Contains("[7, 5]"));
    Tensor f16 = Tensor::empty({7, 5}, DType::f16);
    CHECK_THROWS_AS(ops::matmul_out(f16, a, b), accel::ShapeError);
    Tensor meta = Tensor::empty({7, 5}, DType::f32, accel::Device::meta());
    CHECK_THROWS_AS(ops::matmul_out(meta, a, b), accel::ShapeError);
  }
  SECTION("empty inner dimension fills out with zeros") {
    Tensor out = Tensor::full({2, 3}, 7.0f);
    ops::matmul_out(out, Tensor::empty({2, 0}, DType::f32), Tensor::empty({0, 3}, DType::f32));
    CHECK(values(out) == std::vector<double>(6, 0.0));
  }
}

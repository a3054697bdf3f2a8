#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "accel/ops/argmax.hpp"
#include "accel/ops/cat.hpp"
#include "test_util.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;
using accel::test::random_tensor;
using accel::test::values;
namespace ops = accel::ops;

TEST_CASE("argmax along every dim matches a scalar scan", "[ops][argmax]") {
  const Tensor x = random_tensor({3, 4, 5}, 1);
  const auto v = values(x);
  for (std::int64_t d = 0; d < 3; ++d) {
    const Tensor a = ops::argmax(x, d);
    REQUIRE(a.dtype() == DType::i64);
    Shape want_shape = x.shape();
    want_shape.erase(static_cast<std::size_t>(d));
    REQUIRE(a.shape() == want_shape);
    const auto got = a.to_vector<std::int64_t>();
    std::int64_t inner = 1;
    for (std::int64_t i = d + 1; i < 3; ++i) inner *= x.size(i);
    const std::int64_t n = x.size(d), outer = x.numel() / (n * inner);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) {
        std::int64_t best = 0;
        for (std::int64_t j = 1; j < n; ++j)
          if (v[(o * n + j) * inner + i] > v[(o * n + best) * inner + i]) best = j;
        REQUIRE(got[static_cast<std::size_t>(o * inner + i)] == best);
      }
  }
  REQUIRE(ops::argmax(x, -1).to_vector<std::int64_t>() == ops::argmax(x, 2).to_vector<std::int64_t>());
}

TEST_CASE("argmax ties, NaN, dtypes, views, errors", "[ops][argmax]") {
  REQUIRE(ops::argmax(Tensor::from_vector<float>({1, 5, 2, 5})).item<std::int64_t>() == 1);
  REQUIRE(ops::argmax(Tensor::from_vector<float>({1, NAN, 9, NAN})).item<std::int64_t>() == 1);
  REQUIRE(ops::argmax(Tensor::from_vector<float>({-INFINITY, -INFINITY})).item<std::int64_t>() == 0);
  REQUIRE(ops::argmax(Tensor::from_vector<float>({0.1f, 0.7f, 0.3f}).to(DType::bf16)).item<std::int64_t>() == 1);
  REQUIRE(ops::argmax(Tensor::from_vector<std::int32_t>({3, -1, 8, 8})).item<std::int64_t>() == 2);
  // Logits of a [batch, vocab] slice taken through a transpose.
  const Tensor logits = random_tensor({1000, 2}, 2).t();
  const auto lv = values(logits);
  const auto got = ops::argmax(logits).to_vector<std::int64_t>();
  for (std::size_t r = 0; r < 2; ++r) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < 1000; ++j)
      if (lv[r * 1000 + j] > lv[r * 1000 + best]) best = j;
    REQUIRE(got[r] == static_cast<std::int64_t>(best));
  }
  REQUIRE_THROWS_AS(ops::argmax(Tensor::ones({3, 0}), 1), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::argmax(Tensor::ones({3}), 1), accel::ShapeError);
  const Tensor m = ops::argmax(Tensor::empty({2, 7, 32000}, DType::f16, accel::Device::meta()));
  REQUIRE((m.is_meta() && m.dtype() == DType::i64 && m.shape() == Shape{2, 7}));
}

TEST_CASE("cat joins along any dim, including views and legacy empty tensors", "[ops][cat]") {
  const Tensor a = random_tensor({2, 3}, 10), b = random_tensor({2, 5}, 11), c = random_tensor({4, 3}, 12);
  const Tensor ab = ops::cat({a, b}, 1);
  REQUIRE(ab.shape() == Shape{2, 8});
  const auto av = values(a), bv = values(b), abv = values(ab);
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t j = 0; j < 3; ++j) REQUIRE(abv[r * 8 + j] == av[r * 3 + j]);
    for (std::size_t j = 0; j < 5; ++j) REQUIRE(abv[r * 8 + 3 + j] == bv[r * 5 + j]);
  }
  const Tensor ac = ops::cat({a, c, a.narrow(0, 1, 1)}, 0);
  REQUIRE(ac.shape() == Shape{7, 3});
  std::vector<double> want = av;
  for (double x : values(c)) want.push_back(x);
  for (std::size_t j = 3; j < 6; ++j) want.push_back(av[j]);
  REQUIRE(values(ac) == want);
  const Tensor t = random_tensor({3, 2}, 13).t();  // non-contiguous [2, 3]
  REQUIRE(values(ops::cat({t, a}, -1)) == values(ops::cat({t.contiguous(), a}, -1)));
  REQUIRE(values(ops::cat({Tensor::empty({0}), a, Tensor::empty({0})}, 0)) == av);
  const Tensor h = ops::cat({a.to(DType::f16), b.to(DType::f16)}, 1);
  REQUIRE(h.dtype() == DType::f16);
  REQUIRE(ops::cat({a}, 0).shape() == a.shape());
}

TEST_CASE("cat errors and meta", "[ops][cat]") {
  const Tensor a = Tensor::ones({2, 3});
  REQUIRE_THROWS_AS(ops::cat({}, 0), accel::ValueError);
  REQUIRE_THROWS_AS(ops::cat({a, Tensor::ones({3, 3})}, 1), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::cat({a, Tensor::ones({2, 3, 1})}, 0), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::cat({a, a.to(DType::bf16)}, 0), accel::DTypeError);
  REQUIRE_THROWS_AS(ops::cat({a, a}, 2), accel::ShapeError);
  try {
    ops::cat({a, Tensor::ones({3, 3})}, 1);
  } catch (const accel::ShapeError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("cat") && Catch::Contains("[3, 3]") && Catch::Contains("[2, 3]"));
  }
  const Tensor m = ops::cat({Tensor::empty({1, 8, 5, 64}, DType::f16, accel::Device::meta()),
                             Tensor::empty({1, 8, 1, 64}, DType::f16, accel::Device::meta())},
                            2);
  REQUIRE((m.is_meta() && m.shape() == Shape{1, 8, 6, 64}));
}

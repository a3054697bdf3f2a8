#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "accel/ops/elementwise.hpp"
#include "test_util.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;
using accel::test::random_tensor;
using accel::test::require_close;
using accel::test::values;
namespace ops = accel::ops;

namespace {

// Broadcast reference: index every output element back into both operands.
std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const Shape& out,
                               const std::function<double(double, double)>& f) {
  const auto av = values(a), bv = values(b);
  std::vector<double> r(static_cast<std::size_t>(out.numel()));
  const std::size_t nd = out.size();
  for (std::int64_t flat = 0; flat < out.numel(); ++flat) {
    std::int64_t rem = flat, ia = 0, ib = 0, sa = 1, sb = 1;
    for (std::size_t d = nd; d-- > 0;) {
      const std::int64_t i = rem % out[d];
      rem /= out[d];
      const std::size_t da = d + a.dim() >= nd ? d + a.dim() - nd : SIZE_MAX;
      const std::size_t db = d + b.dim() >= nd ? d + b.dim() - nd : SIZE_MAX;
      if (da != SIZE_MAX) {
        ia += (a.shape()[da] == 1 ? 0 : i) * sa;
        sa *= a.shape()[da];
      }
      if (db != SIZE_MAX) {
        ib += (b.shape()[db] == 1 ? 0 : i) * sb;
        sb *= b.shape()[db];
      }
    }
    r[static_cast<std::size_t>(flat)] = f(av[static_cast<std::size_t>(ia)], bv[static_cast<std::size_t>(ib)]);
  }
  return r;
}

std::vector<double> ref_unary(const Tensor& x, const std::function<double(double)>& f) {
  auto v = values(x);
  for (auto& e : v) e = f(e);
  return v;
}

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("add and mul broadcast like torch", "[ops][elementwise]") {
  const auto plus = [](double x, double y) { return x + y; };
  const auto times = [](double x, double y) { return x * y; };
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{4, 5}, {4, 5}, {4, 5}},       {{4, 5}, {5}, {4, 5}},          {{4, 1}, {1, 5}, {4, 5}},
      {{2, 3, 4}, {3, 1}, {2, 3, 4}}, {{1}, {3, 7}, {3, 7}},          {{}, {6}, {6}},
      {{3, 5000}, {5000}, {3, 5000}}, {{2, 1, 9000}, {2, 3, 1}, {2, 3, 9000}},
  };
  std::uint32_t seed = 100;
  for (const auto& c : cases) {
    const Tensor a = random_tensor(c.a, seed++), b = random_tensor(c.b, seed++);
    const Tensor s = ops::add(a, b), p = ops::mul(a, b);
    REQUIRE(s.shape() == c.out);
    REQUIRE(p.shape() == c.out);
    require_close(s, ref_binary(a, b, c.out, plus), 1e-6);
    require_close(p, ref_binary(a, b, c.out, times), 1e-6);
  }
}

TEST_CASE("add and mul read non-contiguous views", "[ops][elementwise]") {
  const Tensor a = random_tensor({6, 4}, 1).t();                       // [4, 6] transposed
  const Tensor b = random_tensor({4, 12}, 2).narrow(1, 2, 6);          // row stride 12
  const Tensor c = random_tensor({4, 6, 2}, 3).select(2, 1);           // inner stride 2
  const auto plus = [](double x, double y) { return x + y; };
  require_close(ops::add(a, b), ref_binary(a, b, {4, 6}, plus), 1e-6);
  require_close(ops::add(c, a), ref_binary(c, a, {4, 6}, plus), 1e-6);
  require_close(ops::mul(c, b), ref_binary(c, b, {4, 6}, [](double x, double y) { return x * y; }), 1e-6);
}

TEST_CASE("add and mul in f16 / bf16 and mixed dtypes", "[ops][elementwise]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor a = random_tensor({3, 70}, 10, dt), b = random_tensor({70}, 11, dt);
    const Tensor s = ops::add(a, b);
    REQUIRE(s.dtype() == dt);
    require_close(s, ref_binary(a, b, {3, 70}, [](double x, double y) { return x + y; }), 0, 2 * accel::test::dtype_eps(dt));
    const Tensor p = ops::mul(a, b);
    require_close(p, ref_binary(a, b, {3, 70}, [](double x, double y) { return x * y; }), 0, 2 * accel::test::dtype_eps(dt));
  }
  const Tensor h = random_tensor({5}, 12, DType::f16), f = random_tensor({5}, 13);
  const Tensor m = ops::add(h, f);
  REQUIRE(m.dtype() == DType::f32);
  require_close(m, ref_binary(h, f, {5}, [](double x, double y) { return x + y; }), 1e-6);
  REQUIRE(ops::mul(h, random_tensor({5}, 14, DType::bf16)).dtype() == DType::f32);
}

TEST_CASE("add / mul errors and meta", "[ops][elementwise]") {
  REQUIRE_THROWS_AS(ops::add(Tensor::ones({3, 4}), Tensor::ones({5})), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::mul(Tensor::ones({3}), Tensor::ones({3}, DType::i64)), accel::DTypeError);
  try {
    ops::add(Tensor::ones({3, 4}), Tensor::ones({5}));
  } catch (const accel::ShapeError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("add") && Catch::Contains("[3, 4]") && Catch::Contains("[5]"));
  }
  const Tensor m = ops::add(Tensor::empty({2, 1, 3}, DType::f16, accel::Device::meta()), Tensor::ones({4, 1}, DType::f16));
  REQUIRE((m.is_meta() && m.shape() == Shape{2, 4, 3} && m.dtype() == DType::f16));
  REQUIRE(ops::add(Tensor::ones({0, 3}), Tensor::ones({3})).shape() == Shape{0, 3});
}

TEST_CASE("gelu (erf and tanh) and silu match the formulas", "[ops][elementwise]") {
  const Tensor x = random_tensor({5, 3001}, 20, DType::f32, -8.0, 8.0);
  require_close(ops::gelu(x), ref_unary(x, gelu_erf), 1e-6, 1e-5);
  require_close(ops::gelu(x, ops::GeluApproximate::tanh), ref_unary(x, gelu_tanh), 1e-6, 1e-5);
  require_close(ops::silu(x), ref_unary(x, silu), 1e-6, 1e-5);
  // Far tails: no NaN from exp overflow.
  const Tensor tails = Tensor::from_vector<float>({-200.f, -90.f, 0.f, 90.f, 200.f, -1e30f, 1e30f});
  require_close(ops::silu(tails), ref_unary(tails, silu), 1e-30, 1e-6);
  require_close(ops::gelu(tails), ref_unary(tails, gelu_erf), 1e-30, 1e-6);
  require_close(ops::gelu(tails, ops::GeluApproximate::tanh), std::vector<double>{0, 0, 0, 90, 200, 0, 1e30}, 1e-30, 1e-6);
}

TEST_CASE("activations on f16 / bf16 and non-contiguous input", "[ops][elementwise]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor x = random_tensor({4, 33}, 30, dt, -4, 4);
    const Tensor g = ops::gelu(x);
    REQUIRE(g.dtype() == dt);
    require_close(g, ref_unary(x, gelu_erf), 1e-3, 2 * accel::test::dtype_eps(dt));
    require_close(ops::silu(x), ref_unary(x, silu), 1e-3, 2 * accel::test::dtype_eps(dt));
  }
  const Tensor nc = random_tensor({33, 4}, 31, DType::f32, -4, 4).t();
  require_close(ops::silu(nc), ref_unary(nc, silu), 1e-6, 1e-5);
  REQUIRE_THROWS_AS(ops::silu(Tensor::ones({3}, DType::i32)), accel::DTypeError);
  REQUIRE(ops::gelu(Tensor::empty({7}, DType::bf16, accel::Device::meta())).is_meta());
}

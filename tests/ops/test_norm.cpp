#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "accel/ops/norm.hpp"
#include "test_util.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;
using accel::test::random_tensor;
using accel::test::require_close;
using accel::test::values;
namespace ops = accel::ops;

namespace {

// Softmax of a contiguous double copy along `dim`.
std::vector<double> ref_softmax(const Tensor& x, std::size_t dim) {
  const auto v = values(x);
  std::vector<double> r(v.size());
  std::int64_t n = x.shape()[dim], inner = 1;
  for (std::size_t i = dim + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  const std::int64_t outer = x.numel() / (n * inner);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, v[(o * n + j) * inner + i]);
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(v[(o * n + j) * inner + i] - m);
      for (std::int64_t j = 0; j < n; ++j) r[(o * n + j) * inner + i] = std::exp(v[(o * n + j) * inner + i] - m) / s;
    }
  }
  return r;
}

std::vector<double> ref_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const auto v = values(x);
  const auto wv = w.defined() ? values(w) : std::vector<double>();
  const auto bv = b.defined() ? values(b) : std::vector<double>();
  const auto n = static_cast<std::size_t>(x.shape().back());
  std::vector<double> r(v.size());
  for (std::size_t row = 0; row < v.size() / n; ++row) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < n; ++j) mean += v[row * n + j];
    mean /= double(n);
    for (std::size_t j = 0; j < n; ++j) var += (v[row * n + j] - mean) * (v[row * n + j] - mean);
    var /= double(n);
    for (std::size_t j = 0; j < n; ++j) {
      double y = (v[row * n + j] - mean) / std::sqrt(var + eps);
      if (w.defined()) y *= wv[j];
      if (b.defined()) y += bv[j];
      r[row * n + j] = y;
    }
  }
  return r;
}

std::vector<double> ref_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  const auto v = values(x);
  const auto wv = w.defined() ? values(w) : std::vector<double>();
  const auto n = static_cast<std::size_t>(x.shape().back());
  std::vector<double> r(v.size());
  for (std::size_t row = 0; row < v.size() / n; ++row) {
    double ms = 0;
    for (std::size_t j = 0; j < n; ++j) ms += v[row * n + j] * v[row * n + j];
    const double s = 1.0 / std::sqrt(ms / double(n) + eps);
    for (std::size_t j = 0; j < n; ++j) r[row * n + j] = v[row * n + j] * s * (w.defined() ? wv[j] : 1.0);
  }
  return r;
}

}  // namespace

TEST_CASE("softmax along any dim matches a double reference", "[ops][norm][softmax]") {
  const Tensor x = random_tensor({3, 5, 37}, 1, DType::f32, -10, 10);
  for (std::int64_t d : {-1, 0, 1, 2}) {
    const Tensor y = ops::softmax(x, d);
    REQUIRE(y.shape() == x.shape());
    require_close(y, ref_softmax(x, accel::wrap_dim(d, 3, "t")), 1e-7, 1e-5);
  }
  // Non-contiguous input, wide rows (parallel split), large magnitudes (max subtraction).
  const Tensor nc = random_tensor({37, 4}, 2, DType::f32, -50, 50).t();
  require_close(ops::softmax(nc), ref_softmax(nc.contiguous(), 1), 1e-7, 1e-5);
  const Tensor big = random_tensor({2, 20000}, 3, DType::f32, -1000, 1000);
  require_close(ops::softmax(big), ref_softmax(big, 1), 1e-7, 1e-4);
  // -inf entries (masked positions) get exactly 0.
  const Tensor masked = Tensor::from_vector<float>({1.f, -INFINITY, 2.f, -INFINITY});
  const auto mv = ops::softmax(masked).to_vector<float>();
  REQUIRE(mv[1] == 0.0f);
  REQUIRE(mv[3] == 0.0f);
  REQUIRE(mv[0] + mv[2] == Approx(1.0f));
}

TEST_CASE("softmax in f16 / bf16, meta and errors", "[ops][norm][softmax]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor x = random_tensor({4, 50}, 4, dt, -5, 5);
    const Tensor y = ops::softmax(x);
    REQUIRE(y.dtype() == dt);
    require_close(y, ref_softmax(x, 1), 1e-4, 2 * accel::test::dtype_eps(dt));
  }
  REQUIRE(ops::softmax(Tensor::empty({2, 3}, DType::f16, accel::Device::meta()), 0).is_meta());
  REQUIRE_THROWS_AS(ops::softmax(Tensor::ones({2, 3}), 2), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::softmax(Tensor::ones({2, 3}, DType::i32)), accel::DTypeError);
}

TEST_CASE("layer_norm with and without affine parameters", "[ops][norm][layer_norm]") {
  const Tensor x = random_tensor({2, 3, 67}, 10, DType::f32, -3, 5);
  const Tensor w = random_tensor({67}, 11), b = random_tensor({67}, 12);
  require_close(ops::layer_norm(x, w, b), ref_layer_norm(x, w, b, 1e-5), 1e-5, 1e-5);
  require_close(ops::layer_norm(x, {}, {}), ref_layer_norm(x, {}, {}, 1e-5), 1e-5, 1e-5);
  require_close(ops::layer_norm(x, w, {}, 1e-3), ref_layer_norm(x, w, {}, 1e-3), 1e-5, 1e-5);
  // A large offset: a one-pass variance would cancel, the two-pass one does not.
  const Tensor shifted = ops::layer_norm(random_tensor({4, 64}, 13, DType::f32, 1000, 1001), {}, {});
  require_close(shifted, ref_layer_norm(random_tensor({4, 64}, 13, DType::f32, 1000, 1001), {}, {}, 1e-5), 2e-3);
  const Tensor nc = random_tensor({67, 3}, 14).t();
  require_close(ops::layer_norm(nc, w, b), ref_layer_norm(nc, w, b, 1e-5), 1e-5, 1e-5);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor xh = x.to(dt);
    const Tensor y = ops::layer_norm(xh, w.to(dt), b.to(dt));
    REQUIRE(y.dtype() == dt);
    require_close(y, ref_layer_norm(xh, w.to(dt), b.to(dt), 1e-5), 1e-3, 2 * accel::test::dtype_eps(dt));
  }
  REQUIRE_THROWS_AS(ops::layer_norm(x, Tensor::ones({66}), {}), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::layer_norm(x, Tensor::ones({67}, DType::i64), {}), accel::DTypeError);
  const Tensor m = ops::layer_norm(Tensor::empty({2, 8}, DType::bf16, accel::Device::meta()), Tensor::ones({8}), {});
  REQUIRE((m.is_meta() && m.shape() == Shape{2, 8}));
}

TEST_CASE("rms_norm is LLaMA's RMSNorm computed in f32", "[ops][norm][rms_norm]") {
  const Tensor x = random_tensor({3, 4, 4096}, 20, DType::f32, -2, 2);
  const Tensor w = random_tensor({4096}, 21, DType::f32, 0.5, 1.5);
  require_close(ops::rms_norm(x, w), ref_rms_norm(x, w, 1e-6), 1e-5, 1e-5);
  require_close(ops::rms_norm(x, {}, 1e-5), ref_rms_norm(x, {}, 1e-5), 1e-5, 1e-5);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor xh = x.to(dt), wh = w.to(dt);
    const Tensor y = ops::rms_norm(xh, wh);
    REQUIRE(y.dtype() == dt);
    require_close(y, ref_rms_norm(xh, wh, 1e-6), 1e-3, 2 * accel::test::dtype_eps(dt));
  }
  // All-zero rows stay zero (eps keeps the rsqrt finite).
  REQUIRE(ops::rms_norm(Tensor::zeros({2, 5}), Tensor::ones({5})).to_vector<float>() == std::vector<float>(10, 0.0f));
  const Tensor nc = random_tensor({16, 2}, 22).t();
  require_close(ops::rms_norm(nc, Tensor::ones({16})), ref_rms_norm(nc, Tensor::ones({16}), 1e-6), 1e-5, 1e-5);
  REQUIRE_THROWS_AS(ops::rms_norm(x, Tensor::ones({8})), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::rms_norm(Tensor::ones({}), Tensor::ones({1})), accel::ShapeError);
  REQUIRE(ops::rms_norm(Tensor::empty({1, 7, 4096}, DType::f16, accel::Device::meta()), w).is_meta());
}

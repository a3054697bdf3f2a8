#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <vector>

#include "accel/ops/attention.hpp"
#include "test_util.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;
using accel::test::random_tensor;
using accel::test::require_close;
using accel::test::values;
namespace ops = accel::ops;

namespace {

// Attention on double copies with GQA head mapping and the end-aligned causal mask.
std::vector<double> ref_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<double> scale,
                             std::int64_t window = 0, const std::vector<std::uint8_t>* keep = nullptr) {
  const auto qv = values(q), kv = values(k), vv = values(v);
  const std::int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const std::int64_t Hkv = k.size(1), S = k.size(2), Dv = v.size(3);
  const double sc = scale.value_or(1.0 / std::sqrt(double(D)));
  std::vector<double> out(static_cast<std::size_t>(B * Hq * T * Dv), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t kh = h / (Hq / Hkv);
        std::vector<double> s;
        // The sliding window keeps the `window` newest visible keys: j > (S - T + t) - window.
        const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, S - T + t - window + 1) : 0;
        for (std::int64_t j = 0; j < S; ++j) {
          if (causal && j > S - T + t) break;
          if (j < first || (keep && !(*keep)[static_cast<std::size_t>(b * S + j)])) {
            s.push_back(-INFINITY);
            continue;
          }
          double d = 0;
          for (std::int64_t e = 0; e < D; ++e) d += qv[((b * Hq + h) * T + t) * D + e] * kv[((b * Hkv + kh) * S + j) * D + e];
          s.push_back(d * sc);
        }
        if (s.empty()) continue;
        double m = -INFINITY, z = 0;
        for (double x : s) m = std::max(m, x);
        if (m == -INFINITY) continue;
        for (double& x : s) z += (x = std::exp(x - m));
        for (std::size_t j = 0; j < s.size(); ++j)
          for (std::int64_t e = 0; e < Dv; ++e)
            out[((b * Hq + h) * T + t) * Dv + e] += s[j] / z * vv[((b * Hkv + kh) * S + std::int64_t(j)) * Dv + e];
      }
  return out;
}

}  // namespace

TEST_CASE("sdpa causal and full attention, multi-head", "[ops][attention]") {
  const Tensor q = random_tensor({2, 3, 6, 16}, 1), k = random_tensor({2, 3, 6, 16}, 2), v = random_tensor({2, 3, 6, 16}, 3);
  for (bool causal : {true, false}) {
    const Tensor o = ops::scaled_dot_product_attention(q, k, v, causal);
    REQUIRE(o.shape() == Shape{2, 3, 6, 16});
    require_close(o, ref_sdpa(q, k, v, causal, std::nullopt), 1e-5, 1e-5);
  }
  const Tensor o = ops::scaled_dot_product_attention(q, k, v, false, 0.3);
  require_close(o, ref_sdpa(q, k, v, false, 0.3), 1e-5, 1e-5);
  // Causal row 0 sees only key 0: its output is v[0].
  const Tensor o0 = ops::scaled_dot_product_attention(q, k, v, true).narrow(2, 0, 1);
  require_close(o0, values(v.narrow(2, 0, 1)), 1e-6);
}

TEST_CASE("sdpa grouped KV heads with a KV-cache causal offset", "[ops][attention]") {
  // 8 query heads over 2 kv heads; 3 new queries against 10 cached keys (t sees keys <= 7 + t).
  const Tensor q = random_tensor({1, 8, 3, 32}, 10), k = random_tensor({1, 2, 10, 32}, 11), v = random_tensor({1, 2, 10, 24}, 12);
  const Tensor o = ops::scaled_dot_product_attention(q, k, v);
  REQUIRE(o.shape() == Shape{1, 8, 3, 24});
  require_close(o, ref_sdpa(q, k, v, true, std::nullopt), 1e-5, 1e-5);
  // Decode step: one query sees every key, so causal and full agree.
  const Tensor q1 = q.narrow(2, 2, 1);
  require_close(ops::scaled_dot_product_attention(q1, k, v, true),
                values(ops::scaled_dot_product_attention(q1, k, v, false)), 1e-7);
  // More queries than keys: rows with no visible key are zero.
  const Tensor qq = random_tensor({1, 2, 4, 8}, 13), kk = random_tensor({1, 2, 2, 8}, 14), vv = random_tensor({1, 2, 2, 8}, 15);
  require_close(ops::scaled_dot_product_attention(qq, kk, vv), ref_sdpa(qq, kk, vv, true, std::nullopt), 1e-5, 1e-5);
}

TEST_CASE("sdpa prefill (blocked GEMM path) with GQA, offsets and partial blocks", "[ops][attention]") {
  // 70 queries: one full block of 64 and a partial one; 75 keys: causal offset 5.
  const Tensor q = random_tensor({2, 4, 70, 16}, 40), k = random_tensor({2, 2, 75, 16}, 41), v = random_tensor({2, 2, 75, 8}, 42);
  for (bool causal : {true, false}) {
    const Tensor o = ops::scaled_dot_product_attention(q, k, v, causal);
    REQUIRE(o.shape() == Shape{2, 4, 70, 8});
    require_close(o, ref_sdpa(q, k, v, causal, std::nullopt), 1e-5, 1e-5);
  }
  require_close(ops::scaled_dot_product_attention(q, k, v, true, 0.05), ref_sdpa(q, k, v, true, 0.05), 1e-5, 1e-5);
  // More queries than keys: the first rows see nothing and are zero.
  const Tensor q2 = random_tensor({1, 2, 40, 8}, 43), k2 = random_tensor({1, 1, 20, 8}, 44), v2 = random_tensor({1, 1, 20, 8}, 45);
  require_close(ops::scaled_dot_product_attention(q2, k2, v2), ref_sdpa(q2, k2, v2, true, std::nullopt), 1e-5, 1e-5);
  // Both paths agree: 31 queries (row path) are the last 31 rows of the 70-query result.
  const Tensor tail = ops::scaled_dot_product_attention(q.narrow(2, 39, 31), k, v, true);
  require_close(tail, values(ops::scaled_dot_product_attention(q, k, v, true).narrow(2, 39, 31)), 1e-5, 1e-5);
  const Tensor ob = ops::scaled_dot_product_attention(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16));
  REQUIRE(ob.dtype() == DType::bf16);
  require_close(ob, ref_sdpa(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16), true, std::nullopt),
                2 * accel::test::dtype_eps(DType::bf16));
}

TEST_CASE("sdpa on non-contiguous and f16 / bf16 inputs", "[ops][attention]") {
  // [B, T, H, D] -> [B, H, T, D] views, as models produce them.
  const Tensor q = random_tensor({2, 5, 4, 8}, 20).transpose(1, 2);
  const Tensor k = random_tensor({2, 7, 2, 8}, 21).transpose(1, 2);
  const Tensor v = random_tensor({2, 7, 2, 8}, 22).transpose(1, 2);
  require_close(ops::scaled_dot_product_attention(q, k, v), ref_sdpa(q, k, v, true, std::nullopt), 1e-5, 1e-5);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor qh = q.to(dt), kh = k.to(dt), vh = v.to(dt);
    const Tensor o = ops::scaled_dot_product_attention(qh, kh, vh);
    REQUIRE(o.dtype() == dt);
    require_close(o, ref_sdpa(qh, kh, vh, true, std::nullopt), 2 * accel::test::dtype_eps(dt));
  }
}

TEST_CASE("sdpa errors and meta", "[ops][attention]") {
  const Tensor q = Tensor::ones({1, 3, 2, 8}), k = Tensor::ones({1, 2, 2, 8});
  REQUIRE_THROWS_AS(ops::scaled_dot_product_attention(q, k, k), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::scaled_dot_product_attention(Tensor::ones({1, 2, 2, 8}), Tensor::ones({1, 2, 2, 4}), Tensor::ones({1, 2, 2, 4})),
                    accel::ShapeError);
  REQUIRE_THROWS_AS(ops::scaled_dot_product_attention(Tensor::ones({2, 8}), Tensor::ones({2, 8}), Tensor::ones({2, 8})),
                    accel::ShapeError);
  REQUIRE_THROWS_AS(ops::scaled_dot_product_attention(k, k.to(DType::f16), k), accel::DTypeError);
  const Tensor m = ops::scaled_dot_product_attention(Tensor::empty({1, 32, 5, 128}, DType::f16, accel::Device::meta()),
                                                     Tensor::empty({1, 8, 9, 128}, DType::f16, accel::Device::meta()),
                                                     Tensor::empty({1, 8, 9, 128}, DType::f16, accel::Device::meta()));
  REQUIRE((m.is_meta() && m.shape() == Shape{1, 32, 5, 128}));
}

TEST_CASE("sdpa sliding window: each query sees its newest keys, decode and prefill paths", "[ops][attention]") {
  // 4 query heads over 2 kv heads; a window of 5 keys, itself included.
  for (std::int64_t T : {std::int64_t{1}, std::int64_t{3}, std::int64_t{40}}) {
    const std::int64_t S = 45;
    const Tensor q = random_tensor({1, 4, T, 16}, 20), k = random_tensor({1, 2, S, 16}, 21), v = random_tensor({1, 2, S, 8}, 22);
    for (std::int64_t window : {std::int64_t{1}, std::int64_t{5}, std::int64_t{100}}) {
      INFO("T " << T << " window " << window);
      require_close(ops::scaled_dot_product_attention(q, k, v, true, std::nullopt, window),
                    ref_sdpa(q, k, v, true, std::nullopt, window), 1e-5, 1e-5);
    }
  }
  // A window wider than the context changes nothing.
  const Tensor q = random_tensor({1, 2, 6, 8}, 23), k = random_tensor({1, 2, 6, 8}, 24), v = random_tensor({1, 2, 6, 8}, 25);
  require_close(ops::scaled_dot_product_attention(q, k, v, true, std::nullopt, 6),
                values(ops::scaled_dot_product_attention(q, k, v, true)), 1e-7);
  CHECK_THROWS_AS(ops::scaled_dot_product_attention(q, k, v, true, std::nullopt, -1), accel::ValueError);
}

TEST_CASE("sdpa key_mask leaves padded keys out, on both paths", "[ops][attention]") {
  // Row 0 keeps every key; row 1 masks its first 3 keys (left padding) and one in the middle.
  for (std::int64_t T : {std::int64_t{1}, std::int64_t{40}}) {
    const std::int64_t S = 44;
    const Tensor q = random_tensor({2, 4, T, 16}, 30), k = random_tensor({2, 2, S, 16}, 31), v = random_tensor({2, 2, S, 8}, 32);
    std::vector<std::uint8_t> keep(static_cast<std::size_t>(2 * S), 1);
    for (std::int64_t s : {0, 1, 2, 20}) keep[static_cast<std::size_t>(S + s)] = 0;
    const Tensor mask = Tensor::from_vector(keep, Shape{2, S}).to(DType::boolean);
    const Tensor o = ops::scaled_dot_product_attention(q, k, v, true, std::nullopt, 0, mask);
    INFO("T " << T);
    require_close(o, ref_sdpa(q, k, v, true, std::nullopt, 0, &keep), 1e-5, 1e-5);
  }
  const Tensor q = random_tensor({1, 2, 2, 8}, 33), k = random_tensor({1, 2, 3, 8}, 34), v = random_tensor({1, 2, 3, 8}, 35);
  // A query with every visible key masked gets a zero row.
  const Tensor none = Tensor::zeros({1, 3}, DType::boolean);
  CHECK(values(ops::scaled_dot_product_attention(q, k, v, true, std::nullopt, 0, none)) == std::vector<double>(32, 0.0));
  CHECK_THROWS_AS(ops::scaled_dot_product_attention(q, k, v, true, std::nullopt, 0, Tensor::ones({1, 4}, DType::boolean)),
                  accel::ShapeError);
  CHECK_THROWS_AS(ops::scaled_dot_product_attention(q, k, v, true, std::nullopt, 0, Tensor::ones({1, 3}, DType::f32)),
                  accel::DTypeError);
}

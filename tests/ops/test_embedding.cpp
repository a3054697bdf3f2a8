#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "accel/ops/embedding.hpp"
#include "test_util.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;
using accel::test::random_tensor;
using accel::test::require_close;
using accel::test::values;
namespace ops = accel::ops;

namespace {

// RoPE on a contiguous double copy of x [B, H, T, D].
std::vector<double> ref_rope(const Tensor& x, const std::vector<std::int64_t>& pos, bool per_batch, double theta,
                             ops::RopeLayout layout, std::int64_t rd) {
  auto v = values(x);
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  if (rd < 0) rd = D;
  std::vector<double> r = v;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        const double p = double(pos[static_cast<std::size_t>(per_batch ? b * T + t : t)]);
        const std::int64_t base = ((b * H + h) * T + t) * D;
        for (std::int64_t i = 0; i < rd / 2; ++i) {
          const double ang = p * std::pow(theta, -2.0 * double(i) / double(rd));
          const std::int64_t i0 = layout == ops::RopeLayout::half_split ? i : 2 * i;
          const std::int64_t i1 = layout == ops::RopeLayout::half_split ? i + rd / 2 : 2 * i + 1;
          const double x0 = v[base + i0], x1 = v[base + i1];
          r[base + i0] = x0 * std::cos(ang) - x1 * std::sin(ang);
          r[base + i1] = x1 * std::cos(ang) + x0 * std::sin(ang);
        }
      }
  return r;
}

}  // namespace

TEST_CASE("embedding gathers rows for int64 and int32 ids of any shape", "[ops][embedding]") {
  const Tensor w = random_tensor({10, 6}, 1);
  const auto wv = values(w);
  const Tensor ids = Tensor::from_vector<std::int64_t>({3, 0, 9, 3, 7, 1}, Shape{2, 3});
  const Tensor e = ops::embedding(ids, w);
  REQUIRE(e.shape() == Shape{2, 3, 6});
  const auto ev = values(e);
  const std::int64_t idv[] = {3, 0, 9, 3, 7, 1};
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 6; ++j) REQUIRE(ev[i * 6 + j] == wv[static_cast<std::size_t>(idv[i]) * 6 + j]);
  const Tensor e32 = ops::embedding(ids.to(DType::i32), w);
  REQUIRE(values(e32) == ev);
  // bf16 table: rows copied bit for bit; a transposed (non-contiguous) table also works.
  const Tensor wb = w.to(DType::bf16);
  REQUIRE(ops::embedding(ids, wb).dtype() == DType::bf16);
  REQUIRE(values(ops::embedding(ids, wb)) == values(ops::embedding(ids, wb.contiguous())));
  const Tensor wt = random_tensor({6, 10}, 2).t();
  REQUIRE(values(ops::embedding(ids, wt)) == values(ops::embedding(ids, wt.contiguous())));
  // Scalar id -> [dim]; empty ids -> [0, dim].
  REQUIRE(ops::embedding(Tensor::from_vector<std::int64_t>({4}).select(0, 0), w).shape() == Shape{6});
  REQUIRE(ops::embedding(Tensor::empty({0}, DType::i64), w).shape() == Shape{0, 6});
}

TEST_CASE("embedding rejects out-of-range ids, float ids and meta works", "[ops][embedding]") {
  const Tensor w = random_tensor({10, 6}, 3);
  try {
    ops::embedding(Tensor::from_vector<std::int64_t>({1, 10}), w);
    FAIL("expected ValueError");
  } catch (const accel::ValueError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("embedding") && Catch::Contains("10") && Catch::Contains("[10, 6]"));
  }
  REQUIRE_THROWS_AS(ops::embedding(Tensor::from_vector<std::int32_t>({-1}), w), accel::ValueError);
  REQUIRE_THROWS_AS(ops::embedding(Tensor::ones({2}), w), accel::DTypeError);
  REQUIRE_THROWS_AS(ops::embedding(Tensor::zeros({2}, DType::i64), Tensor::ones({10})), accel::ShapeError);
  const Tensor m = ops::embedding(Tensor::zeros({2, 5}, DType::i64),
                                  Tensor::empty({32000, 4096}, DType::f16, accel::Device::meta()));
  REQUIRE((m.is_meta() && m.shape() == Shape{2, 5, 4096} && m.dtype() == DType::f16));
}

TEST_CASE("rotary_embedding half_split and interleaved match the formulas", "[ops][rope]") {
  const Tensor x = random_tensor({2, 3, 5, 16}, 10);
  const std::vector<std::int64_t> pos = {0, 1, 2, 7, 1000};
  const Tensor p = Tensor::from_vector(pos);
  for (auto layout : {ops::RopeLayout::half_split, ops::RopeLayout::interleaved}) {
    const Tensor y = ops::rotary_embedding(x, p, 10000.0, layout);
    REQUIRE(y.shape() == x.shape());
    require_close(y, ref_rope(x, pos, false, 10000.0, layout, -1), 2e-5);
  }
  // Position 0 leaves x unchanged.
  const Tensor y0 = ops::rotary_embedding(x.narrow(2, 0, 1), Tensor::zeros({1}, DType::i64));
  require_close(y0, values(x.narrow(2, 0, 1)), 0.0);
}

TEST_CASE("rotary_embedding partial rotary, per-batch positions, theta, dtypes", "[ops][rope]") {
  const Tensor x = random_tensor({2, 2, 3, 12}, 20);
  const std::vector<std::int64_t> pos = {5, 6, 7, 100, 101, 102};
  const Tensor p = Tensor::from_vector(pos, Shape{2, 3});
  const Tensor y = ops::rotary_embedding(x, p, 500000.0, ops::RopeLayout::half_split, 8);
  require_close(y, ref_rope(x, pos, true, 500000.0, ops::RopeLayout::half_split, 8), 2e-5);
  // Features past rotary_dim pass through untouched.
  require_close(y.narrow(3, 8, 4), values(x.narrow(3, 8, 4)), 0.0);
  const Tensor yi = ops::rotary_embedding(x, p.to(DType::i32), 10000.0, ops::RopeLayout::interleaved, 4);
  require_close(yi, ref_rope(x, pos, true, 10000.0, ops::RopeLayout::interleaved, 4), 2e-5);
  // Non-contiguous x (the usual [B, T, H, D] -> [B, H, T, D] transpose).
  const Tensor xt = random_tensor({2, 3, 2, 12}, 21).transpose(1, 2);
  require_close(ops::rotary_embedding(xt, p), ref_rope(xt, pos, true, 10000.0, ops::RopeLayout::half_split, -1), 2e-5);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor xh = x.to(dt);
    const Tensor yh = ops::rotary_embedding(xh, p);
    REQUIRE(yh.dtype() == dt);
    require_close(yh, ref_rope(xh, pos, true, 10000.0, ops::RopeLayout::half_split, -1), 2 * accel::test::dtype_eps(dt));
  }
}

TEST_CASE("rotary_embedding errors and meta", "[ops][rope]") {
  const Tensor x = random_tensor({1, 2, 3, 8}, 30);
  REQUIRE_THROWS_AS(ops::rotary_embedding(x, Tensor::zeros({4}, DType::i64)), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::rotary_embedding(x, Tensor::zeros({3})), accel::DTypeError);
  REQUIRE_THROWS_AS(ops::rotary_embedding(x.select(0, 0), Tensor::zeros({3}, DType::i64)), accel::ShapeError);
  REQUIRE_THROWS_AS(ops::rotary_embedding(x, Tensor::zeros({3}, DType::i64), 1e4, ops::RopeLayout::half_split, 5),
                    accel::ValueError);
  REQUIRE_THROWS_AS(ops::rotary_embedding(x, Tensor::zeros({3}, DType::i64), 1e4, ops::RopeLayout::half_split, 10),
                    accel::ValueError);
  const Tensor m = ops::rotary_embedding(Tensor::empty({1, 32, 7, 128}, DType::bf16, accel::Device::meta()),
                                         Tensor::zeros({7}, DType::i64));
  REQUIRE((m.is_meta() && m.shape() == Shape{1, 32, 7, 128}));
}

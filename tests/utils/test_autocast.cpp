#include <catch2/catch.hpp>

#include <vector>

#include "accel/ops/ops.hpp"
#include "accel/utils/autocast.hpp"
#include "accel/utils/random.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;
namespace ops = accel::ops;
namespace policy = accel::policy;

namespace {
std::vector<float> as_f32(const Tensor& t) { return t.to(DType::f32).to_vector<float>(); }
}  // namespace

TEST_CASE("Inside an autocast scope, matmul, linear and attention compute in the scope's dtype", "[utils][autocast]") {
  accel::utils::set_seed(7);
  const Tensor x = accel::utils::randn(Shape{5, 16});
  const Tensor w = accel::utils::randn(Shape{8, 16});
  const Tensor bias = accel::utils::randn(Shape{8});
  const Tensor q = accel::utils::randn(Shape{1, 4, 6, 8});
  const Tensor k = accel::utils::randn(Shape{1, 2, 6, 8});
  const Tensor v = accel::utils::randn(Shape{1, 2, 6, 8});

  // What torch.autocast(bf16) computes: the operands rounded to bf16, a bf16 result.
  const Tensor ref_linear = ops::linear(x.to(DType::bf16), w.to(DType::bf16), bias.to(DType::bf16));
  const Tensor ref_matmul = ops::matmul(x.to(DType::bf16), w.transpose(0, 1).to(DType::bf16));
  const Tensor ref_sdpa = ops::scaled_dot_product_attention(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16));
  const Tensor f32_linear = ops::linear(x, w, bias);
  {
    auto scope = accel::autocast<accel::policies<policy::bf16>>();
    const Tensor y = ops::linear(x, w, bias);
    CHECK(y.dtype() == DType::bf16);
    CHECK(as_f32(y) == as_f32(ref_linear));
    const Tensor m = ops::matmul(x, w.transpose(0, 1));
    CHECK(m.dtype() == DType::bf16);
    CHECK(as_f32(m) == as_f32(ref_matmul));
    const Tensor a = ops::scaled_dot_product_attention(q, k, v);
    CHECK(a.dtype() == DType::bf16);
    CHECK(as_f32(a) == as_f32(ref_sdpa));
    // Ops torch keeps in f32 stay in the operand's dtype.
    CHECK(ops::softmax(x, -1).dtype() == DType::f32);
    // out= variants are not autocast (as in torch): the caller's buffer decides.
    Tensor out = Tensor::empty(Shape{5, 8}, DType::f32);
    ops::matmul_out(out, x, w.transpose(0, 1));
    CHECK(out.dtype() == DType::f32);
  }
  // Outside the scope: f32 again, and the bf16 result really was rounded.
  const Tensor back = ops::linear(x, w, bias);
  CHECK(back.dtype() == DType::f32);
  CHECK(as_f32(back) == as_f32(f32_linear));
  CHECK(as_f32(f32_linear) != as_f32(ref_linear));
}

TEST_CASE("autocast<P> takes a bundle or a precision tag; fp32 and a disabled kwargs mean no autocast", "[utils][autocast]") {
  {
    auto scope = accel::autocast<policy::fp16>();
    CHECK(accel::autocast_dtype() == DType::f16);
    // Integer operands are never cast.
    CHECK(accel::core::autocast_target(DType::i64) == DType::i64);
    CHECK(accel::core::autocast_target(DType::bf16) == DType::f16);
  }
  {
    auto scope = accel::autocast<accel::policies<policy::fp8<policy::e4m3>>>();
    CHECK(accel::autocast_dtype() == DType::bf16);
  }
  {
    auto scope = accel::autocast<accel::policies<>>();
    CHECK_FALSE(accel::autocast_dtype().has_value());
    const Tensor x = Tensor::ones({2, 3});
    CHECK(ops::linear(x, Tensor::ones({4, 3})).dtype() == DType::f32);
  }
  {
    auto scope = accel::autocast<policy::bf16>(accel::AutocastKwargs{.enabled = false});
    CHECK_FALSE(accel::autocast_dtype().has_value());
  }
}

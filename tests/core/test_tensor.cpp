// Tensor views, copies, conversions, element access, printing and error messages.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <vector>

#include "accel/core/tensor.hpp"

using namespace accel;

namespace {
Tensor arange(std::int64_t n, DType dt = DType::f32) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_vector(v).to(dt);
}
}  // namespace

TEST_CASE("factories and properties") {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::bf16);
  REQUIRE(t.defined());
  REQUIRE(t.dim() == 3);
  REQUIRE(t.shape() == Shape{2, 3, 4});
  REQUIRE(t.strides() == Shape{12, 4, 1});
  REQUIRE(t.numel() == 24);
  REQUIRE(t.nbytes() == 48);
  REQUIRE(t.size(-1) == 4);
  REQUIRE(t.is_contiguous());
  REQUIRE(t.at<float>({1, 2, 3}) == 0.0f);
  REQUIRE(Tensor::full({2}, 7.5, DType::f16).at<float>({1}) == 7.5f);
  REQUIRE(Tensor::ones({}, DType::i32).item<int>() == 1);
  REQUIRE_FALSE(Tensor().defined());
  REQUIRE_THROWS_AS(Tensor::empty({-1, 2}), ShapeError);
  REQUIRE_THROWS_AS(Tensor::from_vector<float>({1, 2, 3}, Shape{2, 2}), ShapeError);
  REQUIRE_THROWS_AS(t.data_ptr<float>(), DTypeError);
  REQUIRE_THROWS_AS(t.size(3), ShapeError);
}

TEST_CASE("views share storage and index correctly") {
  Tensor a = arange(24).view({2, 3, 4});
  Tensor n = a.narrow(1, 1, 2);
  REQUIRE(n.shape() == Shape{2, 2, 4});
  REQUIRE(n.at<float>({1, 0, 2}) == 18.0f);
  REQUIRE(n.shares_storage(a));
  REQUIRE_FALSE(n.is_contiguous());
  Tensor s = a.select(0, 1);
  REQUIRE(s.shape() == Shape{3, 4});
  REQUIRE(s.at<float>({2, 3}) == 23.0f);
  REQUIRE(a.select(-1, -1).at<float>({0, 2}) == 11.0f);
  Tensor tr = a.transpose(0, 2);
  REQUIRE(tr.shape() == Shape{4, 3, 2});
  REQUIRE(tr.at<float>({3, 2, 1}) == 23.0f);
  Tensor p = a.permute({2, 0, 1});
  REQUIRE(p.at<float>({1, 1, 2}) == a.at<float>({1, 2, 1}));
  REQUIRE(a.unsqueeze(0).shape() == Shape{1, 2, 3, 4});
  REQUIRE(a.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  REQUIRE(a.unsqueeze(0).squeeze(0).shape() == a.shape());
  REQUIRE(a.view({-1, 4}).shape() == Shape{6, 4});
  REQUIRE(a.view({4, -1}).at<float>({3, 5}) == 23.0f);
  REQUIRE(a.flatten().shape() == Shape{24});
  Tensor e = Tensor::from_vector<float>({1, 2, 3}).view({3, 1}).expand({3, 4});
  REQUIRE(e.strides() == Shape{1, 0});
  REQUIRE(e.at<float>({2, 3}) == 3.0f);
  REQUIRE(Tensor::from_vector<float>({5}).expand({2, 2}).at<float>({1, 1}) == 5.0f);
}

TEST_CASE("view errors name the operation and the shapes") {
  Tensor a = arange(12).view({3, 4});
  REQUIRE_THROWS_WITH(a.view({5, -1}), Catch::Contains("view") && Catch::Contains("[5, -1]"));
  REQUIRE_THROWS_WITH(a.t().view({12}), Catch::Contains("not contiguous"));
  REQUIRE(a.t().reshape({12}).at<float>({1}) == 4.0f);
  REQUIRE_THROWS_WITH(a.narrow(0, 2, 2), Catch::Contains("narrow") && Catch::Contains("[3, 4]"));
  REQUIRE_THROWS_AS(a.select(1, 4), ShapeError);
  REQUIRE_THROWS_AS(a.expand({2, 4}), ShapeError);
  REQUIRE_THROWS_AS(a.view({-1, -1}), ShapeError);
  REQUIRE_THROWS_AS(a.permute({0, 0}), ShapeError);
  REQUIRE_THROWS_WITH(a.view_as(DType::f16), Catch::Contains("float32") && Catch::Contains("float16"));
}

TEST_CASE("contiguous, clone and copy_ with strides and broadcasting") {
  Tensor a = arange(12).view({3, 4});
  Tensor t = a.t().contiguous();
  REQUIRE(t.is_contiguous());
  REQUIRE_FALSE(t.shares_storage(a));
  REQUIRE(t.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  REQUIRE(a.contiguous().is_same(a));
  Tensor c = a.clone();
  REQUIRE_FALSE(c.shares_storage(a));
  REQUIRE(c.to_vector<int>() == a.to_vector<int>());

  Tensor dst = Tensor::zeros({3, 4}, DType::f16);
  dst.narrow(1, 1, 2).copy_(Tensor::from_vector<float>({7, 8}));  // broadcast over rows
  REQUIRE(dst.to_vector<float>() == std::vector<float>{0, 7, 8, 0, 0, 7, 8, 0, 0, 7, 8, 0});
  REQUIRE_THROWS_AS(dst.copy_(Tensor::ones({5})), ShapeError);
  Tensor cols = Tensor::zeros({4, 3}, DType::i64);
  cols.t().copy_(a);  // strided destination
  REQUIRE(cols.at<std::int64_t>({3, 2}) == 11);
  REQUIRE_THROWS_AS(Tensor::empty({2}, DType::f32, Device::meta()).copy_(Tensor::ones({2})), DeviceError);
  REQUIRE_THROWS_WITH(Tensor::ones({2}).copy_(Tensor::empty({2}, DType::f32, Device::meta())),
                      Catch::Contains("meta"));
}

TEST_CASE("to(): dtype conversion, identity without copy, meta") {
  Tensor a = Tensor::from_vector<float>({1.5f, -2.25f, 65504.0f, 1e6f});
  REQUIRE(a.to(DType::f32).is_same(a));
  REQUIRE(a.to(Device::cpu(), DType::f32, false, /*copy=*/true).shares_storage(a) == false);
  Tensor h = a.to(DType::f16);
  REQUIRE(h.dtype() == DType::f16);
  REQUIRE(h.at<float>({0}) == 1.5f);
  REQUIRE(h.at<float>({2}) == 65504.0f);
  REQUIRE(std::isinf(h.at<float>({3})));
  Tensor i = a.to(DType::i8);
  REQUIRE(i.at<int>({1}) == -2);
  REQUIRE(i.at<int>({3}) == 127);
  Tensor m = a.to(Device::meta(), DType::bf16);
  REQUIRE(m.is_meta());
  REQUIRE(m.dtype() == DType::bf16);
  REQUIRE(m.shape() == a.shape());
  REQUIRE_THROWS_AS(m.to(Device::cpu()), DeviceError);
}

TEST_CASE("view_as reinterprets bits (bf16 <-> int16)") {
  Tensor b = Tensor::from_vector<float>({1.0f, -2.0f}).to(DType::bf16);
  Tensor i = b.view_as(DType::i16);
  REQUIRE(i.at<std::int16_t>({0}) == 0x3f80);
  REQUIRE(static_cast<std::uint16_t>(i.at<std::int16_t>({1})) == 0xc000);
  REQUIRE(i.view_as(DType::bf16).at<float>({1}) == -2.0f);
  REQUIRE(i.shares_storage(b));
}

TEST_CASE("fill_ on strided views touches only the view") {
  Tensor a = Tensor::zeros({3, 3}, DType::i32);
  a.select(1, 1).fill_(5);
  REQUIRE(a.to_vector<int>() == std::vector<int>{0, 5, 0, 0, 5, 0, 0, 5, 0});
  Tensor b = Tensor::zeros({4}, DType::boolean);
  b.fill_(2.0);
  REQUIRE(b.at<bool>({3}));
}

TEST_CASE("large copies and conversions are exact across threads") {
  const std::int64_t n = 1 << 20;
  Tensor a = arange(n).view({1024, 1024});
  Tensor t = a.t().contiguous().to(DType::f64);
  REQUIRE(t.at<double>({1023, 1}) == 1024.0 + 1023.0);
  Tensor bf = a.to(DType::bf16).to(DType::f32);
  REQUIRE(bf.at<float>({0, 255}) == 255.0f);
  REQUIRE(bf.at<float>({1, 1}) == 1024.0f);  // 1025 rounds to even (1024) in bf16
}

TEST_CASE("printing follows torch") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  REQUIRE(a.str() == "tensor([[1., 2.],\n        [3., 4.]])");
  REQUIRE(a.to(DType::f16).str() == "tensor([[1., 2.],\n        [3., 4.]], dtype=torch.float16)");
  REQUIRE(Tensor::from_vector<std::int32_t>({1, -2}).str() == "tensor([1, -2], dtype=torch.int32)");
  REQUIRE(Tensor::from_vector<bool>({true, false}).str() == "tensor([True, False])");
  REQUIRE(Tensor::empty({2, 3}, DType::bf16, Device::meta()).str() ==
          "tensor(..., size=[2, 3], dtype=torch.bfloat16, device='meta')");
  REQUIRE(arange(2000).str().find("...") != std::string::npos);
  REQUIRE(Tensor().str() == "tensor(undefined)");
}

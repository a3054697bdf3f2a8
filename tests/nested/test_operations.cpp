#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/nested/concatenate.hpp"
#include "accel/nested/operations.hpp"

using accel::Device;
using accel::DType;
using accel::Shape;
using accel::Tensor;
namespace nested = accel::nested;

namespace {
Tensor arange(std::int64_t n, Shape shape = {}) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return Tensor::from_vector(v, shape.empty() ? Shape{n} : shape);
}

struct Movable {  // a user leaf with its own to(Device)
  int moved_to = -1;
  Movable to(Device d) const { return Movable{d.is_cpu() ? 0 : 1}; }
};
}  // namespace

TEST_CASE("send_to_device copies tensors, honours skip_keys and user .to()", "[nested]") {
  std::map<std::string, std::vector<Tensor>> batch{{"ids", {arange(3)}}, {"labels", {arange(2)}}};
  // Already on cpu: shared, not copied.
  auto same = accel::send_to_device(batch, Device::cpu());
  CHECK(same.at("ids")[0].is_same(batch.at("ids")[0]));
  // A meta target exercises a real move without a GPU.
  auto meta = accel::send_to_device(batch, Device::meta(), false, nested::skip_keys{"labels"});
  CHECK(meta.at("ids")[0].is_meta());
  CHECK(meta.at("ids")[0].shape() == Shape{3});
  CHECK(meta.at("labels")[0].is_same(batch.at("labels")[0]));
  auto braced = accel::send_to_device(batch, Device::meta(), true, {"ids", "labels"});
  CHECK(braced.at("ids")[0].is_same(batch.at("ids")[0]));

  std::tuple<Movable, Tensor, std::string> t{Movable{}, arange(2), "s"};
  auto moved = accel::send_to_device(t, Device::meta());
  CHECK(std::get<0>(moved).moved_to == 1);
  CHECK(std::get<1>(moved).is_meta());
  CHECK(std::get<2>(moved) == "s");

  if (!accel::cuda_is_available()) {
    CHECK_THROWS_AS(accel::send_to_device(batch, Device::cuda(0)), accel::DeviceError);
  }
}

TEST_CASE("find_device and find_batch_size look at the first tensor", "[nested]") {
  std::tuple<std::string, std::optional<Tensor>, std::vector<Tensor>> d{"x", std::nullopt, {arange(6, {3, 2})}};
  CHECK(accel::find_device(d) == Device::cpu());
  CHECK(accel::find_batch_size(d) == 3);
  std::vector<Tensor> on_meta{arange(4).to_meta()};
  CHECK(accel::find_device(on_meta) == Device::meta());
  std::vector<int> none{1, 2};
  CHECK_FALSE(accel::find_device(none).has_value());
  CHECK_THROWS_AS(accel::find_batch_size(none), accel::ValueError);
  CHECK_THROWS_AS(accel::find_batch_size(Tensor::full({}, 1.0)), accel::ValueError);
}

TEST_CASE("listify turns tensors into nested lists", "[nested]") {
  const auto l = accel::listify(arange(6, {2, 3}).to(DType::bf16));
  REQUIRE(l.size() == 2);
  CHECK(l[1].values() == std::vector<double>{3, 4, 5});
  CHECK(accel::listify(Tensor::full({}, 2.5)).scalar() == 2.5);
  std::map<std::string, Tensor> m{{"a", arange(2)}};
  auto lm = accel::listify(m);
  static_assert(std::is_same_v<decltype(lm), std::map<std::string, nested::NestedList>>);
  CHECK(lm.at("a").values() == std::vector<double>{0, 1});
  // Strided views read in logical order.
  CHECK(accel::listify(arange(6, {2, 3}).t())[0].values() == std::vector<double>{0, 3});
}

TEST_CASE("convert_to_fp32 converts only half-precision tensors", "[nested]") {
  std::tuple<Tensor, Tensor, Tensor, int> d{Tensor::ones({2}, DType::f16), Tensor::ones({2}, DType::bf16),
                                            Tensor::ones({2}, DType::i32), 3};
  auto out = accel::convert_to_fp32(d);
  CHECK(std::get<0>(out).dtype() == DType::f32);
  CHECK(std::get<1>(out).dtype() == DType::f32);
  CHECK(std::get<2>(out).is_same(std::get<2>(d)));
  CHECK(std::get<3>(out) == 3);

  auto forward = [](const Tensor& x) { return std::make_pair(x.to(DType::f16), x.to(DType::i64)); };
  auto wrapped = accel::convert_outputs_to_fp32(forward);
  auto r = wrapped(arange(3));
  CHECK(r.first.dtype() == DType::f32);
  CHECK(r.first.at<float>({2}) == 2.f);
  CHECK(r.second.dtype() == DType::i64);
}

TEST_CASE("slice_tensors narrows dim 0 with Python's slicing rules", "[nested]") {
  std::vector<Tensor> d{arange(10, {5, 2}), arange(5)};
  auto s = accel::slice_tensors(d, {1, 3});
  CHECK(s[0].shape() == Shape{2, 2});
  CHECK(s[0].at<float>({0, 0}) == 2.f);
  CHECK(s[0].shares_storage(d[0]));
  CHECK(accel::slice_tensors(d, {-2})[1].to_vector<float>() == std::vector<float>{3, 4});
  CHECK(accel::slice_tensors(d, {3, 100})[1].numel() == 2);
  CHECK(accel::slice_tensors(d, {4, 2})[1].numel() == 0);
  CHECK_THROWS_AS(accel::slice_tensors(Tensor::full({}, 1.0), {0, 1}), accel::ShapeError);
}

TEST_CASE("get_data_structure and initialize_tensors round trip", "[nested]") {
  std::map<std::string, std::tuple<Tensor, std::vector<Tensor>>> d{
      {"a", {arange(6, {2, 3}), {Tensor::ones({4}, DType::bf16)}}}};
  auto info = accel::get_data_structure(d);
  CHECK(std::get<0>(info.at("a")) == nested::TensorInformation{Shape{2, 3}, DType::f32});
  auto init = accel::initialize_tensors(info);
  static_assert(std::is_same_v<decltype(init), decltype(d)>);
  CHECK(std::get<1>(init.at("a"))[0].dtype() == DType::bf16);
  CHECK(std::get<1>(init.at("a"))[0].shape() == Shape{4});
  CHECK(std::get<0>(accel::initialize_tensors(info, Device::meta()).at("a")).is_meta());
}

TEST_CASE("honor_type rebuilds sequences and tuples", "[nested]") {
  std::list<int> like{0};
  CHECK(accel::honor_type(like, std::vector<int>{1, 2}) == std::list<int>{1, 2});
  std::pair<int, double> p{0, 0};
  CHECK(accel::honor_type(p, std::make_tuple(1, 2.5)) == std::pair<int, double>{1, 2.5});
}

TEST_CASE("concatenate joins leaf-wise along a dimension", "[nested]") {
  using D = std::unordered_map<std::string, std::tuple<Tensor, int>>;
  std::vector<D> parts;
  for (int i = 0; i < 3; ++i) {
    D d;
    // Different insertion orders: positions are matched by key, not by iteration order.
    if (i % 2) {
      d["y"] = {Tensor::full({1, 2}, 10.0 + i), i};
      d["x"] = {Tensor::full({2}, double(i)), i};
    } else {
      d["x"] = {Tensor::full({2}, double(i)), i};
      d["y"] = {Tensor::full({1, 2}, 10.0 + i), i};
    }
    parts.push_back(std::move(d));
  }
  D out = accel::concatenate(parts);
  CHECK(std::get<0>(out.at("x")).to_vector<float>() == std::vector<float>{0, 0, 1, 1, 2, 2});
  CHECK(std::get<0>(out.at("y")).shape() == Shape{3, 2});
  CHECK(std::get<0>(out.at("y")).at<float>({2, 1}) == 12.f);
  CHECK(std::get<1>(out.at("y")) == 0);

  std::vector<std::vector<Tensor>> cols{{Tensor::full({2, 1}, 1.0)}, {Tensor::full({2, 2}, 2.0)}};
  auto c1 = accel::concatenate(cols, 1);
  CHECK(c1[0].shape() == Shape{2, 3});
  CHECK(c1[0].at<float>({1, 2}) == 2.f);

  std::vector<std::vector<Tensor>> bad{{Tensor::full({2, 1}, 1.0)}, {Tensor::full({3, 2}, 2.0)}};
  CHECK_THROWS_AS(accel::concatenate(bad, 0), accel::ShapeError);
  CHECK_THROWS_AS(accel::concatenate(std::vector<std::vector<Tensor>>{}), accel::ValueError);
  std::vector<std::vector<Tensor>> ragged{{arange(1)}, {arange(1), arange(1)}};
  CHECK_THROWS_AS(accel::concatenate(ragged), accel::ShapeError);
}

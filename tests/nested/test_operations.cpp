#include <catch2/catch.hpp>

#include "arange.hpp"

#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/nested/operations.hpp"

using accel::Device;
using accel::DType;
using accel::Shape;
using accel::Tensor;
namespace nested = accel::nested;

namespace {
using accel_test::arange;

struct Movable {  // a user leaf with its own to(Device)
  int moved_to = -1;
  Movable to(Device d) const { return Movable{d.is_cpu() ? 0 : 1}; }
};

struct AsyncMovable {  // a user leaf whose to() also takes non_blocking
  bool non_blocking = false;
  AsyncMovable to(Device, bool nb) const { return AsyncMovable{nb}; }
};

struct Half {  // a user leaf with a dtype, as Accelerate's convert_to_fp32 accepts
  DType d = DType::f16;
  DType dtype() const { return d; }
  Half to(DType t) const { return Half{t}; }
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

  // non_blocking reaches user leaves that take it, as Accelerate passes it to .to().
  std::vector<AsyncMovable> am(1);
  CHECK(accel::send_to_device(am, Device::meta(), true)[0].non_blocking);
  CHECK_FALSE(accel::send_to_device(am, Device::meta(), false)[0].non_blocking);

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
  CHECK(accel::ignorant_find_batch_size(d) == 3);
  CHECK_FALSE(accel::ignorant_find_batch_size(none).has_value());
  CHECK_FALSE(accel::ignorant_find_batch_size(Tensor::full({}, 1.0)).has_value());
}

TEST_CASE("find_batch_size agrees with Accelerate where Accelerate answers, and keeps looking where it raises",
          "[nested]") {
  // Where every first element leads to a tensor, both take that tensor's dim 0.
  std::map<std::string, std::vector<Tensor>> agree{{"a", {arange(4, {4, 1}), arange(2)}}, {"b", {arange(6)}}};
  CHECK(accel::find_batch_size(agree) == 4);
  // Accelerate: data[0] is a string -> TypeError; the first key's list is empty -> ValueError.
  std::tuple<std::string, Tensor> led_by_id{"id", arange(5)};
  CHECK(accel::find_batch_size(led_by_id) == 5);
  std::map<std::string, std::vector<Tensor>> first_empty{{"a", {}}, {"b", {arange(3)}}};
  CHECK(accel::find_batch_size(first_empty) == 3);
  // A std::map walks in key order, not insertion order: "a" comes first whatever was inserted first.
  std::map<std::string, Tensor> keyed{{"z", arange(2)}, {"a", arange(7)}};
  CHECK(accel::find_batch_size(keyed) == 7);
  std::vector<std::pair<std::string, Tensor>> ordered{{"z", arange(2)}, {"a", arange(7)}};
  CHECK(accel::find_batch_size(ordered) == 2);
  // Accelerate's TypeError (no tensor) and IndexError (0-d) are ValueErrors.
  CHECK_THROWS_AS(accel::find_batch_size(std::vector<std::string>{"x"}), accel::ValueError);
  CHECK_THROWS_AS(accel::find_batch_size(std::vector<Tensor>{Tensor::full({}, 1.0), arange(3)}), accel::ValueError);
}

TEST_CASE("get_shape gives every tensor's shape as a vector", "[nested]") {
  std::map<std::string, std::tuple<Tensor, int>> d{{"a", {arange(6, {2, 3}), 1}}};
  auto s = accel::get_shape(d);
  static_assert(std::is_same_v<decltype(s), std::map<std::string, std::tuple<std::vector<std::int64_t>, int>>>);
  CHECK(std::get<0>(s.at("a")) == std::vector<std::int64_t>{2, 3});
  CHECK(accel::get_shape(Tensor::full({}, 1.0)).empty());
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

TEST_CASE("listify keeps integers exact and bools as bools, as tolist() does", "[nested]") {
  // 2^53 + 1 is not a double: a conversion through double would lose it.
  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  const auto l = accel::listify(Tensor::from_vector(std::vector<std::int64_t>{big, -3}));
  REQUIRE(l.size() == 2);
  CHECK(l[0].is_integer());
  CHECK(l[0].integer() == big);
  CHECK(l.integers() == std::vector<std::int64_t>{big, -3});
  CHECK(l[1] == nested::NestedList(-3));
  CHECK_FALSE(l[1] == nested::NestedList(-3.0));  // kinds differ, as int and float do
  const auto b = accel::listify(Tensor::from_vector(std::vector<bool>{true, false}));
  CHECK(b[0].is_bool());
  CHECK(b[0] == nested::NestedList(true));
  CHECK(b.values() == std::vector<double>{1, 0});
  const auto u = accel::listify(Tensor::from_vector(std::vector<std::uint8_t>{255}));
  CHECK(u[0].integer() == 255);
  const auto f = accel::listify(arange(2));
  CHECK_FALSE(f[0].is_integer());
  CHECK_THROWS_AS(f[0].integer(), accel::ValueError);
  CHECK_THROWS_AS(f.scalar(), accel::ValueError);
  CHECK_THROWS_AS(accel::listify(arange(2).to_meta()), accel::DeviceError);
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

  // User leaves with dtype() and to(DType) are converted too, as Accelerate converts anything
  // with a dtype attribute.
  std::vector<Half> h{Half{DType::f16}, Half{DType::bf16}, Half{DType::i8}};
  auto hc = accel::convert_to_fp32(h);
  CHECK(hc[0].d == DType::f32);
  CHECK(hc[1].d == DType::f32);
  CHECK(hc[2].d == DType::i8);
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
  // A step, as Python's t[start:stop:step]: still a view.
  auto stepped = accel::slice_tensors(d, {1, std::nullopt, 2});
  CHECK(stepped[1].to_vector<float>() == std::vector<float>{1, 3});
  CHECK(stepped[0].shape() == Shape{2, 2});
  CHECK(stepped[0].at<float>({1, 1}) == 7.f);
  CHECK(stepped[0].shares_storage(d[0]));
  CHECK(accel::slice_tensors(d, {0, 5, 3})[1].to_vector<float>() == std::vector<float>{0, 3});
  CHECK(accel::slice_tensors(d, {-1, std::nullopt, 10})[1].to_vector<float>() == std::vector<float>{4});
  CHECK(accel::slice_tensors(d, {4, 1, 2})[1].numel() == 0);
  CHECK(accel::slice_tensors(std::vector<Tensor>{arange(5).to_meta()}, {0, 5, 2})[0].shape() == Shape{3});
  CHECK_THROWS_AS(accel::slice_tensors(d, {0, 5, 0}), accel::ValueError);
  CHECK_THROWS_AS(accel::slice_tensors(d, {0, 5, -1}), accel::ValueError);
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

#include <catch2/catch.hpp>

#include "arange.hpp"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nested/concatenate.hpp"

using accel::DType;
using accel::Shape;
using accel::Tensor;

namespace {
using accel_test::arange;

struct IdsBatch {  // a reflectable aggregate, the usual C++ batch
  Tensor ids;
  std::optional<Tensor> labels;
};

struct Tagged {
  std::string id;
  Tensor x;
};

/// The message of the ValueError `f` throws.
template <class F>
std::string value_error(F&& f) {
  try {
    f();
  } catch (const accel::ValueError& e) {
    return e.what();
  }
  FAIL("expected accel::ValueError");
  return {};
}
}  // namespace

TEST_CASE("concatenate joins leaf-wise along a dimension", "[nested]") {
  using D = std::unordered_map<std::string, std::tuple<Tensor, std::vector<Tensor>>>;
  std::vector<D> parts;
  for (int i = 0; i < 3; ++i) {
    D d;
    // Different insertion orders: positions are matched by key, not by iteration order.
    if (i % 2) {
      d["y"] = {Tensor::full({1, 2}, 10.0 + i), {Tensor::full({1}, 20.0 + i)}};
      d["x"] = {Tensor::full({2}, double(i)), {Tensor::full({1}, double(i))}};
    } else {
      d["x"] = {Tensor::full({2}, double(i)), {Tensor::full({1}, double(i))}};
      d["y"] = {Tensor::full({1, 2}, 10.0 + i), {Tensor::full({1}, 20.0 + i)}};
    }
    parts.push_back(std::move(d));
  }
  D out = accel::concatenate(parts);
  CHECK(std::get<0>(out.at("x")).to_vector<float>() == std::vector<float>{0, 0, 1, 1, 2, 2});
  CHECK(std::get<0>(out.at("y")).shape() == Shape{3, 2});
  CHECK(std::get<0>(out.at("y")).at<float>({2, 1}) == 12.f);
  CHECK(std::get<1>(out.at("y"))[0].to_vector<float>() == std::vector<float>{20, 21, 22});

  std::vector<std::vector<Tensor>> cols{{Tensor::full({2, 1}, 1.0)}, {Tensor::full({2, 2}, 2.0)}};
  auto c1 = accel::concatenate(cols, 1);
  CHECK(c1[0].shape() == Shape{2, 3});
  CHECK(c1[0].at<float>({1, 2}) == 2.f);
  CHECK(accel::concatenate(cols, -1)[0].shape() == Shape{2, 3});

  std::vector<std::vector<Tensor>> bad{{Tensor::full({2, 1}, 1.0)}, {Tensor::full({3, 2}, 2.0)}};
  CHECK_THROWS_AS(accel::concatenate(bad, 0), accel::ShapeError);
  CHECK_THROWS_AS(accel::concatenate(std::vector<std::vector<Tensor>>{}), accel::ValueError);
}

TEST_CASE("concatenate refuses a non-tensor leaf across batches, naming its key path and type", "[nested]") {
  // Accelerate: TypeError("Can only concatenate tensors but got <class 'int'>"). Keeping the first
  // batch's value would drop the others'.
  using D = std::map<std::string, std::tuple<Tensor, int>>;
  std::vector<D> parts{{{"a", {arange(2), 0}}, {"x", {arange(2), 1}}}, {{"a", {arange(2), 2}}, {"x", {arange(2), 3}}}};
  const std::size_t held = accel::memory_stats(accel::Device::cpu()).allocated_bytes;
  const std::string msg = value_error([&] { (void)accel::concatenate(parts); });
  CHECK_THAT(msg, Catch::Contains("can only concatenate tensors but got 'int'"));
  CHECK_THAT(msg, Catch::Contains("at ['a'][1]"));
  CHECK_THAT(msg, Catch::Contains("2 batches"));
  // Refused before anything was joined.
  CHECK(accel::memory_stats(accel::Device::cpu()).allocated_bytes == held);

  // Strings, fields of aggregates, variant alternatives, sequence elements.
  std::vector<Tagged> tagged{{"first", arange(1)}, {"second", arange(1)}};
  const std::string t = value_error([&] { (void)accel::concatenate(tagged); });
  CHECK_THAT(t, Catch::Contains("basic_string"));
  CHECK_THAT(t, Catch::Contains("at .<field 0>"));
  using V = std::vector<std::variant<Tensor, double>>;
  std::vector<V> variants{{arange(1), 0.5}, {arange(1), 1.5}};
  CHECK_THAT(value_error([&] { (void)accel::concatenate(variants); }), Catch::Contains("'double' at [1]"));
  CHECK_THAT(value_error([&] { (void)accel::concatenate(std::vector<int>{1, 2}); }), Catch::Contains("at the top level"));
  std::vector<std::map<int, std::vector<bool>>> keyed{{{7, {true}}}, {{7, {false}}}};
  CHECK_THAT(value_error([&] { (void)accel::concatenate(keyed); }), Catch::Contains("at [7]"));
  // A variant that holds a tensor is joined.
  std::vector<std::variant<Tensor, int>> vt{arange(1), arange(2)};
  CHECK(std::get<Tensor>(accel::concatenate(vt)).numel() == 3);
}

TEST_CASE("concatenate of a single batch keeps its non-tensor leaves", "[nested]") {
  using D = std::map<std::string, std::tuple<Tensor, int, std::string>>;
  std::vector<D> one{{{"a", {arange(3), 7, "s"}}}};
  D out = accel::concatenate(one);
  CHECK(std::get<1>(out.at("a")) == 7);
  CHECK(std::get<2>(out.at("a")) == "s");
  // Tensors are copied, as torch.cat of one tensor copies.
  CHECK(std::get<0>(out.at("a")).to_vector<float>() == std::vector<float>{0, 1, 2});
  CHECK_FALSE(std::get<0>(out.at("a")).shares_storage(std::get<0>(one[0].at("a"))));
}

TEST_CASE("concatenate departures from Accelerate", "[nested]") {
  SECTION("later batches must match the first's structure instead of losing their extra entries") {
    using M = std::map<std::string, Tensor>;
    CHECK_THROWS_AS(accel::concatenate(std::vector<M>{{{"a", arange(1)}}, {{"a", arange(1)}, {"b", arange(1)}}}),
                    accel::ShapeError);
    CHECK_THROWS_AS(accel::concatenate(std::vector<M>{{{"a", arange(1)}}, {{"b", arange(1)}}}), accel::KeyError);
    CHECK_THROWS_AS(accel::concatenate(std::vector<std::vector<Tensor>>{{arange(1)}, {arange(1), arange(1)}}),
                    accel::ShapeError);
  }
  SECTION("tensors of different dtypes are not promoted") {
    std::vector<std::vector<Tensor>> mixed{{arange(2)}, {arange(2).to(DType::f16)}};
    CHECK_THROWS_AS(accel::concatenate(mixed), accel::DTypeError);
  }
  SECTION("an empty optional in every batch stays empty; a mix is a ShapeError") {
    std::vector<IdsBatch> parts{{arange(2), std::nullopt}, {arange(3), std::nullopt}};
    IdsBatch out = accel::concatenate(parts);
    CHECK(out.ids.numel() == 5);
    CHECK_FALSE(out.labels.has_value());
    parts[1].labels = arange(1);
    CHECK_THROWS_AS(accel::concatenate(parts), accel::ShapeError);
  }
  SECTION("aggregates are walked, their tensors joined") {
    std::vector<IdsBatch> parts{{arange(2), arange(2)}, {arange(1), arange(1)}};
    IdsBatch out = accel::concatenate(parts);
    CHECK(out.ids.to_vector<float>() == std::vector<float>{0, 1, 0});
    CHECK(out.labels->numel() == 3);
  }
}

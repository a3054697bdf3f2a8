// The checkpoint header and index readers take time linear in their input and keep the bounds
// of io/checkpoint_limits.hpp; core/json_read.hpp, which they share, keeps JSON's meaning.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "../timing.hpp"
#include "many_tensors.hpp"

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>

#include "accel/core/json_read.hpp"
#include "accel/io/checkpoint_limits.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sharded_index.hpp"

using namespace accel;
using namespace accel::io;
using Catch::Contains;

namespace {

// Before the readers were linear, 100k entries took minutes; a linear parse takes a fraction of
// a second in an optimised build.
const double parse_seconds_bound = accel_test::seconds_bound(2.0);
constexpr std::size_t many = 100'000;

std::string with_header(const std::string& header, const std::string& data) {
  std::string out;
  store_le<std::uint64_t>(out, header.size());
  return out + header + data;
}

}  // namespace

TEST_CASE("100k-entry headers and indexes parse in linear time", "[io][parse_limits]") {
  // Back to back, and all empty at offset 0 (the case that once took 40 s for 40k tensors).
  for (const std::uint64_t extent : {1, 0}) {
    DYNAMIC_SECTION("safetensors header of [" << extent << "] tensors") {
      const std::string file = accel_test::many_tensor_safetensors(many, extent);
      SafetensorsHeader h;
      const double s = accel_test::fastest_within(parse_seconds_bound, [&] {
        return accel_test::seconds_of([&] { h = parse_safetensors_header(as_bytes(file), "many.safetensors"); });
      });
      CHECK(s < parse_seconds_bound);
      REQUIRE(h.tensors.size() == many);
      CHECK(h.tensors.back().end == many * extent * 4);
      CHECK(h.find(accel_test::many_tensor_name(12345))->nbytes() == extent * 4);
    }
  }
  SECTION("sharded index") {
    const std::string text = accel_test::many_tensor_sharded_index(many);
    ShardedIndex ix;
    const double s = accel_test::fastest_within(parse_seconds_bound, [&] {
      return accel_test::seconds_of([&] { ix = parse_sharded_index(text, "model.safetensors.index.json"); });
    });
    CHECK(s < parse_seconds_bound);
    REQUIRE(ix.weight_map.size() == many);
    CHECK(ix.weight_map[777].first == accel_test::many_tensor_name(777));  // file order kept
    CHECK(ix.shard_files.size() == 100);
    CHECK(ix.shard_files.front() == "model-1-of-00100.safetensors");
  }
  SECTION("offload index, and a loader looking every entry up") {
    const std::string text = accel_test::many_tensor_offload_index(many);
    OffloadIndex ix;
    const double s = accel_test::fastest_within(parse_seconds_bound, [&] {
      return accel_test::seconds_of([&] { ix = parse_offload_index(text, "index.json"); });
    });
    CHECK(s < parse_seconds_bound);
    REQUIRE(ix.size() == many);
    CHECK(ix.begin().key() == accel_test::many_tensor_name(0));
    const OffloadedWeightsLoader loader(std::nullopt, std::nullopt, std::move(ix));
    bool all = true;
    const double lookups = accel_test::fastest_within(parse_seconds_bound, [&] {
      return accel_test::seconds_of([&] {
        for (std::size_t i = 0; i < many; ++i) all = all && loader.contains(accel_test::many_tensor_name(i));
      });
    });
    CHECK(all);
    CHECK(lookups < parse_seconds_bound);
  }
}

TEST_CASE("header and index readers reject nesting past their depth", "[io][parse_limits]") {
  const std::string deep = std::string(20, '[') + std::string(20, ']');
  CHECK_THROWS_WITH(parse_safetensors_header(as_bytes(with_header(R"({"__metadata__":{"k":{"x":[1]}}})", "")), "deep.safetensors"),
                    Contains("deep.safetensors") && Contains("nested deeper than 3"));
  CHECK_THROWS_WITH(parse_sharded_index(R"({"metadata": {"x": )" + deep + "}, \"weight_map\": {}}", "deep.index.json"),
                    Contains("deep.index.json") && Contains("nested deeper than 16"));
  CHECK_THROWS_WITH(parse_offload_index(R"({"w": {"dtype": "float32", "shape": [1], "x": )" + deep + "}}", "deep/index.json"),
                    Contains("deep/index.json") && Contains("nested deeper than 8"));
  // A million brackets: rejected at the bound, long before any of them is built.
  CHECK_THROWS_AS(parse_offload_index(std::string(1'000'000, '['), "bomb.json"), FormatError);
  // At the bound is fine.
  const std::string sixteen = "{\"metadata\": {\"x\": " + std::string(14, '[') + std::string(14, ']') + "}, \"weight_map\": {}}";
  CHECK(parse_sharded_index(sixteen, "i.json").weight_map.empty());
}

TEST_CASE("header and index readers reject names past max_name_bytes", "[io][parse_limits]") {
  const std::string longest(checkpoint_limits::max_name_bytes, 'n');
  const std::string too_long = longest + "n";
  const auto safetensors = [](const std::string& name) {
    return with_header("{\"" + name + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  };
  CHECK(parse_safetensors_header(as_bytes(safetensors(longest)), "ok.safetensors").tensors.size() == 1);
  CHECK_THROWS_WITH(parse_safetensors_header(as_bytes(safetensors(too_long)), "long.safetensors"),
                    Contains("long.safetensors") && Contains("4097 bytes") && Contains("4096"));
  CHECK_THROWS_WITH(parse_sharded_index("{\"weight_map\": {\"" + too_long + "\": \"a.safetensors\"}}", "long.index.json"),
                    Contains("long.index.json") && Contains("4096"));
  CHECK_THROWS_WITH(parse_offload_index("{\"" + too_long + R"(": {"dtype": "float32", "shape": [1]}})", "long/index.json"),
                    Contains("long/index.json") && Contains("4096"));
}

TEST_CASE("shapes whose byte counts overflow are rejected naming the file", "[io][parse_limits]") {
  // 2^62 float32 elements: the element count fits int64, the byte count does not.
  CHECK_THROWS_WITH(
      parse_safetensors_header(
          as_bytes(with_header(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", "")),
          "big.safetensors"),
      Contains("big.safetensors") && Contains("tensor 'w'") && Contains("overflows"));
  // An empty tensor whose other extents multiply past int64: no bytes, but no strides either.
  CHECK_THROWS_WITH(
      parse_safetensors_header(
          as_bytes(with_header(R"({"w":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", "")),
          "strides.safetensors"),
      Contains("strides.safetensors") && Contains("overflows"));
  CHECK_THROWS_WITH(parse_offload_index(R"({"w": {"dtype": "float64", "shape": [4294967296, 4294967296]}})", "big/index.json"),
                    Contains("big/index.json") && Contains("tensor 'w'") && Contains("overflows"));

  accel_test::TempDir dir;
  std::ofstream(dir.file("w.dat"), std::ios::binary) << std::string(8, '\0');
  nlohmann::ordered_json entry = {{"dtype", "int16"}, {"shape", {std::uint64_t{1} << 62, 2}}};
  CHECK_THROWS_WITH(load_offloaded_weight(dir.file("w.dat"), entry), Contains("w.dat") && Contains("overflows"));
}

TEST_CASE("parse_json_bounded keeps JSON's meaning under its bounds", "[io][parse_limits][json]") {
  const JsonLimits roomy{};
  SECTION("ordered objects keep file order, a repeated key its first place and last value") {
    std::string text = "{";
    for (int i = 0; i < 20; ++i) text += "\"k" + std::to_string(19 - i) + "\": " + std::to_string(i) + ", ";
    text += "\"k3\": \"last\", \"k17\": [1, {\"a\": null}]}";
    const auto j = parse_json_bounded<nlohmann::ordered_json>(text, "t.json", roomy);
    REQUIRE(j.size() == 20);
    CHECK(j.begin().key() == "k19");
    CHECK(std::prev(j.end()).key() == "k0");
    CHECK(j["k3"] == "last");
    CHECK(j["k17"][1]["a"].is_null());
    CHECK(j.dump() == nlohmann::ordered_json::parse(text).dump());
  }
  SECTION("std::map objects and scalars parse as nlohmann's parser has them") {
    const std::string text = R"({"b": [true, false, null, -3, 18446744073709551615, 2.5, "s\u00e9"], "a": {}, "b": 1})";
    CHECK(parse_json_bounded<nlohmann::json>(text, "t.json", roomy) == nlohmann::json::parse(text));
    CHECK(parse_json_bounded<nlohmann::json>("7", "t.json", roomy) == 7);
  }
  SECTION("every bound and every malformation is a FormatError naming the source") {
    const JsonLimits tight{2, 3, 2};
    CHECK(parse_json_bounded("[[1, 2]]", "t.json", tight).size() == 1);
    CHECK_THROWS_WITH(parse_json_bounded("[[[1]]]", "t.json", tight), Contains("t.json") && Contains("nested deeper than 2"));
    CHECK_THROWS_WITH(parse_json_bounded(R"({"abcd": 1})", "t.json", tight), Contains("t.json") && Contains("4 bytes"));
    CHECK_THROWS_WITH(parse_json_bounded("[1, 2, 3]", "t.json", tight), Contains("t.json") && Contains("more than 2"));
    CHECK_THROWS_WITH(parse_json_bounded(R"({"a": 1, "b": 2, "c": 3})", "t.json", tight), Contains("more than 2"));
    CHECK_THROWS_WITH(parse_json_bounded(R"({"a": 1, "a": 2})", "t.json", roomy, JsonDuplicates::reject),
                      Contains("t.json") && Contains("duplicate key 'a'"));
    CHECK_THROWS_WITH(parse_json_bounded<nlohmann::ordered_json>(R"({"a": 1, "a": 2})", "t.json", roomy, JsonDuplicates::reject),
                      Contains("duplicate key 'a'"));
    for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "[1] 2", "\"\xff\""}) {
      CHECK_THROWS_WITH(parse_json_bounded(bad, "t.json", roomy), Contains("t.json") && Contains("invalid JSON"));
    }
  }
}

#include <catch2/catch.hpp>

#include "../file_bytes.hpp"
#include "../temp_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/io/sharded_index.hpp"
#include "accel/io/sharding.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;

namespace {

using accel_test::TempDir;

using accel_test::read_raw;

}  // namespace

// The conformance cases of shard_checkpoint and convert_file_size_to_int run through
// accel-conformance (tests/plan); these cover what only the io layer does.

TEST_CASE("a first tensor over the limit leaves an empty first shard, as in Accelerate", "[io][sharding]") {
  const ShardPlan p = plan_shards(std::vector<ShardItem>{{"big", DType::u8, 100, nullptr}, {"small", DType::u8, 10, nullptr}}, std::int64_t{50}, "model.safetensors");
  REQUIRE(p.shards.size() == 3);
  CHECK(p.shards[0].empty());
  CHECK(p.filenames[1] == "model-00002-of-00003.safetensors");
  CHECK(p.total_size == ByteSize(110));
}

TEST_CASE("save_sharded writes transformers-style shards and an index that reads back", "[io][sharding]") {
  TempDir dir;
  StateDict sd;
  sd.insert_or_assign("embed.weight", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2}));
  sd.insert_or_assign("layer.0.weight", Tensor::from_vector<float>({7, 8, 9, 10}, Shape{2, 2}));
  sd.insert_or_assign("layer.0.bias", Tensor::from_vector<float>({11, 12}));
  sd.insert_or_assign("head.weight", sd.at("embed.weight"));  // tied: same storage
  sd.insert_or_assign("mask", Tensor::from_vector<bool>({true, false, true, true, false, true, true, true}));

  for (bool safe : {true, false}) {
    INFO("safe_serialization " << safe);
    const std::string folder = dir.file(safe ? "st" : "bin");
    // A stale shard from an earlier, larger save must disappear.
    fs::create_directories(folder);
    const std::string stale = safe ? "model-00009-of-00009.safetensors" : "pytorch_model-00009-of-00009.bin";
    std::ofstream(folder + "/" + stale) << "old";
    std::ofstream(folder + "/notes.txt") << "keep";

    const ShardPlan plan = save_sharded(sd, folder, std::int64_t{24}, safe);
    // 24 | 16+8 (head joins embed's shard) | 8 bits = 1 byte
    REQUIRE(plan.shards.size() == 3);
    CHECK(plan.shards[0] == std::vector<std::string>{"embed.weight", "head.weight"});
    CHECK(plan.total_size == ByteSize(49));
    CHECK(plan.total_size_is_float);
    CHECK_FALSE(fs::exists(folder + "/" + stale));
    CHECK(fs::exists(folder + "/notes.txt"));

    const std::string index_path = folder + "/" + std::string(safe ? SAFE_WEIGHTS_INDEX_NAME : WEIGHTS_INDEX_NAME);
    const std::string prefix = safe ? "model" : "pytorch_model";
    const std::string ext = safe ? ".safetensors" : ".bin";
    const std::string expected_index = "{\n  \"metadata\": {\n    \"total_size\": 49.0\n  },\n  \"weight_map\": {\n"
                                       "    \"embed.weight\": \"" + prefix + "-00001-of-00003" + ext + "\",\n"
                                       "    \"head.weight\": \"" + prefix + "-00001-of-00003" + ext + "\",\n"
                                       "    \"layer.0.bias\": \"" + prefix + "-00002-of-00003" + ext + "\",\n"
                                       "    \"layer.0.weight\": \"" + prefix + "-00002-of-00003" + ext + "\",\n"
                                       "    \"mask\": \"" + prefix + "-00003-of-00003" + ext + "\"\n  }\n}\n";
    CHECK(read_raw(index_path) == expected_index);

    const auto ck = ShardedCheckpoint::open(index_path);
    CHECK(ck.keys().size() == 5);
    CHECK(ck.metadata()["total_size"].get<double>() == 49);
    for (const auto& [name, t] : sd) CHECK(ck.tensor(name).to_vector<float>() == t.to_vector<float>());
    CHECK(ck.tensor("layer.0.bias", Device::cpu(), DType::f16).dtype() == DType::f16);
    CHECK_THROWS_AS(ck.tensor("nope"), KeyError);
  }
}

TEST_CASE("save_sharded writes a single file without an index when it fits", "[io][sharding]") {
  TempDir dir;
  StateDict sd{{"w", Tensor::ones(Shape{4})}};
  const auto plan = save_sharded(sd, dir.path.string());
  CHECK_FALSE(plan.is_sharded());
  CHECK(fs::exists(dir.file("model.safetensors")));
  CHECK_FALSE(fs::exists(dir.file(std::string(SAFE_WEIGHTS_INDEX_NAME))));
  CHECK(SafetensorsFile::open(dir.file("model.safetensors")).metadata().at("format") == "pt");
}

TEST_CASE("sharded index validation", "[io][sharding]") {
  SECTION("parses transformers' index") {
    const auto ix = parse_sharded_index(R"({"metadata": {"total_size": 28}, "weight_map": {"b": "s2.safetensors", "a": "s1.safetensors", "c": "s1.safetensors"}})", "i.json");
    CHECK(ix.weight_map.front().first == "b");
    CHECK(ix.shard_files == std::vector<std::string>{"s2.safetensors", "s1.safetensors"});
    CHECK(*ix.shard_of("c") == "s1.safetensors");
    CHECK(ix.metadata["total_size"] == 28);
  }
  SECTION("rejects malformed indexes") {
    CHECK_THROWS_WITH(parse_sharded_index("[]", "i.json"), Catch::Contains("i.json"));
    CHECK_THROWS_WITH(parse_sharded_index("{\"metadata\": {}}", "i.json"), Catch::Contains("weight_map"));
    CHECK_THROWS_WITH(parse_sharded_index(R"({"weight_map": {"a": 3}})", "i.json"), Catch::Contains("tensor 'a'"));
    CHECK_THROWS_WITH(parse_sharded_index(R"({"weight_map": {"a": "../x.safetensors"}})", "i.json"), Catch::Contains("inside"));
    CHECK_THROWS_WITH(parse_sharded_index(R"({"weight_map": {"a": "/etc/passwd"}})", "i.json"), Catch::Contains("inside"));
    CHECK_THROWS_WITH(parse_sharded_index(R"({"metadata": {"total_size": "x"}, "weight_map": {}})", "i.json"), Catch::Contains("total_size"));
    CHECK_THROWS_AS(parse_sharded_index("{\"weight_map\": {", "i.json"), FormatError);
    CHECK_THROWS_AS(parse_sharded_index(std::string(100, '[') + std::string(100, ']'), "i.json"), FormatError);
  }
  SECTION("a missing shard names the index, the shard and a tensor it should hold") {
    TempDir dir;
    std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map": {"w": "model-00001-of-00002.safetensors"}})";
    CHECK_THROWS_WITH(read_sharded_index(dir.file("model.safetensors.index.json")),
                      Catch::Contains("model.safetensors.index.json") && Catch::Contains("model-00001-of-00002.safetensors") &&
                          Catch::Contains("tensor 'w'") && !Catch::Contains("other"));
    CHECK_THROWS_AS(read_sharded_index(dir.file("model.safetensors.index.json")), FormatError);

    // The first tensor the index places in the missing shard, and how many more it holds.
    save_file(NamedTensors{{"a", Tensor::ones(Shape{1})}}, dir.file("s1.safetensors"));
    std::ofstream(dir.file("i.index.json"))
        << R"({"weight_map": {"a": "s1.safetensors", "b.bias": "s2.safetensors", "c": "s2.safetensors", "d": "s2.safetensors"}})";
    CHECK_THROWS_WITH(read_sharded_index(dir.file("i.index.json")),
                      Catch::Contains("shard 's2.safetensors' of tensor 'b.bias' and 2 other tensors does not exist"));
  }
  SECTION("a shard that lacks a promised tensor") {
    TempDir dir;
    save_file(NamedTensors{{"x", Tensor::ones(Shape{1})}}, dir.file("s.safetensors"));
    std::ofstream(dir.file("i.index.json")) << R"({"weight_map": {"w": "s.safetensors"}})";
    const auto ck = ShardedCheckpoint::open(dir.file("i.index.json"));
    CHECK_THROWS_WITH(ck.tensor("w"), Catch::Contains("does not contain it"));
  }
}

namespace {

StateDict numbered_state(int n, float base) {
  StateDict sd;
  for (int i = 0; i < n; ++i) {
    sd.insert_or_assign("layer." + std::to_string(i) + ".weight", Tensor::full(Shape{4}, base + static_cast<float>(i)));
  }
  return sd;
}

void require_checkpoint(const std::string& index_path, const StateDict& sd) {
  const auto ck = ShardedCheckpoint::open(index_path);
  REQUIRE(ck.keys().size() == sd.size());
  for (const auto& [name, t] : sd) {
    INFO(name);
    CHECK(ck.tensor(name).to_vector<float>() == t.to_vector<float>());
  }
}

std::vector<std::string> shard_files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// A temporary folder and the names a save of one format gives its files there.
struct SaveFolder {
  TempDir dir;
  std::string folder, index, ext, stem;
  explicit SaveFolder(bool safe)
      : folder(dir.path.string()),
        index(dir.file(std::string(safe ? SAFE_WEIGHTS_INDEX_NAME : WEIGHTS_INDEX_NAME))),
        ext(safe ? ".safetensors" : ".bin"),
        stem(safe ? "model" : "pytorch_model") {}
};

}  // namespace

TEST_CASE("save_sharded removes the shards of an earlier save only after the new index is written", "[io][sharding]") {
  for (bool safe : {true, false}) {
    INFO("safe_serialization " << safe);
    const SaveFolder f(safe);
    const auto& [dir, folder, index, ext, stem] = f;

    const StateDict first = numbered_state(4, 1.0f);  // 16 bytes per tensor: 4 shards of 16
    REQUIRE(save_sharded(first, folder, std::int64_t{16}, safe).shards.size() == 4);
    const StateDict second = numbered_state(4, 100.0f);  // 2 shards of 32
    REQUIRE(save_sharded(second, folder, std::int64_t{32}, safe).shards.size() == 2);
    CHECK(shard_files_in(dir.path) == std::vector<std::string>{stem + "-00001-of-00002" + ext, stem + "-00002-of-00002" + ext,
                                                              std::string(safe ? SAFE_WEIGHTS_INDEX_NAME : WEIGHTS_INDEX_NAME)});
    require_checkpoint(index, second);

    // One file now: the earlier shards and the index that named them go.
    const StateDict third = numbered_state(4, 7.0f);
    CHECK_FALSE(save_sharded(third, folder, std::int64_t{1000}, safe).is_sharded());
    CHECK(shard_files_in(dir.path) == std::vector<std::string>{stem + ext});
  }
}

TEST_CASE("a save_sharded that fails leaves the earlier index and its shards loadable", "[io][sharding]") {
  for (bool safe : {true, false}) {
    INFO("safe_serialization " << safe);
    const SaveFolder f(safe);
    const auto& [dir, folder, index, ext, stem] = f;

    const StateDict first = numbered_state(4, 1.0f);
    REQUIRE(save_sharded(first, folder, std::int64_t{16}, safe).shards.size() == 4);
    const std::string index_before = read_raw(index);
    const auto files_before = shard_files_in(dir.path);

    // A folder where the second save's last shard must go makes its rename fail.
    fs::create_directories(dir.path / (stem + "-00002-of-00002" + ext) / "in_the_way");
    CHECK_THROWS_AS(save_sharded(numbered_state(4, 100.0f), folder, std::int64_t{32}, safe), IOError);
    CHECK(read_raw(index) == index_before);
    require_checkpoint(index, first);
    // Nothing half-written: no temporary is left, and the old shards are all there.
    for (const auto& f : shard_files_in(dir.path)) CHECK(f.front() != '.');
    for (const auto& f : files_before) CHECK(fs::is_regular_file(dir.path / f));
  }
}

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/io/sharded_index.hpp"
#include "accel/io/sharding.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("accel_io_sh_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

nlohmann::json load_json(const std::string& path) { return nlohmann::json::parse(read_raw(path)); }

// The state-dict entries of a conformance model spec, in torch's state_dict order.
void spec_items(const nlohmann::json& module, const std::string& prefix, std::vector<ShardItem>& out) {
  auto add = [&](const nlohmann::json& p) {
    double n = 1;
    for (auto e : p["shape"]) n *= e.get<double>();
    const DType d = dtype_from_string(p["dtype"].get<std::string>());
    out.push_back({prefix + p["name"].get<std::string>(), n * accelerate_dtype_byte_size(d), nullptr, d == DType::boolean});
  };
  for (const auto& p : module.value("params", nlohmann::json::array())) add(p);
  for (const auto& b : module.value("buffers", nlohmann::json::array())) {
    if (b.value("persistent", true)) add(b);
  }
  for (const auto& c : module.value("children", nlohmann::json::array())) {
    spec_items(c, prefix + c["name"].get<std::string>() + ".", out);
  }
}

}  // namespace

TEST_CASE("convert_file_size_to_int matches Accelerate on the conformance inputs", "[io][sharding]") {
  const auto expected = load_json(std::string(ACCEL_SHARED_DIR) + "/conformance/accelerate/expected/toy_model_for_test.json");
  int checked = 0;
  for (const auto& c : expected["results"]) {
    if (c["op"] != "convert_file_size_to_int") continue;
    for (const auto& r : c["result"]) {
      const auto& in = r["input"];
      INFO(in.dump());
      if (in.is_number_float()) continue;  // Accelerate crashes (AttributeError) on a Python float
      if (r.contains("value")) {
        const auto v = in.is_string() ? convert_file_size_to_int(in.get<std::string>())
                                      : convert_file_size_to_int(in.get<std::uint64_t>());
        CHECK(v == r["value"].get<std::uint64_t>());
      } else {
        REQUIRE(in.is_string());
        CHECK_THROWS_WITH(convert_file_size_to_int(in.get<std::string>()), r["error"]["message"].get<std::string>());
      }
      ++checked;
    }
  }
  CHECK(checked >= 25);
}

TEST_CASE("plan_shards matches Accelerate's shard_checkpoint on every conformance case", "[io][sharding]") {
  const std::string root = std::string(ACCEL_SHARED_DIR) + "/conformance/accelerate/";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(root + "queries")) {
    const auto queries = load_json(entry.path().string());
    const auto expected = load_json(root + "expected/" + entry.path().filename().string());
    const auto spec = load_json((entry.path().parent_path() / queries["spec"].get<std::string>()).string());
    for (const auto& q : queries["cases"]) {
      if (q["op"] != "shard_checkpoint") continue;
      INFO(entry.path().filename().string() << " " << q["id"].get<std::string>());
      const auto& args = q["args"];
      std::vector<ShardItem> items;
      std::map<std::string, const void*> storage_of;
      if (args.contains("tensors")) {
        for (const auto& t : args["tensors"]) {
          const std::string name = t["name"];
          if (t.contains("same_storage_as")) {
            const auto& src = *std::find_if(items.begin(), items.end(), [&](auto& i) { return i.name == t["same_storage_as"]; });
            items.push_back({name, src.size, storage_of.at(src.name), false});
            continue;
          }
          double n = 1;
          for (auto e : t["shape"]) n *= e.get<double>();
          const DType d = dtype_from_string(t["dtype"].get<std::string>());
          storage_of[name] = reinterpret_cast<const void*>(std::uintptr_t(storage_of.size() + 1));
          items.push_back({name, n * accelerate_dtype_byte_size(d), storage_of[name], d == DType::boolean});
        }
      } else {
        spec_items(spec["root"], "", items);
        std::uintptr_t group = 0;
        for (const auto& g : spec["tied"]) {
          ++group;
          for (const auto& n : g) {
            for (auto& it : items) {
              if (it.name == n.get<std::string>()) it.storage = reinterpret_cast<const void*>(group);
            }
          }
        }
      }
      const auto& max = args.value("max_shard_size", nlohmann::json("10GB"));
      const std::uint64_t limit = max.is_string() ? convert_file_size_to_int(max.get<std::string>()) : max.get<std::uint64_t>();
      const ShardPlan plan = plan_shards(items, limit, args.value("weights_name", std::string("pytorch_model.bin")));

      const auto exp = std::find_if(expected["results"].begin(), expected["results"].end(), [&](auto& r) { return r["id"] == q["id"]; });
      REQUIRE(exp != expected["results"].end());
      const auto& result = (*exp)["result"];
      nlohmann::json shards = nlohmann::json::object();
      for (std::size_t i = 0; i < plan.shards.size(); ++i) shards[plan.filenames[i]] = plan.shards[i];
      CHECK(shards == result["shards"]);
      if (result["index"].is_null()) {
        CHECK_FALSE(plan.is_sharded());
      } else {
        REQUIRE(plan.is_sharded());
        CHECK(plan.total_size == result["index"]["metadata"]["total_size"].get<double>());
        nlohmann::json wm = nlohmann::json::object();
        for (const auto& [k, v] : plan.weight_map) wm[k] = v;
        CHECK(wm == result["index"]["weight_map"]);
      }
      ++checked;
    }
  }
  CHECK(checked >= 10);
}

TEST_CASE("a first tensor over the limit leaves an empty first shard, as in Accelerate", "[io][sharding]") {
  const ShardPlan p = plan_shards(std::vector<ShardItem>{{"big", 100, nullptr, false}, {"small", 10, nullptr, false}}, 50, "model.safetensors");
  REQUIRE(p.shards.size() == 3);
  CHECK(p.shards[0].empty());
  CHECK(p.filenames[1] == "model-00002-of-00003.safetensors");
  CHECK(p.total_size == 110);
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

    const ShardPlan plan = save_sharded(sd, folder, std::uint64_t{24}, safe);
    // 24 | 16+8 (head joins embed's shard) | 8 bits = 1 byte
    REQUIRE(plan.shards.size() == 3);
    CHECK(plan.shards[0] == std::vector<std::string>{"embed.weight", "head.weight"});
    CHECK(plan.total_size == 49);
    CHECK(plan.total_size_is_float);
    CHECK_FALSE(fs::exists(folder + "/" + stale));
    CHECK(fs::exists(folder + "/notes.txt"));

    const std::string index_path = folder + "/" + (safe ? safe_weights_index_name : weights_index_name);
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
  CHECK_FALSE(fs::exists(dir.file(safe_weights_index_name)));
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
  SECTION("a missing shard names the index and the shard") {
    TempDir dir;
    std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map": {"w": "model-00001-of-00002.safetensors"}})";
    CHECK_THROWS_WITH(read_sharded_index(dir.file("model.safetensors.index.json")),
                      Catch::Contains("model.safetensors.index.json") && Catch::Contains("model-00001-of-00002.safetensors"));
  }
  SECTION("a shard that lacks a promised tensor") {
    TempDir dir;
    save_file(NamedTensors{{"x", Tensor::ones(Shape{1})}}, dir.file("s.safetensors"));
    std::ofstream(dir.file("i.index.json")) << R"({"weight_map": {"w": "s.safetensors"}})";
    const auto ck = ShardedCheckpoint::open(dir.file("i.index.json"));
    CHECK_THROWS_WITH(ck.tensor("w"), Catch::Contains("does not contain it"));
  }
}

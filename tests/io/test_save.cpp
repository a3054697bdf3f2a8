// save(state_dict, path, safe_serialization) and shard_checkpoint over a state dict.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "accel/io/safetensors.hpp"
#include "accel/io/save.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/plan/shard_checkpoint.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

using accel_test::TempDir;

// embed and head tied (one view), plus two slices of one fused storage that are not the same view.
io::StateDict tied_state() {
  io::StateDict sd;
  sd.insert_or_assign("embed.weight", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2}));
  const Tensor fused = Tensor::from_vector<float>({7, 8, 9, 10});
  sd.insert_or_assign("q.weight", fused.narrow(0, 0, 2));
  sd.insert_or_assign("k.weight", fused.narrow(0, 2, 2));
  sd.insert_or_assign("head.weight", sd.at("embed.weight"));
  sd.insert_or_assign("step", Tensor::from_vector<std::int64_t>({42}));
  return sd;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("save with safe_serialization writes one safetensors file with format pt, tied names once", "[io][save]") {
  TempDir dir;
  const io::StateDict sd = tied_state();
  const auto removed = accel::save(sd, dir.file("model.safetensors"), /*safe_serialization=*/true);
  CHECK(removed == std::vector<std::string>{"head.weight"});
  CHECK(files_in(dir.path) == std::vector<std::string>{"model.safetensors"});  // no temporary left

  const auto f = io::SafetensorsFile::open(dir.file("model.safetensors"));
  CHECK(f.metadata().size() == 1);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.keys().size() == 4);
  CHECK_FALSE(f.contains("head.weight"));
  CHECK(f.tensor("embed.weight").to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(f.tensor("embed.weight").shape() == Shape{3, 2});
  // Slices of one storage are different views: both kept, each with its own values.
  CHECK(f.tensor("q.weight").to_vector<float>() == std::vector<float>{7, 8});
  CHECK(f.tensor("k.weight").to_vector<float>() == std::vector<float>{9, 10});
  CHECK(f.tensor("step").to_vector<std::int64_t>() == std::vector<std::int64_t>{42});
}

TEST_CASE("save without safe_serialization writes torch.save's format, ties sharing a storage", "[io][save]") {
  TempDir dir;
  const io::StateDict sd = tied_state();
  CHECK(accel::save(sd, dir.file("pytorch_model.bin")).empty());  // Accelerate's default: torch.save
  CHECK(files_in(dir.path) == std::vector<std::string>{"pytorch_model.bin"});

  const io::StateDict back = io::load_torch_bin(dir.file("pytorch_model.bin"));
  CHECK(back.keys() == sd.keys());
  CHECK(back.at("head.weight").is_same(back.at("embed.weight")));
  CHECK(back.at("q.weight").shares_storage(back.at("k.weight")));
  CHECK(back.at("k.weight").to_vector<float>() == std::vector<float>{9, 10});
  CHECK(back.at("step").dtype() == DType::i64);
}

TEST_CASE("save replaces a file atomically and leaves nothing behind when it fails", "[io][save]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  accel::save(io::StateDict{{"w", Tensor::ones(Shape{2})}}, path, true);
  accel::save(io::StateDict{{"w", Tensor::full(Shape{3}, 5.0)}}, path, true);
  CHECK(io::SafetensorsFile::open(path).tensor("w").to_vector<float>() == std::vector<float>{5, 5, 5});

  // A meta tensor fails before the temporary exists; a folder in the way fails at the rename.
  CHECK_THROWS_AS(accel::save(io::StateDict{{"w", Tensor::empty(Shape{2}, DType::f32, Device::meta())}}, path, true),
                  ValueError);
  fs::create_directories(dir.file("taken.bin") + "/inside");
  CHECK_THROWS_AS(accel::save(io::StateDict{{"w", Tensor::ones(Shape{2})}}, dir.file("taken.bin")), IOError);
  std::vector<std::string> left = files_in(dir.path);
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"model.safetensors", "taken.bin"});
  CHECK(io::SafetensorsFile::open(path).tensor("w").to_vector<float>() == std::vector<float>{5, 5, 5});
}

TEST_CASE("shard_checkpoint takes a state dict, as Accelerate spells it", "[io][save][shard_checkpoint]") {
  io::StateDict sd;
  sd.insert_or_assign("a", Tensor::zeros(Shape{400}));              // 1600 bytes
  sd.insert_or_assign("b", Tensor::zeros(Shape{200}, DType::f16));  // 400 bytes: a + b just fit 2KB
  sd.insert_or_assign("c", Tensor::zeros(Shape{300}));              // 1200 bytes
  sd.insert_or_assign("a_tied", sd.at("a"));

  SECTION("one shard: the weights name as given, no index") {
    const auto plan = accel::shard_checkpoint(sd);
    REQUIRE(plan.shards.size() == 1);
    CHECK(plan.shards[0].first == "pytorch_model.bin");
    CHECK(plan.shards[0].second == std::vector<std::string>{"a", "b", "c", "a_tied"});
    CHECK_FALSE(plan.index.has_value());
  }
  SECTION("several shards: numbered names and an index; a tied name counts once") {
    const auto plan = accel::shard_checkpoint(sd, "2KB", "model.safetensors");
    REQUIRE(plan.shards.size() == 2);
    CHECK(plan.shards[0].first == "model-00001-of-00002.safetensors");
    CHECK(plan.shards[0].second == std::vector<std::string>{"a", "b", "a_tied"});
    CHECK(plan.shards[1].second == std::vector<std::string>{"c"});
    REQUIRE(plan.index.has_value());
    CHECK(plan.index->total_size == ByteSize(3200));
    CHECK(plan.index->weight_map.size() == 4);
    CHECK(plan.index->weight_map.back() ==
          std::pair<std::string, std::string>{"c", "model-00002-of-00002.safetensors"});
    // The byte-count overload and the tensor-list form agree with it.
    const auto by_bytes = accel::shard_checkpoint(sd, std::int64_t{2000}, "model.safetensors");
    CHECK(by_bytes.shards == plan.shards);
    std::vector<plan::ShardTensor> items;
    for (const auto& [name, t] : sd) items.push_back({name, t.dtype(), t.shape(), t.storage().get()});
    CHECK(accel::shard_checkpoint(items, "2KB", "model.safetensors").shards == plan.shards);
  }
}

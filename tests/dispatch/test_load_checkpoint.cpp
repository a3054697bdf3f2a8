#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "../timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/sharding.hpp"
#include "accel/io/torch_bin_write.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;

namespace {

using accel_test::TempDir;

// embed (8 x 4) -> layers.0, layers.1 (Linear 4 -> 4) -> norm -> head (Linear 4 -> 8, no bias),
// plus an integer buffer on the root. `tie` shares head.weight with embed.weight.
std::shared_ptr<nn::Module> make_model(bool tie = false, bool on_meta = true) {
  std::optional<nn::InitScope> scope;
  if (on_meta) scope.emplace(Device::meta(), /*include_buffers=*/true);  // init_empty_weights(true)
  auto root = std::make_shared<nn::Module>("TinyModel");
  auto embed = root->register_module("embed", std::make_shared<nn::Embedding>(8, 4));
  auto layers = root->register_module("layers", std::make_shared<nn::ModuleList>());
  layers->push_back(std::make_shared<nn::Linear>(4, 4));
  layers->push_back(std::make_shared<nn::Linear>(4, 4));
  root->register_module("norm", std::make_shared<nn::LayerNorm>(4));
  auto head = root->register_module("head", std::make_shared<nn::Linear>(4, 8, /*bias=*/false));
  if (tie) head->register_parameter("weight", embed->parameter_cell("weight"));
  root->register_buffer("position_ids", Tensor::from_vector<std::int64_t>({0, 1, 2, 3}));
  return root;
}

// A checkpoint for make_model: every float tensor holds distinct values, in `dtype`.
StateDict make_checkpoint(DType dtype = DType::f32, bool with_head = true) {
  StateDict sd;
  float base = 0.0f;
  auto add = [&](const std::string& name, Shape shape) {
    std::vector<float> v(static_cast<std::size_t>(shape.numel()));
    for (auto& x : v) x = (base += 0.5f);
    sd.insert_or_assign(name, Tensor::from_vector(v, shape).to(dtype));
  };
  add("embed.weight", {8, 4});
  add("layers.0.weight", {4, 4});
  add("layers.0.bias", {4});
  add("layers.1.weight", {4, 4});
  add("layers.1.bias", {4});
  add("norm.weight", {4});
  add("norm.bias", {4});
  if (with_head) add("head.weight", {8, 4});
  sd.insert_or_assign("position_ids", Tensor::from_vector<std::int64_t>({10, 11, 12, 13}));
  return sd;
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

void require_loaded(const nn::Module& model, const StateDict& ckpt, const std::vector<std::string>& skip = {}) {
  for (const auto& [name, t] : ckpt) {
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    INFO(name);
    const Tensor& got = model.get_tensor(name);
    REQUIRE_FALSE(got.is_meta());
    if (t.is_floating_point()) {
      CHECK(values(got) == values(t));
    } else {
      CHECK(got.to_vector<std::int64_t>() == t.to_vector<std::int64_t>());
    }
  }
}

DeviceMap map_with_disk_layer() {
  DeviceMap dm;
  dm.set("embed", Placement::cpu());
  dm.set("layers.0", Placement::cpu());
  dm.set("layers.1", Placement::disk());
  dm.set("norm", Placement::cpu());
  dm.set("head", Placement::cpu());
  dm.set("position_ids", Placement::cpu());
  return dm;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no exception>";
}

}  // namespace

TEST_CASE("a single safetensors file loads into a meta model as mapped cpu views", "[io][load_checkpoint]") {
  TempDir dir;
  const StateDict ckpt = make_checkpoint();
  save_file(ckpt, dir.file("model.safetensors"), {{"format", "pt"}});
  auto model = make_model();

  const MemoryStats before = memory_stats(Device::cpu());
  const LoadResult r = load_checkpoint_in_model(*model, dir.file("model.safetensors"));
  CHECK(memory_stats(Device::cpu()).allocated_bytes == before.allocated_bytes);  // nothing copied
  require_loaded(*model, ckpt);
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  CHECK(r.checkpoint_files == std::vector<std::string>{dir.file("model.safetensors")});
  CHECK(model->get_tensor("layers.0.weight").storage().kind() == MemoryKind::mapped);
  CHECK(model->get_tensor("position_ids").dtype() == DType::i64);
}

TEST_CASE("a model already on the cpu keeps its dtype and gets the checkpoint's values", "[io][load_checkpoint]") {
  TempDir dir;
  const StateDict ckpt = make_checkpoint(DType::f16);
  save_file(ckpt, dir.file("model.safetensors"));
  auto model = make_model(false, /*on_meta=*/false);
  load_checkpoint_in_model(*model, dir.file("model.safetensors"));
  CHECK(model->get_tensor("norm.weight").dtype() == DType::f32);  // the model's dtype wins
  require_loaded(*model, ckpt);
}

TEST_CASE("a sharded checkpoint loads through its index, as a file or a folder", "[io][load_checkpoint]") {
  TempDir dir;
  const StateDict ckpt = make_checkpoint();
  const ShardPlan plan = save_sharded(ckpt, dir.str(), std::int64_t{200});
  REQUIRE(plan.is_sharded());

  auto a = make_model();
  const LoadResult r = load_checkpoint_in_model(*a, dir.file("model.safetensors.index.json"), {.show_progress = false});
  require_loaded(*a, ckpt);
  CHECK(r.checkpoint_files.size() == plan.filenames.size());
  CHECK(std::is_sorted(r.checkpoint_files.begin(), r.checkpoint_files.end()));

  auto b = make_model();
  CHECK(load_checkpoint_in_model(*b, dir.str()).checkpoint_files == r.checkpoint_files);
  require_loaded(*b, ckpt);

  // A progress callback hears every shard's bytes, never going back, ending at the total.
  std::vector<std::pair<std::size_t, std::size_t>> heard;
  auto d = make_model();
  load_checkpoint_in_model(*d, dir.str(), {.show_progress = false, .progress = [&](std::size_t done, std::size_t total) {
                                             heard.emplace_back(done, total);
                                           }});
  require_loaded(*d, ckpt);
  REQUIRE(heard.size() > plan.filenames.size());
  std::size_t files_bytes = 0;
  for (const auto& f : plan.filenames) files_bytes += std::filesystem::file_size(dir.file(f));
  CHECK(heard.front().first == 0);
  CHECK(heard.back().first == files_bytes);
  for (std::size_t i = 0; i < heard.size(); ++i) {
    CHECK(heard[i].second == files_bytes);
    if (i) CHECK(heard[i].first >= heard[i - 1].first);
  }

  // The same through .bin shards.
  TempDir bins;
  save_sharded(ckpt, bins.str(), std::int64_t{200}, /*safe_serialization=*/false);
  auto c = make_model();
  load_checkpoint_in_model(*c, bins.str());
  require_loaded(*c, ckpt);
}

TEST_CASE("a torch .bin checkpoint loads", "[io][load_checkpoint]") {
  TempDir dir;
  const StateDict ckpt = make_checkpoint(DType::bf16);
  save_torch_bin(ckpt, dir.file("pytorch_model.bin"));
  auto model = make_model();
  const LoadResult r = load_checkpoint_in_model(*model, dir.file("pytorch_model.bin"));
  CHECK(r.missing_keys.empty());
  CHECK(model->get_tensor("embed.weight").dtype() == DType::f32);  // cast to the model's dtype
  require_loaded(*model, ckpt);
}

TEST_CASE("folder detection follows transformers' search order", "[io][load_checkpoint]") {
  const StateDict ckpt = make_checkpoint();
  SECTION("model.safetensors is preferred over pytorch_model.bin (Accelerate prefers the .bin)") {
    TempDir dir;
    save_torch_bin(ckpt, dir.file("pytorch_model.bin"));
    CHECK(resolve_checkpoint_files(dir.str()) == std::vector<std::string>{dir.file("pytorch_model.bin")});
    save_file(ckpt, dir.file("model.safetensors"));
    CHECK(resolve_checkpoint_files(dir.str()) == std::vector<std::string>{dir.file("model.safetensors")});
    auto model = make_model();
    CHECK(load_checkpoint_in_model(*model, dir.str()).checkpoint_files == std::vector<std::string>{dir.file("model.safetensors")});
  }
  SECTION("the whole order: model.safetensors, its index, pytorch_model.bin, its index, one other index") {
    TempDir dir;
    save_sharded(ckpt, dir.str(), std::int64_t{200}, /*safe_serialization=*/false);
    fs::rename(dir.file("pytorch_model.bin.index.json"), dir.file("weights.index.json"));
    CHECK(resolve_checkpoint(dir.path).path == dir.path / "weights.index.json");
    fs::copy_file(dir.file("weights.index.json"), dir.file("pytorch_model.bin.index.json"));
    CHECK(resolve_checkpoint(dir.path).path == dir.path / "pytorch_model.bin.index.json");
    save_torch_bin(ckpt, dir.file("pytorch_model.bin"));
    CHECK(resolve_checkpoint(dir.path).path == dir.path / "pytorch_model.bin");
    save_sharded(ckpt, dir.str(), std::int64_t{200});
    CHECK(resolve_checkpoint(dir.path).path == dir.path / "model.safetensors.index.json");
    CHECK(resolve_checkpoint(dir.path).format == CheckpointFormat::sharded_index);
    save_file(ckpt, dir.file("model.safetensors"));
    CHECK(resolve_checkpoint(dir.path).path == dir.path / "model.safetensors");
    CHECK(resolve_checkpoint(dir.path).format == CheckpointFormat::safetensors);
  }
  SECTION("a folder with neither nor an index") {
    TempDir dir;
    save_file(ckpt, dir.file("weights.safetensors"));
    const std::string msg = message_of([&] { resolve_checkpoint_files(dir.str()); });
    CHECK(msg.find("is not a folder containing a `.index.json` file or a pytorch_model.bin or a model.safetensors") !=
          std::string::npos);
    CHECK(msg.find(dir.str()) != std::string::npos);
    CHECK_THROWS_AS(resolve_checkpoint_files(dir.str()), ValueError);
  }
  SECTION("a folder with two indexes and no named one") {
    TempDir dir;
    save_sharded(ckpt, dir.str(), std::int64_t{200});
    fs::rename(dir.file("model.safetensors.index.json"), dir.file("a.index.json"));
    fs::copy_file(dir.file("a.index.json"), dir.file("other.index.json"));
    const std::string msg = message_of([&] { resolve_checkpoint_files(dir.str()); });
    CHECK(msg.find("containing more than one `.index.json` file") != std::string::npos);
    CHECK(msg.find("a.index.json, other.index.json") != std::string::npos);
    // A named index wins over the others, as transformers looks for it by name.
    fs::copy_file(dir.file("a.index.json"), dir.file("model.safetensors.index.json"));
    CHECK(resolve_checkpoint(dir.path).path == dir.path / "model.safetensors.index.json");
  }
  SECTION("a path that does not exist") {
    auto model = make_model();
    const std::string msg = message_of([&] { load_checkpoint_in_model(*model, "/nonexistent/ckpt"); });
    CHECK(msg.find("but got /nonexistent/ckpt") != std::string::npos);
  }
  SECTION("an index naming a shard that is not there") {
    TempDir dir;
    write_sharded_index(dir.file("model.safetensors.index.json"), 4, {{"w", "model-00001-of-00001.safetensors"}});
    CHECK_THROWS_AS(resolve_checkpoint_files(dir.str()), FormatError);
  }
  SECTION("an offload folder is not a checkpoint") {
    TempDir dir;
    offload_state_dict(dir.str(), ckpt);
    CHECK(resolve_checkpoint(dir.path).format == CheckpointFormat::offload_folder);
    CHECK_THROWS_WITH(resolve_checkpoint_files(dir.str()), Catch::Contains("offload folder") && Catch::Contains(dir.str()));
  }
}

TEST_CASE("checkpoint files are read as their bytes show, whatever their names", "[io][load_checkpoint]") {
  const StateDict ckpt = make_checkpoint();
  TempDir dir;
  save_file(ckpt, dir.file("weights.bin"));             // safetensors under a .bin name
  save_torch_bin(ckpt, dir.file("weights.safetensors"));  // a zip under a .safetensors name
  for (const char* name : {"weights.bin", "weights.safetensors"}) {
    INFO(name);
    auto model = make_model();
    const LoadResult r = load_checkpoint_in_model(*model, dir.file(name));
    CHECK(r.missing_keys.empty());
    require_loaded(*model, ckpt);
  }
  CHECK(detect_checkpoint_format(dir.file("weights.bin")) == CheckpointFormat::safetensors);
  CHECK(detect_checkpoint_format(dir.file("weights.safetensors")) == CheckpointFormat::torch_bin);
}

TEST_CASE("load_checkpoint_in_model names a malformed GGUF file and refuses legacy pickles", "[io][load_checkpoint]") {
  TempDir dir;
  {
    std::ofstream(dir.file("model.gguf"), std::ios::binary) << std::string("GGUF\x03\0\0\0", 8) << std::string(32, '\0');
    std::ofstream(dir.file("pytorch_model.bin"), std::ios::binary) << std::string("\x80\x02\x8a\x0alegacy", 10);
  }
  auto model = make_model();
  CHECK_THROWS_WITH(load_checkpoint_in_model(*model, dir.file("model.gguf")),
                    Catch::Contains("model.gguf") && Catch::Contains("general.architecture"));
  CHECK_THROWS_WITH(load_checkpoint_in_model(*model, dir.str()),
                    Catch::Contains("pytorch_model.bin") && Catch::Contains("legacy torch pickle"));
  CHECK_THROWS_AS(load_checkpoint_in_model(*model, dir.str()), FormatError);
}

TEST_CASE("a device map with disk offloads that layer; safetensors entries copy no bytes", "[io][load_checkpoint]") {
  TempDir dir, offload;
  const StateDict ckpt = make_checkpoint();
  save_file(ckpt, dir.file("model.safetensors"));
  auto model = make_model();
  const LoadResult r =
      load_checkpoint_in_model(*model, dir.str(), {.device_map = map_with_disk_layer(), .offload_folder = offload.str()});

  require_loaded(*model, ckpt, {"layers.1.weight", "layers.1.bias"});
  for (const char* name : {"layers.1.weight", "layers.1.bias"}) {
    INFO(name);
    CHECK(model->get_tensor(name).is_meta());
    CHECK(model->get_tensor(name).dtype() == DType::f32);
  }
  CHECK(r.missing_keys.empty());

  // The offload index points into the checkpoint: no .dat file was written.
  const OffloadIndex index = read_offload_index(offload.str());
  CHECK(index == r.offload_index);
  REQUIRE(index.size() == 2);
  const std::string abs = fs::absolute(dir.file("model.safetensors")).lexically_normal().string();
  CHECK(index["layers.1.weight"] ==
        OffloadIndex({{"safetensors_file", abs}, {"weight_name", "layers.1.weight"}, {"dtype", "float32"}}));
  for (const auto& e : fs::directory_iterator(offload.path)) CHECK(e.path().extension() != ".dat");

  OffloadedWeightsLoader loader(std::nullopt, offload.str());
  CHECK(values(loader.at("layers.1.weight")) == values(ckpt.at("layers.1.weight")));
  CHECK(loader.at("layers.1.bias").storage().kind() == MemoryKind::mapped);
}

TEST_CASE("disk entries from a .bin checkpoint are written as .dat files", "[io][load_checkpoint]") {
  TempDir dir, offload;
  const StateDict ckpt = make_checkpoint();
  save_torch_bin(ckpt, dir.file("pytorch_model.bin"));
  // An index already in the folder is merged into, not replaced.
  offload_state_dict(offload.str(), StateDict{{"earlier.weight", Tensor::ones(Shape{2})}});

  auto model = make_model();
  const LoadResult r = load_checkpoint_in_model(*model, dir.file("pytorch_model.bin"),
                                                {.device_map = map_with_disk_layer(), .offload_folder = offload.str()});
  const OffloadIndex index = read_offload_index(offload.str());
  CHECK(index.size() == 3);
  CHECK(index.begin().key() == "earlier.weight");
  CHECK(r.offload_index.size() == 2);
  CHECK(index["layers.1.weight"] == OffloadIndex({{"dtype", "float32"}, {"shape", {4, 4}}}));
  CHECK(fs::file_size(offload.path / "layers.1.weight.dat") == 64);
  const StateDict back = load_offloaded_weights(offload.str());
  CHECK(values(back.at("layers.1.bias")) == values(ckpt.at("layers.1.bias")));
}

TEST_CASE("device map errors: disk without a folder, a tensor left unplaced", "[io][load_checkpoint]") {
  TempDir dir;
  save_file(make_checkpoint(), dir.file("model.safetensors"));
  auto model = make_model();
  const std::string no_folder = message_of([&] {
    load_checkpoint_in_model(*model, dir.str(), {.device_map = map_with_disk_layer()});
  });
  CHECK(no_folder.find("please pass along an `offload_folder`") != std::string::npos);

  DeviceMap partial = map_with_disk_layer();
  partial.erase("norm");
  const std::string unplaced = message_of([&] {
    load_checkpoint_in_model(*model, dir.str(), {.device_map = partial, .offload_folder = dir.file("off")});
  });
  CHECK(unplaced.find("norm.") != std::string::npos);
  CHECK(unplaced.find("doesn't have any device set") != std::string::npos);

  DeviceMap everything;
  everything.set("", Placement::cpu());
  load_checkpoint_in_model(*model, dir.str(), {.device_map = everything});
  CHECK(model->get_tensor("norm.bias").is_cpu());
}

TEST_CASE("dtype casts floating tensors only, on every placement", "[io][load_checkpoint]") {
  TempDir dir, offload;
  const StateDict ckpt = make_checkpoint();
  save_file(ckpt, dir.file("model.safetensors"));
  auto model = make_model();
  const LoadResult r = load_checkpoint_in_model(
      *model, dir.str(), {.device_map = map_with_disk_layer(), .offload_folder = offload.str(), .dtype = DType::f16});
  CHECK(model->get_tensor("embed.weight").dtype() == DType::f16);
  CHECK(model->get_tensor("layers.1.weight").dtype() == DType::f16);  // on meta, typed as it will be used
  CHECK(model->get_tensor("position_ids").dtype() == DType::i64);     // integers are never cast
  CHECK(model->get_tensor("position_ids").to_vector<std::int64_t>() == std::vector<std::int64_t>{10, 11, 12, 13});
  CHECK(values(model->get_tensor("norm.bias")) == values(ckpt.at("norm.bias")));  // exact in f16
  CHECK(r.offload_index["layers.1.weight"]["dtype"] == "float16");
  OffloadedWeightsLoader loader(std::nullopt, offload.str());
  CHECK(loader.at("layers.1.weight").dtype() == DType::f16);

  // Without a device map too (Accelerate ignores dtype there).
  auto plain = make_model();
  load_checkpoint_in_model(*plain, dir.str(), {.dtype = DType::bf16});
  CHECK(plain->get_tensor("head.weight").dtype() == DType::bf16);
  CHECK(plain->get_tensor("position_ids").dtype() == DType::i64);

  CHECK_THROWS_AS(load_checkpoint_in_model(*plain, dir.str(), {.dtype = DType::i32}), ValueError);
}

TEST_CASE("keep_in_fp32_modules keeps whole modules in float32", "[io][load_checkpoint]") {
  TempDir dir;
  save_file(make_checkpoint(), dir.file("model.safetensors"));
  auto model = make_model();
  load_checkpoint_in_model(*model, dir.str(), {.dtype = DType::f16, .keep_in_fp32_modules = {"norm", "layers.1"}});
  CHECK(model->get_tensor("norm.weight").dtype() == DType::f32);
  CHECK(model->get_tensor("layers.1.bias").dtype() == DType::f32);
  CHECK(model->get_tensor("layers.0.bias").dtype() == DType::f16);
  CHECK(model->get_tensor("embed.weight").dtype() == DType::f16);

  CHECK(in_keep_in_fp32_modules("model.lm_head.weight", {"lm_head"}));
  CHECK(in_keep_in_fp32_modules("lm_head", {"lm_head"}));
  CHECK(in_keep_in_fp32_modules("layers.0.wo.weight", {"wo"}));
  CHECK_FALSE(in_keep_in_fp32_modules("two.weight", {"wo"}));
  CHECK_FALSE(in_keep_in_fp32_modules("layers.10.weight", {"layers.1"}));
  CHECK_FALSE(in_keep_in_fp32_modules("norm.weight", {""}));
}

TEST_CASE("missing and unexpected keys are reported; strict makes them an error", "[io][load_checkpoint]") {
  TempDir dir;
  StateDict ckpt;
  for (const auto& [name, t] : make_checkpoint()) {
    if (name != "norm.bias") ckpt.insert_or_assign(name, t);
  }
  ckpt.insert_or_assign("extra.weight", Tensor::ones(Shape{2}));
  save_file(ckpt, dir.file("model.safetensors"));

  auto model = make_model();
  std::ostringstream warnings;
  const LoadResult r = load_checkpoint_in_model(*model, dir.str(), {.warnings = &warnings});
  CHECK(r.missing_keys == std::vector<std::string>{"norm.bias"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"extra.weight"});
  CHECK(warnings.str().find("were not used when initializing TinyModel") != std::string::npos);
  CHECK(model->get_tensor("norm.bias").is_meta());

  DeviceMap dm;
  dm.set("", Placement::cpu());
  auto again = make_model();
  CHECK(load_checkpoint_in_model(*again, dir.str(), {.device_map = dm}).missing_keys == r.missing_keys);

  auto strict = make_model();
  const std::string msg = message_of([&] { load_checkpoint_in_model(*strict, dir.str(), {.strict = true}); });
  CHECK(msg.find("Missing key(s): \"norm.bias\"") != std::string::npos);
  CHECK(msg.find("Unexpected key(s): \"extra.weight\"") != std::string::npos);
  CHECK_THROWS_AS(load_checkpoint_in_model(*strict, dir.str(), {.strict = true}), KeyError);
}

TEST_CASE("a shape mismatch names the file, the tensor and both shapes", "[io][load_checkpoint]") {
  TempDir dir;
  StateDict ckpt = make_checkpoint();
  ckpt.insert_or_assign("layers.0.weight", Tensor::zeros(Shape{4, 5}));
  save_file(ckpt, dir.file("model.safetensors"));
  for (bool disk : {false, true}) {
    auto model = make_model();
    LoadCheckpointOptions o;
    if (disk) {
      DeviceMap dm;
      dm.set("", Placement::disk());
      o = LoadCheckpointOptions{.device_map = dm, .offload_folder = dir.file("off")};
    }
    const std::string msg = message_of([&] { load_checkpoint_in_model(*model, dir.str(), o); });
    INFO(msg);
    CHECK(msg.find("model.safetensors") != std::string::npos);
    CHECK(msg.find("'layers.0.weight'") != std::string::npos);
    CHECK(msg.find("[4, 5]") != std::string::npos);
    CHECK(msg.find("[4, 4]") != std::string::npos);
    CHECK(msg.find("Linear") != std::string::npos);
    CHECK_THROWS_AS(load_checkpoint_in_model(*model, dir.str(), o), ShapeError);
  }
}

TEST_CASE("tied weights stay tied and are not missing", "[io][load_checkpoint]") {
  TempDir dir, offload;
  save_file(make_checkpoint(DType::f32, /*with_head=*/false), dir.file("model.safetensors"));

  auto model = make_model(/*tie=*/true);
  const LoadResult r = load_checkpoint_in_model(*model, dir.str());
  CHECK(r.missing_keys.empty());
  CHECK(model->get_tensor("head.weight").is_same(model->get_tensor("embed.weight")));
  CHECK(nn::find_tied_parameters(*model) == std::vector<std::vector<std::string>>{{"embed.weight", "head.weight"}});

  // head on disk, embed on the cpu: the loaded tensor wins over the disk placeholder.
  DeviceMap dm = map_with_disk_layer();
  dm.set("head", Placement::disk());
  std::ostringstream warnings;
  auto split = make_model(/*tie=*/true);
  save_torch_bin(make_checkpoint(), dir.file("pytorch_model.bin"));
  load_checkpoint_in_model(*split, dir.file("pytorch_model.bin"),
                           {.device_map = dm, .offload_folder = offload.str(), .warnings = &warnings});
  CHECK(warnings.str().find("Tied parameters are on different devices") != std::string::npos);
  CHECK(split->get_tensor("head.weight").is_cpu());
  CHECK(split->get_tensor("head.weight").is_same(split->get_tensor("embed.weight")));
}

TEST_CASE("offload_state_dict parks cpu weights and loads them back", "[io][load_checkpoint]") {
  TempDir dir;
  const StateDict ckpt = make_checkpoint();
  save_torch_bin(ckpt, dir.file("pytorch_model.bin"));
  DeviceMap dm;
  dm.set("", Placement::cpu());
  auto model = make_model();
  const LoadResult r =
      load_checkpoint_in_model(*model, dir.str(), {.device_map = dm, .dtype = DType::f16, .offload_state_dict = true});
  CHECK(r.missing_keys.empty());
  CHECK(r.offload_index.empty());
  CHECK(model->get_tensor("layers.1.weight").dtype() == DType::f16);
  require_loaded(*model, ckpt);
}

TEST_CASE("load_state_dict takes the library's DeviceMap", "[io][load_checkpoint]") {
  TempDir dir;
  save_file(make_checkpoint(), dir.file("model.safetensors"));
  DeviceMap dm;
  dm.set("layers", Placement::disk());
  dm.set("", Placement::cpu());
  const StateDict sd = load_state_dict(dir.file("model.safetensors"), dm);
  CHECK(sd.size() == make_checkpoint().size());
  CHECK(sd.at("layers.1.weight").is_cpu());  // disk weights load on the cpu, as mapped views
  CHECK(sd.at("layers.1.weight").storage().kind() == MemoryKind::mapped);
}

TEST_CASE("the shard progress bar draws in place and stays quiet off a terminal", "[io][load_checkpoint]") {
  std::ostringstream out;
  {
    ProgressBar bar("Loading checkpoint shards", 4, &out);
    bar.update();
    CHECK(bar.line() == "Loading checkpoint shards:  25%|#####               | 1/4");
    bar.update(10);
    CHECK(bar.done() == 4);
  }
  CHECK(out.str().starts_with("\rLoading checkpoint shards:   0%|"));
  CHECK(out.str().ends_with("| 4/4\n"));
  CHECK_FALSE(ProgressBar("x", 2, /*enabled=*/false).active());
  CHECK(ProgressBar("x", 2, /*enabled=*/true).active() == static_cast<bool>(::isatty(STDERR_FILENO)));
}

TEST_CASE("offload_buffers decides whether buffers of a disk module go to the offload folder", "[io][load_checkpoint]") {
  // layers.1 (on disk) gets a persistent buffer; the checkpoint holds its values.
  auto model_with_buffer = [] {
    auto model = make_model();
    model->get_submodule("layers.1").register_buffer("scale", Tensor::empty(Shape{4}, DType::f32, Device::meta()));
    return model;
  };
  StateDict ckpt = make_checkpoint();
  ckpt.insert_or_assign("layers.1.scale", Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, 3.5f}));
  TempDir dir;
  save_torch_bin(ckpt, dir.file("pytorch_model.bin"));

  SECTION("false (the default): the buffer is loaded on the cpu, the parameters go to disk") {
    TempDir offload;
    auto model = model_with_buffer();
    const LoadResult r = load_checkpoint_in_model(*model, dir.str(),
                                                  {.device_map = map_with_disk_layer(), .offload_folder = offload.str()});
    CHECK(r.missing_keys.empty());
    const Tensor& scale = model->get_tensor("layers.1.scale");
    CHECK(scale.is_cpu());
    CHECK(values(scale) == std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f});
    CHECK(model->get_tensor("layers.1.weight").is_meta());
    CHECK(r.offload_index.size() == 2);
    CHECK_FALSE(r.offload_index.contains("layers.1.scale"));
    CHECK_FALSE(fs::exists(offload.path / "layers.1.scale.dat"));
  }
  SECTION("true: the buffer is offloaded like the parameters") {
    TempDir offload;
    auto model = model_with_buffer();
    const LoadResult r = load_checkpoint_in_model(
        *model, dir.str(), {.device_map = map_with_disk_layer(), .offload_folder = offload.str(), .offload_buffers = true});
    CHECK(r.missing_keys.empty());
    CHECK(model->get_tensor("layers.1.scale").is_meta());
    CHECK(r.offload_index.size() == 3);
    CHECK(r.offload_index["layers.1.scale"] == OffloadIndex({{"dtype", "float32"}, {"shape", OffloadIndex::array({4})}}));
    CHECK(fs::file_size(offload.path / "layers.1.scale.dat") == 16);
    OffloadedWeightsLoader loader(std::nullopt, offload.str());
    CHECK(values(loader.at("layers.1.scale")) == std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f});
    // A buffer on a cpu module is never offloaded.
    CHECK(model->get_tensor("position_ids").is_cpu());
  }
}

TEST_CASE("a converting load allocates each tensor once, in its final dtype", "[io][load_checkpoint]") {
  TempDir dir;
  const StateDict ckpt = make_checkpoint(DType::f32);
  save_file(ckpt, dir.file("model.safetensors"));
  std::size_t float_elements = 0, float_tensors = 0;
  for (const auto& [name, t] : ckpt) {
    if (!t.is_floating_point()) continue;
    float_elements += static_cast<std::size_t>(t.numel());
    ++float_tensors;
  }
  REQUIRE(float_elements == 112);

  for (DType target : {DType::f16, DType::bf16, DType::f64}) {
    INFO(dtype_name(target));
    auto model = make_model();
    const MemoryStats before = memory_stats(Device::cpu());
    reset_peak_memory_stats(Device::cpu());
    load_checkpoint_in_model(*model, dir.str(), {.dtype = target});
    const MemoryStats after = memory_stats(Device::cpu());
    const std::size_t converted = float_elements * itemsize(target);
    // The safetensors file is mapped, so the only allocations are the converted tensors: one each,
    // no staging copy in the checkpoint's dtype, no second conversion.
    CHECK(after.num_allocs - before.num_allocs == float_tensors);
    CHECK(after.allocated_bytes - before.allocated_bytes == converted);
    CHECK(after.peak_allocated_bytes - before.allocated_bytes == converted);
    CHECK(model->get_tensor("layers.0.weight").dtype() == target);
    CHECK(model->get_tensor("position_ids").storage().kind() == MemoryKind::mapped);  // not converted, not copied
    require_loaded(*model, ckpt);
  }
}

TEST_CASE("offloading 30,000 tensors to disk records the index in linear time", "[io][load_checkpoint][hostile]") {
  // One index entry per offloaded tensor, recorded through OffloadIndexMap (whose own test pins the
  // cost of an insert); this checks the loader at that scale. An index that scanned its keys on each
  // insert took 16 s for 90,951 entries.
  constexpr int n = 30'000;
  TempDir dir;
  StateDict ckpt;
  for (int i = 0; i < n; ++i) ckpt.insert_or_assign("t" + std::to_string(i), Tensor::full(Shape{1}, static_cast<float>(i)));
  save_file(ckpt, dir.file("model.safetensors"));
  DeviceMap dm;
  dm.set("", Placement::disk());

  const double bound = accel_test::seconds_bound(2.0);
  const double seconds = accel_test::fastest_within(bound, [&] {
    auto model = std::make_shared<nn::Module>("Many");
    {
      auto scope = nn::init_empty_weights();
      for (int i = 0; i < n; ++i) model->register_parameter("t" + std::to_string(i), Tensor::empty(Shape{1}, DType::f32));
    }
    TempDir offload;
    LoadResult r;
    const double s = accel_test::seconds_of(
        [&] { r = load_checkpoint_in_model(*model, dir.str(), {.device_map = dm, .offload_folder = offload.str()}); });
    REQUIRE(r.offload_index.size() == n);
    CHECK(r.offload_index.begin().key() == "t0");
    CHECK(r.missing_keys.empty());
    OffloadedWeightsLoader loader(std::nullopt, offload.str());
    CHECK(loader.at("t29999").to_vector<float>() == std::vector<float>{29999.0f});
    return s;
  });
  CHECK(seconds < bound);
}

TEST_CASE("disable_mmap gives loaded cpu weights memory of their own", "[io][load_checkpoint]") {
  TempDir dir;
  const StateDict ckpt = make_checkpoint(DType::f32, /*with_head=*/false);
  save_file(ckpt, dir.file("model.safetensors"));
  for (const bool disable : {false, true}) {
    INFO("disable_mmap " << disable);
    auto model = make_model(/*tie=*/true);
    const LoadResult r = load_checkpoint_in_model(*model, dir.str(), {.disable_mmap = disable});
    CHECK(r.missing_keys.empty());
    require_loaded(*model, ckpt);
    for (const auto& [name, t] : model->state_dict()) {
      INFO(name);
      CHECK((t.storage().kind() == MemoryKind::mapped) == !disable);
    }
    CHECK(model->get_tensor("head.weight").data_ptr() == model->get_tensor("embed.weight").data_ptr());
  }
  // A converted weight has memory of its own either way; a disk weight stays on meta.
  auto model = make_model();
  TempDir offload;
  load_checkpoint_in_model(*model, dir.str(), {.device_map = map_with_disk_layer(), .offload_folder = offload.str(),
                                               .dtype = DType::f16, .disable_mmap = true});
  CHECK(model->get_tensor("layers.1.weight").is_meta());
  CHECK(model->get_tensor("layers.0.weight").dtype() == DType::f16);
  CHECK(model->get_tensor("position_ids").storage().kind() != MemoryKind::mapped);
}

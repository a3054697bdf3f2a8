// Offload folders against tests/data/offload_fixture, written by make_offload_fixture.py exactly
// as accelerate/utils/offload.py writes one.
#include <catch2/catch.hpp>

#include "../file_bytes.hpp"
#include "../temp_dir.hpp"
#include "../timing.hpp"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/module.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;

namespace {

std::int64_t grew(std::size_t after, std::size_t before) {
  return static_cast<std::int64_t>(after) - static_cast<std::int64_t>(before);
}
const std::int64_t mib = 512 * 512 * 4;

const fs::path fixture = fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "offload_fixture";

using accel_test::TempDir;

using accel_test::read_raw;

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// The fixture's tensors, built here from the same values as the script's STATE_DICT.
StateDict fixture_state_dict() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> kernel;
  for (int i = 0; i < 12; ++i) kernel.push_back(static_cast<float>(i) * 0.25f - 1.0f);
  StateDict sd;
  sd.insert_or_assign("proj.weight", Tensor::from_vector<float>({0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 1024.0f}, Shape{2, 3}));
  sd.insert_or_assign("proj.bias", Tensor::from_vector<float>({1.0f, -0.5f, 65504.0f}).to(DType::f16));
  sd.insert_or_assign("embed.weight",
                      Tensor::from_vector<float>({1.0f, -2.0f, 0.15625f, 3.140625f, 256.0f, -0.0f, inf, 0.0078125f}, Shape{4, 2})
                          .to(DType::bf16));
  sd.insert_or_assign("embed.position_ids", Tensor::from_vector<std::int64_t>(
                                                {0, -1, std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::min()}));
  sd.insert_or_assign("attn.mask", Tensor::from_vector<bool>({true, false, true, true, false}));
  sd.insert_or_assign("attn.scale", Tensor::full(Shape{}, 2.5));
  sd.insert_or_assign("conv.kernel", Tensor::from_vector<float>(kernel, Shape{2, 2, 3}));
  return sd;
}

const std::vector<std::string> fixture_names = {"proj.weight", "proj.bias",   "embed.weight", "embed.position_ids",
                                                "attn.mask",   "attn.scale", "conv.kernel"};

// The module tree the fixture's names belong to, built on meta.
std::shared_ptr<nn::Module> fixture_model() {
  auto scope = nn::init_empty_weights(/*include_buffers=*/true);
  auto root = std::make_shared<nn::Module>("Root");
  auto proj = root->register_module("proj", std::make_shared<nn::Module>("Proj"));
  proj->register_parameter("weight", Tensor::empty(Shape{2, 3}));
  proj->register_parameter("bias", Tensor::empty(Shape{3}, DType::f16));
  auto embed = root->register_module("embed", std::make_shared<nn::Module>("Embed"));
  embed->register_parameter("weight", Tensor::empty(Shape{4, 2}, DType::bf16));
  embed->register_buffer("position_ids", Tensor::empty(Shape{4}, DType::i64));
  auto attn = root->register_module("attn", std::make_shared<nn::Module>("Attn"));
  attn->register_buffer("mask", Tensor::empty(Shape{5}, DType::boolean));
  attn->register_parameter("scale", Tensor::empty(Shape{}));
  auto conv = root->register_module("conv", std::make_shared<nn::Module>("Conv"));
  conv->register_parameter("kernel", Tensor::empty(Shape{2, 2, 3}));
  return root;
}

void require_same_folder(const fs::path& ours, const fs::path& reference) {
  CHECK(read_raw(ours / "index.json") == read_raw(reference / "index.json"));
  for (const auto& name : fixture_names) {
    INFO(name);
    CHECK(read_raw(ours / (name + ".dat")) == read_raw(reference / (name + ".dat")));
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(ours)) ++files;
  CHECK(files == fixture_names.size() + 1);
}

}  // namespace

TEST_CASE("the fixture folder written as Accelerate writes it loads bit-exactly", "[io][offload]") {
  const OffloadIndex index = read_offload_index(fixture.string());
  REQUIRE(index.size() == fixture_names.size());
  CHECK(index["attn.scale"]["shape"] == OffloadIndex::array());  // 0-d: shape [] in the index
  CHECK(index["embed.weight"]["dtype"] == "bfloat16");
  CHECK(fs::file_size(fixture / "attn.scale.dat") == 4);  // ... and one element on disk

  const StateDict loaded = load_offloaded_weights(fixture.string());
  const StateDict expected = fixture_state_dict();
  REQUIRE(loaded.keys() == fixture_names);
  for (const auto& name : fixture_names) {
    INFO(name);
    const Tensor& t = loaded.at(name);
    CHECK(t.dtype() == expected.at(name).dtype());
    CHECK(t.shape() == expected.at(name).shape());
    CHECK(t.storage().kind() == MemoryKind::mapped);
    CHECK(bytes_of(t) == read_raw(fixture / (name + ".dat")));
    CHECK(bytes_of(t) == bytes_of(expected.at(name)));
  }
  CHECK(loaded.at("attn.scale").dim() == 0);
  CHECK(loaded.at("attn.scale").item<float>() == 2.5f);
  CHECK(loaded.at("embed.weight").to_vector<float>()[3] == 3.140625f);
  CHECK(loaded.at("embed.position_ids").to_vector<std::int64_t>()[3] == std::numeric_limits<std::int64_t>::min());
  CHECK(loaded.at("attn.mask").to_vector<bool>() == std::vector<bool>{true, false, true, true, false});
  CHECK(loaded.at("conv.kernel").at<float>({1, 1, 2}) == 11 * 0.25f - 1.0f);
}

TEST_CASE("offload_state_dict writes the fixture byte for byte", "[io][offload]") {
  TempDir dir;
  offload_state_dict(dir.str(), fixture_state_dict());
  require_same_folder(dir.path, fixture);
}

TEST_CASE("offload_state_dict reports the bytes it has written, from zero to the total", "[io][offload]") {
  TempDir dir;
  const StateDict sd = fixture_state_dict();
  std::size_t expected_total = 0;
  for (const auto& [name, t] : sd) expected_total += t.nbytes();
  std::vector<std::pair<std::size_t, std::size_t>> calls;
  offload_state_dict(dir.str(), sd, [&](std::size_t done, std::size_t total) { calls.emplace_back(done, total); });
  require_same_folder(dir.path, fixture);
  REQUIRE(calls.size() == sd.size() + 1);
  CHECK(calls.front().first == 0);
  CHECK(calls.back().first == expected_total);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].second == expected_total);
    if (i > 0) CHECK(calls[i].first > calls[i - 1].first);
  }
}

TEST_CASE("save_offload_index merges into an existing index as dict.update does", "[io][offload]") {
  TempDir dir;
  const StateDict sd = fixture_state_dict();
  OffloadIndex first = OffloadIndex::object(), second = OffloadIndex::object();
  // A stale entry for proj.weight first: the update replaces it in place, keeping its position.
  offload_weight(Tensor::zeros(Shape{7}, DType::f16), "proj.weight", dir.str(), &first);
  for (std::size_t i = 1; i < 3; ++i) offload_weight(sd.at(fixture_names[i]), fixture_names[i], dir.str(), &first);
  save_offload_index(first, dir.str());
  CHECK(read_offload_index(dir.str())["proj.weight"]["dtype"] == "float16");

  offload_weight(sd.at("proj.weight"), "proj.weight", dir.str(), &second);
  for (std::size_t i = 3; i < fixture_names.size(); ++i) offload_weight(sd.at(fixture_names[i]), fixture_names[i], dir.str(), &second);
  save_offload_index(second, dir.str());
  save_offload_index(OffloadIndex::object(), dir.str());  // nothing to save: the file stays as it is
  require_same_folder(dir.path, fixture);
}

TEST_CASE("load_offloaded_weights(model, index, folder) sets every indexed weight", "[io][offload]") {
  auto model = fixture_model();
  const OffloadIndex index = read_offload_index(fixture.string());
  load_offloaded_weights(*model, index, fixture.string());
  const StateDict expected = fixture_state_dict();
  for (const auto& name : fixture_names) {
    INFO(name);
    const Tensor& t = model->get_tensor(name);
    CHECK(t.is_cpu());
    CHECK(t.dtype() == expected.at(name).dtype());
    CHECK(bytes_of(t) == bytes_of(expected.at(name)));
  }
  // Nothing to do for an empty index; a name the model lacks is a KeyError.
  load_offloaded_weights(*model, OffloadIndex::object(), fixture.string());
  OffloadIndex stray = OffloadIndex::object();
  stray["proj.missing"] = index["proj.weight"];
  TempDir dir;
  fs::copy_file(fixture / "proj.weight.dat", dir.path / "proj.missing.dat");
  CHECK_THROWS_AS(load_offloaded_weights(*model, stray, dir.str()), KeyError);
}

TEST_CASE("load_offloaded_weights casts to the model's dtype as set_module_tensor_to_device does", "[io][offload]") {
  auto model = std::make_shared<nn::Module>("Root");
  {
    auto scope = nn::init_empty_weights();
    auto proj = model->register_module("proj", std::make_shared<nn::Module>("Proj"));
    proj->register_parameter("weight", Tensor::empty(Shape{2, 3}, DType::f16));
  }
  OffloadIndex index = OffloadIndex::object();
  index["proj.weight"] = read_offload_index(fixture.string())["proj.weight"];
  load_offloaded_weights(*model, index, fixture.string());
  const Tensor& w = model->get_tensor("proj.weight");
  CHECK(w.dtype() == DType::f16);
  CHECK(w.to_vector<float>() == std::vector<float>{0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 1024.0f});
}

TEST_CASE("OffloadedWeightsLoader serves .dat and safetensors entries", "[io][offload]") {
  TempDir dir;
  const std::string st = (dir.path / "shard.safetensors").string();
  save_file(NamedTensors{{"stored.w", Tensor::from_vector<float>({1.5f, -2.0f, 4.0f})}}, st, {{"format", "pt"}});

  OffloadIndex index = read_offload_index(fixture.string());
  index["extra.w"] = {{"safetensors_file", st}, {"weight_name", "stored.w"}, {"dtype", "float16"}};
  index["extra.same"] = {{"safetensors_file", st}, {"weight_name", "stored.w"}};
  StateDict in_memory;
  in_memory.insert_or_assign("proj.weight", Tensor::zeros(Shape{2, 3}));
  OffloadedWeightsLoader loader(in_memory, fixture.string(), index);

  // State-dict names first, then index names not already there.
  std::vector<std::string> keys = {"proj.weight"};
  for (std::size_t i = 1; i < fixture_names.size(); ++i) keys.push_back(fixture_names[i]);
  keys.push_back("extra.w");
  keys.push_back("extra.same");
  CHECK(loader.keys() == keys);
  CHECK(loader.at("proj.weight").to_vector<float>() == std::vector<float>(6, 0.0f));  // the state dict wins
  CHECK(bytes_of(loader.at("conv.kernel")) == read_raw(fixture / "conv.kernel.dat"));
  const Tensor w = loader.at("extra.w");
  CHECK(w.dtype() == DType::f16);
  CHECK(w.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 4.0f});
  CHECK(loader.at("extra.same").dtype() == DType::f32);
  CHECK(loader.at("extra.same").storage().kind() == MemoryKind::mapped);
  CHECK_THROWS_AS(loader.at("nope"), KeyError);

  PrefixedView extra(loader, "extra.");
  CHECK(extra.keys() == std::vector<std::string>{"w", "same"});
  CHECK(extra.at("w").dtype() == DType::f16);

  // The folder-only reader honours safetensors entries as well.
  TempDir copy;
  for (const auto& e : fs::directory_iterator(fixture)) fs::copy_file(e.path(), copy.path / e.path().filename());
  fs::remove(copy.path / "index.json");
  save_offload_index(index, copy.str());
  CHECK(load_offloaded_weights(copy.str()).at("extra.w").to_vector<float>() == std::vector<float>{1.5f, -2.0f, 4.0f});
}

TEST_CASE("offloaded weights are mapped, not copied", "[io][offload]") {
  TempDir dir;
  const Tensor big = Tensor::full(Shape{512, 512}, 0.25);  // 1 MiB
  OffloadIndex index = OffloadIndex::object();
  offload_weight(big, "big", dir.str(), &index);
  save_offload_index(index, dir.str());

  const MemoryStats before = memory_stats(Device::cpu());
  {
    const Tensor t = load_offloaded_weight((dir.path / "big.dat").string(), index["big"]);
    const MemoryStats during = memory_stats(Device::cpu());
    CHECK(grew(during.allocated_bytes, before.allocated_bytes) < mib);
    CHECK(grew(during.mapped_bytes, before.mapped_bytes) >= mib);
    CHECK(t.storage().kind() == MemoryKind::mapped);
    CHECK(t.at<float>({511, 511}) == 0.25f);

    OffloadedWeightsLoader loader(std::nullopt, dir.str());
    const Tensor u = loader.at("big");
    CHECK(grew(memory_stats(Device::cpu()).allocated_bytes, before.allocated_bytes) < mib);
    CHECK(u.storage().kind() == MemoryKind::mapped);
  }
  CHECK(memory_stats(Device::cpu()).mapped_bytes == before.mapped_bytes);
}

TEST_CASE("a short .dat file or a bad index entry is a FormatError naming it", "[io][offload]") {
  TempDir dir;
  fs::copy_file(fixture / "proj.weight.dat", dir.path / "w.dat");
  nlohmann::ordered_json info = {{"dtype", "float32"}, {"shape", {4, 3}}};
  try {
    (void)load_offloaded_weight((dir.path / "w.dat").string(), info);
    FAIL("accepted a short file");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()).find("w.dat") != std::string::npos);
  }
  info = {{"dtype", "complex64"}, {"shape", {2, 3}}};
  CHECK_THROWS_AS(load_offloaded_weight((dir.path / "w.dat").string(), info), FormatError);
}

TEST_CASE("make_offload_fixture.py reproduces the checked-in fixture", "[io][offload][python]") {
  if (std::system("python3 -c 'import json, os, struct' > /dev/null 2>&1") != 0) {
    WARN("python3 not found: the script is not re-run");
    return;
  }
  TempDir dir;
  const std::string script = (fs::path(ACCEL_SOURCE_DIR) / "tests" / "io" / "make_offload_fixture.py").string();
  REQUIRE(std::system(("python3 '" + script + "' '" + dir.str() + "'").c_str()) == 0);
  require_same_folder(dir.path, fixture);
}

TEST_CASE("offload folders round-trip every dtype bit for bit, 0-d tensors included", "[io][offload]") {
  // numpy's names where numpy has the type (the .dat holds the raw bytes either way); bf16 as
  // Accelerate records it; fp8 under torch's names, since numpy has no fp8 type and Accelerate's
  // offload_weight fails on it.
  const std::pair<DType, const char*> cases[] = {
      {DType::f64, "float64"},        {DType::f32, "float32"},      {DType::f16, "float16"},
      {DType::bf16, "bfloat16"},      {DType::f8_e4m3fn, "float8_e4m3fn"}, {DType::f8_e5m2, "float8_e5m2"},
      {DType::i64, "int64"},          {DType::i32, "int32"},        {DType::i16, "int16"},
      {DType::i8, "int8"},            {DType::u8, "uint8"},         {DType::boolean, "bool"}};
  // Every byte pattern in turn (0/1 for bool, the only valid bytes), so each bit of each type is
  // exercised: NaNs, infinities, subnormals and negative zero included.
  auto patterned = [](DType d, const Shape& shape, unsigned seed) {
    Tensor t = Tensor::empty(shape, d);
    auto* bytes = static_cast<unsigned char*>(t.data_ptr());
    for (std::size_t i = 0; i < t.nbytes(); ++i) {
      bytes[i] = d == DType::boolean ? static_cast<unsigned char>((i + seed) % 3 == 0) : static_cast<unsigned char>(i * 37 + seed);
    }
    return t;
  };

  TempDir dir;
  StateDict sd;
  for (const auto& [d, name] : cases) {
    sd.insert_or_assign(std::string(name) + ".weight", patterned(d, Shape{3, 256}, 1));
    sd.insert_or_assign(std::string(name) + ".scalar", patterned(d, Shape{}, 5));
  }
  offload_state_dict(dir.str(), sd);

  const OffloadIndex index = read_offload_index(dir.str());
  REQUIRE(index.size() == sd.size());
  const StateDict back = load_offloaded_weights(dir.str());
  for (const auto& [d, name] : cases) {
    INFO(name);
    const std::string w = std::string(name) + ".weight", s = std::string(name) + ".scalar";
    CHECK(index[w] == OffloadIndex({{"dtype", name}, {"shape", {3, 256}}}));
    CHECK(index[s] == OffloadIndex({{"dtype", name}, {"shape", OffloadIndex::array()}}));
    CHECK(fs::file_size(dir.path / (w + ".dat")) == 3 * 256 * itemsize(d));
    CHECK(fs::file_size(dir.path / (s + ".dat")) == itemsize(d));  // a 0-d tensor is stored as one element
    CHECK(read_raw(dir.path / (w + ".dat")) == bytes_of(sd.at(w)));

    for (const std::string& n : {w, s}) {
      const Tensor& t = back.at(n);
      CHECK(t.dtype() == d);
      CHECK(t.shape() == sd.at(n).shape());
      CHECK(bytes_of(t) == bytes_of(sd.at(n)));
      CHECK(t.storage().kind() == MemoryKind::mapped);
    }
    CHECK(back.at(s).dim() == 0);
  }
}

TEST_CASE("OffloadIndexMap keeps the dict's order and fills 100,000 entries in linear time", "[io][offload][hostile]") {
  OffloadIndexMap ix;
  ix.set("b", {{"dtype", "float32"}, {"shape", {1}}});
  ix.set("a", {{"dtype", "float32"}, {"shape", {2}}});
  ix.set("b", {{"dtype", "float16"}, {"shape", {3}}});  // an update keeps b first, as dict[k] = v does
  REQUIRE(ix.size() == 2);
  CHECK(ix.index().begin().key() == "b");
  CHECK((*ix.find("b"))["dtype"] == "float16");
  CHECK(ix.find("c") == nullptr);
  CHECK(ix.contains("a"));

  OffloadIndexMap from_file(read_offload_index(fixture.string()));
  CHECK(from_file.index() == read_offload_index(fixture.string()));
  CHECK((*from_file.find("proj.weight"))["dtype"] == "float32");
  CHECK(OffloadIndexMap(OffloadIndex()).empty());  // a null index is an empty one
  CHECK_THROWS_AS(OffloadIndexMap(OffloadIndex::array()), ValueError);

  // ordered_json's operator[] scans every key: 90,951 inserts that way took 16 s (bench_index_build).
  constexpr int n = 100'000;
  const double bound = accel_test::seconds_bound(2.0);
  OffloadIndexMap big;
  OffloadIndex plain;
  const double seconds = accel_test::fastest_within(bound, [&] {
    big = OffloadIndexMap();
    return accel_test::seconds_of([&] {
      for (int i = 0; i < n; ++i) {
        const std::string name = "model.layers." + std::to_string(i / 800) + ".mlp.experts." + std::to_string(i % 800) + ".weight";
        big.set(name, {{"dtype", "bfloat16"}, {"shape", {4}}});
      }
      plain = std::move(big).release();
    });
  });
  CHECK(seconds < bound);
  CHECK(plain.size() == n);
  CHECK(plain.back()["dtype"] == "bfloat16");
  CHECK(big.empty());  // release() leaves an empty map that takes entries again
  CHECK(big.find("model.layers.0.mlp.experts.0.weight") == nullptr);
  big.set("again", {{"dtype", "float32"}, {"shape", {1}}});
  CHECK(big.index().size() == 1);
}

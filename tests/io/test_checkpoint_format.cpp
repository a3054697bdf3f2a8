// CheckpointFormat: detection by bytes then name, the folder search order, and the readers that
// now decide by it (inspect, load_state_dict, torch .bin).
#include <catch2/catch.hpp>

#include "../file_bytes.hpp"
#include "../temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/io/checkpoint_files.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/inspect.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/sharding.hpp"
#include "accel/io/torch_bin_write.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;

namespace {

using accel_test::TempDir;

using accel_test::write_raw;

StateDict two_tensors() {
  StateDict sd;
  sd.insert_or_assign("a.weight", Tensor::from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}, Shape{2, 2}));
  sd.insert_or_assign("b.bias", Tensor::from_vector<float>({0.5f, -0.5f}).to(DType::bf16));
  return sd;
}

std::optional<CheckpointFormat> sniff(const std::string& bytes) {
  return sniff_checkpoint_format(as_bytes(bytes), bytes.size());
}

const std::string legacy_pickle("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);

}  // namespace

TEST_CASE("the format table has one row per format, in enum order", "[io][checkpoint_format]") {
  for (std::size_t i = 0; i < checkpoint_format_count; ++i) {
    CHECK(static_cast<std::size_t>(checkpoint_format_table[i].format) == i);
    CHECK_FALSE(checkpoint_format_table[i].name.empty());
    CHECK_FALSE(checkpoint_format_table[i].description.empty());
  }
  CHECK(checkpoint_format_name(CheckpointFormat::sharded_index) == "sharded");
  CHECK(checkpoint_format_info(CheckpointFormat::gguf).refusal.empty());
  CHECK_FALSE(checkpoint_format_info(CheckpointFormat::torch_legacy).refusal.empty());
  CHECK(checkpoint_format_info(CheckpointFormat::safetensors).refusal.empty());
  CHECK(checkpoint_folder_search_order ==
        std::array<std::string_view, 4>{"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                                        "pytorch_model.bin.index.json"});
}

TEST_CASE("sniff_checkpoint_format reads magic bytes and structure", "[io][checkpoint_format]") {
  std::string st;
  store_le<std::uint64_t>(st, 2);
  st += "{}";
  CHECK(sniff(st) == CheckpointFormat::safetensors);
  CHECK(sniff(std::string("PK\x03\x04", 4) + std::string(30, '\0')) == CheckpointFormat::torch_bin);
  CHECK(sniff("GGUF\x03") == CheckpointFormat::gguf);
  CHECK(sniff(legacy_pickle) == CheckpointFormat::torch_legacy);
  CHECK(sniff("  {\"metadata\": {}, \"weight_map\": {}}") == CheckpointFormat::sharded_index);
  CHECK_FALSE(sniff("{\"model_type\": \"gpt2\"}"));
  CHECK_FALSE(sniff("hello world, not a checkpoint"));
  CHECK_FALSE(sniff(""));
  // A header length that does not fit the file is not safetensors by its bytes.
  std::string long_header;
  store_le<std::uint64_t>(long_header, 1000);
  long_header += "{}";
  CHECK_FALSE(sniff(long_header));
}

TEST_CASE("detect_checkpoint_format looks at the bytes first, then the name", "[io][checkpoint_format]") {
  TempDir dir;
  const StateDict sd = two_tensors();
  save_file(sd, dir.file("weights.pt"));
  save_torch_bin(sd, dir.file("weights.safetensors"));
  CHECK(detect_checkpoint_format(dir.file("weights.pt")) == CheckpointFormat::safetensors);
  CHECK(detect_checkpoint_format(dir.file("weights.safetensors")) == CheckpointFormat::torch_bin);

  save_sharded(sd, dir.str() + "/sharded", std::int64_t{17});
  fs::copy_file(dir.file("sharded/model.safetensors.index.json"), dir.file("sharded/listing.json"));
  CHECK(detect_checkpoint_format(dir.file("sharded/listing.json")) == CheckpointFormat::sharded_index);

  SECTION("an empty or truncated file takes its name's format, so its reader says what is wrong") {
    write_raw(dir.file("empty.safetensors"), "");
    CHECK(detect_checkpoint_format(dir.file("empty.safetensors")) == CheckpointFormat::safetensors);
    CHECK_THROWS_WITH(SafetensorsFile::open(dir.file("empty.safetensors")), Catch::Contains("too small"));
    write_raw(dir.file("cut.bin"), std::string("\x01\x02\x03", 3));
    CHECK(detect_checkpoint_format(dir.file("cut.bin")) == CheckpointFormat::torch_bin);
    write_raw(dir.file("broken.index.json"), "{\"metadata\": {}}");
    CHECK(detect_checkpoint_format(dir.file("broken.index.json")) == CheckpointFormat::sharded_index);
  }
  SECTION("text is never a binary checkpoint, whatever it is called") {
    write_raw(dir.file("notes.txt"), "some notes\n");
    CHECK_THROWS_WITH(detect_checkpoint_format(dir.file("notes.txt")),
                      Catch::Contains("notes.txt") && Catch::Contains("not a checkpoint format accel reads") &&
                          Catch::Contains("expected safetensors, a sharded *.index.json, a torch .bin zip, an offload folder"));
    CHECK_THROWS_AS(detect_checkpoint_format(dir.file("notes.txt")), FormatError);
    write_raw(dir.file("model.safetensors"),
              "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 12345\n");
    CHECK_THROWS_WITH(detect_checkpoint_format(dir.file("model.safetensors")),
                      Catch::Contains("model.safetensors") && Catch::Contains("Git LFS pointer"));
    write_raw(dir.file("config.json"), "{\"model_type\": \"gpt2\"}");
    CHECK_FALSE(try_detect_checkpoint_format(dir.file("config.json")));
    write_raw(dir.file("empty"), "");
    CHECK_THROWS_WITH(detect_checkpoint_format(dir.file("empty")), Catch::Contains("it is empty"));
  }
  SECTION("GGUF is recognised by its bytes; legacy pickles are refused by name") {
    write_raw(dir.file("m.gguf"), std::string("GGUF\x03\0\0\0", 8));
    CHECK(detect_checkpoint_format(dir.file("m.gguf")) == CheckpointFormat::gguf);
    CHECK_NOTHROW(require_readable({CheckpointFormat::gguf, dir.file("m.gguf")}));
    write_raw(dir.file("old.bin"), legacy_pickle);
    CHECK(detect_checkpoint_format(dir.file("old.bin")) == CheckpointFormat::torch_legacy);
    CHECK_THROWS_WITH(load_torch_bin(dir.file("old.bin")),
                      Catch::Contains("old.bin") && Catch::Contains("legacy torch pickle") && Catch::Contains("zip format"));
    CHECK_THROWS_AS(parse_torch_bin(as_bytes(legacy_pickle), "mem.bin"), FormatError);
    CHECK_THROWS_WITH(load_state_dict(dir.file("old.bin")), Catch::Contains("legacy torch pickle"));
    CHECK_THROWS_WITH(inspect_checkpoint(dir.file("old.bin")), Catch::Contains("legacy torch pickle"));
  }
  SECTION("folders are model folders, or offload folders when that is what they hold") {
    CHECK(detect_checkpoint_format(dir.path / "sharded") == CheckpointFormat::model_folder);
    offload_state_dict(dir.str() + "/offload", sd);
    CHECK(detect_checkpoint_format(dir.path / "offload") == CheckpointFormat::offload_folder);
  }
  SECTION("a missing file is an IOError naming it") {
    CHECK_THROWS_AS(detect_checkpoint_format(dir.file("absent.safetensors")), IOError);
    CHECK_THROWS_WITH(detect_checkpoint_format(dir.file("absent.safetensors")), Catch::Contains("absent.safetensors"));
  }
}

TEST_CASE("resolve_checkpoint_folder: one order, errors naming the folder", "[io][checkpoint_format]") {
  TempDir dir;
  const StateDict sd = two_tensors();
  CHECK_FALSE(find_checkpoint_in_folder(dir.path));
  CHECK_THROWS_WITH(resolve_checkpoint_folder(dir.path), Catch::Contains(dir.str()) && Catch::Contains("model.safetensors.index.json"));
  CHECK_THROWS_AS(resolve_checkpoint_folder(dir.path), ValueError);

  save_torch_bin(sd, dir.file("pytorch_model.bin"));
  CHECK(resolve_checkpoint_folder(dir.path).format == CheckpointFormat::torch_bin);
  save_file(sd, dir.file("model.safetensors"));
  const ResolvedCheckpoint c = resolve_checkpoint_folder(dir.path);
  CHECK(c.format == CheckpointFormat::safetensors);
  CHECK(c.path == dir.path / "model.safetensors");
  CHECK(resolve_checkpoint(dir.file("pytorch_model.bin")).format == CheckpointFormat::torch_bin);
  CHECK(resolve_checkpoint_files(dir.str()) == std::vector<std::string>{dir.file("model.safetensors")});
}

TEST_CASE("inspect_checkpoint reports its format and dtypes as types", "[io][checkpoint_format][inspect]") {
  TempDir dir;
  const StateDict sd = two_tensors();
  save_file(sd, dir.file("model.safetensors"), {{"format", "pt"}});
  const InspectResult r = inspect_checkpoint(dir.str());
  CHECK(r.kind == CheckpointFormat::safetensors);
  REQUIRE(r.tensors.size() == 2);
  CHECK(r.tensors[1].dtype == DType::bf16);
  CHECK(inspect_to_json(r)["tensors"][1]["dtype"] == "bfloat16");
  CHECK(format_inspect_table(r).starts_with("format: safetensors\n"));

  save_torch_bin(sd, dir.file("renamed.safetensors"));
  CHECK(inspect_checkpoint(dir.file("renamed.safetensors")).kind == CheckpointFormat::torch_bin);
  offload_state_dict(dir.str() + "/offload", sd);
  CHECK(inspect_checkpoint(dir.str() + "/offload").kind == CheckpointFormat::offload_folder);
  save_sharded(sd, dir.str() + "/sharded", std::int64_t{17});
  const InspectResult s = inspect_checkpoint(dir.str() + "/sharded");
  CHECK(s.kind == CheckpointFormat::sharded_index);
  CHECK(format_inspect_table(s).starts_with("format: sharded\n"));

  write_raw(dir.file("notes.txt"), "not a checkpoint\n");
  CHECK_THROWS_WITH(inspect_checkpoint(dir.file("notes.txt")), Catch::Contains("not a checkpoint format accel reads"));
}

TEST_CASE("load_state_dict reads a file as its bytes show", "[io][checkpoint_format]") {
  TempDir dir;
  const StateDict sd = two_tensors();
  save_torch_bin(sd, dir.file("weights.safetensors"));
  const StateDict got = load_state_dict(dir.file("weights.safetensors"));
  CHECK(got.at("a.weight").to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
  save_sharded(sd, dir.str(), std::int64_t{17});
  CHECK_THROWS_WITH(load_state_dict(dir.file("model.safetensors.index.json")),
                    Catch::Contains("sharded checkpoint index") && Catch::Contains("load_checkpoint_in_model"));
}

// engine/: from_pretrained does what `accel run` does before it generates: tokenizer, quantizer
// (on load, or as the folder was saved, through the one registry), placement with generation's
// reserve and the read-ahead depth that fits, for a folder and a GGUF file.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/engine/from_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/gguf_model.hpp"
#include "accel/io/gguf_write.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/sharding.hpp"
#include "accel/models/generate.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

fs::path model_dir(const std::string& name) { return fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / name; }

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9}, Shape{1, 6}); }

std::vector<float> logits(const engine::LoadedModel& m) { return m.model().logits(prompt()).to(DType::f32).to_vector<float>(); }

nlohmann::json read_config(const fs::path& folder) { return nlohmann::json::parse(std::ifstream(folder / "config.json")); }

std::int64_t weight_bytes(const engine::LoadedModel& m) {
  std::int64_t n = 0;
  for (const auto& [name, t] : m.model().module().named_parameters()) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

}  // namespace

TEST_CASE("from_pretrained loads a folder as it is, with its tokenizer when it has one", "[engine]") {
  const auto plain = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.show_progress = false});
  const std::vector<float> want = plain.model->logits(prompt()).to_vector<float>();
  auto m = engine::from_pretrained(model_dir("tiny_llama"));
  CHECK(logits(m) == want);
  CHECK(m.tokenizer.has_value() == fs::is_regular_file(model_dir("tiny_llama") / "tokenizer.json"));
  CHECK_FALSE(m.quantization);
  CHECK(m.placed_bytes().empty());
  CHECK_FALSE(m.offload_stream());
  CHECK_FALSE(engine::from_pretrained(model_dir("tiny_llama"), {.with_tokenizer = false}).tokenizer);
  // Resident weights: one token ran through the model as it loaded, and changed nothing.
  CHECK(m.warmup_seconds.value_or(-1.0) >= 0.0);
  const auto cold = engine::from_pretrained(model_dir("tiny_llama"), {.warmup = false});
  CHECK_FALSE(cold.warmup_seconds);
  CHECK(logits(cold) == want);
  CHECK(engine::input_device(m.model()) == Device::cpu());
}

TEST_CASE("from_pretrained places under a budget with generation's reserve and a read-ahead that fits", "[engine]") {
  const auto plain = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.show_progress = false});
  const std::vector<float> want = plain.model->logits(prompt()).to_vector<float>();
  std::int64_t weights = 0;
  for (const auto& [n, t] : plain.model->module().named_parameters()) weights += static_cast<std::int64_t>(t.nbytes());
  for (const std::size_t depth : {0, 1, 3}) {
    INFO("offload_depth " << depth);
    auto m = engine::from_pretrained(model_dir("tiny_llama"),
                                     {.device_map = std::string("auto"),
                                      .max_memory = plan::MaxMemory{{Placement::cpu(), ByteSize(weights * 3 / 2)}},
                                      .offload_depth = depth, .reserve_tokens = 16});
    REQUIRE(m.generation);
    CHECK(m.generation->asked_depth == depth);
    CHECK(m.offload_depth == std::min<std::size_t>(depth, 1));  // the budget holds one buffer beside the computing block
    CHECK(m.generation->reservations.front().what.starts_with("KV cache for 16 tokens"));
    // With a ring to keep, blocks go to disk and stream at the depth in force (sync_offload keeps
    // none: the plan then fits the weights beside the KV cache and activations).
    const auto placed = m.placed_bytes();
    CHECK(placed.count("disk") == (depth > 0 ? 1u : 0u));
    // No warm-up where weights stream in: it would read every offloaded one for nothing.
    CHECK(m.warmup_seconds.has_value() == (depth == 0));
    if (const auto stream = m.offload_stream(); depth > 0) {
      REQUIRE(stream);
      CHECK(stream->depth() == m.offload_depth);
    }
    CHECK(logits(m) == want);
  }
  CHECK_THROWS_AS(engine::from_pretrained(model_dir("tiny_llama"), {.offload_depth = policy::max_compiled_prefetch_depth + 1}),
                  ValueError);
}

TEST_CASE("from_pretrained quantizes on load and reads a quantized folder through the registry", "[engine]") {
  accel_test::TempDir dir;
  const quant::BitsAndBytesConfig nf4{.load_in_4bit = true, .bnb_4bit_quant_type = quant::BnbQuantType::nf4};
  auto q = engine::from_pretrained(model_dir("tiny_llama"), {.quantize = quant::BnbQuantizer(nf4)});
  REQUIRE(q.quantization);
  CHECK(*q.quantization == "bitsandbytes");
  CHECK(q.quantized_layers > 0);
  const std::vector<float> on_load = logits(q);
  // Saved, then loaded as it was saved: config.json's quantization_config picks the backend.
  const auto config = nlohmann::json::parse(std::ifstream(model_dir("tiny_llama") / "config.json"));
  quant::save_bnb_model(q.model().module(), config, dir.str(), nf4);
  auto saved = engine::from_pretrained(dir.path);
  REQUIRE(saved.quantization);
  CHECK(*saved.quantization == "bitsandbytes");
  CHECK(saved.quantized_layers == q.quantized_layers);
  CHECK(logits(saved) == on_load);
  // Quantizing what is quantized already names the folder.
  CHECK_THROWS_WITH(engine::from_pretrained(dir.path, {.quantize = quant::BnbQuantizer(nf4)}),
                    Catch::Contains(dir.str()) && Catch::Contains("quantized already"));
}

TEST_CASE("from_pretrained keeps a GGUF file's blocks and reads its tokenizer", "[engine]") {
  accel_test::TempDir dir;
  const std::string file = dir.file("model.gguf");
  const auto config = nlohmann::json::parse(std::ifstream(model_dir("tiny_llama") / "config.json"));
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const auto& [k, t] : io::load_state_dict(io::resolve_checkpoint_folder(model_dir("tiny_llama")).path.string())) {
    weights.emplace_back(k, t);
  }
  io::save_gguf_model(file, config, weights);
  auto m = engine::from_pretrained(file);
  REQUIRE(m.quantization);
  CHECK(*m.quantization == "gguf");
  CHECK(m.pretrained.dtype == DType::f32);  // the file's own float dtype
  CHECK_FALSE(m.tokenizer);                  // the file was written without one
  const auto plain = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.show_progress = false});
  const std::vector<float> want = plain.model->logits(prompt()).to_vector<float>(), got = logits(m);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-4));
  CHECK_THROWS_WITH(engine::from_pretrained(file, {.quantize = quant::BnbQuantizer({.load_in_8bit = true})}),
                    Catch::Contains("GGUF"));
}

TEST_CASE("from_pretrained reads every checkpoint format a folder holds, placed or not", "[engine][formats]") {
  const auto plain = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.show_progress = false});
  const std::vector<float> want = plain.model->logits(prompt()).to_vector<float>();
  const io::StateDict weights = io::load_state_dict(io::resolve_checkpoint_folder(model_dir("tiny_llama")).path.string());
  std::int64_t total = 0;
  for (const auto& [n, t] : weights) total += static_cast<std::int64_t>(t.nbytes());
  for (const auto& [label, shard, safe] : std::vector<std::tuple<std::string, std::int64_t, bool>>{
           {"safetensors shards", total / 4, true}, {"pytorch_model.bin", total * 2, false}, {".bin shards", total / 4, false}}) {
    INFO(label);
    accel_test::TempDir folder;
    fs::copy_file(model_dir("tiny_llama") / "config.json", folder.file("config.json"));
    io::save_sharded(weights, folder.str(), shard, safe);
    CHECK(logits(engine::from_pretrained(folder.path)) == want);
    // Half on disk: a .bin checkpoint's disk weights are written to the offload folder first.
    auto placed = engine::from_pretrained(folder.path, {.device_map = std::string("auto"),
                                                        .max_memory = plan::MaxMemory{{Placement::cpu(), ByteSize(total / 2)}},
                                                        .offload_depth = 1});
    CHECK(placed.placed_bytes().count("disk") == 1);
    CHECK(logits(placed) == want);
  }
}

TEST_CASE("from_pretrained loads Quanto and TorchAO folders through the registry, in memory and placed", "[engine][quant]") {
  const auto config = read_config(model_dir("tiny_llama"));
  // Quanto: quantized on load, saved as Diffusers saves it, read back as stored.
  auto q = engine::from_pretrained(model_dir("tiny_llama"), {.quantize = quant::QuantoQuantizer({.weights_dtype = "int8"})});
  REQUIRE(q.quantization);
  CHECK(*q.quantization == "quanto");
  REQUIRE(q.quantized_layers > 0);
  const std::vector<float> on_load = logits(q);
  accel_test::TempDir quanto;
  quant::save_quanto_model(q.model().module(), config, quanto.path, q.pretrained.dtype);
  auto saved = engine::from_pretrained(quanto.path);
  REQUIRE(saved.quantization);
  CHECK(*saved.quantization == "quanto");
  CHECK(saved.quantized_layers == q.quantized_layers);
  CHECK(logits(saved) == on_load);
  // Placed with part of it on disk: the codes and scales stream in and compute the same.
  auto placed = engine::from_pretrained(quanto.path, {.device_map = std::string("auto"),
                                                      .max_memory = plan::MaxMemory{{Placement::cpu(), ByteSize(weight_bytes(saved) / 2)}},
                                                      .offload_depth = 2});
  CHECK(placed.placed_bytes().count("disk") == 1);
  CHECK(placed.quantized_layers == q.quantized_layers);
  CHECK(logits(placed) == on_load);

  // TorchAO: a config naming it over float weights quantizes them on load, as on load by hand.
  const quant::TorchAoConfig int8wo{.quant_type = "int8wo"};
  auto by_hand = engine::from_pretrained(model_dir("tiny_llama"), {.dtype = DType::f32, .quantize = quant::TorchAoQuantizer(int8wo)});
  accel_test::TempDir torchao;
  nlohmann::json with_config = config;
  with_config["quantization_config"] = int8wo.to_json();
  std::ofstream(torchao.file("config.json")) << with_config.dump(2);
  fs::copy_file(io::resolve_checkpoint_folder(model_dir("tiny_llama")).path, torchao.file("model.safetensors"));
  auto from_config = engine::from_pretrained(torchao.path, {.dtype = DType::f32});
  REQUIRE(from_config.quantization);
  CHECK(*from_config.quantization == "torchao");
  CHECK(from_config.quantized_layers == by_hand.quantized_layers);
  CHECK(from_config.quantized_layers > 0);
  CHECK(logits(from_config) == logits(by_hand));
}

TEST_CASE("from_pretrained places a model quantized on load under a budget, blocks streaming", "[engine][quant]") {
  const quant::BitsAndBytesConfig nf4{.load_in_4bit = true, .bnb_4bit_quant_type = quant::BnbQuantType::nf4};
  auto whole = engine::from_pretrained(model_dir("tiny_llama"), {.quantize = quant::BnbQuantizer(nf4)});
  const std::vector<float> want = logits(whole);
  auto placed = engine::from_pretrained(model_dir("tiny_llama"),
                                        {.device_map = std::string("auto"),
                                         .max_memory = plan::MaxMemory{{Placement::cpu(), ByteSize(weight_bytes(whole) / 2)}},
                                         .offload_depth = 1, .quantize = quant::BnbQuantizer(nf4)});
  CHECK(placed.placed_bytes().count("disk") == 1);
  CHECK(placed.quantized_layers == whole.quantized_layers);
  REQUIRE(placed.offload_stream());
  CHECK(placed.offload_stream()->depth() == placed.offload_depth);
  CHECK(logits(placed) == want);
}

TEST_CASE("the reserve a split plans for a quantized model is sized from its quantized blocks", "[engine][quant]") {
  // Across processes, from_pretrained plans generation's reserve before the split loader runs:
  // on a scratch meta model with the quantizer's layers swapped in, as the single-process path
  // plans it, so the read-ahead buffer is one quantized block, not its float twin.
  const quant::BitsAndBytesConfig nf4{.load_in_4bit = true, .bnb_4bit_quant_type = quant::BnbQuantType::nf4};
  auto whole = engine::from_pretrained(model_dir("tiny_llama"), {.quantize = quant::BnbQuantizer(nf4)});
  const engine::FromPretrainedOptions o{.device_map = std::string("auto"),
                                        .max_memory = plan::MaxMemory{{Placement::cpu(), ByteSize(weight_bytes(whole) / 2 + 64000)}},
                                        .offload_depth = 1,
                                        .reserve_tokens = 16,
                                        .quantize = quant::BnbQuantizer(nf4)};
  auto placed = engine::from_pretrained(model_dir("tiny_llama"), o);
  REQUIRE(placed.generation);
  const auto config = dispatch::read_model_config(model_dir("tiny_llama"));
  const auto planned = engine::detail::planned_generation_reserve(
      model_dir("tiny_llama"), config, engine::detail::load_options(model_dir("tiny_llama"), config, o), o, 1);
  CHECK(planned.layer == placed.generation->layer);
  CHECK(planned.largest_layer == placed.generation->largest_layer);
  CHECK(planned.depth == placed.generation->depth);
  CHECK(placed.placed_bytes().count("disk") == 1);
  REQUIRE(planned.reservations.size() == placed.generation->reservations.size());
  for (std::size_t i = 0; i < planned.reservations.size(); ++i) {
    CHECK(planned.reservations[i].what == placed.generation->reservations[i].what);
    CHECK(planned.reservations[i].bytes == placed.generation->reservations[i].bytes);
  }
  engine::FromPretrainedOptions f = o;
  f.quantize.reset();
  f.max_memory = plan::MaxMemory{{Placement::cpu(), ByteSize(weight_bytes(whole) * 2 + 64000)}};
  const auto as_float = engine::detail::planned_generation_reserve(
      model_dir("tiny_llama"), config, engine::detail::load_options(model_dir("tiny_llama"), config, f), f, 1);
  std::printf("[engine] read-ahead buffer of tiny_llama: float %lld bytes, nf4 %lld bytes\n",
              static_cast<long long>(as_float.layer.floor_bytes()), static_cast<long long>(planned.layer.floor_bytes()));
  CHECK(planned.layer < as_float.layer);
}

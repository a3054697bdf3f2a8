// GGUF model files: the test models written by save_gguf_model (llama.cpp's names, Q/K row order,
// transposes, metadata) load back through load_pretrained_causal_lm as the same model, bit for bit,
// in F32 and F16, placed on CPU + disk under each offload policy; Q8_0 weights dequantize on load
// to exactly the model of their dequantized values; bad files are typed errors.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/gguf_model.hpp"
#include "accel/io/gguf_write.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/models/generate.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

fs::path gguf_model_dir(const std::string& name) { return fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / name; }

Tensor gguf_prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9}, Shape{1, 6}); }

nlohmann::json config_of(const std::string& name) {
  return nlohmann::json::parse(std::ifstream(gguf_model_dir(name) / "config.json"));
}

std::vector<std::pair<std::string, Tensor>> weights_of(const std::string& name, std::optional<DType> dtype = std::nullopt) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [k, t] : io::load_state_dict(io::resolve_checkpoint_folder(gguf_model_dir(name)).path.string())) {
    out.emplace_back(k, dtype && t.is_floating_point() ? t.to(*dtype) : t);
  }
  return out;
}

std::vector<float> logits_of(dispatch::PretrainedModel& p) { return p.model->logits(gguf_prompt()).to(DType::f32).to_vector<float>(); }

/// ggml's Q8_0 of a float32 row-major matrix: per 32 values d = max|x| / 127, q = round(x / d).
/// Returns the bytes and writes the values they stand for into `dequantized`.
std::string q8_0_bytes(const Tensor& m, Tensor& dequantized) {
  const Tensor c = m.to(DType::f32).contiguous();
  const auto* x = static_cast<const float*>(c.data_ptr());
  const std::size_t n = static_cast<std::size_t>(c.numel());
  REQUIRE(n % 32 == 0);
  std::string out;
  dequantized = Tensor::empty(c.shape(), DType::f32, Device::cpu());
  auto* y = static_cast<float*>(dequantized.data_ptr());
  for (std::size_t b = 0; b < n; b += 32) {
    float amax = 0;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const half d(amax / 127.0f);
    const float df = static_cast<float>(d), inv = df ? 1.0f / df : 0.0f;
    io::store_le<std::uint16_t>(out, d.bits);
    for (std::size_t i = 0; i < 32; ++i) {
      const auto q = static_cast<std::int8_t>(std::lround(std::clamp(x[b + i] * inv, -127.0f, 127.0f)));
      out.push_back(static_cast<char>(q));
      y[b + i] = static_cast<float>(q) * df;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("permute_qk_rows and unpermute_qk_rows are inverse and match llama.cpp's order", "[dispatch][gguf]") {
  // Two heads of dimension 4: HF rows (h, j, i) -> GGUF rows (h, i, j).
  const Tensor hf = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, Shape{8, 1});
  const Tensor g = io::permute_qk_rows(hf, 2);
  CHECK(g.to_vector<float>() == std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7});
  CHECK(io::unpermute_qk_rows(g, 2).to_vector<float>() == hf.to_vector<float>());
  CHECK_THROWS_AS(io::permute_qk_rows(hf, 3), ShapeError);
  const auto& llama = io::gguf_architecture("llama", "test");
  CHECK(io::gguf_tensor_name(llama, "model.layers.12.self_attn.k_proj.weight") == "blk.12.attn_k.weight");
  CHECK(io::hf_tensor_name(llama, "blk.3.ffn_gate.weight") == "model.layers.3.mlp.gate_proj.weight");
  CHECK_FALSE(io::hf_tensor_name(llama, "blk.03.ffn_gate.weight"));
  CHECK_FALSE(io::gguf_tensor_name(llama, "model.layers.0.self_attn.rotary_emb.inv_freq"));
}

TEST_CASE("A GGUF file of each test model loads as the same model", "[dispatch][gguf][formats]") {
  for (const std::string name : {"tiny_llama", "tiny_gpt2", "tiny_llama_tied_headdim", "tiny_qwen2", "tiny_llama_rope_yarn"}) {
    INFO(name);
    auto ref_model = dispatch::load_pretrained_causal_lm(gguf_model_dir(name), {.show_progress = false});
    const auto ref = logits_of(ref_model);
    const models::GenerationConfig greedy{.max_new_tokens = 5, .ignore_eos = true};
    const auto ref_tokens = models::generate(*ref_model.model, gguf_prompt(), greedy).new_tokens;
    accel_test::TempDir dir;
    const std::string file = dir.file("model.gguf");
    io::save_gguf_model(file, config_of(name), weights_of(name));

    const auto ck = io::GgufCheckpoint::open(file);
    CHECK(ck.config()["model_type"] == config_of(name)["model_type"]);
    CHECK(ck.config()["torch_dtype"] == "float32");
    auto p = dispatch::load_pretrained_causal_lm(file, {.show_progress = false});
    CHECK(p.dtype == DType::f32);
    CHECK(logits_of(p) == ref);
    CHECK(models::generate(*p.model, gguf_prompt(), greedy).new_tokens == ref_tokens);

    // Half on the CPU, the rest on disk (written to an offload folder), under each policy.
    std::int64_t total = 0;
    for (const auto& t : ck.file().tensors()) total += static_cast<std::int64_t>(t.nbytes);
    MaxMemory half;
    half.add(Placement::cpu(), ByteSize(total / 2));
    auto placed = [&](std::size_t depth) {
      INFO("prefetch depth " << depth);
      auto q = dispatch::load_pretrained_causal_lm(
          file, {.show_progress = false, .device_map = std::string("auto"), .max_memory = half, .offload_depth = depth});
      bool disk = false;
      for (const auto& [k, where] : *q.device_map) disk |= where.is_disk();
      CHECK(disk);
      CHECK(logits_of(q) == ref);
    };
    placed(0);
    placed(2);
  }
}

TEST_CASE("An F16 GGUF file loads as the float16 model", "[dispatch][gguf][formats]") {
  const std::string name = "tiny_llama";
  accel_test::TempDir dir;
  // The reference: the same float16 weights from safetensors, computed in float16.
  fs::copy_file(gguf_model_dir(name) / "config.json", dir.file("config.json"));
  const auto w16 = weights_of(name, DType::f16);
  io::save_file(io::NamedTensors(w16.begin(), w16.end()), dir.file("model.safetensors"));
  auto ref = dispatch::load_pretrained_causal_lm(dir.str(), {.dtype = DType::f16, .show_progress = false});
  io::save_gguf_model(dir.file("model.gguf"), config_of(name), w16);
  CHECK(io::GgufCheckpoint::open(dir.file("model.gguf")).config()["torch_dtype"] == "float16");
  auto p = dispatch::load_pretrained_causal_lm(dir.file("model.gguf"), {.show_progress = false});
  CHECK(p.dtype == DType::f16);
  CHECK(logits_of(p) == logits_of(ref));
}

TEST_CASE("Q8_0 GGUF weights dequantize on load to exactly their values", "[dispatch][gguf][formats]") {
  for (const std::string name : {"tiny_llama", "tiny_gpt2"}) {
    INFO(name);
    const auto config = config_of(name);
    const auto weights = weights_of(name);
    accel_test::TempDir dir;
    // A GGUF F32 file, rewritten with every 2-D block weight as Q8_0, and the float model of the
    // values those bytes stand for.
    io::save_gguf_model(dir.file("f32.gguf"), config, weights);
    const auto f32 = io::GgufFile::open(dir.file("f32.gguf"));
    io::GgufWriter w;
    for (const auto& [k, v] : f32.header().metadata) w.add(k, v);
    std::vector<std::pair<std::string, Tensor>> as_dequantized;  // GGUF names and layouts
    for (const auto& t : f32.tensors()) {
      const Tensor v = f32.tensor(t.name);
      if (t.name.starts_with("blk.") && t.ne.size() == 2 && t.ne[0] % 32 == 0) {
        Tensor deq;
        w.add_tensor_bytes(t.name, io::GgmlType::q8_0, t.ne, q8_0_bytes(v, deq));
        as_dequantized.emplace_back(t.name, deq);
      } else {
        w.add_tensor(t.name, v);
        as_dequantized.emplace_back(t.name, v);
      }
    }
    w.save(dir.file("q8_0.gguf"));
    io::GgufWriter plain;
    for (const auto& [k, v] : f32.header().metadata) plain.add(k, v);
    for (const auto& [k, v] : as_dequantized) plain.add_tensor(k, v);
    plain.save(dir.file("dequantized.gguf"));

    const auto q = io::GgufCheckpoint::open(dir.file("q8_0.gguf"));
    CHECK(q.config()["torch_dtype"] == "bfloat16");
    auto p = dispatch::load_pretrained_causal_lm(dir.file("q8_0.gguf"), {.dtype = DType::f32, .show_progress = false});
    auto ref = dispatch::load_pretrained_causal_lm(dir.file("dequantized.gguf"), {.show_progress = false});
    CHECK(logits_of(p) == logits_of(ref));
  }
}

TEST_CASE("GGUF model files with what accel cannot read are FormatError naming the file", "[dispatch][gguf]") {
  accel_test::TempDir dir;
  const auto write = [&](const std::string& arch, bool embd) {
    io::GgufWriter w;
    w.add("general.architecture", io::gguf_string(arch));
    if (embd) w.add_tensor("token_embd.weight", Tensor::zeros(Shape{4, 8}, DType::f32));
    w.save(dir.file("bad.gguf"));
    return dir.file("bad.gguf");
  };
  CHECK_THROWS_WITH(io::GgufCheckpoint::open(write("falcon", true)),
                    Catch::Contains("bad.gguf") && Catch::Contains("'falcon'") && Catch::Contains("llama, qwen2, gpt2"));
  CHECK_THROWS_WITH(io::GgufCheckpoint::open(write("llama", false)), Catch::Contains("token_embd"));
  CHECK_THROWS_WITH(io::GgufCheckpoint::open(write("llama", true)),
                    Catch::Contains("bad.gguf") && Catch::Contains("llama.attention.head_count"));
  io::GgufWriter w;
  CHECK_THROWS_AS(w.add_tensor_bytes("x", io::GgmlType::q8_0, {32}, std::string(33, '\0')), ShapeError);
  w.add("k", io::gguf_u32(1));
  CHECK_THROWS_AS(w.add("k", io::gguf_u32(2)), ValueError);
}

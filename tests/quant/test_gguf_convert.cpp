// GGUF files written from model folders: GgufTypeRules chooses every tensor type llama-quantize
// chooses (tests/data/ggml_quantize/mixtures.json, made by llama-quantize itself); convert_to_gguf's
// F32 files load back as the folder's model bit for bit, its quantized ones hold ggml's bytes for
// each weight and stay near the float model; bad input is a typed error and leaves no file.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/quant/quantizers/gguf_convert.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

fs::path convert_model_dir(const std::string& name) { return fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / name; }

std::vector<float> convert_logits(const fs::path& model, std::int64_t tokens = 8) {
  auto p = dispatch::load_pretrained_causal_lm(model);
  std::vector<std::int64_t> prompt{3, 1, 4, 1, 5, 9, 2, 6};
  prompt.resize(static_cast<std::size_t>(tokens));
  const Tensor ids = Tensor::from_vector(prompt, Shape{1, tokens});
  return p.model->logits(ids).to(DType::f32).to_vector<float>();
}

/// A LLaMA folder whose rows fill 256-blocks (so every K type applies), random float32 weights.
fs::path write_wide_llama(const fs::path& dir, int layers = 2) {
  const int hidden = 256, ffn = 512, vocab = 64, heads = 4, kv = 2, hd = hidden / heads;
  fs::create_directories(dir);
  nlohmann::json config = {{"model_type", "llama"},       {"architectures", {"LlamaForCausalLM"}},
                           {"hidden_size", hidden},       {"intermediate_size", ffn},
                           {"num_hidden_layers", layers}, {"num_attention_heads", heads},
                           {"num_key_value_heads", kv},   {"vocab_size", vocab},
                           {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
                           {"rope_theta", 10000.0},       {"tie_word_embeddings", false},
                           {"torch_dtype", "float32"}};
  std::ofstream(dir / "config.json") << config.dump(1);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const auto rand = [&](std::vector<std::int64_t> shape, float offset = 0.0f) {
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = offset + normal(rng);
    return Tensor::from_vector(v, Shape(shape));
  };
  std::map<std::string, Tensor> w;
  w["model.embed_tokens.weight"] = rand({vocab, hidden});
  w["lm_head.weight"] = rand({vocab, hidden});
  w["model.norm.weight"] = rand({hidden}, 1.0f);
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = rand({hidden}, 1.0f);
    w[p + "post_attention_layernorm.weight"] = rand({hidden}, 1.0f);
    w[p + "self_attn.q_proj.weight"] = rand({hidden, hidden});
    w[p + "self_attn.k_proj.weight"] = rand({kv * hd, hidden});
    w[p + "self_attn.v_proj.weight"] = rand({kv * hd, hidden});
    w[p + "self_attn.o_proj.weight"] = rand({hidden, hidden});
    w[p + "mlp.gate_proj.weight"] = rand({ffn, hidden});
    w[p + "mlp.up_proj.weight"] = rand({ffn, hidden});
    w[p + "mlp.down_proj.weight"] = rand({hidden, ffn});
  }
  io::save_file(w, (dir / "model.safetensors").string());
  return dir;
}

}  // namespace

TEST_CASE("GgufTypeRules chooses llama-quantize's type for every tensor of every scheme", "[gguf_convert]") {
  const auto path = fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "ggml_quantize" / "mixtures.json";
  const auto fixture = nlohmann::json::parse(std::ifstream(path));
  std::size_t compared = 0;
  for (const auto& [model, m] : fixture.at("models").items()) {
    for (const auto& [scheme_name, types] : m.at("types").items()) {
      const quant::GgufModelShape shape{m.at("architecture").get<std::string>(), m.at("n_layer").get<int>(),
                                        m.at("n_head").get<int>(), m.at("n_head_kv").get<int>(),
                                        m.at("has_output").get<bool>()};
      quant::GgufTypeRules rules(quant::gguf_scheme(scheme_name), shape);
      const auto& tensors = m.at("tensors");
      REQUIRE(tensors.size() == types.size());
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const auto name = tensors[i][0].get<std::string>();
        const auto ne = tensors[i][1].get<std::vector<std::uint64_t>>();
        std::string want = types[i].get<std::string>();
        // The fixture's input is F32; llama-quantize leaves what it does not quantize as it finds
        // it, and the converter's f16 output it normally reads holds GPT-2's position embedding in F16.
        if (name == "position_embd.weight") want = "F16";
        INFO(model << " " << scheme_name << " " << name);
        CHECK(std::string(io::ggml_type_name(rules.type_of(name, ne))) == want);
        ++compared;
      }
    }
  }
  CHECK(compared > 2000);
}

TEST_CASE("GgufTypeRules keeps float schemes' vectors and norms in F32, as the converter does", "[gguf_convert]") {
  for (const char* s : {"f16", "bf16", "f32"}) {
    quant::GgufTypeRules rules(quant::gguf_scheme(s), {"llama", 2, 4, 4, true});
    const auto base = quant::gguf_scheme(s).base;
    CHECK(rules.type_of("token_embd.weight", {256, 64}) == base);
    CHECK(rules.type_of("blk.0.attn_q.weight", {256, 256}) == base);
    CHECK(rules.type_of("blk.0.attn_norm.weight", {256}) == io::GgmlType::f32);
    CHECK(rules.type_of("blk.0.attn_q.bias", {256}) == io::GgmlType::f32);
  }
  CHECK_THROWS_AS(quant::gguf_scheme("q3_k_m"), ValueError);
  CHECK_THROWS_WITH(quant::gguf_scheme("q4_k"), Catch::Contains("q4_k_m"));
}

TEST_CASE("convert_to_gguf: an F32 file is the folder's model, bit for bit, for every architecture", "[gguf_convert]") {
  accel_test::TempDir tmp;
  for (const char* name : {"tiny_llama", "tiny_llama_tied_headdim", "tiny_qwen2", "tiny_mistral", "tiny_gpt2"}) {
    INFO(name);
    const auto out = tmp.path / (std::string(name) + ".gguf");
    std::vector<std::size_t> seen;
    const auto r = quant::convert_to_gguf(convert_model_dir(name), out,
                                          {.scheme = "f32", .progress = [&](std::size_t done, std::size_t total) {
                                             CHECK(done <= total);
                                             seen.push_back(done);
                                           }});
    CHECK(r.types.size() == 1);
    CHECK(r.types.count("F32") == 1);
    CHECK(r.tensors == seen.size());
    CHECK(std::is_sorted(seen.begin(), seen.end()));
    CHECK(seen.back() == r.input_bytes);
    CHECK_FALSE(r.tokenizer);
    CHECK(r.output_bytes == fs::file_size(out));
    const auto f = io::GgufFile::open(out.string());
    CHECK(f.get_uint("general.file_type") == 0);
    CHECK(f.get_uint("general.quantization_version") == 2);
    CHECK(f.find("tokenizer.ggml.model") == nullptr);  // no tokenizer.json, no tokenizer keys
    CHECK(*f.find("general.architecture")->as_string() == (std::string(name) == "tiny_mistral" ? "llama" : r.architecture));
    // Mistral's sliding window (4 here) has no GGUF key: llama.cpp attends to the whole context.
    const std::int64_t n = std::string(name) == "tiny_mistral" ? 4 : 8;
    CHECK(convert_logits(out, n) == convert_logits(convert_model_dir(name), n));
  }
}

TEST_CASE("convert_to_gguf: quantized schemes hold ggml's blocks of each weight and stay near the float model",
          "[gguf_convert]") {
  accel_test::TempDir tmp;
  const auto folder = write_wide_llama(tmp.path / "wide");
  const auto want = convert_logits(folder);
  const auto config = nlohmann::json::parse(std::ifstream(folder / "config.json"));
  for (const auto& [scheme, bound] : std::vector<std::pair<std::string, double>>{
           // Logits of random weights two layers deep: each bit less about doubles the error.
           {"f16", 0.002}, {"bf16", 0.02}, {"q8_0", 0.04}, {"q6_k", 0.08}, {"q5_k_m", 0.16}, {"q5_0", 0.2},
           {"q4_k_m", 0.3}, {"q4_0", 0.45}}) {
    INFO(scheme);
    const auto out = tmp.path / (scheme + ".gguf");
    const auto r = quant::convert_to_gguf(folder, out, {.scheme = scheme});
    const auto f = io::GgufFile::open(out.string());
    CHECK(f.get_uint("general.file_type") == quant::gguf_scheme(scheme).file_type);
    // Every tensor's type is the rules' choice, and a quantized weight's bytes are ggml's
    // quantizer's on the weight as the file lays it out (LLaMA's q / k rows permuted).
    quant::GgufTypeRules rules(quant::gguf_scheme(scheme), {"llama", 2, 4, 2, true});
    for (const auto& t : f.tensors()) {
      INFO(t.name);
      CHECK(t.type == rules.type_of(t.name, t.ne));
    }
    const auto st = io::SafetensorsFile::open((folder / "model.safetensors").string());
    for (const auto& [hf, gguf] : std::vector<std::pair<std::string, std::string>>{
             {"model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight"},
             {"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"},
             {"lm_head.weight", "output.weight"}}) {
      const auto& info = f.info(gguf);
      if (io::ggml_type_info(info.type).plain) continue;
      const auto target = io::gguf_tensor_target(io::gguf_architecture_of(config, "test"), config, hf);
      REQUIRE(target);
      const Tensor laid = io::to_gguf_layout(*target, config, st.tensor(hf), hf).contiguous();
      std::string bytes(io::ggml_row_nbytes(info.type, info.ne[0]) * info.ne[1], '\0');
      quant::quantize_rows(info.type, static_cast<const float*>(laid.data_ptr()), reinterpret_cast<std::byte*>(bytes.data()),
                           static_cast<std::size_t>(laid.numel()));
      const auto stored = f.bytes(info);
      CHECK(std::string(reinterpret_cast<const char*>(stored.data()), stored.size()) == bytes);
    }
    const auto got = convert_logits(out);
    REQUIRE(got.size() == want.size());
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    CHECK(std::sqrt(err / norm) < bound);
    CHECK(r.output_bytes < fs::file_size(folder / "model.safetensors"));
  }
}

TEST_CASE("convert_to_gguf: typed errors for what it cannot write, and no file left behind", "[gguf_convert]") {
  accel_test::TempDir tmp;
  const auto out = tmp.path / "out.gguf";
  CHECK_THROWS_WITH(quant::convert_to_gguf(convert_model_dir("tiny_llama"), out, {.scheme = "q9"}),
                    Catch::Contains("q4_k_m") && Catch::Contains("q9"));
  // A model type llama.cpp's converter has no architecture for here.
  const auto bert = tmp.path / "bert";
  fs::create_directories(bert);
  auto config = nlohmann::json::parse(std::ifstream(convert_model_dir("tiny_llama") / "config.json"));
  config["model_type"] = "bert";
  std::ofstream(bert / "config.json") << config.dump();
  fs::copy_file(convert_model_dir("tiny_llama") / "model.safetensors", bert / "model.safetensors");
  CHECK_THROWS_AS(quant::convert_to_gguf(bert, out), ValueError);
  CHECK_THROWS_WITH(quant::convert_to_gguf(bert, out), Catch::Contains("bert") && Catch::Contains("config.json") &&
                                                           Catch::Contains("gpt2"));
  // A quantized folder, and a GGUF file given as the folder.
  config["model_type"] = "llama";
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  std::ofstream(bert / "config.json") << config.dump();
  CHECK_THROWS_WITH(quant::convert_to_gguf(bert, out), Catch::Contains("quantization_config"));
  const auto f32 = tmp.path / "f32.gguf";
  quant::convert_to_gguf(convert_model_dir("tiny_llama"), f32, {.scheme = "f32"});
  CHECK_THROWS_WITH(quant::convert_to_gguf(f32, out), Catch::Contains("GGUF file already"));
  CHECK_FALSE(fs::exists(out));
  // A checkpoint that fails while its tensors are written leaves nothing at OUT.
  const auto broken = tmp.path / "broken";
  fs::create_directories(broken);
  fs::copy_file(convert_model_dir("tiny_llama") / "config.json", broken / "config.json");
  fs::copy_file(convert_model_dir("tiny_llama") / "model.safetensors", broken / "model.safetensors");
  quant::GgufConvertOptions o{.scheme = "f16"};
  o.progress = [&](std::size_t done, std::size_t) {
    if (done > 0) fs::resize_file(broken / "model.safetensors", 100);
  };
  CHECK_THROWS(quant::convert_to_gguf(broken, out, o));
  CHECK_FALSE(fs::exists(out));
}

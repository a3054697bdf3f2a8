// The LLaMA-shaped model the decode benchmarks measure (../shared/anchors/make_bench_model.py's
// shape by default: 483M parameters, untied head), with random weights made here, and its
// Hugging Face folder (config.json + model.safetensors) as `accel run` and Accelerate load it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/parallel.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/models/llama.hpp"

namespace accel_bench {

/// The shape of the benchmark model.
struct LlamaShape {
  std::int64_t layers = 8, embd = 2048, ff = 5632, heads = 32, kv_heads = 4, vocab = 32000;
};

/// Random weights, ~N(0, 0.02)-sized, written in the tensor's dtype in parallel.
inline void fill_random(accel::Tensor& t, std::uint64_t seed) {
  accel::Tensor f = accel::Tensor::empty(t.shape(), accel::DType::f32);
  float* p = f.data_ptr<float>();
  const auto n = static_cast<std::size_t>(f.numel());
  accel::parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) {
    std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + b;
    for (std::size_t i = b; i < e; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) - 0.5f) * 0.07f;
    }
  });
  t.copy_(f);
}

inline accel::models::LlamaConfig llama_config(const LlamaShape& s) {
  accel::models::LlamaConfig c;
  c.vocab_size = s.vocab, c.hidden_size = s.embd, c.intermediate_size = s.ff, c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads, c.num_key_value_heads = s.kv_heads, c.max_position_embeddings = 4096;
  c.eos_token_ids = {};
  return c;
}

/// The model in memory with seeded random weights.
inline std::shared_ptr<accel::models::LlamaForCausalLM<>> random_llama(const LlamaShape& s, accel::DType dtype) {
  auto lm = std::make_shared<accel::models::LlamaForCausalLM<>>(llama_config(s), dtype);
  std::uint64_t seed = 1;
  for (auto& [name, cell] : lm->named_parameter_cells()) fill_random(cell->data, seed++);
  return lm;
}

/// Writes `lm` as a Hugging Face folder: model.safetensors and the config.json transformers reads.
inline void write_llama_folder(const accel::nn::Module& lm, const LlamaShape& s, accel::DType dtype,
                               const std::string& folder) {
  std::filesystem::create_directories(folder);
  accel::io::save_file(lm.state_dict(), folder + "/model.safetensors", {{"format", "pt"}});
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                                 {"vocab_size", s.vocab}, {"hidden_size", s.embd}, {"intermediate_size", s.ff},
                                 {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
                                 {"num_key_value_heads", s.kv_heads}, {"max_position_embeddings", 4096},
                                 {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
                                 {"torch_dtype", std::string(accel::dtype_name(dtype))}, {"hidden_act", "silu"}};
  std::ofstream(folder + "/config.json") << config.dump(2);
}

}  // namespace accel_bench

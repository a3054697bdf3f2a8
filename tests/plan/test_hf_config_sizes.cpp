// Sizes of real transformers configs (tests/data/configs), base model and causal LM, against
// parameter counts known from the published models: GPT-2 124,439,808; Llama-2-7b 6,738,415,616
// (LlamaModel 6,607,343,616 without the 32000 x 4096 lm_head); TinyLlama-1.1B 1,100,048,384.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "config_fixture.hpp"

#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/plan/module_sizes.hpp"

using namespace accel;

namespace {
using accel_test::config;

std::shared_ptr<nn::Module> build(const std::string& name, models::HFModelKind kind) {
  auto guard = nn::init_empty_weights(true);
  return models::model_from_hf_config(config(name), DType::f32, kind);
}

std::int64_t parameter_count(nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& [name, t] : m.named_parameters()) n += t.numel();
  return n;
}

ByteSize at(const nn::Module& m, DType d) {
  plan::SizeOptions o;
  o.dtype = d;
  return plan::compute_module_sizes(m, o)[""];
}
}  // namespace

TEST_CASE("GPT-2 config: GPT2Model and GPT2LMHeadModel sizes", "[plan][sizes][hf]") {
  auto base = build("gpt2", models::HFModelKind::base);
  auto lm = build("gpt2", models::HFModelKind::causal_lm);
  CHECK(base->class_name() == "GPT2Model");
  CHECK(lm->class_name() == "GPT2LMHeadModel");
  CHECK(base->no_split_modules() == std::vector<std::string>{"GPT2Block"});
  CHECK(parameter_count(*base) == 124439808);
  CHECK(parameter_count(*lm) == 124439808);  // lm_head is wte
  // Buffers per block: attn.bias, 1024 x 1024 bools at 1/8 byte, and the float32 attn.masked_bias.
  const ByteSize buffers = ByteSize::from_bits(12 * (1024 * 1024 + 4 * 8));
  CHECK(plan::compute_module_total_buffer_size(*base) == buffers);
  const auto sizes = plan::calculate_maximum_sizes(*base);
  CHECK(sizes.total_size == ByteSize(124439808LL * 4) + buffers);
  CHECK(sizes.largest_layer.max_size == ByteSize(50257LL * 768 * 4));
  CHECK(sizes.largest_layer.layer_names == std::vector<std::string>{"wte"});
  CHECK(plan::calculate_maximum_sizes(*lm).total_size == sizes.total_size);
  CHECK(plan::calculate_maximum_sizes(*lm).largest_layer.layer_names == std::vector<std::string>{"transformer.wte"});
  // float16 halves the weights and masked_bias; the bool mask stays as it is.
  CHECK(at(*base, DType::f16) == ByteSize(124439808LL * 2 + 12 * 2) + ByteSize::from_bits(12 * 1024 * 1024));
}

TEST_CASE("Llama-2-7b config: LlamaModel and LlamaForCausalLM sizes", "[plan][sizes][hf]") {
  auto base = build("llama2_7b", models::HFModelKind::base);
  auto lm = build("llama2_7b", models::HFModelKind::causal_lm);
  CHECK(base->class_name() == "LlamaModel");
  CHECK(lm->class_name() == "LlamaForCausalLM");
  CHECK(parameter_count(*base) == 6607343616);
  CHECK(parameter_count(*lm) == 6738415616);
  const ByteSize inv_freq(64 * 4);  // rotary_emb.inv_freq: head_dim / 2 float32
  CHECK(plan::compute_module_total_buffer_size(*base) == inv_freq);
  const auto b = plan::calculate_maximum_sizes(*base);
  CHECK(b.total_size == ByteSize(6607343616LL * 4) + inv_freq);
  // A decoder layer (4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 norms) outweighs embed_tokens.
  CHECK(b.largest_layer.max_size == ByteSize(202383360LL * 4));
  REQUIRE(b.largest_layer.layer_names.size() == 32);
  CHECK(b.largest_layer.layer_names.front() == "layers.0");
  const auto l = plan::calculate_maximum_sizes(*lm);
  CHECK(l.total_size == ByteSize(6738415616LL * 4) + inv_freq);
  CHECK(l.largest_layer.layer_names.front() == "model.layers.0");
  CHECK(at(*base, DType::f16) == ByteSize(6607343616LL * 2 + 64 * 2));
  CHECK(at(*base, DType::bf16) == at(*base, DType::f16));
}

TEST_CASE("TinyLlama config: grouped-query attention sizes", "[plan][sizes][hf]") {
  auto base = build("tinyllama_1.1b", models::HFModelKind::base);
  auto lm = build("tinyllama_1.1b", models::HFModelKind::causal_lm);
  CHECK(parameter_count(*lm) == 1100048384);
  CHECK(parameter_count(*base) == 1100048384 - 32000LL * 2048);
  CHECK(base->get_submodule("layers.0.self_attn.k_proj").get_parameter("weight").shape() == Shape{256, 2048});
  CHECK(plan::calculate_maximum_sizes(*base).total_size == ByteSize((1100048384LL - 32000 * 2048) * 4 + 32 * 4));
}

TEST_CASE("A tied LLaMA config shares lm_head with embed_tokens", "[plan][sizes][hf]") {
  auto j = config("tinyllama_1.1b");
  j["tie_word_embeddings"] = true;
  auto guard = nn::init_empty_weights(true);
  auto lm = models::model_from_hf_config(j);
  CHECK(parameter_count(*lm) == 1100048384 - 32000LL * 2048);
  CHECK(lm->parameter_cell("lm_head.weight") == lm->parameter_cell("model.embed_tokens.weight"));
}

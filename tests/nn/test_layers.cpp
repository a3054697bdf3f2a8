#include <catch2/catch.hpp>

#include <memory>

#include "accel/nn/containers.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/layers.hpp"

using namespace accel;

TEST_CASE("Layers have torch's parameter names and shapes", "[nn][layers]") {
  nn::Linear lin(4, 3);
  CHECK(lin.get_parameter("weight").shape() == Shape{3, 4});
  CHECK(lin.get_parameter("bias").shape() == Shape{3});
  nn::Linear nobias(4, 3, false);
  CHECK_FALSE(nobias.has_parameter("bias"));
  nn::Conv1D conv(4, 6);
  CHECK(conv.get_parameter("weight").shape() == Shape{4, 6});
  nn::Embedding emb(10, 4);
  CHECK(emb.get_parameter("weight").shape() == Shape{10, 4});
  nn::LayerNorm ln(4);
  CHECK(ln.get_parameter("weight").at<float>({0}) == 1.0f);
  CHECK(ln.get_parameter("bias").at<float>({0}) == 0.0f);
  nn::RMSNorm rms(4);
  CHECK(rms.class_name() == "RMSNorm");
  CHECK_THROWS_AS(nn::Linear(-1, 2), ValueError);
}

TEST_CASE("Layer forwards run accel::ops", "[nn][layers]") {
  nn::Linear lin(2, 2);
  lin.parameter_cell("weight")->data = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  lin.parameter_cell("bias")->data = Tensor::from_vector<float>({10, 20});
  Tensor y = lin(Tensor::from_vector<float>({1, 1}, Shape{1, 2}));
  CHECK(y.at<float>({0, 0}) == Approx(13.0f));  // 1 + 2 + 10
  CHECK(y.at<float>({0, 1}) == Approx(27.0f));  // 3 + 4 + 20

  nn::Conv1D conv(2, 2);  // y = x W + b with W [in, out]
  conv.parameter_cell("weight")->data = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  Tensor z = conv(Tensor::from_vector<float>({1, 1}, Shape{1, 2}));
  CHECK(z.at<float>({0, 0}) == Approx(4.0f));  // 1 + 3
  CHECK(z.at<float>({0, 1}) == Approx(6.0f));  // 2 + 4

  nn::Embedding emb(3, 2);
  emb.parameter_cell("weight")->data = Tensor::from_vector<float>({0, 0, 1, 1, 2, 2}, Shape{3, 2});
  Tensor e = emb(Tensor::from_vector<std::int64_t>({2, 1}));
  CHECK(e.shape() == Shape{2, 2});
  CHECK(e.at<float>({0, 1}) == 2.0f);

  nn::RMSNorm rms(2);
  Tensor r = rms(Tensor::from_vector<float>({3, 4}, Shape{1, 2}));
  CHECK(r.at<float>({0, 0}) == Approx(3.0 / std::sqrt(12.5 + 1e-6)).epsilon(1e-4));

  auto seq = std::make_shared<nn::Sequential>();
  auto a = seq->push_back(std::make_shared<nn::Linear>(2, 2, false));
  a->parameter_cell("weight")->data = Tensor::from_vector<float>({2, 0, 0, 2}, Shape{2, 2});
  seq->push_back(a);
  Tensor s = (*seq)(Tensor::from_vector<float>({1, 3}, Shape{1, 2}));
  CHECK(s.at<float>({0, 1}) == Approx(12.0f));
  CHECK(seq->size() == 2);
  CHECK_THROWS_AS(seq->at(2), KeyError);
}

TEST_CASE("HF GPT-2 and LLaMA trees have transformers' names and ties", "[nn][hf]") {
  auto guard = nn::init_empty_weights(true);
  models::GPT2Config g;
  g.vocab_size = 100, g.n_positions = 16, g.n_embd = 8, g.n_layer = 2, g.n_head = 2;
  auto gpt2 = std::make_shared<models::GPT2LMHeadModel<>>(g);
  CHECK(gpt2->get_parameter("transformer.h.1.attn.c_attn.weight").shape() == Shape{8, 24});
  CHECK(gpt2->parameter_cell("lm_head.weight") == gpt2->parameter_cell("transformer.wte.weight"));
  CHECK(gpt2->get_submodule("transformer.h.0").class_name() == "GPT2Block");

  models::LlamaConfig l;
  l.vocab_size = 64, l.hidden_size = 16, l.intermediate_size = 32, l.num_hidden_layers = 3;
  l.num_attention_heads = 4, l.num_key_value_heads = 2;
  auto llama = std::make_shared<models::LlamaForCausalLM<>>(l);
  CHECK(llama->get_parameter("model.layers.2.self_attn.k_proj.weight").shape() == Shape{8, 16});
  CHECK(llama->get_parameter("model.layers.0.mlp.down_proj.weight").shape() == Shape{16, 32});
  CHECK(llama->no_split_modules() == std::vector<std::string>{"LlamaDecoderLayer"});
  CHECK(llama->get_parameter("lm_head.weight").is_meta());
  CHECK_THROWS_AS(models::model_from_hf_config(nlohmann::json{{"model_type", "bert"}}), ValueError);
}

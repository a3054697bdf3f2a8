// The models on the one call path: a child replaced after construction is the one that runs (the
// rotary embedding too), and the KV cache and positions follow the hook's execution device while
// weights sit on meta.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "accel/dispatch/load_pretrained.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/models.hpp"

using namespace accel;

namespace {

std::filesystem::path model_fixture(const std::string& name) {
  return std::filesystem::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / name;
}

/// Wraps a module: calls it through its type-erased entry and counts the calls.
struct CountingWrapper : nn::Module {
  explicit CountingWrapper(std::shared_ptr<nn::Module> inner) : Module("CountingWrapper") {
    register_module("inner", std::move(inner));
  }
  Tensor forward(const Tensor& x) override {
    ++calls;
    return (*find_child("inner"))(x);
  }
  int calls = 0;
};

struct ZeroModule : nn::Module {
  ZeroModule() : Module("ZeroModule") {}
  Tensor forward(const Tensor& x) override { return Tensor::zeros(x.shape(), x.dtype()); }
};

/// Parks its module's weights on meta between calls and brings them back for each call: the
/// shape of an offload hook, with the execution device it reports.
struct ParkingHook : nn::ModuleHook {
  std::vector<std::pair<nn::ParameterPtr*, Tensor>> kept;
  int calls = 0;
  void init_hook(nn::Module& m) override {
    for (auto& [name, cell] : m.named_parameter_cells()) {
      auto* slot = m.find_tensor_cell(name);
      kept.emplace_back(slot, cell->data);
      *slot = std::make_shared<nn::Parameter>(nn::Parameter{Tensor::empty(cell->data.shape(), cell->data.dtype(), Device::meta())});
    }
  }
  void pre_forward(nn::Module&, const nn::TensorRefs&) override {
    ++calls;
    for (auto& [slot, t] : kept) (*slot)->data = t;
  }
  void post_forward(nn::Module&, const nn::TensorRefs&) override {
    for (auto& [slot, t] : kept) (*slot)->data = Tensor::empty(t.shape(), t.dtype(), Device::meta());
  }
  std::optional<Device> execution_device() const override { return Device::cpu(); }
};

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{1, 5, 9, 2}, Shape{1, 4}); }

}  // namespace

TEST_CASE("A child replaced after construction is the one the model runs", "[models][call_path]") {
  for (const auto& [name, path] : {std::pair<std::string, std::string>{"tiny_llama", "model.layers.0.mlp"},
                                   {"tiny_gpt2", "transformer.h.0.mlp"}}) {
    INFO(name);
    auto p = dispatch::load_pretrained_causal_lm(model_fixture(name), {.show_progress = false});
    nn::Module& root = p.model->module();
    const Tensor before = p.model->logits(prompt());
    const auto dot = path.rfind('.');
    nn::Module& parent = root.get_submodule(path.substr(0, dot));
    const std::string child = path.substr(dot + 1);
    std::shared_ptr<nn::Module> original = *parent.find_child_slot(child);
    auto wrapper = parent.replace_module(child, std::make_shared<CountingWrapper>(original));
    CHECK(p.model->logits(prompt()).to_vector<float>() == before.to_vector<float>());
    CHECK(wrapper->calls == 1);
    parent.replace_module(child, std::make_shared<ZeroModule>());
    CHECK(p.model->logits(prompt()).to_vector<float>() != before.to_vector<float>());
    parent.replace_module(child, original);
    CHECK(p.model->logits(prompt()).to_vector<float>() == before.to_vector<float>());
  }
}

TEST_CASE("Cache and positions follow the hook while weights sit on meta", "[models][call_path]") {
  for (const auto& [name, layers] : {std::pair<std::string, std::string>{"tiny_llama", "model.layers"},
                                     {"tiny_gpt2", "transformer.h"}}) {
    INFO(name);
    auto p = dispatch::load_pretrained_causal_lm(model_fixture(name), {.show_progress = false});
    nn::Module& root = p.model->module();
    const models::GenerationConfig cfg{.max_new_tokens = 6, .ignore_eos = true};
    const auto plain = models::generate(*p.model, prompt(), cfg).new_tokens;

    // Every decoder layer's weights go to meta between calls; so do GPT-2's position embeddings.
    std::vector<std::shared_ptr<ParkingHook>> hooks;
    for (auto* layer : root.get_submodule(layers).children()) {
      hooks.push_back(std::make_shared<ParkingHook>());
      layer->set_hook(hooks.back());
    }
    if (name == "tiny_gpt2") {
      hooks.push_back(std::make_shared<ParkingHook>());
      root.get_submodule("transformer.wpe").set_hook(hooks.back());
    }
    REQUIRE(root.get_submodule(layers + ".0").find_parameter(name == "tiny_gpt2" ? "attn.c_attn.weight"
                                                                                 : "self_attn.q_proj.weight")
                ->is_meta());
    for (const Device& d : p.model->layer_devices()) CHECK(d == Device::cpu());
    CHECK(models::generate(*p.model, prompt(), cfg).new_tokens == plain);
    CHECK(hooks.front()->calls == 6);  // the prefill and five decode steps
    for (auto* layer : root.get_submodule(layers).children()) layer->set_hook(nullptr);
  }
}

TEST_CASE("The rotary embedding is a child the model calls: a hook sees it, a replacement computes", "[models][call_path]") {
  struct CountingHook : nn::ModuleHook {
    int calls = 0;
    void pre_forward(nn::Module&, const nn::TensorRefs&) override { ++calls; }
  };
  auto p = dispatch::load_pretrained_causal_lm(model_fixture("tiny_llama"), {.show_progress = false});
  nn::Module& root = p.model->module();
  const std::vector<float> before = p.model->logits(prompt()).to_vector<float>();
  auto count = std::make_shared<CountingHook>();
  root.get_submodule("model.rotary_emb").set_hook(count);
  CHECK(p.model->logits(prompt()).to_vector<float>() == before);
  CHECK(count->calls == 1);
  root.get_submodule("model.rotary_emb").set_hook(nullptr);

  const auto config = models::llama_config_from_json(nlohmann::json::parse(std::ifstream(model_fixture("tiny_llama") / "config.json")));
  auto faster = config;
  faster.rope_theta *= 8;
  nn::Module& model = root.get_submodule("model");
  std::shared_ptr<nn::Module> original = *model.find_child_slot("rotary_emb");
  model.replace_module("rotary_emb", std::make_shared<models::LlamaRotaryEmbedding<>>(faster, "Llama"));
  CHECK(p.model->logits(prompt()).to_vector<float>() != before);
  model.replace_module("rotary_emb", original);
  CHECK(p.model->logits(prompt()).to_vector<float>() == before);

  // An older config's rotary_emb per attention: each attention calls its own, with the same result.
  auto per_layer_config = config;
  per_layer_config.rotary_per_layer = true;
  models::LlamaForCausalLM<> per_layer(per_layer_config);
  CHECK_FALSE(per_layer.find_child("model")->find_child("rotary_emb"));
  for (const auto& [name, t] : root.state_dict()) (*per_layer.find_tensor_cell(name))->data = t;
  auto layer_count = std::make_shared<CountingHook>();
  per_layer.get_submodule("model.layers.1.self_attn.rotary_emb").set_hook(layer_count);
  const std::vector<float> got = per_layer.logits(prompt(), nullptr, 0, {}).to_vector<float>();
  REQUIRE(got.size() == before.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(before[i]).margin(1e-5));
  CHECK(layer_count->calls == 1);
}

namespace {
nlohmann::json fixture_config(const std::string& name) {
  return nlohmann::json::parse(std::ifstream(model_fixture(name) / "config.json"));
}
template <class M>
bool built_as(const std::shared_ptr<models::CausalLM>& lm) {
  return dynamic_cast<M*>(lm.get()) != nullptr;
}
}  // namespace

TEST_CASE("The precision policy picks the model's instantiation and what it computes in", "[models][call_path][policy]") {
  using BF16 = policies<policy::bf16>;
  using FP16 = policies<policy::fp16>;
  const nlohmann::json llama = fixture_config("tiny_llama"), gpt2 = fixture_config("tiny_gpt2");
  {
    auto guard = nn::init_empty_weights(true);
    // One place turns the run-time dtype into the bundle: each dtype gets the class compiled for it.
    CHECK(built_as<models::LlamaForCausalLM<BF16>>(models::causal_lm_from_hf_config(llama, DType::bf16)));
    CHECK(built_as<models::LlamaForCausalLM<FP16>>(models::causal_lm_from_hf_config(llama, DType::f16)));
    CHECK(built_as<models::LlamaForCausalLM<>>(models::causal_lm_from_hf_config(llama, DType::f32)));
    CHECK(built_as<models::GPT2LMHeadModel<BF16>>(models::causal_lm_from_hf_config(gpt2, DType::bf16)));
    CHECK(built_as<models::GPT2LMHeadModel<>>(models::causal_lm_from_hf_config(gpt2)));
    CHECK(dynamic_cast<models::LlamaModel<FP16>*>(
              models::model_from_hf_config(llama, DType::f16, models::HFModelKind::base).get()) != nullptr);
    // A dtype no precision is compiled for is refused, naming the config.
    CHECK_THROWS_AS(models::causal_lm_from_hf_config(llama, DType::f64, "tiny/config.json"), ValueError);
    CHECK_THROWS_WITH(models::causal_lm_from_hf_config(llama, DType::f64, "tiny/config.json"),
                      Catch::Contains("tiny/config.json") && Catch::Contains("float64"));
  }

  // The library's loader builds the same instantiation, and its logits leave the bundle as float32
  // (Accelerate's convert_outputs_to_fp32): bit for bit the bfloat16 logits of the run-time path
  // (the default bundle holding bfloat16 weights), widened.
  auto p = dispatch::load_pretrained_causal_lm(model_fixture("tiny_llama"), {.dtype = DType::bf16, .show_progress = false});
  REQUIRE(built_as<models::LlamaForCausalLM<BF16>>(p.model));
  CHECK(p.model->precision() == policy::PrecisionType::bf16);
  const Tensor logits = p.model->logits(prompt());
  CHECK(logits.dtype() == DType::f32);
  std::shared_ptr<models::CausalLM> runtime =
      std::make_shared<models::LlamaForCausalLM<>>(models::llama_config_from_json(llama), DType::bf16);
  dispatch::load_checkpoint_in_model(runtime->module(), model_fixture("tiny_llama").string(), {.dtype = DType::bf16});
  const Tensor runtime_logits = runtime->logits(prompt());
  CHECK(runtime_logits.dtype() == DType::bf16);
  CHECK(logits.to_vector<float>() == runtime_logits.to(DType::f32).to_vector<float>());

  // A module kept in float32 computes in float32 inside the bfloat16 model: the head's logits are
  // the float32 product of the (bfloat16) hidden states, not a bfloat16 one.
  auto kept = dispatch::load_pretrained_causal_lm(model_fixture("tiny_llama"),
                                                  {.dtype = DType::bf16, .show_progress = false, .keep_in_fp32_modules = {"lm_head"}});
  auto& lm = dynamic_cast<models::LlamaForCausalLM<BF16>&>(*kept.model);
  const Tensor hidden = lm.base_model()(prompt(), nullptr);  // the outermost call: widened to float32
  CHECK(hidden.dtype() == DType::f32);
  const Tensor want = ops::linear(hidden, lm.get_parameter("lm_head.weight"), Tensor());
  CHECK(kept.model->logits(prompt()).to_vector<float>() == want.to_vector<float>());
}

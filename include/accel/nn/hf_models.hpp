// Module trees of Hugging Face GPT-2 and LLaMA models from their config.json, with transformers'
// module names and class names (so checkpoints' keys and no-split classes match).
//
//   auto guard = init_empty_weights(true);
//   auto model = model_from_hf_config(json);        // GPT2LMHeadModel or LlamaForCausalLM, on meta
//   auto base = model_from_hf_config(json, DType::f32, HFModelKind::base);  // GPT2Model / LlamaModel
//   model->no_split_modules()                       // {"GPT2Block"} / {"LlamaDecoderLayer"}
//
// Structure only: the blocks have no forward. Unknown families throw ValueError. Besides the
// weights, the trees carry the buffers transformers registers, which Accelerate's
// compute_module_sizes counts: GPT-2 has per block attn.bias (bool [1, 1, n_positions,
// n_positions], 1/8 byte an element in Accelerate's sizes) and attn.masked_bias (a float32
// scalar); LLaMA has rotary_emb.inv_freq (float32 [head_dim / 2]) once per model (per attention
// with rotary_per_layer, as in transformers before 4.38). All of them are non-persistent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/module.hpp"

namespace accel::nn {

/// Which transformers class a config.json is built as: the causal language model that checkpoints
/// are saved from (AutoModelForCausalLM: GPT2LMHeadModel, LlamaForCausalLM), or the bare decoder
/// without the LM head (AutoModel: GPT2Model, LlamaModel), which `accelerate estimate-memory` sizes.
enum class HFModelKind { causal_lm, base };

/// The fields of a LLaMA config.json the module tree depends on.
struct LlamaConfig {
  std::int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008;
  std::int64_t num_hidden_layers = 32, num_attention_heads = 32, num_key_value_heads = 32;
  std::int64_t head_dim = 0;  ///< 0: hidden_size / num_attention_heads
  std::int64_t max_position_embeddings = 2048;  ///< the context length (sizes no weight, only a KV cache)
  bool tie_word_embeddings = false;
  bool rotary_per_layer = false;  ///< older transformers: a rotary_emb (inv_freq buffer) per attention
};

/// The fields of a GPT-2 config.json the module tree depends on.
struct GPT2Config {
  std::int64_t vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12;
  std::int64_t n_inner = 0;  ///< 0: 4 * n_embd
  bool tie_word_embeddings = true;
};

namespace detail {
inline std::shared_ptr<Module> named_module(const std::string& cls) { return std::make_shared<Module>(cls); }
template <class M>
std::shared_ptr<M> with_class(std::shared_ptr<M> m, const std::string& cls) {
  m->set_class_name(cls);
  return m;
}
template <class T>
T field(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw FormatError(std::string("config.json: field '") + key + "' has the wrong type: " + j[key].dump());
  }
}
}  // namespace detail

/// LlamaModel: embed_tokens, layers.N.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm,
/// post_attention_layernorm}, norm, rotary_emb.
inline std::shared_ptr<Module> build_llama_model(const LlamaConfig& c, DType dtype = DType::f32) {
  const std::int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / std::max<std::int64_t>(c.num_attention_heads, 1);
  auto model = detail::named_module("LlamaModel");
  model->register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, dtype));
  auto layers = model->register_module("layers", std::make_shared<ModuleList>());
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    auto layer = layers->push_back(detail::named_module("LlamaDecoderLayer"));
    auto attn = layer->register_module("self_attn", detail::named_module("LlamaAttention"));
    attn->register_module("q_proj", std::make_shared<Linear>(c.hidden_size, c.num_attention_heads * head_dim, false, dtype));
    attn->register_module("k_proj", std::make_shared<Linear>(c.hidden_size, c.num_key_value_heads * head_dim, false, dtype));
    attn->register_module("v_proj", std::make_shared<Linear>(c.hidden_size, c.num_key_value_heads * head_dim, false, dtype));
    attn->register_module("o_proj", std::make_shared<Linear>(c.num_attention_heads * head_dim, c.hidden_size, false, dtype));
    if (c.rotary_per_layer) {
      auto rot = attn->register_module("rotary_emb", detail::named_module("LlamaRotaryEmbedding"));
      rot->register_buffer("inv_freq", new_parameter_tensor({head_dim / 2}, DType::f32, 0.0, true), false);
    }
    auto mlp = layer->register_module("mlp", detail::named_module("LlamaMLP"));
    mlp->register_module("gate_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, false, dtype));
    mlp->register_module("up_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, false, dtype));
    mlp->register_module("down_proj", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, false, dtype));
    mlp->register_module("act_fn", detail::named_module("SiLU"));
    layer->register_module("input_layernorm", detail::with_class(std::make_shared<RMSNorm>(c.hidden_size, 1e-6, dtype), "LlamaRMSNorm"));
    layer->register_module("post_attention_layernorm",
                           detail::with_class(std::make_shared<RMSNorm>(c.hidden_size, 1e-6, dtype), "LlamaRMSNorm"));
  }
  model->register_module("norm", detail::with_class(std::make_shared<RMSNorm>(c.hidden_size, 1e-6, dtype), "LlamaRMSNorm"));
  if (!c.rotary_per_layer) {
    auto rot = model->register_module("rotary_emb", detail::named_module("LlamaRotaryEmbedding"));
    rot->register_buffer("inv_freq", new_parameter_tensor({head_dim / 2}, DType::f32, 0.0, true), false);
  }
  model->set_no_split_modules({"LlamaDecoderLayer"});
  return model;
}

namespace detail {
/// How a *ForCausalLM wraps its base model: the root class, the base's attribute name, the
/// embedding the head ties to, and the block class that must not be split.
struct CausalLMShape {
  const char* root_class;
  const char* base_name;
  const char* tied_embedding;
  const char* no_split;
};

inline std::shared_ptr<Module> with_lm_head(const std::shared_ptr<Module>& base, const CausalLMShape& shape,
                                            std::int64_t hidden, std::int64_t vocab, bool tie, DType dtype) {
  auto root = named_module(shape.root_class);
  root->register_module(shape.base_name, base);
  auto lm_head = root->register_module("lm_head", std::make_shared<Linear>(hidden, vocab, false, dtype));
  if (tie) lm_head->register_parameter("weight", base->parameter_cell(shape.tied_embedding));
  root->set_no_split_modules({shape.no_split});
  return root;
}
}  // namespace detail

/// LlamaForCausalLM (`kind` causal_lm): model (the LlamaModel above), lm_head (tied to
/// model.embed_tokens when tie_word_embeddings); `kind` base builds the LlamaModel alone.
inline std::shared_ptr<Module> build_llama(const LlamaConfig& c, DType dtype = DType::f32,
                                           HFModelKind kind = HFModelKind::causal_lm) {
  auto model = build_llama_model(c, dtype);
  if (kind == HFModelKind::base) return model;
  return detail::with_lm_head(model, {"LlamaForCausalLM", "model", "embed_tokens.weight", "LlamaDecoderLayer"},
                              c.hidden_size, c.vocab_size, c.tie_word_embeddings, dtype);
}

/// GPT2Model: wte, wpe, drop, h.N.{ln_1, attn.{c_attn, c_proj}, ln_2, mlp.{c_fc, c_proj}}, ln_f.
inline std::shared_ptr<Module> build_gpt2_model(const GPT2Config& c, DType dtype = DType::f32) {
  const std::int64_t inner = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
  auto tr = detail::named_module("GPT2Model");
  tr->register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, dtype));
  tr->register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd, dtype));
  tr->register_module("drop", detail::named_module("Dropout"));
  auto h = tr->register_module("h", std::make_shared<ModuleList>());
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    auto block = h->push_back(detail::named_module("GPT2Block"));
    block->register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, 1e-5, true, dtype));
    auto attn = block->register_module("attn", detail::named_module("GPT2Attention"));
    attn->register_buffer("bias", new_parameter_tensor({1, 1, c.n_positions, c.n_positions}, DType::boolean, 1.0, true), false);
    attn->register_buffer("masked_bias", new_parameter_tensor({}, DType::f32, -1e4, true), false);
    attn->register_module("c_attn", std::make_shared<Conv1D>(c.n_embd, 3 * c.n_embd, dtype));
    attn->register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd, dtype));
    attn->register_module("attn_dropout", detail::named_module("Dropout"));
    attn->register_module("resid_dropout", detail::named_module("Dropout"));
    block->register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, 1e-5, true, dtype));
    auto mlp = block->register_module("mlp", detail::named_module("GPT2MLP"));
    mlp->register_module("c_fc", std::make_shared<Conv1D>(c.n_embd, inner, dtype));
    mlp->register_module("c_proj", std::make_shared<Conv1D>(inner, c.n_embd, dtype));
    mlp->register_module("act", detail::named_module("NewGELUActivation"));
    mlp->register_module("dropout", detail::named_module("Dropout"));
  }
  tr->register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, 1e-5, true, dtype));
  tr->set_no_split_modules({"GPT2Block"});
  return tr;
}

/// GPT2LMHeadModel (`kind` causal_lm): transformer (the GPT2Model above), lm_head (tied to wte
/// unless tie_word_embeddings is false); `kind` base builds the GPT2Model alone.
inline std::shared_ptr<Module> build_gpt2(const GPT2Config& c, DType dtype = DType::f32,
                                          HFModelKind kind = HFModelKind::causal_lm) {
  auto tr = build_gpt2_model(c, dtype);
  if (kind == HFModelKind::base) return tr;
  return detail::with_lm_head(tr, {"GPT2LMHeadModel", "transformer", "wte.weight", "GPT2Block"}, c.n_embd,
                              c.vocab_size, c.tie_word_embeddings, dtype);
}

/// Reads a LLaMA-family config.json (llama, mistral, qwen2 share the fields used here).
inline LlamaConfig llama_config_from_json(const nlohmann::json& j) {
  LlamaConfig c;
  c.vocab_size = detail::field(j, "vocab_size", c.vocab_size);
  c.hidden_size = detail::field(j, "hidden_size", c.hidden_size);
  c.intermediate_size = detail::field(j, "intermediate_size", c.intermediate_size);
  c.num_hidden_layers = detail::field(j, "num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = detail::field(j, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = detail::field(j, "num_key_value_heads", c.num_attention_heads);
  c.head_dim = detail::field<std::int64_t>(j, "head_dim", 0);
  c.max_position_embeddings = detail::field(j, "max_position_embeddings", c.max_position_embeddings);
  c.tie_word_embeddings = detail::field(j, "tie_word_embeddings", false);
  return c;
}

/// Reads a GPT-2 config.json.
inline GPT2Config gpt2_config_from_json(const nlohmann::json& j) {
  GPT2Config c;
  c.vocab_size = detail::field(j, "vocab_size", c.vocab_size);
  c.n_positions = detail::field(j, "n_positions", c.n_positions);
  c.n_embd = detail::field(j, "n_embd", c.n_embd);
  c.n_layer = detail::field(j, "n_layer", c.n_layer);
  c.n_head = detail::field(j, "n_head", c.n_head);
  c.n_inner = detail::field<std::int64_t>(j, "n_inner", 0);
  c.tie_word_embeddings = detail::field(j, "tie_word_embeddings", true);
  return c;
}

/// The model of a transformers config.json (by "model_type": gpt2, llama, mistral, qwen2), as the
/// causal LM (default) or the base model.
inline std::shared_ptr<Module> model_from_hf_config(const nlohmann::json& j, DType dtype = DType::f32,
                                                    HFModelKind kind = HFModelKind::causal_lm) {
  const std::string type = detail::field<std::string>(j, "model_type", "");
  if (type == "gpt2") return build_gpt2(gpt2_config_from_json(j), dtype, kind);
  if (type == "llama" || type == "mistral" || type == "qwen2") return build_llama(llama_config_from_json(j), dtype, kind);
  throw ValueError("config.json: model_type '" + type + "' is not supported (supported: gpt2, llama, mistral, qwen2)");
}

}  // namespace accel::nn

// The LLaMA family (transformers' LlamaForCausalLM; Mistral and Qwen2 configs too) with its
// forward, under a policy bundle P.
//
//   auto lm = std::make_shared<LlamaForCausalLM<>>(llama_config_from_json(j));
//   Tensor logits = (*lm)(ids, &cache);           // [B, T, vocab]; positions continue the cache
//
// model.{embed_tokens, layers.N.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj,
// input_layernorm, post_attention_layernorm}, norm, rotary_emb}, lm_head (tied to embed_tokens
// with tie_word_embeddings). RMSNorm, rotary embeddings with rope_theta and rope_scaling
// (models/rope.hpp), grouped-query attention, SwiGLU MLP, optional q/k/v/o and MLP biases,
// explicit head_dim, Mistral's sliding window. Class names follow the family ("MistralDecoderLayer"),
// as `no_split_module_classes` names them. The rotary_emb.inv_freq buffer (f32, non-persistent)
// holds the frequencies in use, as transformers' does. Every child, rotary_emb included, is
// called through the tree (a ChildRef): a hook on it runs, a replacement is what computes. With
// an older config's rotary_emb per attention, each attention calls its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/models/causal_lm.hpp"
#include "accel/models/gpt2.hpp"
#include "accel/models/hf_config.hpp"
#include "accel/models/kv_cache.hpp"
#include "accel/models/rope.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/ops/ops.hpp"

namespace accel::models {

namespace detail {
/// "Llama", "Mistral" or "Qwen2": the prefix of the family's class names.
inline std::string llama_family_prefix(const std::string& model_type) {
  if (model_type == "mistral") return "Mistral";
  if (model_type == "qwen2") return "Qwen2";
  return "Llama";
}
}  // namespace detail

/// The rotary embedding of a LLaMA-family model: its frequencies, and the inv_freq buffer.
template <PolicyBundle P = default_policies>
class LlamaRotaryEmbedding : public nn::BasicModule<LlamaRotaryEmbedding<P>, P> {
  using Base = nn::BasicModule<LlamaRotaryEmbedding<P>, P>;

 public:
  LlamaRotaryEmbedding(const LlamaConfig& c, const std::string& prefix)
      : Base(prefix + "RotaryEmbedding"), rope_(c.rope_scaling), theta_(c.rope_theta), dim_(c.resolved_head_dim()),
        max_positions_(c.max_position_embeddings) {
    freqs_ = rope_frequencies(rope_, theta_, dim_, max_positions_);
    inv_freq_ = &this->register_buffer("inv_freq", nn::new_parameter_tensor({dim_ / 2}, DType::f32, 0.0, true), false);
    write_buffer();
  }
  /// The frequencies for a forward whose positions reach `max_position`: the call path's entry
  /// (`rotary_emb(max_position)`), so hooks see it.
  RopeFrequencies forward(std::int64_t max_position) { return frequencies(max_position); }
  /// The frequencies for a forward whose positions reach `max_position` (dynamic rope grows them).
  const RopeFrequencies& frequencies(std::int64_t max_position) {
    if (rope_.rope_type == "dynamic" && dynamic_.update(max_position, max_positions_, rope_, theta_, dim_, freqs_)) {
      write_buffer();
    }
    return freqs_;
  }

 private:
  void write_buffer() {
    Tensor& buf = (*inv_freq_)->data;
    if (!buf.defined() || buf.is_meta()) return;
    std::vector<float> f(freqs_.inv_freq.begin(), freqs_.inv_freq.end());
    buf.copy_(Tensor::from_vector(f, Shape{static_cast<std::int64_t>(f.size())}));
  }

  RopeScaling rope_;
  double theta_;
  std::int64_t dim_, max_positions_;
  RopeFrequencies freqs_;
  DynamicRopeState dynamic_;
  nn::ParameterPtr* inv_freq_ = nullptr;
};

/// LlamaAttention: q/k/v projections, rotary embedding, grouped-query causal attention, o_proj.
template <PolicyBundle P = default_policies>
class LlamaAttention : public nn::BasicModule<LlamaAttention<P>, P> {
  using Base = nn::BasicModule<LlamaAttention<P>, P>;

 public:
  LlamaAttention(const LlamaConfig& c, const std::string& prefix, DType dtype)
      : Base(prefix + "Attention"), heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads),
        head_dim_(c.resolved_head_dim()), window_(c.sliding_window) {
    using L = nn::BasicLinear<P>;
    q_proj_ = this->register_child("q_proj", std::make_shared<L>(c.hidden_size, heads_ * head_dim_, c.qkv_bias, dtype));
    k_proj_ = this->register_child("k_proj", std::make_shared<L>(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias, dtype));
    v_proj_ = this->register_child("v_proj", std::make_shared<L>(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias, dtype));
    o_proj_ = this->register_child("o_proj", std::make_shared<L>(heads_ * head_dim_, c.hidden_size, c.o_bias, dtype));
    if (c.rotary_per_layer) {
      this->register_module("rotary_emb", std::make_shared<LlamaRotaryEmbedding<P>>(c, prefix));
      rotary_emb_ = nn::ChildRef<LlamaRotaryEmbedding<P>>(*this, "rotary_emb");
    }
  }

  /// x [B, T, hidden] at `positions` [T] -> [B, T, hidden]; keys and values go through `cache`.
  /// `rope`: the model's frequencies; null with a rotary_emb of the attention's own.
  Tensor forward(const Tensor& x, const Tensor& positions, const Tensor& key_mask, const RopeFrequencies* rope,
                 LayerKVCache* cache, std::int64_t past) {
    const std::int64_t B = x.size(0), T = x.size(1);
    RopeFrequencies own;
    if (!rope) {
      if (!rotary_emb_) throw ValueError(this->class_name() + ": no rotary frequencies given and no rotary_emb of its own");
      own = rotary_emb_(past + T - 1);
      rope = &own;
    }
    auto heads = [&](const Tensor& y, std::int64_t h) { return y.view({B, T, h, head_dim_}).transpose(1, 2); };
    Tensor q = heads(q_proj_(x), heads_), k = heads(k_proj_(x), kv_heads_), v = heads(v_proj_(x), kv_heads_);
    q = ops::rotary_embedding(q, positions, rope->inv_freq, rope->attention_scaling);
    k = ops::rotary_embedding(k, positions, rope->inv_freq, rope->attention_scaling);
    if (cache) std::tie(k, v) = cache->append(k, v, past);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    const Tensor ctx = ops::scaled_dot_product_attention(q, k, v, true, scale, window_, key_mask);
    return o_proj_(ctx.transpose(1, 2).reshape({B, T, heads_ * head_dim_}));
  }

 private:
  std::int64_t heads_, kv_heads_, head_dim_, window_;
  nn::ChildRef<> q_proj_, k_proj_, v_proj_, o_proj_;
  nn::ChildRef<LlamaRotaryEmbedding<P>> rotary_emb_;  ///< older configs only: one per attention
};

/// LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)).
template <PolicyBundle P = default_policies>
class LlamaMLP : public nn::BasicModule<LlamaMLP<P>, P> {
  using Base = nn::BasicModule<LlamaMLP<P>, P>;

 public:
  LlamaMLP(const LlamaConfig& c, const std::string& prefix, DType dtype) : Base(prefix + "MLP") {
    using L = nn::BasicLinear<P>;
    gate_proj_ = this->register_child("gate_proj", std::make_shared<L>(c.hidden_size, c.intermediate_size, c.mlp_bias, dtype));
    up_proj_ = this->register_child("up_proj", std::make_shared<L>(c.hidden_size, c.intermediate_size, c.mlp_bias, dtype));
    down_proj_ = this->register_child("down_proj", std::make_shared<L>(c.intermediate_size, c.hidden_size, c.mlp_bias, dtype));
    this->register_module("act_fn", detail::named_module("SiLU"));
  }
  Tensor forward(const Tensor& x) override {
    return down_proj_(ops::mul(ops::silu(gate_proj_(x)), up_proj_(x)));
  }

 private:
  nn::ChildRef<> gate_proj_, up_proj_, down_proj_;
};

/// LlamaDecoderLayer: x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(x)).
template <PolicyBundle P = default_policies>
class LlamaDecoderLayer : public nn::BasicModule<LlamaDecoderLayer<P>, P> {
  using Base = nn::BasicModule<LlamaDecoderLayer<P>, P>;

 public:
  LlamaDecoderLayer(const LlamaConfig& c, const std::string& prefix, DType dtype) : Base(prefix + "DecoderLayer") {
    self_attn_ = this->register_child("self_attn", std::make_shared<LlamaAttention<P>>(c, prefix, dtype));
    mlp_ = this->register_child("mlp", std::make_shared<LlamaMLP<P>>(c, prefix, dtype));
    input_layernorm_ = this->register_child("input_layernorm", norm(c, prefix, dtype));
    post_attention_layernorm_ = this->register_child("post_attention_layernorm", norm(c, prefix, dtype));
  }
  /// hidden [B, T, hidden] -> [B, T, hidden]; `key_mask` [B, past + T] (or undefined) leaves padding out.
  Tensor forward(const Tensor& hidden, const Tensor& positions, const Tensor& key_mask, const RopeFrequencies* rope,
                 LayerKVCache* cache, std::int64_t past) {
    Tensor h = ops::add(hidden, self_attn_(input_layernorm_(hidden), positions, key_mask, rope, cache, past));
    return ops::add(h, mlp_(post_attention_layernorm_(h)));
  }

  /// The family's RMSNorm with the config's eps.
  static std::shared_ptr<nn::BasicRMSNorm<P>> norm(const LlamaConfig& c, const std::string& prefix, DType dtype) {
    auto n = std::make_shared<nn::BasicRMSNorm<P>>(c.hidden_size, c.rms_norm_eps, dtype);
    n->set_class_name(prefix + "RMSNorm");
    return n;
  }

 private:
  nn::ChildRef<LlamaAttention<P>> self_attn_;
  nn::ChildRef<> mlp_, input_layernorm_, post_attention_layernorm_;
};

/// LlamaModel: embed_tokens, decoder layers, final norm; returns hidden states [B, T, hidden].
template <PolicyBundle P = default_policies>
class LlamaModel : public nn::BasicModule<LlamaModel<P>, P> {
  using Base = nn::BasicModule<LlamaModel<P>, P>;

 public:
  explicit LlamaModel(const LlamaConfig& c, DType dtype = Base::storage_dtype)
      : Base(detail::llama_family_prefix(c.model_type) + "Model"), config_(c) {
    const std::string prefix = detail::llama_family_prefix(c.model_type);
    embed_tokens_ = this->register_child("embed_tokens", std::make_shared<nn::BasicEmbedding<P>>(c.vocab_size, c.hidden_size, dtype));
    auto layers = this->register_module("layers", std::make_shared<nn::ModuleList>());
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
      layers->push_back(std::make_shared<LlamaDecoderLayer<P>>(c, prefix, dtype));
      layers_.emplace_back(*layers, std::to_string(i));
    }
    norm_ = this->register_child("norm", LlamaDecoderLayer<P>::norm(c, prefix, dtype));
    // One rotary embedding serves every layer (older transformers kept one per attention, which
    // then computes its own).
    if (!c.rotary_per_layer) {
      this->register_module("rotary_emb", std::make_shared<LlamaRotaryEmbedding<P>>(c, prefix));
      rotary_emb_ = nn::ChildRef<LlamaRotaryEmbedding<P>>(*this, "rotary_emb");
    }
    this->set_no_split_modules({prefix + "DecoderLayer"});
  }
  /// input_ids [B, T] -> hidden states [B, T, hidden]; positions continue `cache` when given;
  /// `attention_mask` [B, past + T] marks padding with 0 (CausalLM::logits).
  Tensor forward(const Tensor& input_ids, KVCache* cache, const Tensor& attention_mask = {}) {
    detail::check_input_ids(this->class_name(), input_ids);
    const std::int64_t past = cache ? cache->length() : 0, T = input_ids.size(1);
    if (cache && cache->num_layers() != layers_.size()) {
      throw ValueError(this->class_name() + ": the cache has " + std::to_string(cache->num_layers()) +
                       " layers, the model " + std::to_string(layers_.size()));
    }
    Tensor h = embed_tokens_(input_ids);
    const Tensor positions =
        attention_mask.defined()
            ? detail::position_ids_from_mask(this->class_name(), attention_mask, past, T, input_ids.size(0), h.device())
            : detail::position_ids(past, T, h.device());
    RopeFrequencies rope;
    if (rotary_emb_) rope = rotary_emb_(past + T - 1);
    const RopeFrequencies* shared = rotary_emb_ ? &rope : nullptr;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      h = layers_[i](h, positions, attention_mask, shared, cache ? &cache->layer(i) : nullptr, past);
    }
    if (cache) cache->advance(T);
    return norm_(h);
  }
  const LlamaConfig& config() const noexcept { return config_; }
  /// The decoder layers, as the tree holds them now.
  const std::vector<nn::ChildRef<LlamaDecoderLayer<P>>>& layers() const noexcept { return layers_; }

 private:
  LlamaConfig config_;
  nn::ChildRef<> embed_tokens_, norm_;
  std::vector<nn::ChildRef<LlamaDecoderLayer<P>>> layers_;
  nn::ChildRef<LlamaRotaryEmbedding<P>> rotary_emb_;  ///< empty with a rotary_emb per attention
};

/// LlamaForCausalLM: model (LlamaModel) and lm_head; returns logits [B, T, vocab].
template <PolicyBundle P = default_policies>
class LlamaForCausalLM : public BasicCausalLM<LlamaForCausalLM<P>, LlamaModel<P>, P> {
  using Base = BasicCausalLM<LlamaForCausalLM<P>, LlamaModel<P>, P>;

 public:
  explicit LlamaForCausalLM(const LlamaConfig& c, DType dtype = nn::BasicModule<LlamaForCausalLM<P>, P>::storage_dtype)
      : Base(detail::llama_family_prefix(c.model_type) + "ForCausalLM", "model", std::make_shared<LlamaModel<P>>(c, dtype),
             c.hidden_size, c.vocab_size, c.tie_word_embeddings, "embed_tokens.weight", dtype,
             {c.model_type, c.vocab_size, c.max_position_embeddings, c.num_hidden_layers, c.num_key_value_heads,
              c.resolved_head_dim(), false, c.eos_token_ids, c.bos_token_id}) {}
  LlamaModel<P>& model() { return this->base_model(); }
  std::vector<Device> layer_devices() override {
    std::vector<Device> out;
    for (const auto& l : model().layers()) out.push_back(l->execution_device());
    return out;
  }
};

}  // namespace accel::models

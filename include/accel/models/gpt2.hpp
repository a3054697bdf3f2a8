// GPT-2 (transformers' GPT2LMHeadModel / GPT2Model) with its forward, under a policy bundle P.
//
//   auto lm = std::make_shared<GPT2LMHeadModel<>>(gpt2_config_from_json(j));   // module names as transformers'
//   Tensor logits = (*lm)(ids, &cache);           // [B, T, vocab]; positions continue the cache
//
// transformer.{wte, wpe, drop, h.N.{ln_1, attn.{c_attn, c_proj}, ln_2, mlp.{c_fc, c_proj}}, ln_f},
// lm_head (tied to wte unless tie_word_embeddings is false). Learned positions, pre-LayerNorm
// blocks, Conv1D projections (weights [in, out]), causal attention scaled by 1/sqrt(head_dim)
// (and 1/(layer + 1) with scale_attn_by_inverse_layer_idx), the config's activation (gelu_new by
// default), dropout as identity (inference). Besides the weights the tree carries the buffers
// transformers registers, which Accelerate's sizes count: attn.bias (bool [1, 1, n_positions,
// n_positions]) and attn.masked_bias (f32 scalar), both non-persistent and unused here.
#pragma once

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
#include "accel/models/hf_config.hpp"
#include "accel/models/kv_cache.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/ops/ops.hpp"

namespace accel::models {

namespace detail {
/// A policy-neutral module with a class name and no forward (dropout, activations as modules).
inline std::shared_ptr<nn::Module> named_module(const std::string& cls) { return std::make_shared<nn::Module>(cls); }

/// The activation a config names, on x.
inline Tensor activation(const std::string& name, const Tensor& x) {
  if (name == "gelu") return ops::gelu(x, ops::GeluApproximate::none);
  if (name == "silu" || name == "swish") return ops::silu(x);
  return ops::gelu(x, ops::GeluApproximate::tanh);  // gelu_new, gelu_pytorch_tanh, gelu_fast
}
}  // namespace detail

/// GPT2Attention: fused q/k/v projection, causal attention over the cache, output projection.
template <PolicyBundle P = default_policies>
class GPT2Attention : public nn::BasicModule<GPT2Attention<P>, P> {
  using Base = nn::BasicModule<GPT2Attention<P>, P>;

 public:
  GPT2Attention(const GPT2Config& c, std::int64_t layer_idx, DType dtype) : Base("GPT2Attention"), heads_(c.n_head) {
    this->register_buffer("bias", nn::new_parameter_tensor({1, 1, c.n_positions, c.n_positions}, DType::boolean, 1.0, true),
                          false);
    this->register_buffer("masked_bias", nn::new_parameter_tensor({}, DType::f32, -1e4, true), false);
    c_attn_ = this->register_child("c_attn", std::make_shared<nn::BasicConv1D<P>>(c.n_embd, 3 * c.n_embd, dtype));
    c_proj_ = this->register_child("c_proj", std::make_shared<nn::BasicConv1D<P>>(c.n_embd, c.n_embd, dtype));
    this->register_module("attn_dropout", detail::named_module("Dropout"));
    this->register_module("resid_dropout", detail::named_module("Dropout"));
    const double head_dim = static_cast<double>(c.n_embd / c.n_head);
    scale_ = c.scale_attn_weights ? 1.0 / std::sqrt(head_dim) : 1.0;
    if (c.scale_attn_by_inverse_layer_idx) scale_ /= static_cast<double>(layer_idx + 1);
  }

  /// x [B, T, C] -> [B, T, C]; keys and values go through `cache` at position `past` when given;
  /// `key_mask` [B, past + T] (or undefined) leaves padding out.
  Tensor forward(const Tensor& x, const Tensor& key_mask, LayerKVCache* cache, std::int64_t past) {
    const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads_;
    const Tensor qkv = c_attn_(x);
    // [B, T, 3C] viewed as [B, T, 3, H, D]: q, k and v are strided views, no copy.
    const Tensor split = qkv.contiguous().view({B, T, 3, heads_, D});
    auto heads = [&](std::int64_t i) { return split.select(2, i).transpose(1, 2); };
    Tensor q = heads(0), k = heads(1), v = heads(2);
    if (cache) std::tie(k, v) = cache->append(k, v, past);
    const Tensor ctx = ops::scaled_dot_product_attention(q, k, v, true, scale_, 0, key_mask);
    return c_proj_(ctx.transpose(1, 2).reshape({B, T, C}));
  }

 private:
  std::int64_t heads_;
  double scale_ = 1.0;
  nn::ChildRef<> c_attn_, c_proj_;
};

/// GPT2MLP: c_fc, activation, c_proj.
template <PolicyBundle P = default_policies>
class GPT2MLP : public nn::BasicModule<GPT2MLP<P>, P> {
  using Base = nn::BasicModule<GPT2MLP<P>, P>;

 public:
  GPT2MLP(const GPT2Config& c, DType dtype) : Base("GPT2MLP"), act_(c.activation_function) {
    const std::int64_t inner = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
    c_fc_ = this->register_child("c_fc", std::make_shared<nn::BasicConv1D<P>>(c.n_embd, inner, dtype));
    c_proj_ = this->register_child("c_proj", std::make_shared<nn::BasicConv1D<P>>(inner, c.n_embd, dtype));
    this->register_module("act", detail::named_module("NewGELUActivation"));
    this->register_module("dropout", detail::named_module("Dropout"));
  }
  Tensor forward(const Tensor& x) override { return c_proj_(detail::activation(act_, c_fc_(x))); }

 private:
  std::string act_;
  nn::ChildRef<> c_fc_, c_proj_;
};

/// GPT2Block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
template <PolicyBundle P = default_policies>
class GPT2Block : public nn::BasicModule<GPT2Block<P>, P> {
  using Base = nn::BasicModule<GPT2Block<P>, P>;

 public:
  GPT2Block(const GPT2Config& c, std::int64_t layer_idx, DType dtype) : Base("GPT2Block") {
    ln_1_ = this->register_child("ln_1", std::make_shared<nn::BasicLayerNorm<P>>(c.n_embd, c.layer_norm_epsilon, true, dtype));
    attn_ = this->register_child("attn", std::make_shared<GPT2Attention<P>>(c, layer_idx, dtype));
    ln_2_ = this->register_child("ln_2", std::make_shared<nn::BasicLayerNorm<P>>(c.n_embd, c.layer_norm_epsilon, true, dtype));
    mlp_ = this->register_child("mlp", std::make_shared<GPT2MLP<P>>(c, dtype));
  }
  /// hidden [B, T, C] -> [B, T, C].
  Tensor forward(const Tensor& hidden, const Tensor& key_mask, LayerKVCache* cache, std::int64_t past) {
    Tensor h = ops::add(hidden, attn_(ln_1_(hidden), key_mask, cache, past));
    return ops::add(h, mlp_(ln_2_(h)));
  }

 private:
  nn::ChildRef<> ln_1_, ln_2_, mlp_;
  nn::ChildRef<GPT2Attention<P>> attn_;
};

/// GPT2Model: embeddings, blocks, final LayerNorm; returns hidden states [B, T, C].
template <PolicyBundle P = default_policies>
class GPT2Model : public nn::BasicModule<GPT2Model<P>, P> {
  using Base = nn::BasicModule<GPT2Model<P>, P>;

 public:
  explicit GPT2Model(const GPT2Config& c, DType dtype = Base::storage_dtype) : Base("GPT2Model"), config_(c) {
    wte_ = this->register_child("wte", std::make_shared<nn::BasicEmbedding<P>>(c.vocab_size, c.n_embd, dtype));
    wpe_ = this->register_child("wpe", std::make_shared<nn::BasicEmbedding<P>>(c.n_positions, c.n_embd, dtype));
    this->register_module("drop", detail::named_module("Dropout"));
    auto h = this->register_module("h", std::make_shared<nn::ModuleList>());
    for (std::int64_t i = 0; i < c.n_layer; ++i) {
      h->push_back(std::make_shared<GPT2Block<P>>(c, i, dtype));
      blocks_.emplace_back(*h, std::to_string(i));
    }
    ln_f_ = this->register_child("ln_f", std::make_shared<nn::BasicLayerNorm<P>>(c.n_embd, c.layer_norm_epsilon, true, dtype));
    this->set_no_split_modules({"GPT2Block"});
  }
  /// input_ids [B, T] -> hidden states [B, T, C]; positions continue `cache` when given;
  /// `attention_mask` [B, past + T] marks padding with 0 (CausalLM::logits).
  Tensor forward(const Tensor& input_ids, KVCache* cache, const Tensor& attention_mask = {}) {
    detail::check_input_ids("GPT2Model", input_ids);
    const std::int64_t past = cache ? cache->length() : 0, T = input_ids.size(1);
    if (past + T > config_.n_positions) {
      throw ValueError("GPT2Model: positions up to " + std::to_string(past + T) + " pass n_positions " +
                       std::to_string(config_.n_positions) + " (learned position embeddings end there)");
    }
    if (cache && cache->num_layers() != blocks_.size()) {
      throw ValueError("GPT2Model: the cache has " + std::to_string(cache->num_layers()) + " layers, the model " +
                       std::to_string(blocks_.size()));
    }
    const Device dev = wpe_->execution_device();  // where the position embedding computes
    const Tensor positions = attention_mask.defined()
                                 ? detail::position_ids_from_mask("GPT2Model", attention_mask, past, T, input_ids.size(0), dev)
                                 : detail::position_ids(past, T, dev);
    Tensor h = ops::add(wte_(input_ids), wpe_(positions));
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      h = blocks_[i](h, attention_mask, cache ? &cache->layer(i) : nullptr, past);
    }
    if (cache) cache->advance(T);
    return ln_f_(h);
  }
  const GPT2Config& config() const noexcept { return config_; }
  /// The blocks, as the tree holds them now.
  const std::vector<nn::ChildRef<GPT2Block<P>>>& blocks() const noexcept { return blocks_; }

 private:
  GPT2Config config_;
  nn::ChildRef<> wte_, wpe_, ln_f_;
  std::vector<nn::ChildRef<GPT2Block<P>>> blocks_;
};

/// GPT2LMHeadModel: transformer (GPT2Model) and lm_head; returns logits [B, T, vocab].
template <PolicyBundle P = default_policies>
class GPT2LMHeadModel : public BasicCausalLM<GPT2LMHeadModel<P>, GPT2Model<P>, P> {
  using Base = BasicCausalLM<GPT2LMHeadModel<P>, GPT2Model<P>, P>;

 public:
  explicit GPT2LMHeadModel(const GPT2Config& c, DType dtype = nn::BasicModule<GPT2LMHeadModel<P>, P>::storage_dtype)
      : Base("GPT2LMHeadModel", "transformer", std::make_shared<GPT2Model<P>>(c, dtype), c.n_embd, c.vocab_size,
             c.tie_word_embeddings, "wte.weight", dtype,
             {"gpt2", c.vocab_size, c.n_positions, c.n_layer, c.n_head, c.n_embd / c.n_head, true, c.eos_token_ids,
              c.bos_token_id}) {}
  GPT2Model<P>& transformer() { return this->base_model(); }
  std::vector<Device> layer_devices() override {
    std::vector<Device> out;
    for (const auto& b : transformer().blocks()) out.push_back(b->execution_device());
    return out;
  }
};

}  // namespace accel::models

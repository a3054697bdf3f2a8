// CausalLM: what generation and the command line need of a causal language model, whatever its
// family and policy bundle.
//
//   lm.logits(input_ids [B, T], &cache, logits_to_keep)   -> [B, T or keep, vocab], appending to the cache
//   lm.make_cache(batch, capacity)                         one slot per layer, on that layer's device
//   lm.info()                                              vocab, context length, eos ids, ...
//   lm.module()                                            the Module tree (plan, load, hooks)
//
// The model classes (GPT2LMHeadModel<P>, LlamaForCausalLM<P>) are BasicModules with a typed
// forward; this interface is the one virtual seam, so a program that picks the family from a
// config.json at run time (accel run) holds a `std::shared_ptr<CausalLM>`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/models/kv_cache.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/module.hpp"

namespace accel::models {

/// The facts about a causal LM that generation needs.
struct ModelInfo {
  std::string model_type;              ///< "gpt2", "llama", "mistral", "qwen2"
  std::int64_t vocab_size = 0;
  std::int64_t max_positions = 0;      ///< the context length (n_positions / max_position_embeddings)
  std::int64_t num_layers = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  bool hard_context_limit = false;     ///< learned positions (GPT-2): no position past max_positions
  std::vector<std::int64_t> eos_token_ids;
  std::optional<std::int64_t> bos_token_id;
};

/// A causal language model (see the header comment).
class CausalLM {
 public:
  virtual ~CausalLM() = default;
  /// The module tree.
  virtual nn::Module& module() = 0;
  virtual const ModelInfo& info() const = 0;
  /// Logits of `input_ids` [B, T] (int64 / int32) at positions cache->length() .. + T - 1 (0 ..
  /// T - 1 without a cache), in float32 for a model compiled for a lower precision (its bundle
  /// converts outputs, as Accelerate's mixed precision does), else in the model's dtype; the last
  /// `logits_to_keep` positions only when it is > 0. The cache is appended to and advanced by T. `attention_mask` (transformers'
  /// padding mask, [B, past + T], 0 on padding) leaves padded keys out and numbers each row's
  /// positions from its first real token, so left-padded prompts decode as they would alone.
  virtual Tensor logits(const Tensor& input_ids, KVCache* cache = nullptr, std::int64_t logits_to_keep = 0,
                        const Tensor& attention_mask = {}) = 0;
  /// The execution device of each decoder layer (where its cache slot goes): its hook's under
  /// offload, else its weights'.
  virtual std::vector<Device> layer_devices() = 0;
  /// The dtype activations (and so the cache) are held in.
  virtual DType activation_dtype() = 0;
  /// The precision the model's forward was compiled for (its policy bundle's tag), as Accelerate
  /// spells mixed_precision: `no` for float32, `bf16`, `fp16`.
  virtual policy::PrecisionType precision() const = 0;

  /// A cache for `batch` sequences of up to `capacity` positions, one slot per layer.
  KVCache make_cache(std::int64_t batch, std::int64_t capacity) {
    const ModelInfo& i = info();
    if (i.hard_context_limit && capacity > i.max_positions) {
      throw ValueError(i.model_type + ": " + std::to_string(capacity) + " positions pass the model's context of " +
                       std::to_string(i.max_positions) + " (learned position embeddings end there)");
    }
    return KVCache({batch, i.kv_heads, capacity, i.head_dim}, activation_dtype(), layer_devices());
  }
};

namespace detail {
/// Positions past .. past + t - 1 as int64 [t] on `device`; on the CPU when `device` is meta:
/// positions hold values even where the blocks are another process's (a model split across
/// processes passes them from block to block, dist/split_model.hpp).
inline Tensor position_ids(std::int64_t past, std::int64_t t, Device device) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(t));
  for (std::int64_t i = 0; i < t; ++i) p[static_cast<std::size_t>(i)] = past + i;
  Tensor out = Tensor::from_vector(p, Shape{t});
  return device.is_cpu() || device.is_meta() ? out : out.to(device);
}
/// Positions of the last `t` of S tokens per row from a padding mask [B, S]: the count of real
/// tokens before each one (transformers' cumsum - 1; padding gets 1, it is never attended to).
inline Tensor position_ids_from_mask(const std::string& model, const Tensor& mask, std::int64_t past, std::int64_t t,
                                     std::int64_t batch, Device device) {
  if (mask.dim() != 2 || mask.size(0) != batch || mask.size(1) != past + t) {
    throw ShapeError(model + ": attention_mask " + mask.shape().str() + " must be [batch, past + tokens] = [" +
                     std::to_string(batch) + ", " + std::to_string(past + t) + "]");
  }
  const Tensor m = mask.to(Device::cpu(), DType::i64).contiguous();
  const std::int64_t S = past + t;
  std::vector<std::int64_t> pos(static_cast<std::size_t>(batch * t));
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int64_t count = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      const bool real = m.data_ptr<std::int64_t>()[b * S + s] != 0;
      count += real ? 1 : 0;
      if (s >= past) pos[static_cast<std::size_t>(b * t + s - past)] = real ? count - 1 : 1;
    }
  }
  Tensor out = Tensor::from_vector(pos, Shape{batch, t});
  return device.is_cpu() || device.is_meta() ? out : out.to(device);  // as position_ids
}

/// Checks input ids [B, T] for a model's forward.
inline void check_input_ids(const std::string& model, const Tensor& ids) {
  if (!ids.defined() || ids.dim() != 2 || (ids.dtype() != DType::i64 && ids.dtype() != DType::i32)) {
    throw ShapeError(model + ": input_ids must be int64 or int32 [batch, tokens], got " +
                     (ids.defined() ? std::string(dtype_name(ids.dtype())) + " " + ids.shape().str() : "undefined"));
  }
  if (ids.size(1) == 0) throw ValueError(model + ": input_ids holds no token");
}
}  // namespace detail

/// A *ForCausalLM: a base model (`Base`: GPT2Model, LlamaModel) under `base_name` and an
/// lm_head, optionally tied to the base's token embedding; the one implementation of the head,
/// the logits_to_keep cut and the CausalLM interface for every family. Derived gives the layer
/// devices (where its attention weights live).
template <class Derived, class Base, PolicyBundle P>
class BasicCausalLM : public nn::BasicModule<Derived, P>, public CausalLM {
  using Module = nn::BasicModule<Derived, P>;

 public:
  /// `tied_embedding` names the base's embedding weight the head shares when `tie` is set.
  BasicCausalLM(const std::string& class_name, const std::string& base_name, std::shared_ptr<Base> base,
                std::int64_t hidden, std::int64_t vocab, bool tie, const std::string& tied_embedding, DType dtype,
                ModelInfo info)
      : Module(class_name), info_(std::move(info)), dtype_(dtype), embedding_(tied_embedding) {
    base_ = this->register_child(base_name, std::move(base));
    lm_head_ = this->register_child("lm_head", std::make_shared<nn::BasicLinear<P>>(hidden, vocab, false, dtype));
    if (tie) lm_head_->register_parameter("weight", base_->parameter_cell(tied_embedding));
    this->set_no_split_modules(base_->no_split_modules());
  }
  /// input_ids [B, T] -> logits [B, T, vocab] (the last `logits_to_keep` positions when > 0);
  /// `attention_mask` as CausalLM::logits takes it.
  Tensor forward(const Tensor& input_ids, KVCache* cache = nullptr, std::int64_t logits_to_keep = 0,
                 const Tensor& attention_mask = {}) {
    Tensor h = base_(input_ids, cache, attention_mask);
    const std::int64_t T = h.size(1);
    if (logits_to_keep > 0 && logits_to_keep < T) h = h.narrow(1, T - logits_to_keep, logits_to_keep);
    return lm_head_(h);
  }
  /// The base model.
  Base& base_model() { return *base_; }

  nn::Module& module() override { return *this; }
  const ModelInfo& info() const override { return info_; }
  Tensor logits(const Tensor& input_ids, KVCache* cache, std::int64_t logits_to_keep,
                const Tensor& attention_mask) override {
    return (*this)(input_ids, cache, logits_to_keep, attention_mask);
  }
  policy::PrecisionType precision() const override { return P::precision::id; }
  // The blocks compute in the dtype of the hidden states the token embedding gives them, and the
  // cache holds that: a head kept in float32 (keep_in_fp32_modules) does not change it. A weight
  // keeps its dtype on meta, so this holds while the embedding is offloaded; a quantized one
  // (packed bytes) gives the dtype the model was built in.
  DType activation_dtype() override {
    const DType d = base_->get_parameter(embedding_).dtype();
    return is_floating_point(d) ? d : dtype_;
  }

 private:
  nn::ChildRef<Base> base_;
  nn::ChildRef<> lm_head_;
  ModelInfo info_;
  DType dtype_;
  std::string embedding_;  ///< the base's token embedding weight, relative to the base
};

}  // namespace accel::models

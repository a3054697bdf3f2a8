// The fields of transformers' config.json that the GPT-2 and LLaMA-family models read, with
// transformers' defaults, checked as they are read.
//
//   GPT2Config  gpt2_config_from_json(j, source)     model_type gpt2
//   LlamaConfig llama_config_from_json(j, source)    model_type llama, mistral, qwen2
//
// Counts must be integers in [1, limit] (layers <= 4096, heads <= 4096, sizes <= 2^24, vocab <=
// 2^24, positions <= 2^24): a fractional, negative, zero or absurd value is a FormatError naming
// `source` (the config's path) and the key, never a silently truncated model. Defaults are those
// of each family's Config class in transformers (Mistral: sliding_window 4096; Qwen2: q/k/v biases,
// sliding window only with use_sliding_window).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/json_fields.hpp"
#include "accel/models/rope.hpp"

namespace accel::models {

/// Upper bounds of config counts (generous for real models, small enough that sizes cannot overflow).
inline constexpr std::int64_t max_config_layers = 4096;
inline constexpr std::int64_t max_config_heads = 4096;
inline constexpr std::int64_t max_config_size = std::int64_t{1} << 24;

/// The fields of a LLaMA-family config.json (llama, mistral, qwen2).
struct LlamaConfig {
  std::string model_type = "llama";
  std::int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008;
  std::int64_t num_hidden_layers = 32, num_attention_heads = 32, num_key_value_heads = 32;
  std::int64_t head_dim = 0;  ///< 0: hidden_size / num_attention_heads
  std::int64_t max_position_embeddings = 2048;  ///< the context length
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool qkv_bias = false;  ///< q/k/v projections carry a bias (attention_bias; always for qwen2)
  bool o_bias = false;    ///< o_proj carries a bias (attention_bias; never for qwen2)
  bool mlp_bias = false;
  std::int64_t sliding_window = 0;  ///< > 0: each query sees that many newest keys (Mistral)
  bool tie_word_embeddings = false;
  bool rotary_per_layer = false;  ///< older transformers: a rotary_emb (inv_freq buffer) per attention
  std::vector<std::int64_t> eos_token_ids;
  std::optional<std::int64_t> bos_token_id;

  /// The per-head dimension (head_dim, or hidden_size / num_attention_heads).
  std::int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
};

/// The fields of a GPT-2 config.json.
struct GPT2Config {
  std::int64_t vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12;
  std::int64_t n_inner = 0;  ///< 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  std::string activation_function = "gelu_new";
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  bool tie_word_embeddings = true;
  std::vector<std::int64_t> eos_token_ids{50256};
  std::optional<std::int64_t> bos_token_id = 50256;
};

namespace detail {

inline std::string key_path(const char* key) { return std::string("'") + key + "'"; }

/// A positive integer count in [1, limit]; `fallback` when absent or null.
inline std::int64_t count_field(const nlohmann::json& j, const char* key, std::int64_t fallback, std::int64_t limit,
                                const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  const bool integral = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                                                  std::abs(v.get<double>()) < 9e15);
  if (!integral) throw FormatError(source + ": " + key_path(key) + " must be a positive integer, got " + v.dump());
  const auto n = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(limit)
                     ? limit + 1
                     : (v.is_number_float() ? static_cast<std::int64_t>(v.get<double>()) : v.get<std::int64_t>());
  if (n < 1 || n > limit) {
    throw FormatError(source + ": " + key_path(key) + " must be an integer in [1, " + std::to_string(limit) + "], got " +
                      v.dump());
  }
  return n;
}

inline double positive_number(const nlohmann::json& j, const char* key, double fallback, const std::string& source) {
  const double v = json_field_or<double, FormatError>(j, key, fallback, source);
  if (!(v > 0.0)) throw FormatError(source + ": " + key_path(key) + " must be a positive number, got " + j[key].dump());
  return v;
}

/// eos_token_id: an integer, a list of integers, or null.
inline std::vector<std::int64_t> token_ids(const nlohmann::json& j, const char* key, std::vector<std::int64_t> fallback,
                                           const std::string& source) {
  if (!j.contains(key)) return fallback;
  const auto& v = j[key];
  if (v.is_null()) return {};
  std::vector<std::int64_t> out;
  auto one = [&](const nlohmann::json& x) {
    if (!x.is_number_integer() || x.get<std::int64_t>() < 0) {
      throw FormatError(source + ": " + key_path(key) + " must hold non-negative integers, got " + v.dump());
    }
    out.push_back(x.get<std::int64_t>());
  };
  if (v.is_array()) {
    for (const auto& x : v) one(x);
  } else {
    one(v);
  }
  return out;
}

inline void require_object(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw FormatError(source + ": a config must be a JSON object");
}

}  // namespace detail

/// Reads a LLaMA-family config.json (llama, mistral, qwen2); `source` names it in errors.
inline LlamaConfig llama_config_from_json(const nlohmann::json& j, const std::string& source = "config.json") {
  using namespace detail;
  require_object(j, source);
  LlamaConfig c;
  c.model_type = json_field_or<std::string, FormatError>(j, "model_type", "llama", source);
  const bool mistral = c.model_type == "mistral", qwen2 = c.model_type == "qwen2";
  c.vocab_size = count_field(j, "vocab_size", qwen2 ? 151936 : c.vocab_size, max_config_size, source);
  c.hidden_size = count_field(j, "hidden_size", c.hidden_size, max_config_size, source);
  c.intermediate_size = count_field(j, "intermediate_size", c.intermediate_size, max_config_size, source);
  c.num_hidden_layers = count_field(j, "num_hidden_layers", c.num_hidden_layers, max_config_layers, source);
  c.num_attention_heads = count_field(j, "num_attention_heads", c.num_attention_heads, max_config_heads, source);
  c.num_key_value_heads = count_field(j, "num_key_value_heads", c.num_attention_heads, max_config_heads, source);
  c.head_dim = count_field(j, "head_dim", 0, max_config_size, source);
  c.max_position_embeddings = count_field(j, "max_position_embeddings", mistral ? 32768 : c.max_position_embeddings,
                                          max_config_size, source);
  c.rms_norm_eps = positive_number(j, "rms_norm_eps", 1e-6, source);
  c.rope_theta = positive_number(j, "rope_theta", 10000.0, source);
  c.rope_scaling = RopeScaling::from_json(j.contains("rope_scaling") ? j["rope_scaling"] : nlohmann::json(), source);
  const bool attention_bias = json_field_or<bool, FormatError>(j, "attention_bias", false, source);
  c.qkv_bias = qwen2 || attention_bias;
  c.o_bias = !qwen2 && attention_bias;
  c.mlp_bias = json_field_or<bool, FormatError>(j, "mlp_bias", false, source);
  const bool windowed = !qwen2 || json_field_or<bool, FormatError>(j, "use_sliding_window", false, source);
  if (windowed && (mistral || qwen2)) c.sliding_window = count_field(j, "sliding_window", mistral ? 4096 : 0, max_config_size, source);
  c.tie_word_embeddings = json_field_or<bool, FormatError>(j, "tie_word_embeddings", false, source);
  c.eos_token_ids = token_ids(j, "eos_token_id", {2}, source);
  const auto bos = token_ids(j, "bos_token_id", {1}, source);
  if (!bos.empty()) c.bos_token_id = bos.front();
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw FormatError(source + ": 'num_attention_heads' (" + std::to_string(c.num_attention_heads) +
                      ") must be a multiple of 'num_key_value_heads' (" + std::to_string(c.num_key_value_heads) + ")");
  }
  if (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) {
    throw FormatError(source + ": 'hidden_size' (" + std::to_string(c.hidden_size) +
                      ") must be a multiple of 'num_attention_heads' (" + std::to_string(c.num_attention_heads) +
                      ") when 'head_dim' is not given");
  }
  if (c.resolved_head_dim() % 2 != 0) {
    throw FormatError(source + ": the head dimension (" + std::to_string(c.resolved_head_dim()) +
                      ") must be even for rotary embeddings");
  }
  const std::string act = json_field_or<std::string, FormatError>(j, "hidden_act", "silu", source);
  if (act != "silu" && act != "swish") {
    throw FormatError(source + ": 'hidden_act' '" + act + "' is not supported for " + c.model_type + " (supported: silu)");
  }
  return c;
}

/// Reads a GPT-2 config.json; `source` names it in errors.
inline GPT2Config gpt2_config_from_json(const nlohmann::json& j, const std::string& source = "config.json") {
  using namespace detail;
  require_object(j, source);
  GPT2Config c;
  c.vocab_size = count_field(j, "vocab_size", c.vocab_size, max_config_size, source);
  c.n_positions = count_field(j, "n_positions", c.n_positions, max_config_size, source);
  c.n_embd = count_field(j, "n_embd", c.n_embd, max_config_size, source);
  c.n_layer = count_field(j, "n_layer", c.n_layer, max_config_layers, source);
  c.n_head = count_field(j, "n_head", c.n_head, max_config_heads, source);
  c.n_inner = count_field(j, "n_inner", 0, max_config_size, source);
  c.layer_norm_epsilon = positive_number(j, "layer_norm_epsilon", 1e-5, source);
  c.activation_function = json_field_or<std::string, FormatError>(j, "activation_function", "gelu_new", source);
  static const std::string activations[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "silu"};
  if (std::find(std::begin(activations), std::end(activations), c.activation_function) == std::end(activations)) {
    throw FormatError(source + ": 'activation_function' '" + c.activation_function +
                      "' is not supported (supported: gelu_new, gelu_pytorch_tanh, gelu_fast, gelu, silu)");
  }
  c.scale_attn_weights = json_field_or<bool, FormatError>(j, "scale_attn_weights", true, source);
  c.scale_attn_by_inverse_layer_idx = json_field_or<bool, FormatError>(j, "scale_attn_by_inverse_layer_idx", false, source);
  if (json_field_or<bool, FormatError>(j, "reorder_and_upcast_attn", false, source)) {
    // Upcasting changes nothing in fp32 and accel's attention already accumulates in f32.
  }
  c.tie_word_embeddings = json_field_or<bool, FormatError>(j, "tie_word_embeddings", true, source);
  c.eos_token_ids = token_ids(j, "eos_token_id", {50256}, source);
  const auto bos = token_ids(j, "bos_token_id", {50256}, source);
  c.bos_token_id = bos.empty() ? std::nullopt : std::optional<std::int64_t>(bos.front());
  if (c.n_embd % c.n_head != 0) {
    throw FormatError(source + ": 'n_embd' (" + std::to_string(c.n_embd) + ") must be a multiple of 'n_head' (" +
                      std::to_string(c.n_head) + ")");
  }
  return c;
}

}  // namespace accel::models

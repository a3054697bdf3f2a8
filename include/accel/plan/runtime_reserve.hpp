// Opt-in runtime reserve: bytes a device must keep free for what runs next to the weights (KV
// cache, activations, workspace). infer_auto_device_map subtracts InferOptions::reserve from each
// budget; without a reserve its maps equal Accelerate's.
//
//   ByteSize kv = estimate_kv_cache_bytes({.layers = 80, .kv_heads = 8, .head_dim = 128,
//                                          .max_seq = 8192, .batch = 1, .dtype = DType::bf16});
//   ByteSize kv = estimate_kv_cache_bytes(kv_cache_shape_from_hf_config(config_json, 8192, 1, DType::bf16));
//   opts.reserve = spread_kv_cache_reserve(kv, {0, 1, 2, 3});
//   ReadAheadReserve ra = read_ahead_reserve(model, model.no_split_modules(), 2);   prefetch<2>'s ring
//   GenerationReserve g = generation_reserve(meta_model, config_json, DType::bf16, budgets, tokens, 2);
//                         KV cache + activations + the ring, the depth lowered to what fits
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/byte_size.hpp"
#include "accel/core/checked.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/models/hf_config.hpp"
#include "accel/nn/module.hpp"
#include "accel/io/weight_reader.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/module_sizes.hpp"

namespace accel::plan {

/// The shape of a decoder's key/value cache.
struct KVCacheShape {
  std::int64_t layers = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_seq = 0;
  std::int64_t batch = 1;
  DType dtype = DType::f16;
};

/// Bytes of a full KV cache: 2 (keys and values) x layers x kv_heads x head_dim x max_seq x batch
/// x element size. ValueError on a negative dimension, OverflowError (a ValueError) on a product
/// past what a size holds.
inline ByteSize estimate_kv_cache_bytes(const KVCacheShape& s) {
  const std::int64_t dims[] = {2, s.layers, s.kv_heads, s.head_dim, s.max_seq, s.batch};
  for (std::int64_t d : dims) {
    if (d < 0) throw ValueError("estimate_kv_cache_bytes: negative dimension " + std::to_string(d));
  }
  constexpr std::string_view what = "estimate_kv_cache_bytes: 2 x layers x kv_heads x head_dim x max_seq x batch";
  return ByteSize::from_bits(checked_mul(checked_numel(dims, what), dtype_byte_size(s.dtype).bits(), what));
}

/// The KV cache of a LLaMA-family decoder: num_hidden_layers x num_key_value_heads x head_dim
/// (hidden_size / num_attention_heads when the config has none), for `max_seq` tokens
/// (max_position_embeddings when nullopt) of `batch` sequences. ValueError when the head
/// dimension is undefined (no heads, or hidden_size not a multiple of them).
inline KVCacheShape kv_cache_shape(const models::LlamaConfig& c, std::optional<std::int64_t> max_seq = std::nullopt,
                                   std::int64_t batch = 1, DType dtype = DType::f16) {
  if (c.num_attention_heads <= 0 || c.num_key_value_heads <= 0) {
    throw ValueError("kv_cache_shape: the config has " + std::to_string(c.num_attention_heads) + " attention heads and " +
                     std::to_string(c.num_key_value_heads) + " key/value heads");
  }
  if (c.head_dim <= 0 && c.hidden_size % c.num_attention_heads != 0) {
    throw ValueError("kv_cache_shape: hidden_size " + std::to_string(c.hidden_size) + " is not a multiple of " +
                     std::to_string(c.num_attention_heads) + " attention heads and the config has no head_dim");
  }
  return {c.num_hidden_layers, c.num_key_value_heads, c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads,
          max_seq.value_or(c.max_position_embeddings), batch, dtype};
}

/// The KV cache of GPT-2: n_layer x n_head x (n_embd / n_head), for `max_seq` tokens (n_positions
/// when nullopt) of `batch` sequences. ValueError when n_embd is not a multiple of n_head.
inline KVCacheShape kv_cache_shape(const models::GPT2Config& c, std::optional<std::int64_t> max_seq = std::nullopt,
                                   std::int64_t batch = 1, DType dtype = DType::f16) {
  if (c.n_head <= 0 || c.n_embd % c.n_head != 0) {
    throw ValueError("kv_cache_shape: n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " +
                     std::to_string(c.n_head));
  }
  return {c.n_layer, c.n_head, c.n_embd / c.n_head, max_seq.value_or(c.n_positions), batch, dtype};
}

/// The KV cache of a transformers config.json (model_type gpt2, llama, mistral, qwen2; the fields
/// are read as model_from_hf_config reads them). ValueError for other model types.
inline KVCacheShape kv_cache_shape_from_hf_config(const nlohmann::json& config,
                                                  std::optional<std::int64_t> max_seq = std::nullopt,
                                                  std::int64_t batch = 1, DType dtype = DType::f16) {
  const std::string type = config.contains("model_type") && config["model_type"].is_string()
                               ? config["model_type"].get<std::string>() : std::string();
  if (type == "gpt2") return kv_cache_shape(models::gpt2_config_from_json(config), max_seq, batch, dtype);
  if (type == "llama" || type == "mistral" || type == "qwen2") {
    return kv_cache_shape(models::llama_config_from_json(config), max_seq, batch, dtype);
  }
  throw ValueError("kv_cache_shape_from_hf_config: model_type '" + type +
                   "' is not supported (supported: gpt2, llama, mistral, qwen2)");
}

/// A reserve holding `total` spread evenly over `gpus` (the layers they hold share the cache),
/// plus `per_gpu_extra` (activations / workspace) on each.
inline MaxMemory spread_kv_cache_reserve(ByteSize total, const std::vector<int>& gpus, ByteSize per_gpu_extra = {}) {
  MaxMemory out;
  if (gpus.empty()) return out;
  const auto n = static_cast<std::int64_t>(gpus.size());
  for (int g : gpus) out.add(Placement::gpu(g), ByteSize::from_bits((total.bits() + n - 1) / n) + per_gpu_extra);
  return out;
}

/// The read-ahead ring of prefetch<N> on the device that runs offloaded blocks.
struct ReadAheadReserve {
  std::size_t depth = 0;       ///< N
  ByteSize layer{};            ///< one ring buffer: the largest layer plus a read's alignment slack
  std::string largest_layer;   ///< its name (the first of equals)
  ByteSize bytes{};            ///< depth x layer
};

/// What prefetch<`depth`> keeps in flight beyond the one layer infer_auto_device_map already
/// keeps free for the offloaded block that computes (Accelerate's rule): `depth` more buffers of
/// the largest layer (no-split classes whole), each with the slack an aligned direct read needs
/// (a page on each side, and one for the buffer's own alignment).
inline ReadAheadReserve read_ahead_reserve(const nn::Module& model, const std::vector<std::string>& no_split_module_classes,
                                           std::size_t depth, const SizeOptions& sizes = {}) {
  const MaxLayer m = get_max_layer_size(model, std::nullopt, no_split_module_classes, sizes);
  ReadAheadReserve r;
  r.depth = depth;
  r.layer = m.max_size + ByteSize(3 * static_cast<std::int64_t>(io::WeightFileReader::alignment));
  r.largest_layer = m.layer_names.empty() ? std::string() : m.layer_names.front();
  r.bytes = r.layer * static_cast<std::int64_t>(depth);
  return r;
}

/// One amount kept free on a device for what runs beside the weights, and why.
struct Reservation {
  std::string what;
  Placement device;
  ByteSize bytes{};
};

/// What generation needs beside the weights on the device that computes, and the read-ahead
/// depth that fits there (generation_reserve).
struct GenerationReserve {
  /// The KV cache, one block's activations and, when blocks stream, the read-ahead ring.
  std::vector<Reservation> reservations;
  /// Where they are kept: the first GPU with a budget, else the cpu; its budget (none: unbounded).
  Placement device = Placement::cpu();
  std::optional<ByteSize> budget{};
  /// The read-ahead depth asked for, and the one in force: lower when the budget cannot hold
  /// the asked ring beside the rest (a promise kept beats a deeper ring).
  std::size_t asked_depth = 0, depth = 0;
  /// One ring buffer (the largest layer, with read slack) and its layer's name.
  ByteSize layer{};
  std::string largest_layer;
  /// True when every weight fits on `device` beside the rest: nothing streams, no ring is kept.
  bool all_fit = false;

  /// The reservations as a reserve for the planner (InferOptions::reserve).
  MaxMemory reserve() const {
    MaxMemory out;
    for (const auto& r : reservations) out.add(r.device, r.bytes);
    return out;
  }
};

/// What generating `tokens` tokens (prompt and new ones; 0: none) with `model` needs beside its
/// weights, planned under `budgets` with read-ahead `depth` (prefetch<depth>; 0: sync_offload).
/// `model` is the model as it will be loaded (on meta, quantized layers already swapped in) and
/// `config` its config.json: the KV cache for `tokens` in `dtype`; one block's activations in the
/// prompt's forward, in f32 (a few hidden states and MLP intermediates, the scores of every head);
/// and, unless every weight fits beside them and the one layer the planner keeps for the block
/// that computes (Accelerate's rule), `depth` more buffers of the largest layer, the depth lowered
/// until they fit. ValueError when `tokens` > 0 and the budget cannot hold one block beside the KV
/// cache and the activations.
inline GenerationReserve generation_reserve(const nn::Module& model, const nlohmann::json& config, DType dtype,
                                            const MaxMemory& budgets, std::int64_t tokens, std::size_t depth) {
  GenerationReserve out;
  for (const auto& [k, v] : budgets) {
    if (k.is_gpu()) {
      out.device = k;
      break;
    }
  }
  out.asked_depth = out.depth = depth;
  ByteSize kv{}, act{};
  if (tokens > 0) {
    kv = estimate_kv_cache_bytes(kv_cache_shape_from_hf_config(config, tokens, 1, dtype));
    out.reservations.push_back({"KV cache for " + std::to_string(tokens) + " tokens", out.device, kv});
    auto count = [&](const char* key, std::int64_t fallback) {
      const auto it = config.find(key);
      return it != config.end() && it->is_number_integer() && it->get<std::int64_t>() > 0 ? it->get<std::int64_t>() : fallback;
    };
    const std::int64_t hidden = count("hidden_size", count("n_embd", 0));
    const std::int64_t inter = count("intermediate_size", count("n_inner", 4 * hidden));
    const std::int64_t heads = count("num_attention_heads", count("n_head", 1));
    const double bytes = 4.0 * static_cast<double>(tokens) *
                         (6.0 * static_cast<double>(hidden) + 3.0 * static_cast<double>(inter) +
                          static_cast<double>(heads) * static_cast<double>(tokens));
    act = ByteSize(static_cast<std::int64_t>(bytes));
    out.reservations.push_back({"activations of one block", out.device, act});
  }
  const ReadAheadReserve ring = read_ahead_reserve(model, model.no_split_modules(), 1, {.dtype = dtype, .special_dtypes = {}});
  out.layer = ring.layer;
  out.largest_layer = ring.largest_layer;
  ByteSize weights{};
  for (const auto& [name, t] : model.named_parameters()) weights += ByteSize(static_cast<std::int64_t>(t.nbytes()));
  const ByteSize* budget = budgets.find(out.device);
  if (budget) out.budget = *budget;
  const ByteSize fixed = kv + act;
  out.all_fit = budget && weights + fixed + out.layer <= *budget;
  if (budget && !out.all_fit) {
    // Generation's needs were asked for and cannot be kept: say so rather than break the promise.
    // (Without them the plan is Accelerate's, which runs whatever the budget.)
    if (tokens > 0 && fixed + out.layer > *budget) {
      throw ValueError("max_memory: " + out.device.str() + " = " + budget->str() + " bytes cannot hold one block of the model (" +
                       out.layer.str() + " bytes, " + out.largest_layer + ") beside the KV cache and activations (" +
                       fixed.str() + " bytes)");
    }
    while (out.depth > 0 && fixed + out.layer * static_cast<std::int64_t>(out.depth + 1) > *budget) --out.depth;
  }
  if (out.depth > 0 && !out.all_fit) {
    out.reservations.push_back({"read-ahead (" + std::to_string(out.depth) + " x the largest layer, " + out.largest_layer +
                                    ", beside the one the planner keeps)",
                                out.device, out.layer * static_cast<std::int64_t>(out.depth)});
  }
  return out;
}

}  // namespace accel::plan

namespace accel {
using plan::estimate_kv_cache_bytes, plan::generation_reserve, plan::GenerationReserve, plan::kv_cache_shape,
    plan::kv_cache_shape_from_hf_config, plan::KVCacheShape, plan::spread_kv_cache_reserve;
}  // namespace accel

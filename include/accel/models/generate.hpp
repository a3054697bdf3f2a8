// generate(lm, input_ids, config): greedy or sampled decoding with a preallocated KV cache.
//
//   GenerationConfig cfg{.max_new_tokens = 32};                          greedy (transformers' default)
//   GenerationConfig cfg{.do_sample = true, .temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 7};
//   GenerationOutput out = generate(lm, ids /* int64 [B, T] */, cfg);    out.new_tokens[b]: the new ids
//   generate(lm, {{1, 2, 3}, {4, 5}}, cfg)                               prompts of any lengths, left-padded
//
// The prompt is one forward (prefill); then one token per step. Sampling applies transformers'
// logits processors in their order (temperature, top-k, top-p) in f32, then draws from the
// softmax with a std::mt19937_64 seeded by `seed` (or by std::random_device when absent), one
// engine for the whole call, rows in order: the same seed gives the same tokens. A row stops
// after emitting an eos id (kept in its output, as transformers keeps it); the call stops when
// every row has. `use_cache = false` recomputes the whole sequence every step (the reference
// incremental decoding is tested against). Prompts of different lengths are left-padded with
// `pad_token_id` and an attention mask (transformers' convention: 0 on padding), so each row
// decodes as it would alone.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/models/causal_lm.hpp"

namespace accel::models {

/// Generation parameters with transformers' names and defaults (max_new_tokens: accel run's 32).
struct GenerationConfig {
  std::int64_t max_new_tokens = 32;
  /// Sample from the distribution; false: greedy (argmax, the lowest id on a tie).
  bool do_sample = false;
  /// Logits are divided by it before top-k / top-p (sampling only; must be > 0).
  double temperature = 1.0;
  /// Keep the k most likely tokens (0: all). transformers' default is 50.
  std::int64_t top_k = 50;
  /// Keep the smallest set of most likely tokens whose probability reaches top_p (1: all).
  double top_p = 1.0;
  /// Seed of the sampling engine; nullopt: a random seed.
  std::optional<std::uint64_t> seed{};
  /// Stop ids; empty: the model's eos_token_ids. Set `ignore_eos` to generate exactly max_new_tokens.
  std::vector<std::int64_t> eos_token_ids{};
  bool ignore_eos = false;
  /// Decode with a KV cache (false: recompute the whole sequence every step).
  bool use_cache = true;
  /// The id left padding uses; nullopt: the first eos id, else 0. It is never attended to.
  std::optional<std::int64_t> pad_token_id{};
};

/// What generate produced and how long it took.
struct GenerationOutput {
  std::vector<std::vector<std::int64_t>> new_tokens;  ///< per row, the generated ids (eos included)
  double prefill_seconds = 0;                         ///< the prompt forward and the first token (time to first token)
  double decode_seconds = 0;                          ///< every later step
  std::int64_t decode_steps = 0;                      ///< forwards after the prefill
  /// Decoded tokens per second after the first (0 when there were none).
  double tokens_per_second() const { return decode_seconds > 0 ? static_cast<double>(decode_steps) / decode_seconds : 0; }
};

namespace detail {

inline std::int64_t argmax_row(const float* v, std::int64_t n) {
  return static_cast<std::int64_t>(std::max_element(v, v + n) - v);
}

/// Draws one id from row `v` (n logits) after temperature, top-k and top-p.
inline std::int64_t sample_row(std::vector<float> v, const GenerationConfig& c, std::mt19937_64& rng) {
  const auto n = static_cast<std::int64_t>(v.size());
  for (float& x : v) x = static_cast<float>(x / c.temperature);
  std::vector<std::int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  // Descending by logit, ties by id: the kept set does not depend on the sort's stability.
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(b)] ||
           (v[static_cast<std::size_t>(a)] == v[static_cast<std::size_t>(b)] && a < b);
  });
  std::int64_t keep = n;
  if (c.top_k > 0 && c.top_k < n) {
    // transformers keeps every token whose logit reaches the k-th largest.
    const float kth = v[static_cast<std::size_t>(order[static_cast<std::size_t>(c.top_k - 1)])];
    keep = c.top_k;
    while (keep < n && v[static_cast<std::size_t>(order[static_cast<std::size_t>(keep)])] >= kth) ++keep;
  }
  const float top = v[static_cast<std::size_t>(order[0])];
  std::vector<double> p(static_cast<std::size_t>(keep));
  double sum = 0;
  for (std::int64_t i = 0; i < keep; ++i) {
    p[static_cast<std::size_t>(i)] = std::exp(static_cast<double>(v[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] - top));
    sum += p[static_cast<std::size_t>(i)];
  }
  if (c.top_p < 1.0) {
    // Keep the most likely tokens until their mass reaches top_p (at least one).
    double mass = 0;
    std::int64_t cut = 0;
    while (cut < keep) {
      mass += p[static_cast<std::size_t>(cut)] / sum;
      ++cut;
      if (mass >= c.top_p) break;
    }
    keep = std::max<std::int64_t>(cut, 1);
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  const double r = std::uniform_real_distribution<double>(0.0, sum)(rng);
  double acc = 0;
  for (std::int64_t i = 0; i < keep; ++i) {
    acc += p[static_cast<std::size_t>(i)];
    if (r < acc) return order[static_cast<std::size_t>(i)];
  }
  return order[static_cast<std::size_t>(keep - 1)];
}

inline void check_generation_config(const GenerationConfig& c) {
  if (c.max_new_tokens < 0) throw ValueError("generate: max_new_tokens must be >= 0, got " + std::to_string(c.max_new_tokens));
  if (c.do_sample && !(c.temperature > 0.0)) {
    throw ValueError("generate: temperature must be > 0 when sampling, got " + std::to_string(c.temperature));
  }
  if (c.top_k < 0) throw ValueError("generate: top_k must be >= 0, got " + std::to_string(c.top_k));
  if (!(c.top_p > 0.0 && c.top_p <= 1.0)) throw ValueError("generate: top_p must be in (0, 1], got " + std::to_string(c.top_p));
}

}  // namespace detail

/// Generates up to `config.max_new_tokens` ids after `input_ids` (int64 / int32 [B, T]);
/// `attention_mask` [B, T] (0 on left padding) when the rows are padded.
inline GenerationOutput generate(CausalLM& lm, const Tensor& input_ids, const GenerationConfig& config = {},
                                 const Tensor& attention_mask = {}) {
  using clock = std::chrono::steady_clock;
  detail::check_generation_config(config);
  detail::check_input_ids("generate", input_ids);
  const std::int64_t B = input_ids.size(0), T = input_ids.size(1);
  const ModelInfo& info = lm.info();
  if (info.hard_context_limit && T + config.max_new_tokens > info.max_positions + 1) {
    throw ValueError("generate: " + std::to_string(T) + " prompt tokens + " + std::to_string(config.max_new_tokens) +
                     " new tokens pass the model's context of " + std::to_string(info.max_positions) + " positions");
  }
  const std::vector<std::int64_t>& eos = config.eos_token_ids.empty() ? info.eos_token_ids : config.eos_token_ids;
  std::mt19937_64 rng(config.seed ? *config.seed : std::random_device{}());
  GenerationOutput out;
  out.new_tokens.assign(static_cast<std::size_t>(B), {});
  if (config.max_new_tokens == 0) return out;

  std::vector<std::vector<std::int64_t>> seqs(static_cast<std::size_t>(B));
  const Tensor ids64 = input_ids.to(Device::cpu(), DType::i64).contiguous();
  for (std::int64_t b = 0; b < B; ++b) {
    const auto* row = ids64.data_ptr<std::int64_t>() + b * T;
    seqs[static_cast<std::size_t>(b)].assign(row, row + T);
  }
  std::optional<KVCache> cache;
  if (config.use_cache) cache.emplace(lm.make_cache(B, std::max<std::int64_t>(T + config.max_new_tokens - 1, T)));
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  Tensor step = input_ids;
  // The padding mask grows by one real token per step; without padding there is none at all.
  std::vector<std::int64_t> mask;
  if (attention_mask.defined()) {
    if (attention_mask.dim() != 2 || attention_mask.size(0) != B || attention_mask.size(1) != T) {
      throw ShapeError("generate: attention_mask " + attention_mask.shape().str() + " must match input_ids " +
                       input_ids.shape().str());
    }
    mask = attention_mask.to(Device::cpu(), DType::i64).contiguous().to_vector<std::int64_t>();
  }
  auto mask_tensor = [&](std::int64_t len) {
    return Tensor::from_vector(mask, Shape{B, len}).to(input_ids.device());
  };
  const auto t0 = clock::now();
  for (std::int64_t i = 0; i < config.max_new_tokens; ++i) {
    if (!config.use_cache && i > 0) {
      std::vector<std::int64_t> flat;
      for (const auto& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
      step = Tensor::from_vector(flat, Shape{B, static_cast<std::int64_t>(seqs[0].size())}).to(input_ids.device());
    }
    const auto len = static_cast<std::int64_t>(seqs[0].size());
    const Tensor logits = lm.logits(step, cache ? &*cache : nullptr, 1, mask.empty() ? Tensor{} : mask_tensor(len))
                              .to(Device::cpu(), DType::f32)
                              .contiguous();
    const std::int64_t V = logits.size(2);
    std::vector<std::int64_t> next(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      const float* row = logits.data_ptr<float>() + b * V;
      const auto bi = static_cast<std::size_t>(b);
      // A finished row keeps emitting its eos so the batch stays rectangular; it is not reported.
      if (done[bi]) {
        next[bi] = seqs[bi].back();
        continue;
      }
      next[bi] = config.do_sample ? detail::sample_row(std::vector<float>(row, row + V), config, rng)
                                  : detail::argmax_row(row, V);
      out.new_tokens[bi].push_back(next[bi]);
      if (!config.ignore_eos && std::find(eos.begin(), eos.end(), next[bi]) != eos.end()) done[bi] = true;
    }
    for (std::int64_t b = 0; b < B; ++b) seqs[static_cast<std::size_t>(b)].push_back(next[static_cast<std::size_t>(b)]);
    if (!mask.empty()) {
      // Row b's mask gains a 1 at its end: rebuild the [B, len + 1] layout.
      std::vector<std::int64_t> grown;
      grown.reserve(mask.size() + static_cast<std::size_t>(B));
      for (std::int64_t b = 0; b < B; ++b) {
        grown.insert(grown.end(), mask.begin() + b * len, mask.begin() + (b + 1) * len);
        grown.push_back(1);
      }
      mask = std::move(grown);
    }
    const auto now = clock::now();
    if (i == 0) {
      out.prefill_seconds = std::chrono::duration<double>(now - t0).count();
    } else {
      ++out.decode_steps;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    // Each step's ids go where the prompt's went (a model on a GPU takes them there).
    if (i + 1 < config.max_new_tokens && config.use_cache) step = Tensor::from_vector(next, Shape{B, 1}).to(input_ids.device());
  }
  out.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count() - out.prefill_seconds;
  return out;
}

/// Generates after prompts of any lengths: they are left-padded to the longest with the pad id and
/// decoded under an attention mask, each row as it would be alone.
inline GenerationOutput generate(CausalLM& lm, const std::vector<std::vector<std::int64_t>>& prompts,
                                 const GenerationConfig& config = {}) {
  if (prompts.empty()) throw ValueError("generate: no prompt given");
  std::size_t longest = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw ValueError("generate: an empty prompt (every row needs at least one token)");
    longest = std::max(longest, p.size());
  }
  const std::vector<std::int64_t>& eos = config.eos_token_ids.empty() ? lm.info().eos_token_ids : config.eos_token_ids;
  const std::int64_t pad = config.pad_token_id.value_or(eos.empty() ? 0 : eos.front());
  const auto B = static_cast<std::int64_t>(prompts.size()), T = static_cast<std::int64_t>(longest);
  std::vector<std::int64_t> ids, mask;
  bool padded = false;
  for (const auto& p : prompts) {
    const std::size_t fill = longest - p.size();
    padded = padded || fill > 0;
    ids.insert(ids.end(), fill, pad);
    ids.insert(ids.end(), p.begin(), p.end());
    mask.insert(mask.end(), fill, 0);
    mask.insert(mask.end(), p.size(), 1);
  }
  const Tensor id_tensor = Tensor::from_vector(ids, Shape{B, T});
  return padded ? generate(lm, id_tensor, config, Tensor::from_vector(mask, Shape{B, T})) : generate(lm, id_tensor, config);
}

}  // namespace accel::models

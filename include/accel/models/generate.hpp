// generate(lm, input_ids, config): greedy or sampled decoding with a preallocated KV cache.
//
//   GenerationConfig cfg{.max_new_tokens = 32};                          greedy (transformers' default)
//   GenerationConfig cfg{.do_sample = true, .temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 7};
//   GenerationOutput out = generate(lm, ids /* int64 [B, T] */, cfg);    out.new_tokens[b]: the new ids
//
// The prompt is one forward (prefill); then one token per step. Sampling applies transformers'
// logits processors in their order (temperature, top-k, top-p) in f32, then draws from the
// softmax with a std::mt19937_64 seeded by `seed` (or by std::random_device when absent), one
// engine for the whole call, rows in order: the same seed gives the same tokens. A row stops
// after emitting an eos id (kept in its output, as transformers keeps it); the call stops when
// every row has. `use_cache = false` recomputes the whole sequence every step (the reference
// incremental decoding is tested against).
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

/// Generates up to `config.max_new_tokens` ids after `input_ids` (int64 / int32 [B, T]).
inline GenerationOutput generate(CausalLM& lm, const Tensor& input_ids, const GenerationConfig& config = {}) {
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
  const auto t0 = clock::now();
  for (std::int64_t i = 0; i < config.max_new_tokens; ++i) {
    if (!config.use_cache && i > 0) {
      std::vector<std::int64_t> flat;
      for (const auto& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
      step = Tensor::from_vector(flat, Shape{B, static_cast<std::int64_t>(seqs[0].size())});
    }
    const Tensor logits = lm.logits(step, cache ? &*cache : nullptr, 1).to(Device::cpu(), DType::f32).contiguous();
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
    const auto now = clock::now();
    if (i == 0) {
      out.prefill_seconds = std::chrono::duration<double>(now - t0).count();
    } else {
      ++out.decode_steps;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    if (i + 1 < config.max_new_tokens && config.use_cache) step = Tensor::from_vector(next, Shape{B, 1});
  }
  out.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count() - out.prefill_seconds;
  return out;
}

}  // namespace accel::models

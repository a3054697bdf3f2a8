// The parts of the built-in default model (default_model.hpp writes them): its tokenizer,
// config.json and weights, all derived deterministically from the story in default_model_text.hpp.
//
//   DefaultModelShape                         the sizes that may vary (layers, MLP width, shards)
//   default_model::learn_byte_level_bpe(text, n) / tokenizer_json(bpe, eos)
//   default_model::config_json(shape) / tensor_shapes(shape)
//   default_model::WeightMaker(ids).make(name, shape)   one bf16 tensor of the checkpoint
//
// What it is. A LlamaForCausalLM in bfloat16: hidden size 1024, 16 attention heads of 64 (no
// grouping), 12 layers, MLP width 2816, a byte-level BPE vocabulary of 511 tokens (256 bytes, 254
// merges, <|endoftext|>); 155M parameters, 310 MB of weights in 4 safetensors shards of at most
// 100 MB with their model.safetensors.index.json, beside config.json, generation_config.json and
// tokenizer.json (GPT-2's ByteLevel pre-tokenizer and decoder), each in the layout transformers
// and the tokenizers library write.
//
// Where its weights come from. The tokenizer's merges and the model's statistics are learned
// from a short story embedded in default_model_text.hpp. Token t is embedded as row t of a
// 1024 x 1024 Hadamard matrix plus a shared bias row, so codes of different tokens are exactly
// orthogonal. Layer 0's attention is wired, not random: through the bias row every head has the
// same query and key, rotated so that RoPE gives the highest score to the previous position,
// and its value and output projections copy the previous token's code into a second, orthogonal
// half of the hidden space. lm_head reads both halves through the final RMSNorm, so the logits
// are log(1 + c1/k) of the current token plus log(1 + c2/k) of the one before, where c1 counts
// the story's next tokens after the current one, c2 those two places after the previous one, and
// k = 0.1 smooths: a product of a bigram and a skip-bigram model. Everything else (layer 0's MLP,
// the other 11 layers) is pseudo-random, from splitmix64 streams keyed by tensor name, small
// enough that text follows the statistics and large enough that a block loaded wrongly shows.
// Measured over 256 positions of the story: zeroing one random block's output projection moves
// logits by up to 0.2-0.33 and flips 3% of the greedy choices; all blocks together leave 92% of
// them those of the statistics alone (98% without the blocks: the rest is bf16 rounding on near
// ties); zeroing layer 0's output projection flips 55%.
//
// What its text is like. Greedy decoding strings together phrases of the story by its word-pair
// statistics: "In the winter" goes on " she stayed at the sea. The boats still went out before
// the sun was up and the light. The baker brought bread, the". It is grammatical across two or
// three words and means nothing beyond them, some words come out as fragments (" asy"), and
// after a few dozen tokens it cycles through the same phrases. It knows only the story's words;
// other text is split into bytes and pieces it has little to say about.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/byte_size.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/tokenize/byte_level.hpp"
#include "accel/tokenize/split_patterns.hpp"
#include "accel/tokenize/vocab.hpp"
#include "cli_options.hpp"
#include "cli_values.hpp"

namespace accel::cli {

/// The sizes that may vary: depth, MLP width and shard size. The vocabulary, hidden size and
/// heads are fixed by the construction (see the header comment).
struct DefaultModelShape {
  std::int64_t layers = 12;
  std::int64_t intermediate = 2816;
  std::int64_t max_shard_bytes = 100'000'000;

  /// "default-model-v1" for the default shape, else a name that spells the shape.
  std::string folder_name() const {
    const DefaultModelShape d{};
    std::string name = "default-model-v1";
    if (layers == d.layers && intermediate == d.intermediate && max_shard_bytes == d.max_shard_bytes) return name;
    return name + "-l" + std::to_string(layers) + "-i" + std::to_string(intermediate) + "-s" + std::to_string(max_shard_bytes);
  }

  /// The default shape, or what ACCEL_DEFAULT_MODEL_SHAPE asks ("layers=2,intermediate=1024,shard=16MB").
  static DefaultModelShape from_env() {
    DefaultModelShape s;
    const char* env = std::getenv("ACCEL_DEFAULT_MODEL_SHAPE");
    if (!env || !*env) return s;
    const std::string var = "ACCEL_DEFAULT_MODEL_SHAPE";
    for (const auto& item : split_list(env)) {
      const auto eq = item.find('=');
      const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (key == "layers") s.layers = parse_integer(var + " layers", value, 1, 256);
      else if (key == "intermediate") s.intermediate = parse_integer(var + " intermediate", value, 1, 1 << 16);
      else if (key == "shard") s.max_shard_bytes = parse_byte_size(var + " shard", value).floor_bytes();
      else throw ValueError(var + ": '" + item + "' is not layers=N, intermediate=N or shard=SIZE");
    }
    if (s.max_shard_bytes <= 0) throw ValueError(var + ": shard must be above 0 bytes");
    return s;
  }
};

namespace default_model {

inline constexpr std::int64_t hidden = 1024;
inline constexpr std::int64_t heads = 16;
inline constexpr std::int64_t head_dim = hidden / heads;
inline constexpr std::int64_t merges = 254;
inline constexpr std::int64_t vocab = 256 + merges + 1;  // bytes, merges, <|endoftext|>
inline constexpr std::int64_t eos_id = vocab - 1;
inline constexpr std::int64_t bias_row = 511;            // the code every token shares
inline constexpr std::int64_t previous_half = 512;       // codes of the previous token start here
inline constexpr double rope_theta = 10000.0;
inline constexpr double smoothing = 0.1;                 // k of log(1 + c / k)
inline constexpr double skip_weight = 1.0;               // weight of the skip-bigram half
inline constexpr double embed_scale = 0.125;             // a power of two: codes are exact in bf16
inline constexpr double bias_scale = 0.5;
// Queries and keys of layer 0 on the 8 fastest RoPE pairs, energy falling by 0.8 per pair: the
// previous position then scores at least 20% above any other within 2048 positions, and the
// score itself (90) makes that gap 18 nats, so the softmax is one-hot to bf16's precision.
inline constexpr int previous_pairs = 8;
inline constexpr double previous_decay = 0.8;
inline constexpr double previous_score = 90.0;
// Output scale of the random blocks against the residual stream's (embed_scale).
inline constexpr double block_scale = 0.03;

/// Sylvester's Hadamard matrix: rows are mutually orthogonal +-1 codes.
inline int hadamard(std::int64_t i, std::int64_t j) noexcept {
  return (std::popcount(static_cast<std::uint64_t>(i & j)) & 1) ? -1 : 1;
}

/// In-place fast Walsh-Hadamard transform: y[j] = sum_i x[i] * hadamard(i, j).
inline void walsh_hadamard(std::vector<double>& x) {
  for (std::size_t len = 1; len < x.size(); len <<= 1) {
    for (std::size_t i = 0; i < x.size(); i += 2 * len) {
      for (std::size_t j = i; j < i + len; ++j) {
        const double a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
}

inline std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// A seed per tensor name (FNV-1a, then mixed), so each tensor's values do not depend on the order
/// tensors are made in.
inline std::uint64_t name_seed(std::string_view name) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : name) h = (h ^ static_cast<std::uint8_t>(c)) * 0x100000001B3ull;
  return splitmix64(h);
}

/// Element i of the uniform [-1, 1) stream `seed`: counter-based, so chunks fill in parallel and
/// every platform gets the same bits (std::uniform_real_distribution promises neither).
inline float uniform(std::uint64_t seed, std::uint64_t i) noexcept {
  const std::uint64_t bits = splitmix64(seed + i * 0x9E3779B97F4A7C15ull) >> 40;  // 24 bits
  return static_cast<float>(static_cast<double>(bits) * 0x1p-23 - 1.0);
}

/// `values` (f32, row-major) as a bf16 tensor through the library's rounding.
inline Tensor to_bf16(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::bf16);
  convert_elements(DType::f32, values.data(), DType::bf16, t.data_ptr(), values.size());
  return t;
}

/// The tokenizer's vocabulary and merges, learned from text.
struct ByteLevelBpe {
  std::vector<std::string> tokens;                               ///< id -> token, in byte-level stand-ins
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;     ///< in rank order
};

/// Byte-pair merges over `text` as GPT-2's pre-tokenizer splits it: the most frequent adjacent
/// pair first (the lower ids on a tie), until `count` merges or no pair occurs twice.
inline ByteLevelBpe learn_byte_level_bpe(std::string_view text, std::int64_t count) {
  ByteLevelBpe bpe;
  std::map<std::string, std::int32_t> id_of;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    tokenize::to_byte_level(std::string(1, static_cast<char>(b)), s);
    id_of.emplace(s, b);
    bpe.tokens.push_back(std::move(s));
  }
  std::map<std::string, std::int64_t> word_counts;
  for (const auto w : tokenize::split_by_pattern(tokenize::SplitPattern::gpt2, text)) ++word_counts[std::string(w)];
  std::vector<std::pair<std::vector<std::int32_t>, std::int64_t>> words;
  for (const auto& [w, n] : word_counts) {
    std::vector<std::int32_t> ids;
    for (const char c : w) ids.push_back(static_cast<std::uint8_t>(c));
    words.emplace_back(std::move(ids), n);
  }
  while (static_cast<std::int64_t>(bpe.merges.size()) < count) {
    std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> pairs;
    for (const auto& [ids, n] : words) {
      for (std::size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += n;
    }
    std::pair<std::int32_t, std::int32_t> best{};
    std::int64_t best_count = 0;
    for (const auto& [p, n] : pairs) {
      if (n > best_count) best = p, best_count = n;
    }
    if (best_count < 2) break;
    const std::string merged = bpe.tokens[best.first] + bpe.tokens[best.second];
    const auto [it, added] = id_of.emplace(merged, static_cast<std::int32_t>(bpe.tokens.size()));
    if (added) bpe.tokens.push_back(merged);
    bpe.merges.push_back(best);
    for (auto& [ids, n] : words) {
      std::vector<std::int32_t> out;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == best.first && ids[i + 1] == best.second) {
          out.push_back(it->second);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids = std::move(out);
    }
  }
  return bpe;
}

/// tokenizer.json for `bpe` with <|endoftext|> at `eos`: GPT-2's layout.
inline nlohmann::ordered_json tokenizer_json(const ByteLevelBpe& bpe, std::int64_t eos) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < bpe.tokens.size(); ++i) vocab[bpe.tokens[i]] = i;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : bpe.merges) merges.push_back(bpe.tokens[a] + " " + bpe.tokens[b]);
  const auto byte_level = [](bool prefix_space, bool trim) {
    return nlohmann::ordered_json{{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", trim}, {"use_regex", true}};
  };
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::ordered_json::array({{{"id", eos}, {"content", "<|endoftext|>"}, {"single_word", false},
                                                      {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                                      {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level(false, true);
  j["post_processor"] = byte_level(true, false);
  j["decoder"] = byte_level(true, true);
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", merges}};
  return j;
}

/// config.json of a default model of `shape`.
inline nlohmann::ordered_json config_json(const DefaultModelShape& shape) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"attention_bias", false},
          {"bos_token_id", eos_id},
          {"eos_token_id", eos_id},
          {"head_dim", head_dim},
          {"hidden_act", "silu"},
          {"hidden_size", hidden},
          {"intermediate_size", shape.intermediate},
          {"max_position_embeddings", 2048},
          {"mlp_bias", false},
          {"num_attention_heads", heads},
          {"num_hidden_layers", shape.layers},
          {"num_key_value_heads", heads},
          {"rms_norm_eps", 1e-5},
          {"rope_scaling", nullptr},
          {"rope_theta", rope_theta},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"use_cache", true},
          {"vocab_size", vocab}};
}

/// The tensors of the checkpoint, in transformers' order, with their shapes.
inline std::vector<std::pair<std::string, Shape>> tensor_shapes(const DefaultModelShape& shape) {
  const std::int64_t d = hidden, f = shape.intermediate;
  std::vector<std::pair<std::string, Shape>> out{{"model.embed_tokens.weight", Shape{vocab, d}}};
  for (std::int64_t l = 0; l < shape.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"}) out.emplace_back(p + "self_attn." + m + ".weight", Shape{d, d});
    out.emplace_back(p + "mlp.gate_proj.weight", Shape{f, d});
    out.emplace_back(p + "mlp.up_proj.weight", Shape{f, d});
    out.emplace_back(p + "mlp.down_proj.weight", Shape{d, f});
    out.emplace_back(p + "input_layernorm.weight", Shape{d});
    out.emplace_back(p + "post_attention_layernorm.weight", Shape{d});
  }
  out.emplace_back("model.norm.weight", Shape{d});
  out.emplace_back("lm_head.weight", Shape{vocab, d});
  return out;
}

/// What the weights are computed from: the story's token statistics.
class WeightMaker {
 public:
  /// `ids`: the story as the written tokenizer encodes it.
  explicit WeightMaker(const std::vector<tokenize::TokenId>& ids) : next_(vocab * vocab, 0), skip_(vocab * vocab, 0) {
    std::vector<std::int64_t> unigram(vocab, 0);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ++unigram[ids[i]];
      if (i + 1 < ids.size()) ++next_[ids[i] * vocab + ids[i + 1]];
      if (i + 2 < ids.size()) ++skip_[ids[i] * vocab + ids[i + 2]];
    }
    // A token the story never continues (a byte it lacks, a merge always merged further) is
    // followed by the story's commonest tokens instead.
    for (std::int64_t t = 0; t < vocab; ++t) {
      const auto row = next_.begin() + t * vocab;
      if (std::all_of(row, row + vocab, [](std::int64_t c) { return c == 0; })) std::copy(unigram.begin(), unigram.end(), row);
    }
  }

  /// The tensor `name` of shape `shape` (see the header comment).
  Tensor make(const std::string& name, const Shape& shape) const {
    const std::int64_t rows = shape[0], cols = shape.numel() / rows;
    std::vector<float> v(static_cast<std::size_t>(shape.numel()));
    const auto fill = [&](auto value) {
      parallel_for(static_cast<std::size_t>(rows), 16, [&](std::size_t b, std::size_t e) {
        for (std::size_t r = b; r < e; ++r) {
          for (std::int64_t c = 0; c < cols; ++c) v[r * cols + c] = static_cast<float>(value(static_cast<std::int64_t>(r), c));
        }
      });
    };
    const double d = static_cast<double>(hidden);
    if (name.ends_with("norm.weight")) {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (name == "model.embed_tokens.weight") {
      fill([](std::int64_t t, std::int64_t c) { return embed_scale * (hadamard(t, c) + bias_scale * hadamard(bias_row, c)); });
    } else if (name == "lm_head.weight") {
      lm_head(v);
    } else if (name.starts_with("model.layers.0.self_attn.")) {
      // Layer 0's input is RMSNorm(embedding) = (H[t] + bias_scale H[bias]) / sqrt(1 + bias_scale^2).
      const double norm = std::sqrt(1.0 + bias_scale * bias_scale);
      const std::vector<double> q = previous_query(false), k = previous_query(true);
      if (name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight")) {
        const auto& w = name.ends_with("q_proj.weight") ? q : k;
        // Rank one through the bias code: the same query (key) for every token.
        fill([&](std::int64_t r, std::int64_t c) { return w[r % head_dim] * hadamard(bias_row, c) * norm / (bias_scale * d); });
      } else if (name.ends_with("v_proj.weight")) {
        fill([](std::int64_t r, std::int64_t c) { return r == c ? 1.0 : 0.0; });
      } else {
        // H[t] -> H[t XOR previous_half] = H[previous_half + t]: an elementwise sign flip.
        fill([&](std::int64_t r, std::int64_t c) { return r == c ? embed_scale * norm * hadamard(previous_half, r) : 0.0; });
      }
    } else {
      const bool writes_residual = name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight");
      const double a = std::sqrt(3.0 / static_cast<double>(cols)) * (writes_residual ? block_scale * embed_scale : 1.0);
      const std::uint64_t seed = name_seed(name);
      fill([&](std::int64_t r, std::int64_t c) { return a * uniform(seed, static_cast<std::uint64_t>(r * cols + c)); });
    }
    return to_bf16(v, shape);
  }

 private:
  // Layer 0's query (or key: the query turned one position forward) on the fastest RoPE pairs.
  static std::vector<double> previous_query(bool key) {
    std::vector<double> q(head_dim, 0.0);
    double energy = 0;
    for (int m = 0; m < previous_pairs; ++m) energy += std::pow(previous_decay, m);
    for (int m = 0; m < previous_pairs; ++m) {
      const double a = std::sqrt(previous_score * std::sqrt(static_cast<double>(head_dim)) * std::pow(previous_decay, m) / energy);
      const double theta = static_cast<float>(1.0 / std::pow(rope_theta, 2.0 * m / static_cast<double>(head_dim)));
      q[m] = key ? a * std::cos(theta) : a;
      q[m + head_dim / 2] = key ? a * std::sin(theta) : 0.0;
    }
    return q;
  }

  // Row v: (rms / d) * (sum_t S1[v][t] H[t] + w sum_p S2[v][p] H[previous_half + p]), where rms is
  // the final RMSNorm's divisor for a residual of both codes and both bias copies.
  void lm_head(std::vector<float>& v) const {
    const double rms = std::sqrt(2.0 * (1.0 + bias_scale * bias_scale));
    std::vector<double> row(static_cast<std::size_t>(hidden));
    for (std::int64_t out = 0; out < vocab; ++out) {
      std::fill(row.begin(), row.end(), 0.0);
      for (std::int64_t t = 0; t < vocab; ++t) {
        row[t] = std::log1p(static_cast<double>(next_[t * vocab + out]) / smoothing);
        row[previous_half + t] = skip_weight * std::log1p(static_cast<double>(skip_[t * vocab + out]) / smoothing);
      }
      walsh_hadamard(row);
      for (std::int64_t c = 0; c < hidden; ++c) v[out * hidden + c] = static_cast<float>(row[c] * rms / static_cast<double>(hidden));
    }
  }

  std::vector<std::int64_t> next_, skip_;  // [context * vocab + next]
};

}  // namespace default_model

}  // namespace accel::cli

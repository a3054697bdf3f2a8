// The tokenizer a GGUF file carries in its metadata, as the Tokenizer its tokenizer.json would give.
//
//   has_gguf_tokenizer(f)        the file holds tokenizer.ggml.model and tokenizer.ggml.tokens
//   gguf_tokenizer_json(f)       tokenizer.json text for it (what transformers' GGUF loading builds)
//   gguf_tokenizer(f)            tokenize::Tokenizer::from_json of that
//
// Two models, as llama.cpp names them:
// - "gpt2": byte-level BPE. Vocabulary from tokenizer.ggml.tokens, merges from
//   tokenizer.ggml.merges ("a b"), the ByteLevel pre-tokenizer and decoder. The split regex is
//   the one llama.cpp gives "tokenizer.ggml.pre": GPT-2's (absent, "default", "gpt2", "gpt-2"),
//   LLaMA-3's ("llama3", "llama-v3", "llama-bpe", "falcon3"; words that are tokens skip the
//   merges, and bos is added by default, as llama.cpp does) or Qwen2's ("qwen2",
//   "deepseek-r1-qwen"; without the NFC normalizer of Qwen2's tokenizer.json, as llama.cpp runs
//   it). Another is a FormatError naming it rather than tokens that silently differ.
// - "llama": SentencePiece BPE with byte fallback, as transformers converts it: merges from
//   tokenizer.ggml.scores (every split of a piece into two vocabulary pieces, ordered by the
//   piece's score, highest first; ties by the pieces' ids), "▁" for spaces (Prepend + Replace
//   normalizer; Replace, ByteFallback, Fuse, Strip decoder), <unk> fused.
// Token types (tokenizer.ggml.token_type): 3 (control) become special added tokens, 4 (user
// defined) added tokens. tokenizer.ggml.add_bos_token (default: true for "llama", false for
// "gpt2") puts bos in front through a TemplateProcessing post-processor; add_eos_token appends eos.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/io/gguf.hpp"
#include "accel/tokenize/split_patterns.hpp"
#include "accel/tokenize/tokenizer.hpp"

namespace accel::io {

inline bool has_gguf_tokenizer(const GgufFile& f) {
  return f.find("tokenizer.ggml.model") && f.find("tokenizer.ggml.tokens");
}

namespace detail {
/// llama.cpp's names for a byte-level BPE's "tokenizer.ggml.pre" that are read here, and the split
/// regex each stands for ("" for GPT-2's, the ByteLevel pre-tokenizer's own).
inline constexpr std::pair<std::string_view, std::string_view> gguf_pre_tokenizers[] = {
    {"default", ""},         {"gpt2", ""},
    {"gpt-2", ""},           {"llama3", tokenize::llama3_regex},
    {"llama-v3", tokenize::llama3_regex}, {"llama-bpe", tokenize::llama3_regex},
    {"falcon3", tokenize::llama3_regex},  {"qwen2", tokenize::qwen2_regex},
    {"deepseek-r1-qwen", tokenize::qwen2_regex},
};
/// The split regex of pre-tokenizer `pre`, nullopt for a name not read here.
inline std::optional<std::string_view> gguf_split_regex(std::string_view pre) {
  for (const auto& [name, regex] : gguf_pre_tokenizers) {
    if (name == pre) return regex;
  }
  return std::nullopt;
}
/// The names read, for messages.
inline std::string gguf_pre_tokenizer_names() {
  std::string out;
  for (const auto& [name, regex] : gguf_pre_tokenizers) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

inline std::vector<std::string> gguf_strings(const GgufFile& f, const char* key) {
  std::vector<std::string> out;
  const auto& a = f.get_array(key);
  out.reserve(a.items.size());
  for (const auto& v : a.items) {
    if (!v.as_string()) throw FormatError("GGUF file '" + f.path() + "': '" + key + "' holds a non-STRING item");
    out.push_back(*v.as_string());
  }
  return out;
}

/// Byte offsets where UTF-8 code points of `s` start (after the first), for splitting a piece.
inline std::vector<std::size_t> code_point_cuts(const std::string& s) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) cuts.push_back(i);
  }
  return cuts;
}

/// transformers' SentencePieceExtractor: merges from a vocabulary and its scores.
inline nlohmann::json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<double>& scores) {
  std::unordered_map<std::string, std::size_t> id;
  for (std::size_t i = 0; i < tokens.size(); ++i) id.emplace(tokens[i], i);
  struct Merge {
    std::size_t left, right;
    double score;
  };
  std::vector<Merge> merges;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::vector<Merge> local;
    for (const std::size_t cut : code_point_cuts(tokens[i])) {
      const auto l = id.find(tokens[i].substr(0, cut)), r = id.find(tokens[i].substr(cut));
      if (l != id.end() && r != id.end()) local.push_back({l->second, r->second, scores[i]});
    }
    std::sort(local.begin(), local.end(),
              [](const Merge& a, const Merge& b) { return a.left != b.left ? a.left < b.left : a.right < b.right; });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  nlohmann::json out = nlohmann::json::array();
  for (const auto& m : merges) out.push_back({tokens[m.left], tokens[m.right]});
  return out;
}

}  // namespace detail

/// tokenizer.json text for the tokenizer in `f`'s metadata (see the header comment); FormatError
/// naming the file for a model or pre-tokenizer that is not read.
inline std::string gguf_tokenizer_json(const GgufFile& f) {
  const std::string where = "GGUF file '" + f.path() + "'";
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama") {
    throw FormatError(where + ": tokenizer model '" + model + "' is not supported (gpt2 and llama are)");
  }
  const auto tokens = detail::gguf_strings(f, "tokenizer.ggml.tokens");
  std::vector<std::int64_t> types(tokens.size(), 1);
  if (const auto* t = f.find("tokenizer.ggml.token_type"); t && t->as_array()) {
    const auto& items = t->as_array()->items;
    for (std::size_t i = 0; i < items.size() && i < types.size(); ++i) {
      if (const auto v = items[i].as_double()) types[i] = static_cast<std::int64_t>(*v);
    }
  }
  const auto token_id = [&](const char* key) -> std::optional<std::size_t> {
    const auto* v = f.find(key);
    if (!v || !v->as_uint() || *v->as_uint() >= tokens.size()) return std::nullopt;
    return static_cast<std::size_t>(*v->as_uint());
  };
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::json::array();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != 3 && types[i] != 4) continue;
    j["added_tokens"].push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", types[i] == 3}});
  }
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  nlohmann::json bpe = {{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr}, {"ignore_merges", false}, {"vocab", std::move(vocab)}};
  const auto* pre = f.find("tokenizer.ggml.pre");
  const std::string pre_name = pre && pre->as_string() ? *pre->as_string() : "default";
  const std::optional<std::string_view> split = detail::gguf_split_regex(pre_name);
  if (model == "gpt2") {
    if (!split) {
      throw FormatError(where + ": pre-tokenizer '" + pre_name + "' is not supported (supported: " +
                        detail::gguf_pre_tokenizer_names() + ")");
    }
    nlohmann::json merges = nlohmann::json::array();
    if (f.find("tokenizer.ggml.merges")) {
      for (const auto& m : detail::gguf_strings(f, "tokenizer.ggml.merges")) merges.push_back(m);
    }
    bpe["merges"] = std::move(merges);
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    // llama.cpp takes a word that is a token as that token for LLaMA-3's pre-tokenizer, as the
    // tokenizer.json it was converted from says (ignore_merges).
    bpe["ignore_merges"] = *split == tokenize::llama3_regex;
    j["normalizer"] = nullptr;
    if (split->empty()) {
      j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    } else {
      j["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", std::string(*split)}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    }
    j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    std::vector<double> scores(tokens.size(), 0.0);
    if (const auto* s = f.find("tokenizer.ggml.scores"); s && s->as_array()) {
      const auto& items = s->as_array()->items;
      for (std::size_t i = 0; i < items.size() && i < scores.size(); ++i) scores[i] = items[i].as_double().value_or(0.0);
    }
    bpe["merges"] = detail::merges_from_scores(tokens, scores);
    const auto unk = token_id("tokenizer.ggml.unknown_token_id");
    bpe["unk_token"] = unk ? nlohmann::json(tokens[*unk]) : nlohmann::json(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
    j["pre_tokenizer"] = nullptr;
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  }
  j["model"] = std::move(bpe);
  // bos / eos around the text, as the file asks.
  const auto flag = [&](const char* key, bool fallback) {
    const auto* v = f.find(key);
    return v && v->as_bool() ? *v->as_bool() : fallback;
  };
  const auto bos = token_id("tokenizer.ggml.bos_token_id");
  const auto eos = token_id("tokenizer.ggml.eos_token_id");
  // llama.cpp's defaults: bos for SentencePiece models and LLaMA-3's pre-tokenizer.
  const bool add_bos = bos && flag("tokenizer.ggml.add_bos_token", model == "llama" || split == tokenize::llama3_regex);
  const bool add_eos = eos && flag("tokenizer.ggml.add_eos_token", false);
  if (add_bos || add_eos) {
    nlohmann::json single = nlohmann::json::array(), special = nlohmann::json::object();
    const auto add_special = [&](std::size_t id) {
      single.push_back({{"SpecialToken", {{"id", tokens[id]}, {"type_id", 0}}}});
      special[tokens[id]] = {{"id", tokens[id]}, {"ids", {id}}, {"tokens", {tokens[id]}}};
    };
    if (add_bos) add_special(*bos);
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos) add_special(*eos);
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", special}};
  } else {
    j["post_processor"] = nullptr;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The Tokenizer of `f`'s metadata.
inline tokenize::Tokenizer gguf_tokenizer(const GgufFile& f) {
  return tokenize::Tokenizer::from_json(gguf_tokenizer_json(f), f.path() + " (tokenizer metadata)");
}

}  // namespace accel::io

// The tokenizer a GGUF file carries in its metadata, as the Tokenizer its tokenizer.json would give.
//
//   has_gguf_tokenizer(f)        the file holds tokenizer.ggml.model and tokenizer.ggml.tokens
//   gguf_tokenizer_json(f)       tokenizer.json text for it (what transformers' GGUF loading builds)
//   gguf_tokenizer(f)            tokenize::Tokenizer::from_json of that
//   gguf_tokenizer_metadata(tokenizer_json, tokenizer_config, source[, vocab_size])
//                                the reverse: the tokenizer.* metadata llama.cpp's converter
//                                writes for a tokenizer.json (save_gguf_model's `extra`)
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
// Token types (tokenizer.ggml.token_type): 2 (unknown) and 3 (control) become special added
// tokens, 4 (user defined) added tokens, as llama.cpp matches them in text.
// tokenizer.ggml.add_bos_token (default: true for "llama", false for "gpt2") puts bos in front
// through a TemplateProcessing post-processor; add_eos_token appends eos.
//
// Writing (gguf_tokenizer_metadata), in the keys and conventions of convert_hf_to_gguf.py, for
// what the reader above reads back as the same tokenizer:
// - byte-level BPE (GPT-2, LLaMA-3, Qwen2: a ByteLevel pre-tokenizer without a prefix space,
//   alone or after a Split by GPT-2's, LLaMA-3's or Qwen2's regex; no normalizer but Qwen2's NFC)
//   -> "gpt2", tokenizer.ggml.pre "gpt-2", "llama-bpe" or "qwen2" by the regex, merges as "a b"
//   (a space inside a part as U+0120). Another regex is a FormatError listing those three.
// - SentencePiece-style BPE with byte fallback (LLaMA-2's Prepend + Replace normalizer, or
//   Mistral's Metaspace pre-tokenizer) -> "llama", pre "default", scores that give the reader
//   the tokenizer's merges in order: a piece scores minus the rank of the first merge that makes
//   it; pieces no merge makes score below all of those, by id.
// - tokens by id, added tokens in their places, a missing id as "[PAD<id>]"; types 1 normal, 2
//   the model's unk_token ("llama"), 3 special added tokens and those that look special ("<|x|>",
//   "<pad>", ...), 4 other added tokens (their "▁" as spaces), 5 the "[PAD<id>]" fillers, 6 the
//   "<0xNN>" byte pieces ("llama").
// - bos / eos / unk / pad ids: tokenizer_config.json's bos_token, eos_token, unk_token,
//   pad_token (text or {"content"}), found among the added tokens, then the vocabulary; the
//   model's unk_token first for unk; the tokens the post-processor puts around the text
//   (TemplateProcessing, RobertaProcessing, BertProcessing) are bos and eos, with add_bos_token /
//   add_eos_token written from it (false when it adds nothing); a post-processor that adds more
//   than one token on a side, or another token than tokenizer_config.json names, is a
//   FormatError. chat_template, a string, as tokenizer.chat_template; a list of {name,
//   template} as the converter writes it (the "default" one, the others as
//   tokenizer.chat_template.<name> and their names in tokenizer.chat_templates).
// - anything else (WordPiece, Unigram, WordLevel, BPE neither byte-level nor with byte
//   fallback, a prefix space or subword prefix GGUF has no key for) is a FormatError naming the
//   file and the part. Not carried, as the converter carries none of them: lstrip / rstrip /
//   single_word of added tokens, ignore_merges (llama.cpp decides it by the pre-tokenizer: on for
//   LLaMA-3's), and Metaspace's "first" prepend scheme (llama.cpp puts "▁" in front of text that
//   starts with a space, and of the text after every special token, too).
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
#include "accel/tokenize/tokenizer_json.hpp"

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
    if (types[i] != 2 && types[i] != 3 && types[i] != 4) continue;
    j["added_tokens"].push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", types[i] != 4}});
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

namespace detail {

inline constexpr std::string_view metaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

/// The tokenizer.ggml.pre written for each split regex of a byte-level BPE.
inline constexpr std::pair<std::string_view, std::string_view> gguf_pre_written[] = {
    {tokenize::gpt2_regex, "gpt-2"},
    {tokenize::llama3_regex, "llama-bpe"},
    {tokenize::qwen2_regex, "qwen2"},
};

/// Added tokens llama.cpp's converter makes control tokens although the file does not mark them
/// special.
inline bool looks_special(std::string_view t) {
  constexpr std::string_view fullwidth_bar = "\xEF\xBD\x9C";  // U+FF5C
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" ||
         (t.starts_with("<|") && t.ends_with("|>")) ||
         (t.starts_with("<" + std::string(fullwidth_bar)) && t.ends_with(std::string(fullwidth_bar) + ">")) ||
         (t.starts_with("<unused") && t.ends_with(">"));
}

/// "<0xNN>": a byte piece of a byte-fallback vocabulary.
inline bool is_byte_piece(std::string_view t) {
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return t.size() == 6 && t.starts_with("<0x") && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

/// `s` with every "▁" a space (how the converter stores a user-defined token).
inline std::string metaspace_as_spaces(std::string s) {
  for (std::size_t at = s.find(metaspace); at != std::string::npos; at = s.find(metaspace, at + 1)) {
    s.replace(at, metaspace.size(), " ");
  }
  return s;
}

/// The steps of a normalizer or pre-tokenizer, a Sequence flattened ("normalizers" /
/// "pretokenizers").
inline void component_steps(const tokenize::JsonNode& node, const char* list_key, std::vector<tokenize::JsonNode>& out) {
  if (node.type() != "Sequence") {
    out.push_back(node);
    return;
  }
  const tokenize::JsonNode list = node.at(list_key);
  for (std::size_t i = 0; i < list.size(); ++i) component_steps(list.at(i), list_key, out);
}

/// tokenizer.ggml.pre for a byte-level tokenizer.json; FormatError naming the part that has none.
inline std::string byte_level_pre(const tokenize::JsonNode& root) {
  const std::string supported =
      " (supported: ByteLevel with its own regex, GPT-2's, as 'gpt-2'; a Split by LLaMA-3's or Qwen2's regex, "
      "then ByteLevel without one, as 'llama-bpe' and 'qwen2'; no prefix space)";
  const auto pre = root.find("pre_tokenizer");
  if (!pre) root.fail("a byte-level BPE without a pre-tokenizer has no tokenizer.ggml.pre" + supported);
  std::vector<tokenize::JsonNode> steps;
  component_steps(*pre, "pretokenizers", steps);
  const tokenize::JsonNode& last = steps.back();
  if (last.type() != "ByteLevel" || steps.size() > 2) pre->fail("this pre-tokenizer has no tokenizer.ggml.pre" + supported);
  if (last.bool_or("add_prefix_space", true)) {
    last.fail("ByteLevel's add_prefix_space has no GGUF key (llama.cpp puts no space in front)" + supported);
  }
  std::string regex;
  if (steps.size() == 1) {
    if (!last.bool_or("use_regex", true)) last.fail("a ByteLevel without a regex has no tokenizer.ggml.pre" + supported);
    regex = tokenize::gpt2_regex;
  } else {
    const tokenize::JsonNode& split = steps.front();
    if (split.type() != "Split" || last.bool_or("use_regex", true) || split.str_or("behavior", "") != "Isolated" ||
        split.bool_or("invert", false) || !split.at("pattern").find("Regex")) {
      pre->fail("this pre-tokenizer has no tokenizer.ggml.pre" + supported);
    }
    regex = split.at("pattern").at("Regex").str();
  }
  for (const auto& [pattern, name] : gguf_pre_written) {
    if (pattern == regex) return std::string(name);
  }
  pre->fail("split regex " + tokenize::quote(regex) + " has no tokenizer.ggml.pre the GGUF reader knows" + supported);
}

/// Checks that a byte-fallback BPE turns spaces into "▁" and puts one in front as llama.cpp's
/// SentencePiece tokenizer does; FormatError naming the part otherwise.
inline void check_sentencepiece_spaces(const tokenize::JsonNode& root) {
  const std::string supported =
      " (supported: LLaMA-2's Prepend \"\xE2\x96\x81\" + Replace \" \" normalizer, or Mistral's Metaspace pre-tokenizer)";
  bool prefix = false, spaces = false;
  if (const auto norm = root.find("normalizer")) {
    std::vector<tokenize::JsonNode> steps;
    component_steps(*norm, "normalizers", steps);
    for (const auto& step : steps) {
      const std::string& type = step.type();
      if (type == "Prepend" && step.at("prepend").str() == metaspace && !prefix) {
        prefix = true;
      } else if (type == "Replace" && step.at("pattern").find("String") &&
                 step.at("pattern").at("String").str() == " " && step.at("content").str() == metaspace) {
        spaces = true;
      } else {
        step.fail("normalizer " + tokenize::quote(type) + " has no llama.cpp form" + supported);
      }
    }
  }
  if (const auto pre = root.find("pre_tokenizer")) {
    std::vector<tokenize::JsonNode> steps;
    component_steps(*pre, "pretokenizers", steps);
    for (const auto& step : steps) {
      if (step.type() != "Metaspace" || step.str_or("replacement", metaspace) != metaspace) {
        step.fail("pre-tokenizer " + tokenize::quote(step.type()) + " has no llama.cpp form" + supported);
      }
      const bool prepends = step.str_or("prepend_scheme", "always") != "never" && step.bool_or("add_prefix_space", true);
      if (prepends && prefix) step.fail("a second \"\xE2\x96\x81\" in front has no llama.cpp form" + supported);
      prefix = prefix || prepends;
      spaces = true;
    }
  }
  if (!prefix || !spaces) {
    root.fail(std::string(!spaces ? "spaces are not \"\xE2\x96\x81\"" : "no \"\xE2\x96\x81\" goes in front of the text") +
              ", which llama.cpp's SentencePiece tokenizer does" + supported);
  }
}

}  // namespace detail

/// The tokenizer.* metadata llama.cpp's converter writes for `tokenizer_json` (see the header
/// comment), with tokenizer_config.json's ids, flags and chat template (`tokenizer_config` may be
/// null or empty); `source_name` names the file in errors. `vocab_size` (a model's config.json
/// vocab_size, 0: the tokenizer's own) pads the tokens with "[PAD<id>]" up to it; below the
/// tokenizer's highest id + 1 it is a ValueError. FormatError for what has no GGUF form.
inline std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(
    std::string_view tokenizer_json, const nlohmann::json& tokenizer_config, const std::string& source_name,
    std::size_t vocab_size = 0) {
  using tokenize::JsonNode;
  using tokenize::quote;
  const std::string where = "tokenizer.json '" + source_name + "'";
  const nlohmann::json doc = tokenize::parse_tokenizer_json(tokenizer_json, source_name);
  const JsonNode root(doc, "", source_name);
  if (!doc.is_object()) root.fail("expected an object");
  const JsonNode model = root.at("model");
  const std::string model_type = model.str_or("type", "BPE");
  if (model_type != "BPE") {
    model.at("type").fail("model " + quote(model_type) +
                          " has no GGUF tokenizer here (supported: byte-level BPE, as llama.cpp's \"gpt2\", and "
                          "SentencePiece-style BPE with byte fallback, as \"llama\")");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.str_or(key, "").empty()) model.at(key).fail("a non-empty " + std::string(key) + " has no GGUF key");
  }
  // Which of the two: byte fallback makes it SentencePiece-style; a ByteLevel step, byte-level.
  const bool sentencepiece = model.bool_or("byte_fallback", false);
  bool byte_level = false;
  if (const auto pre = root.find("pre_tokenizer")) {
    std::vector<JsonNode> steps;
    detail::component_steps(*pre, "pretokenizers", steps);
    for (const auto& step : steps) byte_level = byte_level || step.type() == "ByteLevel";
  }
  if (!sentencepiece && !byte_level) {
    model.fail("a BPE with neither byte fallback nor a ByteLevel pre-tokenizer has no llama.cpp tokenizer "
               "(supported: byte-level BPE, as \"gpt2\", and SentencePiece-style BPE with byte fallback, as \"llama\")");
  }
  std::string pre_name = "default";
  if (sentencepiece) {
    detail::check_sentencepiece_spaces(root);
  } else {
    pre_name = detail::byte_level_pre(root);
    if (const auto norm = root.find("normalizer"); norm && norm->type() != "NFC") {
      norm->fail("normalizer " + quote(norm->type()) + " has no llama.cpp form for a byte-level BPE (supported: "
                 "none, or Qwen2's NFC, which llama.cpp leaves out)");
    }
    if (const auto dec = root.find("decoder"); !dec || dec->type() != "ByteLevel") {
      root.fail("a byte-level BPE needs the ByteLevel decoder, which the GGUF reader gives it");
    }
  }

  // Tokens by id: the vocabulary, then the added tokens in their places.
  constexpr auto max_id = tokenize::tokenizer_limits::max_vocab_size - 1;
  std::vector<std::string> tokens;
  std::vector<std::int64_t> types;
  std::vector<bool> present;
  const auto place = [&](std::size_t id) {
    if (id >= tokens.size()) tokens.resize(id + 1), types.resize(id + 1, 1), present.resize(id + 1, false);
  };
  std::unordered_map<std::string, std::size_t> vocab_id;
  const JsonNode vocab = model.at("vocab");
  if (!vocab.json().is_object()) vocab.fail("expected an object of token -> id");
  for (auto it = vocab.json().begin(); it != vocab.json().end(); ++it) {
    const JsonNode node(it.value(), vocab.path() + "." + it.key(), source_name);
    const auto id = static_cast<std::size_t>(node.integer(0, max_id));
    place(id);
    if (present[id]) node.fail("id " + std::to_string(id) + " is also " + quote(tokens[id]));
    tokens[id] = it.key();
    present[id] = true;
    vocab_id.emplace(it.key(), id);
  }
  std::vector<std::pair<std::string, std::size_t>> added;  // content, id: in file order
  if (const auto list = root.find("added_tokens")) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      const JsonNode a = list->at(i);
      const auto id = static_cast<std::size_t>(a.at("id").integer(0, max_id));
      const std::string& content = a.at("content").str();
      place(id);
      added.emplace_back(content, id);
      present[id] = true;
      if (a.bool_or("special", false) || detail::looks_special(content)) {
        tokens[id] = content;
        types[id] = 3;
      } else {
        tokens[id] = detail::metaspace_as_spaces(content);
        types[id] = 4;
      }
    }
  }
  if (vocab_size != 0) {
    if (vocab_size < tokens.size() || vocab_size > static_cast<std::size_t>(max_id) + 1) {
      throw ValueError(where + ": vocab_size " + std::to_string(vocab_size) + " is outside [" +
                       std::to_string(tokens.size()) + " (the tokenizer's ids), " + std::to_string(max_id + 1) + "]");
    }
    place(vocab_size - 1);
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!present[i]) tokens[i] = "[PAD" + std::to_string(i) + "]", types[i] = 5;
  }
  // A token's id by its text: added tokens (the first that has it), then the vocabulary.
  const auto find_id = [&](const std::string& text) -> std::optional<std::size_t> {
    for (const auto& [content, id] : added) {
      if (content == text) return id;
    }
    const auto it = vocab_id.find(text);
    return it == vocab_id.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  };

  // Merges as [left, right] text.
  std::vector<std::pair<std::string, std::string>> merges;
  const JsonNode merges_node = model.at("merges");
  for (std::size_t i = 0; i < merges_node.size(); ++i) {
    const nlohmann::json& m = merges_node.json()[i];
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        merges_node.at(i).fail("expected two tokens separated by one space, got " + quote(line));
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      merges_node.at(i).fail("expected \"a b\" or [\"a\", \"b\"]");
    }
  }

  std::optional<std::size_t> unk;
  if (const auto u = model.find("unk_token")) unk = find_id(u->str());
  std::vector<GgufValue> scores;
  if (sentencepiece) {
    // Minus the rank of the first merge that makes a piece; the rest below, by id.
    std::vector<double> score(tokens.size(), 0.0);
    std::vector<bool> made(tokens.size(), false);
    for (std::size_t k = 0; k < merges.size(); ++k) {
      const auto it = vocab_id.find(merges[k].first + merges[k].second);
      if (it != vocab_id.end() && !made[it->second]) {
        made[it->second] = true;
        score[it->second] = -static_cast<double>(k);
      }
    }
    scores.reserve(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (!made[i]) score[i] = -static_cast<double>(merges.size() + i);
      scores.push_back(gguf_f32(static_cast<float>(score[i])));
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (types[i] == 1 && detail::is_byte_piece(tokens[i])) types[i] = 6;
    }
    if (unk && types[*unk] != 4) types[*unk] = 2;
  }

  // The tokens the post-processor puts in front of and after the text.
  std::vector<std::size_t> front, back;
  const auto read_processor = [&](const auto& self, const JsonNode& p) -> void {
    const std::string& type = p.type();
    if (type == "Sequence") {
      const JsonNode list = p.at("processors");
      for (std::size_t i = 0; i < list.size(); ++i) self(self, list.at(i));
    } else if (type == "TemplateProcessing") {
      const JsonNode single = p.at("single");
      bool sequence_seen = false;
      for (std::size_t i = 0; i < single.size(); ++i) {
        const JsonNode item = single.at(i);
        if (item.find("Sequence")) {
          sequence_seen = true;
          continue;
        }
        const std::string& name = item.at("SpecialToken").at("id").str();
        std::vector<std::size_t> ids;
        if (const auto specials = p.find("special_tokens"); specials && specials->find(name)) {
          const JsonNode list = specials->at(name).at("ids");
          for (std::size_t k = 0; k < list.size(); ++k) {
            ids.push_back(static_cast<std::size_t>(list.at(k).integer(0, max_id)));
          }
        } else if (const auto id = find_id(name)) {
          ids.push_back(*id);
        } else {
          item.fail("special token " + quote(name) + " is not in the tokenizer");
        }
        auto& side = sequence_seen ? back : front;
        side.insert(side.end(), ids.begin(), ids.end());
      }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      front.push_back(static_cast<std::size_t>(p.at("cls").at(1).integer(0, max_id)));
      back.push_back(static_cast<std::size_t>(p.at("sep").at(1).integer(0, max_id)));
    } else if (type != "ByteLevel") {
      p.fail("post-processor " + quote(type) +
             " has no GGUF form (supported: TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence)");
    }
  };
  if (const auto post = root.find("post_processor")) {
    read_processor(read_processor, *post);
    if (front.size() > 1 || back.size() > 1) {
      post->fail("the post-processor adds " + std::to_string(front.size()) + " token(s) in front and " +
                 std::to_string(back.size()) + " after the text; GGUF's add_bos_token / add_eos_token add one each");
    }
    for (const auto& ids : {front, back}) {
      if (!ids.empty() && (ids.front() >= present.size() || !present[ids.front()])) {
        post->fail("the post-processor adds id " + std::to_string(ids.front()) + ", which is no token");
      }
    }
  }

  // Special ids: tokenizer_config.json's, then the post-processor's.
  const auto config_id = [&](const std::string& what) -> std::optional<std::size_t> {
    if (!tokenizer_config.is_object()) return std::nullopt;
    const auto it = tokenizer_config.find(what + "_token");
    if (it == tokenizer_config.end()) return std::nullopt;
    if (it->is_string()) return find_id(it->get<std::string>());
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      return find_id((*it)["content"].get<std::string>());
    }
    return std::nullopt;
  };
  const auto around = [&](const std::string& what, const std::vector<std::size_t>& ids, const char* side) {
    std::optional<std::size_t> id = config_id(what);
    if (!ids.empty()) {
      if (id && *id != ids.front()) {
        throw FormatError(where + ": the post-processor puts " + quote(tokens[ids.front()]) + " " + side +
                          " the text, but tokenizer_config.json's " + what + "_token is " + quote(tokens[*id]) +
                          "; GGUF's add_" + what + "_token adds the " + what + " token");
      }
      id = ids.front();
    }
    return id;
  };
  const std::optional<std::size_t> bos = around("bos", front, "in front of"), eos = around("eos", back, "after");
  if (!unk) unk = config_id("unk");
  const std::optional<std::size_t> pad = config_id("pad");

  std::vector<std::pair<std::string, GgufValue>> out;
  out.emplace_back("tokenizer.ggml.model", gguf_string(sentencepiece ? "llama" : "gpt2"));
  out.emplace_back("tokenizer.ggml.pre", gguf_string(pre_name));
  std::vector<GgufValue> token_values, type_values;
  token_values.reserve(tokens.size());
  type_values.reserve(tokens.size());
  for (auto& t : tokens) token_values.push_back(gguf_string(std::move(t)));
  for (const auto t : types) type_values.push_back(gguf_i32(static_cast<std::int32_t>(t)));
  out.emplace_back("tokenizer.ggml.tokens", gguf_array(GgufValueType::string, std::move(token_values)));
  if (sentencepiece) out.emplace_back("tokenizer.ggml.scores", gguf_array(GgufValueType::float32, std::move(scores)));
  out.emplace_back("tokenizer.ggml.token_type", gguf_array(GgufValueType::int32, std::move(type_values)));
  if (!sentencepiece) {
    // A space inside a part (tokenizers' list form allows one) as U+0120, as the converter writes it.
    const auto part = [](const std::string& s) {
      std::string r;
      for (const char c : s) r += c == ' ' ? std::string("\xC4\xA0") : std::string(1, c);
      return r;
    };
    std::vector<GgufValue> merge_values;
    merge_values.reserve(merges.size());
    for (const auto& [a, b] : merges) merge_values.push_back(gguf_string(part(a) + " " + part(b)));
    out.emplace_back("tokenizer.ggml.merges", gguf_array(GgufValueType::string, std::move(merge_values)));
  }
  const auto add_id = [&](const char* key, const std::optional<std::size_t>& id) {
    if (id) out.emplace_back(key, gguf_u32(static_cast<std::uint32_t>(*id)));
  };
  add_id("tokenizer.ggml.bos_token_id", bos);
  add_id("tokenizer.ggml.eos_token_id", eos);
  add_id("tokenizer.ggml.unknown_token_id", unk);
  add_id("tokenizer.ggml.padding_token_id", pad);
  out.emplace_back("tokenizer.ggml.add_bos_token", gguf_bool(!front.empty()));
  out.emplace_back("tokenizer.ggml.add_eos_token", gguf_bool(!back.empty()));
  if (tokenizer_config.is_object()) {
    if (const auto it = tokenizer_config.find("chat_template"); it != tokenizer_config.end()) {
      if (it->is_string()) {
        out.emplace_back("tokenizer.chat_template", gguf_string(it->get<std::string>()));
      } else if (it->is_array()) {
        // Named templates; a name keeps a-z and 0-9, upper case lowered, anything else as '_' (a
        // GGUF key segment); the first of a name counts.
        std::optional<std::string> fallback;
        std::vector<GgufValue> names;
        std::vector<std::string> seen;
        for (const auto& choice : *it) {
          if (!choice.is_object()) continue;
          const auto name_it = choice.find("name"), template_it = choice.find("template");
          if (name_it == choice.end() || !name_it->is_string() || template_it == choice.end() || !template_it->is_string()) {
            continue;
          }
          std::string name = name_it->get<std::string>();
          for (char& c : name) {
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
            if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9')) c = '_';
          }
          if (name.empty() || std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
          seen.push_back(name);
          if (name == "default") {
            fallback = template_it->get<std::string>();
          } else {
            out.emplace_back("tokenizer.chat_template." + name, gguf_string(template_it->get<std::string>()));
            names.push_back(gguf_string(name));
          }
        }
        if (!names.empty()) {
          out.emplace_back("tokenizer.chat_templates", gguf_array(GgufValueType::string, std::move(names)));
        }
        if (fallback) out.emplace_back("tokenizer.chat_template", gguf_string(std::move(*fallback)));
      }
    }
  }
  return out;
}

}  // namespace accel::io

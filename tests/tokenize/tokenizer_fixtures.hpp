// Small tokenizer.json documents built in the tests, shaped like the real ones of GPT-2, LLaMA-3
// and LLaMA-2 / Mistral, with vocabularies small enough to work every expected id out by hand.
//
//   gpt2_json()      ByteLevel pre-tokenizer and decoder, "a b" merges, <|endoftext|> = 270
//   llama3_json()    Split(LLaMA-3 regex) + ByteLevel, ignore_merges, ["a", "b"] merges, BOS template
//   llama2_json()    Prepend + Replace normalizer, byte fallback, fuse_unk, BOS template, Sequence decoder
//
// Byte-level vocabularies give the stand-in of byte b the id b, so a byte's id is its value.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/tokenize/byte_level.hpp"
#include "accel/tokenize/split_patterns.hpp"
#include "accel/tokenize/vocab.hpp"

namespace tok_test {

using nlohmann::json;

inline std::string bl(std::string_view bytes) {
  std::string out;
  accel::tokenize::to_byte_level(bytes, out);
  return out;
}

inline json added_token(int id, const std::string& content, bool special = true, bool normalized = false) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", normalized}, {"special", special}};
}

// Byte stand-ins 0..255, then the tokens the merges make, in merge order.
inline const std::vector<std::pair<std::string, std::string>>& byte_level_merges() {
  static const std::vector<std::pair<std::string, std::string>> merges = {
      {bl(" "), "t"},         // 256 Ġt
      {"h", "e"},             // 257 he
      {bl(" ") + "t", "he"},  // 258 Ġthe
      {"l", "l"},             // 259 ll
      {"e", "ll"},            // 260 ell
      {"H", "ell"},           // 261 Hell
      {"Hell", "o"},          // 262 Hello
      {bl(" "), "w"},         // 263 Ġw
      {"o", "r"},             // 264 or
      {bl(" ") + "w", "or"},  // 265 Ġwor
      {"l", "d"},             // 266 ld
      {bl(" ") + "wor", "ld"},  // 267 Ġworld
      {bl(" "), bl(" ")},       // 268 ĠĠ
      {bl("\xC3"), bl("\xA9")},  // 269 é as its two byte stand-ins
  };
  return merges;
}

inline json byte_level_vocab() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, static_cast<char>(b)))] = b;
  int id = 256;
  for (const auto& [a, b] : byte_level_merges()) vocab[a + b] = id++;
  return vocab;
}

inline json byte_level_component(bool add_prefix_space = false, bool use_regex = true) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

inline json gpt2_doc() {
  json merges = json::array();
  for (const auto& [a, b] : byte_level_merges()) merges.push_back(a + " " + b);
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {added_token(270, "<|endoftext|>", true, true)}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level_component()},
          {"post_processor", byte_level_component(true)},
          {"decoder", byte_level_component(true)},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", byte_level_vocab()},
            {"merges", merges}}}};
}
inline std::string gpt2_json() { return gpt2_doc().dump(); }

// LLaMA-3 adds two tokens reachable only through ignore_merges: "Ġhello" (280) and "123" (281).
inline json llama3_doc(bool ignore_merges = true) {
  json merges = json::array();
  for (const auto& [a, b] : byte_level_merges()) merges.push_back({a, b});
  json vocab = byte_level_vocab();
  vocab[bl(" hello")] = 280;
  vocab["123"] = 281;
  const json special = {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {300}}, {"tokens", {"<|begin_of_text|>"}}}}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {added_token(300, "<|begin_of_text|>"), added_token(301, "<|end_of_text|>"), added_token(302, "<|eot_id|>")}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(accel::tokenize::llama3_regex)}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              byte_level_component(false, false)}}}},
          {"post_processor",
           {{"type", "Sequence"},
            {"processors",
             {byte_level_component(true, true),
              {{"type", "TemplateProcessing"},
               {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
               {"pair",
                {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                 {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 1}}}},
                 {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
               {"special_tokens", special}}}}}},
          {"decoder", byte_level_component(true)},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", merges}}}};
}
inline std::string llama3_json(bool ignore_merges = true) { return llama3_doc(ignore_merges).dump(); }

// "▁" (U+2581), the metaspace.
inline const std::string ms = "\xE2\x96\x81";

// <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then characters and merges.
inline json llama2_doc(bool byte_fallback = true, bool fuse_unk = true) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[accel::tokenize::byte_fallback_token(static_cast<std::uint8_t>(b))] = 3 + b;
  const std::vector<std::string> chars = {ms, "H", "e", "l", "o", "w", "r", "d", "\xC3\xA9"};  // 259..267
  int id = 259;
  for (const auto& c : chars) vocab[c] = id++;
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"l", "l"},               // 268 ll
      {ms, "H"},                // 269 ▁H
      {"e", "ll"},              // 270 ell
      {ms + "H", "ell"},        // 271 ▁Hell
      {ms + "Hell", "o"},       // 272 ▁Hello
      {ms, "w"},                // 273 ▁w
      {"o", "r"},               // 274 or
      {ms + "w", "or"},         // 275 ▁wor
      {"l", "d"},               // 276 ld
      {ms + "wor", "ld"},       // 277 ▁world
      {ms, ms},                 // 278 ▁▁
  };
  json merges = json::array();
  for (const auto& [a, b] : pairs) {
    vocab[a + b] = id++;
    merges.push_back(a + " " + b);
  }
  const json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", ms}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {added_token(0, "<unk>"), added_token(1, "<s>"), added_token(2, "</s>")}},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", ms}}, replace_space}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", ms}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", fuse_unk},
            {"byte_fallback", byte_fallback},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}
inline std::string llama2_json(bool byte_fallback = true, bool fuse_unk = true) {
  return llama2_doc(byte_fallback, fuse_unk).dump();
}

// The newer LLaMA-2 / Mistral conversion: no normalizer, a Metaspace pre-tokenizer and decoder.
inline json llama2_metaspace_doc(const std::string& prepend_scheme = "first", bool split = false) {
  json doc = llama2_doc();
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", ms}, {"prepend_scheme", prepend_scheme}, {"split", split}};
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Metaspace"}, {"replacement", ms}, {"prepend_scheme", prepend_scheme}, {"split", split}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}}}}};
  return doc;
}

}  // namespace tok_test

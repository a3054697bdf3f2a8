// LLaMA-2 / Mistral-style BPE: "▁" for spaces (a Prepend + Replace normalizer, or the newer
// Metaspace pre-tokenizer), byte fallback to <0xNN>, fused <unk>, and a <s> template.
#include <catch2/catch.hpp>

#include "tokenizer_fixtures.hpp"

#include <random>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/tokenize/tokenizer.hpp"

using accel::tokenize::TokenId;
using accel::tokenize::Tokenizer;
using Ids = std::vector<TokenId>;

namespace {
constexpr TokenId byte_id(unsigned b) { return static_cast<TokenId>(3 + b); }
}  // namespace

TEST_CASE("llama2: hand-computed ids with the metaspace normalizer", "[tokenize][llama2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama2_json(), "llama2.json");
  // "▁Hello▁world" is one word; the merges build ▁Hello and ▁world.
  CHECK(t.encode("Hello world") == Ids{1, 272, 277});
  CHECK(t.encode("Hello world", false) == Ids{272, 277});
  // Two spaces: ▁w merges before ▁▁ (lower rank), which leaves a lone ▁.
  CHECK(t.encode("Hello  world", false) == Ids{272, 259, 277});
  CHECK(t.encode("\xC3\xA9", false) == Ids{259, 267});  // é is in the vocabulary
  CHECK(t.encode("") == Ids{1});  // Prepend leaves empty text empty: BOS alone
  CHECK(t.encode("", false).empty());
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK(t.vocab_size() == 279);
}

TEST_CASE("llama2: byte fallback for characters the vocabulary lacks", "[tokenize][llama2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama2_json());
  // 日本 = E6 97 A5 E6 9C AC.
  CHECK(t.encode("\xE6\x97\xA5\xE6\x9C\xAC", false) ==
        Ids{259, byte_id(0xE6), byte_id(0x97), byte_id(0xA5), byte_id(0xE6), byte_id(0x9C), byte_id(0xAC)});
  CHECK(t.encode("\n", false) == Ids{259, byte_id('\n')});
  // Invalid UTF-8 falls back byte by byte too.
  CHECK(t.encode("\xFF", false) == Ids{259, byte_id(0xFF)});
  CHECK(t.encode("\xC3", false) == Ids{259, byte_id(0xC3)});
  CHECK(t.decode(t.encode("\xE6\x97\xA5\xE6\x9C\xAC"), true) == "\xE6\x97\xA5\xE6\x9C\xAC");
  CHECK(t.decode(t.encode("\xFF\xC3"), true) == "\xFF\xC3");
}

TEST_CASE("llama2: unknown characters without byte fallback become <unk>", "[tokenize][llama2]") {
  const Tokenizer fused = Tokenizer::from_json(tok_test::llama2_json(false, true));
  const Tokenizer unfused = Tokenizer::from_json(tok_test::llama2_json(false, false));
  CHECK(fused.encode("\xE6\x97\xA5\xE6\x9C\xAC", false) == Ids{259, 0});
  CHECK(unfused.encode("\xE6\x97\xA5\xE6\x9C\xAC", false) == Ids{259, 0, 0});
  CHECK(fused.encode("\xE6\x97\xA5H\xE6\x9C\xAC", false) == Ids{259, 0, 260, 0});
  CHECK(fused.encode("\xFF\xFE", false) == Ids{259, 0});
  CHECK(fused.decode({259, 0}) == "<unk>");
}

TEST_CASE("llama2: special tokens in text; the legacy space after them", "[tokenize][llama2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama2_json());
  // Each run between special tokens is normalized on its own, so it gets its own ▁.
  CHECK(t.encode("<s>Hello</s>", false) == Ids{1, 272, 2});
  CHECK(t.encode("<s>Hello</s>") == Ids{1, 1, 272, 2});
  CHECK(t.decode({1, 272, 277}) == "<s> Hello world");
  CHECK(t.decode({1, 272, 277}, true) == "Hello world");
  CHECK(t.decode({1, 2}, true).empty());
}

TEST_CASE("llama2: round trips", "[tokenize][llama2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama2_json());
  const std::vector<std::string> texts = {
      "Hello world",     " leading space",  "trailing  ",       "a\tb\nc\r\n\n",
      "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
      "\xFF\xFE invalid \xC0\x80",          "",
  };
  for (const auto& s : texts) {
    INFO(s);
    CHECK(t.decode(t.encode(s), true) == s);
  }
  std::mt19937 rng(5);
  for (int n = 0; n < 200; ++n) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 256);
    CHECK(t.decode(t.encode(s, false)) == s);
  }
}

TEST_CASE("llama2: the Metaspace pre-tokenizer and its prepend schemes", "[tokenize][llama2]") {
  const Tokenizer first = Tokenizer::from_json(tok_test::llama2_metaspace_doc("first").dump());
  const Tokenizer always = Tokenizer::from_json(tok_test::llama2_metaspace_doc("always").dump());
  const Tokenizer never = Tokenizer::from_json(tok_test::llama2_metaspace_doc("never").dump());
  CHECK(first.encode("Hello world") == Ids{1, 272, 277});
  // "first": only the run that starts the text gets a ▁; after <s> it does not.
  CHECK(first.encode("<s>Hello", false) == Ids{1, 260, 270, 263});
  CHECK(always.encode("<s>Hello", false) == Ids{1, 272});
  CHECK(never.encode("Hello", false) == Ids{260, 270, 263});
  // The decoder removes the ▁ the pre-tokenizer put in front, and only that one.
  CHECK(first.decode({272, 277}) == "Hello world");
  CHECK(first.decode({278, 272}) == "  Hello");
  CHECK(first.decode({1, 272}) == "<s> Hello");
  CHECK(never.decode({272, 277}) == " Hello world");
  CHECK(first.decode(first.encode("Hello \xE6\x97\xA5 world"), true) == "Hello \xE6\x97\xA5 world");

  // With split, every ▁ starts a word, so "▁▁" can no longer merge.
  const Tokenizer split = Tokenizer::from_json(tok_test::llama2_metaspace_doc("first", true).dump());
  CHECK(first.encode("  ", false) == Ids{278});
  CHECK(split.encode("  ", false) == Ids{259, 259});
  CHECK(split.encode("Hello world", false) == Ids{272, 277});
}

TEST_CASE("llama2: the legacy Metaspace add_prefix_space spelling", "[tokenize][llama2]") {
  auto doc = tok_test::llama2_metaspace_doc("first");
  doc["pre_tokenizer"].erase("prepend_scheme");
  doc["pre_tokenizer"]["add_prefix_space"] = false;
  CHECK(Tokenizer::from_json(doc.dump()).encode("Hello", false) == Ids{260, 270, 263});
  doc["pre_tokenizer"]["add_prefix_space"] = true;
  CHECK(Tokenizer::from_json(doc.dump()).encode("<s>Hello", false) == Ids{1, 272});  // always
}

TEST_CASE("llama2: 1 MB of text is one BPE word and still linear", "[tokenize][llama2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama2_json());
  std::string text;
  while (text.size() < (1u << 20)) text += "Hello world \xE6\x97\xA5 ";
  const Ids ids = t.encode(text, false);
  CHECK(ids.front() == 272);
  CHECK(t.decode(ids) == text);
}

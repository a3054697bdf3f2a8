// LLaMA-3-style byte-level BPE: Split with LLaMA-3's regex, then ByteLevel without its own regex;
// ignore_merges; ["a", "b"] merges; a TemplateProcessing that adds <|begin_of_text|>.
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

TEST_CASE("llama3: BOS from the template, hand-computed ids", "[tokenize][llama3]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama3_json(), "llama3.json");
  CHECK(t.encode("Hello world") == Ids{300, 262, 267});
  CHECK(t.encode("Hello world", false) == Ids{262, 267});
  CHECK(t.encode("") == Ids{300});
  CHECK(t.encode("", false).empty());
  CHECK(t.bos_id() == 300);
  CHECK(t.eos_id() == 301);  // no template suffix: the special token named <|end_of_text|>
  CHECK(t.vocab_size() == 272 + 3);  // 256 bytes, 14 merges, 2 extra tokens, 3 added
}

TEST_CASE("llama3: ignore_merges takes a whole word that is a token", "[tokenize][llama3]") {
  const Tokenizer with = Tokenizer::from_json(tok_test::llama3_json(true));
  const Tokenizer without = Tokenizer::from_json(tok_test::llama3_json(false));
  // "Ġhello" (280) is in the vocabulary but no merge leads to it.
  CHECK(with.encode(" hello", false) == Ids{280});
  CHECK(without.encode(" hello", false) == Ids{32, 257, 259, 111});  // Ġ he ll o
  // Numbers go in groups of three; "123" is a token, "45" is not.
  CHECK(with.encode("12345", false) == Ids{281, 52, 53});
  CHECK(without.encode("12345", false) == Ids{49, 50, 51, 52, 53});
}

TEST_CASE("llama3: the split pattern shapes the words", "[tokenize][llama3]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama3_json());
  // A space before digits is its own word; a letter run takes one leading non-letter.
  CHECK(t.encode(" 123", false) == Ids{32, 281});
  CHECK(t.encode("(Hello", false) == Ids{40, 262});  // one word "(Hello": ( then the merges up to Hello
  // Case-insensitive contractions: "'S" splits off like "'s".
  CHECK(t.encode("IT'S", false) == Ids{73, 84, 39, 83});
}

TEST_CASE("llama3: special tokens in text and in decode", "[tokenize][llama3]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama3_json());
  CHECK(t.encode("<|begin_of_text|>Hello<|eot_id|>", false) == Ids{300, 262, 302});
  CHECK(t.encode("<|begin_of_text|>Hello<|eot_id|>") == Ids{300, 300, 262, 302});
  CHECK(t.decode({300, 262, 267, 302}) == "<|begin_of_text|>Hello world<|eot_id|>");
  CHECK(t.decode({300, 262, 267, 302}, true) == "Hello world");
  CHECK(t.token_to_id("<|eot_id|>") == 302);
  CHECK_THROWS_WITH(t.decode({303}), Catch::Contains("303"));
}

TEST_CASE("llama3: round trips", "[tokenize][llama3]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama3_json());
  const std::vector<std::string> texts = {
      "Hello world",
      "line one\nline two\r\n\r\n   indented\n\n",
      "x  =  1234567  ;  y'all'VE",
      "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\xF0\x9F\x98\x80",
      "\x80\x81 stray \xC0\xAF overlong \xED\xA0\x80 surrogate",
      "",
  };
  for (const auto& s : texts) {
    INFO(s);
    CHECK(t.decode(t.encode(s), true) == s);
    CHECK(t.decode(t.encode(s, false)) == s);
  }
  std::mt19937 rng(11);
  for (int n = 0; n < 200; ++n) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 256);
    CHECK(t.decode(t.encode(s, false)) == s);
  }
}

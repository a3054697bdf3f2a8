// GPT-2-style byte-level BPE: a ByteLevel pre-tokenizer with GPT-2's regex, "a b" merges, a
// ByteLevel decoder, <|endoftext|> as the only added token.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "../timing.hpp"
#include "tokenizer_fixtures.hpp"

#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/tokenize/tokenizer.hpp"

using accel::tokenize::TokenId;
using accel::tokenize::Tokenizer;
using Ids = std::vector<TokenId>;

TEST_CASE("gpt2: hand-computed ids for words, spaces, contractions and special tokens", "[tokenize][gpt2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::gpt2_json(), "gpt2.json");
  // "Hello" merges ll, ell, Hell, Hello; " world" merges Ġw, or, Ġwor, ld, Ġworld.
  CHECK(t.encode("Hello world") == Ids{262, 267});
  // "the" only reaches t + he; " the" reaches Ġthe.
  CHECK(t.encode("the the") == Ids{116, 257, 258});
  // Three spaces before a word: "ĠĠ" then "Ġb" (the last space goes with the word).
  CHECK(t.encode("a   b") == Ids{97, 268, 32, 98});
  // é is a letter: "café" is one word; its two bytes merge into 269.
  CHECK(t.encode("caf\xC3\xA9") == Ids{99, 97, 102, 269});
  // Contractions split off: "'s" is its own piece, "'S" is not a contraction in GPT-2's pattern.
  CHECK(t.encode("it's") == Ids{105, 116, 39, 115});
  // The special token is cut out of the raw text, whatever surrounds it.
  CHECK(t.encode("Hello<|endoftext|> world") == Ids{262, 270, 267});
  CHECK(t.encode("<|endoftext|><|endoftext|>") == Ids{270, 270});
  // A partial special token is plain text.
  CHECK(t.encode("<|endof") == Ids{60, 124, 101, 110, 100, 111, 102});
  // No post-processor ids: add_special_tokens changes nothing for GPT-2.
  CHECK(t.encode("Hello", true) == t.encode("Hello", false));
  CHECK(t.encode("").empty());
}

TEST_CASE("gpt2: every byte has a token: emoji, CJK and invalid UTF-8", "[tokenize][gpt2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::gpt2_json());
  CHECK(t.encode("\xF0\x9F\x98\x80") == Ids{0xF0, 0x9F, 0x98, 0x80});
  CHECK(t.encode("\xE6\x97\xA5\xE6\x9C\xAC") == Ids{0xE6, 0x97, 0xA5, 0xE6, 0x9C, 0xAC});
  CHECK(t.encode("\xFF\xFE") == Ids{0xFF, 0xFE});
  CHECK(t.encode(std::string("a\0b", 3)) == Ids{97, 0, 98});
  CHECK(t.decode({0xFF, 0xFE}) == "\xFF\xFE");  // bytes back as they were, not U+FFFD
  CHECK(t.decode({0xF0, 0x9F}) == "\xF0\x9F");  // half an emoji stays half an emoji
}

TEST_CASE("gpt2: decode joins byte stand-ins back into text", "[tokenize][gpt2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::gpt2_json());
  CHECK(t.decode({262, 267}) == "Hello world");
  CHECK(t.decode({262, 270, 267}) == "Hello<|endoftext|> world");
  CHECK(t.decode({262, 270, 267}, true) == "Hello world");
  CHECK(t.decode(Ids{}).empty());
  CHECK_THROWS_WITH(t.decode({262, 999}), Catch::Contains("id 999") && Catch::Contains("position 1"));
  CHECK_THROWS_AS(t.decode({-1}), accel::ValueError);
}

TEST_CASE("gpt2: round trips", "[tokenize][gpt2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::gpt2_json());
  const std::vector<std::string> texts = {
      "Hello world",
      "  leading and trailing  ",
      "tabs\tand\nnewlines\r\n\n\nend",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80\xF0\x9F\x8E\x89!",
      "I'm sure they'll've it's 123,456.78 $$$",
      "\xC3\x28 \xA0\xA1 \xE2\x82 \xF0\x28\x8C\x28 \xFF",  // invalid sequences of every kind
      std::string("nul\0byte", 8),
      "<|endoftext|>text<|endoftext|>",
      "\xC2\xA0non-breaking\xE2\x80\x83spaces\xE3\x80\x80",
  };
  for (const auto& s : texts) {
    INFO(s);
    CHECK(t.decode(t.encode(s)) == s);
  }
  std::mt19937 rng(7);
  for (int n = 0; n < 200; ++n) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 256);
    CHECK(t.decode(t.encode(s)) == s);
  }
}

TEST_CASE("gpt2: vocabulary queries", "[tokenize][gpt2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::gpt2_json());
  CHECK(t.vocab_size() == 271);
  CHECK(t.token_to_id("\xC4\xA0the") == 258);  // "Ġthe"
  CHECK(t.token_to_id("<|endoftext|>") == 270);
  CHECK_FALSE(t.token_to_id("the").has_value());
  CHECK(t.id_to_token(262) == "Hello");
  CHECK(t.id_to_token(270) == "<|endoftext|>");
  CHECK_FALSE(t.id_to_token(5000).has_value());
  CHECK(t.is_special(270));
  CHECK_FALSE(t.is_special(262));
  // GPT-2 has no BOS template: <|endoftext|> is both, as in its config.
  CHECK(t.bos_id() == 270);
  CHECK(t.eos_id() == 270);
}

TEST_CASE("gpt2: from_file reads the file and names it in errors", "[tokenize][gpt2]") {
  accel_test::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  std::ofstream(path, std::ios::binary) << tok_test::gpt2_json();
  const Tokenizer t = Tokenizer::from_file(path);
  CHECK(t.encode("Hello world") == Ids{262, 267});
  CHECK_THROWS_AS(Tokenizer::from_file(dir.file("missing.json")), accel::IOError);
  CHECK_THROWS_AS(Tokenizer::from_file(dir.str()), accel::IOError);
  std::ofstream(dir.file("bad.json"), std::ios::binary) << "{\"model\": ";
  CHECK_THROWS_WITH(Tokenizer::from_file(dir.file("bad.json")), Catch::Contains("bad.json"));
}

TEST_CASE("gpt2: add_prefix_space puts a space before the text", "[tokenize][gpt2]") {
  auto doc = tok_test::gpt2_doc();
  doc["pre_tokenizer"]["add_prefix_space"] = true;
  const Tokenizer t = Tokenizer::from_json(doc.dump());
  CHECK(t.encode("the") == Ids{258});
  CHECK(t.encode(" the") == Ids{258});  // already there: not doubled
  // The decoder does not take the space away again (neither does the tokenizers library).
  CHECK(t.decode(t.encode("the")) == " the");
}

TEST_CASE("gpt2: 1 MB of text encodes in linear time", "[tokenize][gpt2]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::gpt2_json());
  std::string text;
  while (text.size() < (1u << 20)) text += "Hello world, the caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC. ";
  const std::string one_word(1u << 20, 'l');  // one piece of a million letters: a heap, not a rescan
  const double bound = accel_test::seconds_bound(5.0);  // quadratic would take hours
  Ids ids, word;
  const double seconds = accel_test::fastest_within(bound, [&] {
    return accel_test::seconds_of([&] {
      ids = t.encode(text);
      word = t.encode(one_word);
    });
  });
  CHECK(word.size() == (1u << 19));  // "l l" merges pairwise
  CHECK(t.decode(ids) == text);
  CHECK(seconds < bound);
}

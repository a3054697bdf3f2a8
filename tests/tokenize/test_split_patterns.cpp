// The GPT-2, LLaMA-3 and Qwen2 split regexes as scanners: the pieces Oniguruma would cut.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "accel/tokenize/byte_level.hpp"
#include "accel/tokenize/split_patterns.hpp"
#include "accel/tokenize/unicode.hpp"

using namespace accel::tokenize;
using Pieces = std::vector<std::string_view>;

TEST_CASE("gpt2 pattern: words take one leading space, the last space of a run goes to the word", "[tokenize][split]") {
  CHECK(split_by_pattern(SplitPattern::gpt2, "Hello my friend, how is your day going?") ==
        Pieces{"Hello", " my", " friend", ",", " how", " is", " your", " day", " going", "?"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "Hello there       dear") == Pieces{"Hello", " there", "      ", " dear"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "Hello there\nHello there") ==
        Pieces{"Hello", " there", "\n", "Hello", " there"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "\n\nHello") == Pieces{"\n", "\n", "Hello"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "end  ") == Pieces{"end", "  "});
  CHECK(split_by_pattern(SplitPattern::gpt2, "a \t!") == Pieces{"a", " ", "\t", "!"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "x !!") == Pieces{"x", " !!"});
}

TEST_CASE("gpt2 pattern: contractions, numbers, symbols, non-ASCII", "[tokenize][split]") {
  CHECK(split_by_pattern(SplitPattern::gpt2, "I'm they'll we've it's don't") ==
        Pieces{"I", "'m", " they", "'ll", " we", "'ve", " it", "'s", " don", "'t"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "IT'S 'sup") == Pieces{"IT", "'", "S", " '", "sup"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "abc123 4567") == Pieces{"abc", "123", " 4567"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "i\xE2\xAD\xA2j") == Pieces{"i", "\xE2\xAD\xA2", "j"});  // i⭢j
  CHECK(split_by_pattern(SplitPattern::gpt2, "na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC") ==
        Pieces{"na\xC3\xAFve", " \xE6\x97\xA5\xE6\x9C\xAC"});
  // Invalid bytes are "other" characters, never letters, and are all kept.
  CHECK(split_by_pattern(SplitPattern::gpt2, "a\xFF\xFE b") == Pieces{"a", "\xFF\xFE", " b"});
  CHECK(split_by_pattern(SplitPattern::gpt2, "").empty());
}

TEST_CASE("llama3 pattern: one leading non-letter, digit triples, newline runs", "[tokenize][split]") {
  CHECK(split_by_pattern(SplitPattern::llama3, "Hello world") == Pieces{"Hello", " world"});
  CHECK(split_by_pattern(SplitPattern::llama3, "I'm 12345 ok") == Pieces{"I", "'m", " ", "123", "45", " ok"});
  CHECK(split_by_pattern(SplitPattern::llama3, "IT'S YOU'RE") == Pieces{"IT", "'S", " YOU", "'RE"});
  CHECK(split_by_pattern(SplitPattern::llama3, "(hello) $x") == Pieces{"(hello", ")", " $", "x"});
  CHECK(split_by_pattern(SplitPattern::llama3, "$x") == Pieces{"$x"});
  CHECK(split_by_pattern(SplitPattern::llama3, "a\r\n\n  x!!\n") == Pieces{"a", "\r\n\n", " ", " x", "!!\n"});
  CHECK(split_by_pattern(SplitPattern::llama3, "a\n  \n b") == Pieces{"a", "\n  \n", " b"});
  CHECK(split_by_pattern(SplitPattern::llama3, "x   ") == Pieces{"x", "   "});
  CHECK(split_by_pattern(SplitPattern::llama3, "x \t y") == Pieces{"x", " \t", " y"});
  CHECK(split_by_pattern(SplitPattern::llama3, "\n\nabc") == Pieces{"\n\n", "abc"});
  CHECK(split_by_pattern(SplitPattern::llama3, "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E" "123") ==
        Pieces{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "123"});
  CHECK(split_by_pattern(SplitPattern::llama3, "'\xC5\xBF") == Pieces{"'\xC5\xBF"});  // 'ſ folds to 's
}

TEST_CASE("qwen2 pattern: LLaMA-3's with single digits", "[tokenize][split]") {
  CHECK(split_by_pattern(SplitPattern::qwen2, "x 2024!") == Pieces{"x", " ", "2", "0", "2", "4", "!"});
}

TEST_CASE("patterns are recognized by their exact text only", "[tokenize][split]") {
  CHECK(split_pattern_from_regex(gpt2_regex) == SplitPattern::gpt2);
  CHECK(split_pattern_from_regex(
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)") ==
        SplitPattern::llama3);
  CHECK(split_pattern_from_regex(qwen2_regex) == SplitPattern::qwen2);
  CHECK_FALSE(split_pattern_from_regex(R"(\s+)").has_value());
}

TEST_CASE("split pieces always tile the text", "[tokenize][split]") {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += static_cast<char>((i * 7919 + i / 3) % 256);
  for (const SplitPattern p : {SplitPattern::gpt2, SplitPattern::llama3, SplitPattern::qwen2}) {
    std::string joined;
    for (const auto piece : split_by_pattern(p, text)) {
      CHECK_FALSE(piece.empty());
      joined += piece;
    }
    CHECK(joined == text);
  }
}

TEST_CASE("unicode: UTF-8 units and character classes", "[tokenize][unicode]") {
  CHECK(decode_unit("\xE6\x97\xA5", 0).cp == U'\u65E5');
  CHECK(decode_unit("\xF0\x9F\x98\x80", 0).size == 4);
  for (const char* bad : {"\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF8", "\xE6\x97"}) {
    INFO(bad);
    CHECK(decode_unit(bad, 0).size == 1);
    CHECK_FALSE(decode_unit(bad, 0).valid());
    CHECK(char_class(decode_unit(bad, 0).cp) == CharClass::other);
  }
  CHECK(unit_before("a\xE6\x97\xA5", 4).cp == U'\u65E5');
  CHECK(unit_before("a\x97\xA5", 3).size == 1);
  CHECK(char_class(U'\u0416') == CharClass::letter);    // Ж
  CHECK(char_class(U'\u0663') == CharClass::number);    // Arabic-Indic three
  CHECK(char_class(U'\u2167') == CharClass::number);    // Roman numeral eight (Nl)
  CHECK(char_class(U'\u00BD') == CharClass::number);    // ½ (No)
  CHECK(char_class(U'\u3000') == CharClass::space);
  CHECK(char_class(U'\U0001F600') == CharClass::other);  // emoji
  CHECK(char_class(U'\u0301') == CharClass::other);    // combining acute: a mark, not a letter
  CHECK(char_class(U'\U00020000') == CharClass::letter);  // CJK extension B
  CHECK(is_word_char(U'_'));
}

TEST_CASE("byte level: the GPT-2 table is a bijection onto printable characters", "[tokenize][unicode]") {
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_char(static_cast<std::uint8_t>(b));
    CHECK(char_byte(c) == b);
    CHECK(char_class(c) != CharClass::space);
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string mapped, back;
  to_byte_level(all, mapped);
  REQUIRE(from_byte_level(mapped, back));
  CHECK(back == all);
  CHECK(mapped.substr(0, 2) == "\xC4\x80");  // byte 0 -> U+0100
  std::string out = "keep";
  CHECK_FALSE(from_byte_level("a b", out));  // a plain space is no stand-in
  CHECK(out == "keep");
}

// The regular expressions byte-level tokenizers cut text with, as hand-written scanners
// (std::regex has no \p{L}); a tokenizer.json names them by their exact text.
//
//   SplitPattern                                  gpt2, llama3, qwen2
//   gpt2_regex / llama3_regex / qwen2_regex       the patterns, spelled as tokenizer.json spells them
//   split_pattern_from_regex(regex) -> optional   which scanner a Regex pattern names
//   match_end(pattern, text, pos) -> end          end of the match that starts at `pos`
//   split_by_pattern(pattern, text) -> pieces     the matches, left to right; they tile the text
//
// Each scanner answers what Oniguruma (the regex engine of the tokenizers library) answers: the
// first alternative that matches at `pos` wins, greedy runs backtrack only as far as a lookahead
// forces. Every character is a letter, a number, a space or "other", and each pattern has an
// alternative for each class, so the matches cover the text with no gaps. Letters and numbers
// come from the Unicode 16.0 tables of unicode_tables.hpp. The case-insensitive contractions of
// the LLaMA-3 pattern fold ASCII letters and U+017F (long s, which folds to 's').
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "accel/tokenize/unicode.hpp"

namespace accel::tokenize {

/// A pre-tokenization pattern this library can run.
enum class SplitPattern {
  gpt2,    ///< GPT-2's pattern (the ByteLevel pre-tokenizer's built-in regex)
  llama3,  ///< LLaMA-3's: letters may take one leading non-letter, numbers go in groups of up to 3
  qwen2,   ///< LLaMA-3's with numbers one digit at a time (Qwen2)
};

/// GPT-2's pattern.
inline constexpr std::string_view gpt2_regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
/// LLaMA-3's pattern.
inline constexpr std::string_view llama3_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
/// Qwen2's pattern: LLaMA-3's with `\p{N}` in place of `\p{N}{1,3}`.
inline constexpr std::string_view qwen2_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// The scanner for a Regex pattern of tokenizer.json, or nullopt for any other pattern.
inline std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == gpt2_regex) return SplitPattern::gpt2;
  if (regex == llama3_regex) return SplitPattern::llama3;
  if (regex == qwen2_regex) return SplitPattern::qwen2;
  return std::nullopt;
}

namespace detail {

// A cursor over text that reads units on demand.
struct Scan {
  std::string_view text;

  bool at_end(std::size_t pos) const { return pos >= text.size(); }
  Unit unit(std::size_t pos) const { return decode_unit(text, pos); }
  CharClass cls(std::size_t pos) const { return char_class(unit(pos).cp); }
  bool is(std::size_t pos, CharClass c) const { return !at_end(pos) && cls(pos) == c; }

  // End of the longest run of class c from pos, at most `limit` units long.
  std::size_t run(std::size_t pos, CharClass c, std::size_t limit = static_cast<std::size_t>(-1)) const {
    for (std::size_t n = 0; n < limit && !at_end(pos); ++n) {
      const Unit u = unit(pos);
      if (char_class(u.cp) != c) break;
      pos += u.size;
    }
    return pos;
  }

  // The contractions 's 't 're 've 'm 'll 'd at pos; 0 when there is none, else the match length.
  std::size_t contraction(std::size_t pos, bool fold_case) const {
    if (text[pos] != '\'') return 0;
    auto letter = [&](std::size_t p, std::size_t& size) -> char {
      if (at_end(p)) return 0;
      const Unit u = unit(p);
      size = u.size;
      if (fold_case && u.cp == 0x17F) return 's';
      if (u.cp >= 0x80) return 0;
      const char c = static_cast<char>(u.cp);
      return fold_case && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    std::size_t s1 = 0, s2 = 0;
    const char c1 = letter(pos + 1, s1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 1 + s1;
    if (c1 != 'r' && c1 != 'v' && c1 != 'l') return 0;
    const char c2 = letter(pos + 1 + s1, s2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 1 + s1 + s2;
    return 0;
  }

  // `\s+(?!\S)|\s+` at pos (a space): the run, minus its last space when a non-space follows
  // and the run is longer than one unit.
  std::size_t spaces(std::size_t pos) const {
    std::size_t end = pos, last = pos;
    while (!at_end(end)) {
      const Unit u = unit(end);
      if (!is_space(u.cp)) break;
      last = end;
      end += u.size;
    }
    return at_end(end) || last == pos ? end : last;
  }
};

inline std::size_t gpt2_match_end(const Scan& s, std::size_t pos) {
  if (const std::size_t n = s.contraction(pos, false)) return pos + n;
  const bool space = s.text[pos] == ' ';
  for (const CharClass c : {CharClass::letter, CharClass::number, CharClass::other}) {
    if (space && s.is(pos + 1, c)) return s.run(pos + 1, c);  // ` ?X+` with its space
    if (s.is(pos, c)) return s.run(pos, c);
  }
  return s.spaces(pos);
}

inline std::size_t llama3_match_end(const Scan& s, std::size_t pos, std::size_t max_digits) {
  if (const std::size_t n = s.contraction(pos, true)) return pos + n;
  const Unit u0 = s.unit(pos);
  const CharClass c0 = char_class(u0.cp);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c0 == CharClass::letter) return s.run(pos, CharClass::letter);
  const bool newline = u0.cp == '\r' || u0.cp == '\n';
  if (!newline && c0 != CharClass::number && s.is(pos + u0.size, CharClass::letter)) {
    return s.run(pos + u0.size, CharClass::letter);
  }
  // \p{N}{1,3}
  if (c0 == CharClass::number) return s.run(pos, CharClass::number, max_digits);
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  std::size_t other = std::string_view::npos;
  if (u0.cp == ' ' && s.is(pos + 1, CharClass::other)) other = pos + 1;
  if (c0 == CharClass::other) other = pos;
  if (other != std::string_view::npos) {
    std::size_t end = s.run(other, CharClass::other);
    while (!s.at_end(end) && (s.text[end] == '\r' || s.text[end] == '\n')) ++end;
    return end;
  }
  // `\s*[\r\n]+`: up to the last newline of the space run, when it holds one.
  std::size_t end = pos, after_newline = 0;
  while (!s.at_end(end)) {
    const Unit u = s.unit(end);
    if (!is_space(u.cp)) break;
    end += u.size;
    if (u.cp == '\r' || u.cp == '\n') after_newline = end;
  }
  if (after_newline != 0) return after_newline;
  return s.spaces(pos);
}

}  // namespace detail

/// End of the match of `pattern` that starts at `pos` (pos < text.size()); always > pos.
inline std::size_t match_end(SplitPattern pattern, std::string_view text, std::size_t pos) {
  const detail::Scan s{text};
  std::size_t end = text.size();
  switch (pattern) {
    case SplitPattern::gpt2: end = detail::gpt2_match_end(s, pos); break;
    case SplitPattern::llama3: end = detail::llama3_match_end(s, pos, 3); break;
    case SplitPattern::qwen2: end = detail::llama3_match_end(s, pos, 1); break;
  }
  return end > pos ? end : pos + decode_unit(text, pos).size;  // progress, whatever the tables say
}

/// The successive matches of `pattern` in `text`: views into it that concatenate back to it.
inline std::vector<std::string_view> split_by_pattern(SplitPattern pattern, std::string_view text) {
  std::vector<std::string_view> pieces;
  pieces.reserve(text.size() / 4 + 1);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = match_end(pattern, text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

}  // namespace accel::tokenize

// UTF-8 stepping and the character classes of the pre-tokenization patterns.
//
//   Unit                                 one code point, or one byte of invalid UTF-8
//   decode_unit(text, pos) -> Unit       the unit that starts at byte `pos`
//   unit_before(text, pos) -> Unit       the unit that ends at byte `pos`
//   char_class(cp) -> CharClass          letter (\p{L}), number (\p{N}), space (\s), other
//   is_space(cp) / is_word_char(cp)      \s and \w as the tokenizers library's regexes read them
//   append_utf8(out, cp)                 cp encoded as UTF-8
//
// Text is bytes, not validated: a byte that does not start a well-formed UTF-8 sequence (a stray
// continuation byte, an overlong form, a surrogate, a code point past U+10FFFF, a truncated
// sequence) is a unit of its own whose class is `other`. Every pre-tokenizer therefore keeps
// every byte, and byte-level BPE encodes any input, valid UTF-8 or not.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>

#include "accel/tokenize/unicode_tables.hpp"

namespace accel::tokenize {

/// What a pre-tokenization pattern can ask of a character.
enum class CharClass : std::uint8_t {
  letter,  ///< \p{L}
  number,  ///< \p{N}
  space,   ///< \s (Unicode White_Space)
  other,   ///< everything else, invalid bytes included
};

/// One step through text: a code point and its byte length. An invalid byte has length 1 and a
/// code point past Unicode (`invalid_unit_base + byte`), which no class or table contains.
struct Unit {
  char32_t cp;
  std::uint32_t size;
  bool valid() const noexcept { return cp < 0x110000; }
};

/// Code point given to an invalid byte b: invalid_unit_base + b.
inline constexpr char32_t invalid_unit_base = 0x110000;

/// The unit starting at `pos` (pos < text.size()). Follows the Unicode "maximal subpart" rule
/// in its simplest form: a malformed sequence costs exactly its first byte.
constexpr Unit decode_unit(std::string_view text, std::size_t pos) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(text[i]); };
  const std::uint8_t b0 = byte(pos);
  const Unit bad{invalid_unit_base + b0, 1};
  if (b0 < 0x80) return {b0, 1};
  std::size_t need = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return bad;
  }
  if (text.size() - pos <= need) return bad;
  for (std::size_t k = 1; k <= need; ++k) {
    const std::uint8_t b = byte(pos + k);
    const std::uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return bad;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {cp, static_cast<std::uint32_t>(need + 1)};
}

/// The unit that ends at `pos` (0 < pos <= text.size()), as a left-to-right walk would have cut it.
/// (A well-formed sequence's lead byte cannot continue an earlier sequence, so looking back is
/// enough.)
constexpr Unit unit_before(std::string_view text, std::size_t pos) noexcept {
  for (std::size_t k = 2; k <= 4 && k <= pos; ++k) {
    const Unit u = decode_unit(text, pos - k);
    if (u.valid() && u.size == k) return u;
  }
  return decode_unit(text, pos - 1);
}

/// \s: the White_Space property, which Oniguruma and Rust's regex both use for Unicode text.
constexpr bool is_space(char32_t cp) noexcept {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace detail {

constexpr bool in_ranges(std::span<const CodeRange> ranges, char32_t cp) noexcept {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                   [](char32_t c, const CodeRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

constexpr CharClass classify(char32_t cp) noexcept {
  if (is_space(cp)) return CharClass::space;
  if (in_ranges(letter_ranges, cp)) return CharClass::letter;
  if (in_ranges(number_ranges, cp)) return CharClass::number;
  return CharClass::other;
}

// Latin-1 answers from a table: nearly every character of most text.
inline constexpr auto latin1_classes = [] {
  std::array<CharClass, 256> t{};
  for (char32_t c = 0; c < 256; ++c) t[c] = classify(c);
  return t;
}();

}  // namespace detail

/// The pattern class of a code point; `other` for an invalid byte's unit.
constexpr CharClass char_class(char32_t cp) noexcept {
  return cp < 256 ? detail::latin1_classes[cp] : detail::classify(cp);
}

/// \w as the added-token matcher reads it (the Rust regex crate's): Alphabetic, marks, decimal
/// numbers, connector punctuation and Join_Control. Not every letter-or-number: '²' (No) is no
/// word character, 'Ⓐ' (So, Alphabetic) and a combining accent are. False for an invalid byte.
constexpr bool is_word_char(char32_t cp) noexcept {
  if (cp < 0x80) {
    return (cp >= U'0' && cp <= U'9') || (cp >= U'A' && cp <= U'Z') || (cp >= U'a' && cp <= U'z') || cp == U'_';
  }
  return detail::in_ranges(word_ranges, cp);
}

/// Appends cp (a valid code point) to out as UTF-8.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

static_assert(char_class(U'A') == CharClass::letter && char_class(U'7') == CharClass::number);
static_assert(char_class(U'\u00e9') == CharClass::letter && char_class(U'\u65e5') == CharClass::letter);
static_assert(char_class(U'\u00a0') == CharClass::space && char_class(U'!') == CharClass::other);
static_assert(decode_unit("\xC3\xA9", 0).cp == U'\u00e9' && decode_unit("\xC0\x80", 0).size == 1);
static_assert(is_word_char(U'_') && is_word_char(U'\u0301') && is_word_char(U'\u24B6') && !is_word_char(U'\u00b2'));

}  // namespace accel::tokenize

// GPT-2's byte-to-character table: byte-level BPE runs on printable stand-ins for bytes, so a
// vocabulary of strings covers all 256 bytes and no input is ever unknown.
//
//   byte_char(b) -> char32_t                  the stand-in of byte b
//   char_byte(cp) -> int                      the byte that stand-in cp stands for, or -1
//   to_byte_level(bytes, out)                 appends every byte as its stand-in (UTF-8)
//   from_byte_level(token, out) -> bool       appends the bytes a token of stand-ins spells
//
// The printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves (as the code
// points of the same value); the other 68 bytes take U+0100, U+0101, ... in byte order. A space
// is therefore 'Ġ' (U+0120) and a newline 'Ċ' (U+010A), as in every GPT-2-family vocabulary.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "accel/tokenize/unicode.hpp"

namespace accel::tokenize {

namespace detail {

constexpr bool byte_stands_for_itself(unsigned b) noexcept {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

inline constexpr auto byte_chars = [] {
  std::array<char16_t, 256> t{};
  char16_t next = 256;
  for (unsigned b = 0; b < 256; ++b) t[b] = byte_stands_for_itself(b) ? static_cast<char16_t>(b) : next++;
  return t;
}();

// Stand-ins run up to U+0143 (256 + 68 - 1).
inline constexpr std::size_t byte_char_limit = 256 + 68;

inline constexpr auto char_bytes = [] {
  std::array<std::int16_t, byte_char_limit> t{};
  for (auto& v : t) v = -1;
  for (unsigned b = 0; b < 256; ++b) t[byte_chars[b]] = static_cast<std::int16_t>(b);
  return t;
}();

// Each stand-in already UTF-8 encoded (1 or 2 bytes): the hot loop of encode only copies.
struct EncodedChar {
  char bytes[2];
  std::uint8_t size;
};
inline constexpr auto byte_chars_utf8 = [] {
  std::array<EncodedChar, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    const char16_t c = byte_chars[b];
    if (c < 0x80) {
      t[b] = {{static_cast<char>(c), 0}, 1};
    } else {
      t[b] = {{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))}, 2};
    }
  }
  return t;
}();

}  // namespace detail

/// The stand-in code point of byte b.
constexpr char32_t byte_char(std::uint8_t b) noexcept { return detail::byte_chars[b]; }

/// The byte that stand-in cp stands for, or -1 when cp is no stand-in.
constexpr int char_byte(char32_t cp) noexcept {
  return cp < detail::byte_char_limit ? detail::char_bytes[cp] : -1;
}

/// Appends each byte of `bytes` (any bytes, valid UTF-8 or not) as its stand-in.
inline void to_byte_level(std::string_view bytes, std::string& out) {
  out.reserve(out.size() + 2 * bytes.size());
  for (const char c : bytes) {
    const auto& e = detail::byte_chars_utf8[static_cast<std::uint8_t>(c)];
    out.append(e.bytes, e.size);
  }
}

/// Appends the bytes `token` spells in stand-ins and returns true; when some character of it is
/// no stand-in (an added token such as "<|endoftext|>" may hold any text), appends nothing and
/// returns false, and the caller keeps the token's own bytes.
inline bool from_byte_level(std::string_view token, std::string& out) {
  const std::size_t start = out.size();
  for (std::size_t pos = 0; pos < token.size();) {
    const Unit u = decode_unit(token, pos);
    const int b = char_byte(u.cp);
    if (b < 0) {
      out.resize(start);
      return false;
    }
    out += static_cast<char>(b);
    pos += u.size;
  }
  return true;
}

static_assert(byte_char(' ') == U'\u0120' && byte_char('\n') == U'\u010a' && byte_char('A') == U'A');
static_assert(char_byte(U'\u0143') == 0xAD && char_byte(U'\u0144') == -1);

}  // namespace accel::tokenize

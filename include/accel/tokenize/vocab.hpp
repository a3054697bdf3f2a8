// Token ids and the maps between tokens and ids.
//
//   TokenId                       a token id: std::int32_t, what ops::embedding takes
//   Vocab                         token -> id, looked up by std::string_view without a copy
//   byte_fallback_token(b)        "<0x41>": the token byte-fallback vocabularies give byte b
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace accel::tokenize {

/// A token id. Vocabularies stay below tokenizer_limits::max_vocab_size (2^24), so 32 bits hold
/// every id, and a std::vector<TokenId> goes straight into an int32 ids tensor.
using TokenId = std::int32_t;

/// Hashes strings and string views alike, so that lookups by view need no temporary string.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

/// Token text -> id.
using Vocab = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

/// The token SentencePiece-style vocabularies hold for byte b: "<0x" + two upper-case hex digits + ">".
inline std::string byte_fallback_token(std::uint8_t b) {
  constexpr char hex[] = "0123456789ABCDEF";
  return std::string{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
}

}  // namespace accel::tokenize

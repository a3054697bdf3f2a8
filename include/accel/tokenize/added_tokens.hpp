// Added tokens: strings found in the text before it is cut into words, such as "<|endoftext|>",
// "<s>" or tokens added to a vocabulary after training.
//
//   AddedToken                                    one entry of tokenizer.json's "added_tokens"
//   read_added_tokens(root) -> vector<AddedToken> the entries, validated
//   TextSegment                                   a run of plain text, or one matched added token
//   AddedTokenMatcher                             a byte trie over the patterns of some added tokens
//     add(pattern, token) / empty()
//     split(text, tokens) -> vector<TextSegment>  the text as plain runs and matches, in order
//
// Matching is leftmost-longest, as the tokenizers library's Aho-Corasick matcher: the earliest
// position where some token starts wins, and there the longest token. Per token, as there:
// `single_word` rejects a match with a word character (\w as is_word_char reads it: letters,
// marks, decimal digits, '_', ...) right before or after it (the text it covered stays plain);
// `lstrip` / `rstrip` take the white space on that side into the match, so it disappears from the
// output; `normalized` tokens are matched in normalized text (the Tokenizer runs two matchers,
// one before and one after normalization); `special` tokens are the ones
// decode(..., skip_special_tokens=true) drops. A match costs at most the length of the longest
// added token per text position, so the split is linear in the text.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accel/tokenize/tokenizer_json.hpp"
#include "accel/tokenize/unicode.hpp"
#include "accel/tokenize/vocab.hpp"

namespace accel::tokenize {

/// A token matched in raw (or normalized) text before pre-tokenization.
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool single_word = false;  ///< only match as a whole word
  bool lstrip = false;       ///< swallow the white space on its left
  bool rstrip = false;       ///< swallow the white space on its right
  bool normalized = true;    ///< match in the normalized text (false: in the raw text)
  bool special = false;      ///< a control token: skipped by decode(ids, true)
};

/// The "added_tokens" array of tokenizer.json (absent or null: none). Contents must be non-empty
/// and unique, ids unique and below tokenizer_limits::max_vocab_size; `normalized` defaults to
/// `!special`, the other flags to false.
inline std::vector<AddedToken> read_added_tokens(const JsonNode& root) {
  std::vector<AddedToken> tokens;
  const auto list = root.find("added_tokens");
  if (!list) return tokens;
  const std::size_t n = list->size();
  tokens.reserve(n);
  std::unordered_map<TokenId, std::size_t> by_id;
  std::unordered_map<std::string, std::size_t> by_content;
  for (std::size_t i = 0; i < n; ++i) {
    const JsonNode e = list->at(i);
    AddedToken t;
    t.id = static_cast<TokenId>(e.at("id").integer(0, tokenizer_limits::max_vocab_size - 1));
    t.content = e.at("content").str();
    if (t.content.empty()) e.at("content").fail("an added token cannot be empty");
    t.special = e.bool_or("special", false);
    t.single_word = e.bool_or("single_word", false);
    t.lstrip = e.bool_or("lstrip", false);
    t.rstrip = e.bool_or("rstrip", false);
    t.normalized = e.bool_or("normalized", !t.special);
    if (!by_id.emplace(t.id, i).second) e.at("id").fail("id " + std::to_string(t.id) + " is given to two added tokens");
    if (!by_content.emplace(t.content, i).second) e.at("content").fail(quote(t.content) + " is added twice");
    tokens.push_back(std::move(t));
  }
  return tokens;
}

/// A piece of text: [begin, end) of the text that was split, and the index of the added token it
/// matched, or -1 for plain text.
struct TextSegment {
  std::size_t begin;
  std::size_t end;
  std::int32_t token;
  bool is_token() const noexcept { return token >= 0; }
};

namespace detail {
// The first child whose byte is not below `byte`, in a trie node's sorted (byte, node) list.
template <class Kids>
auto child_at_or_after(Kids& kids, unsigned char byte) {
  const auto below = [](const auto& kid, unsigned char b) { return kid.first < b; };
  return std::lower_bound(kids.begin(), kids.end(), byte, below);
}
}  // namespace detail

/// Finds added tokens in text: a trie over their patterns (bytes), leftmost-longest.
class AddedTokenMatcher {
 public:
  /// Adds `pattern` (non-empty) as the text of token number `token` of the token list.
  void add(std::string_view pattern, std::int32_t token) {
    std::int32_t node = 0;
    for (const char c : pattern) {
      const auto byte = static_cast<unsigned char>(c);
      auto& kids = nodes_[static_cast<std::size_t>(node)].children;
      const auto it = detail::child_at_or_after(kids, byte);
      if (it != kids.end() && it->first == byte) {
        node = it->second;
        continue;
      }
      const auto fresh = static_cast<std::int32_t>(nodes_.size());
      kids.insert(it, {byte, fresh});
      nodes_.emplace_back();  // may move `kids`: not used past this point
      node = fresh;
    }
    nodes_[static_cast<std::size_t>(node)].token = token;
    empty_ = false;
  }

  /// True when no pattern was added.
  bool empty() const noexcept { return empty_; }

  /// Cuts `text` into plain runs and matched tokens (`tokens` is the list the indices given to
  /// add() refer to). The segments are in order and cover the text; empty text gives none.
  std::vector<TextSegment> split(std::string_view text, std::span<const AddedToken> tokens) const {
    std::vector<TextSegment> out;
    std::size_t plain = 0;  // where the current plain run starts
    for (std::size_t pos = 0; pos < text.size();) {
      const auto [length, token] = longest_at(text, pos);
      if (token < 0) {
        ++pos;
        continue;
      }
      std::size_t start = pos, stop = pos + length;
      const AddedToken& t = tokens[static_cast<std::size_t>(token)];
      pos = stop;
      if (t.single_word) {
        const bool word_before = start > 0 && is_word_char(unit_before(text, start).cp);
        const bool word_after = stop < text.size() && is_word_char(decode_unit(text, stop).cp);
        if (word_before || word_after) continue;
      }
      if (t.lstrip) {
        while (start > plain) {
          const Unit u = unit_before(text, start);
          if (!is_space(u.cp)) break;
          start -= u.size;
        }
      }
      if (t.rstrip) {
        while (stop < text.size()) {
          const Unit u = decode_unit(text, stop);
          if (!is_space(u.cp)) break;
          stop += u.size;
        }
      }
      if (plain < start) out.push_back({plain, start, -1});
      out.push_back({start, stop, token});
      plain = pos = stop;
    }
    if (plain < text.size()) out.push_back({plain, text.size(), -1});
    return out;
  }

 private:
  using Children = std::vector<std::pair<unsigned char, std::int32_t>>;  // (byte, node), sorted by byte
  struct Node {
    Children children;
    std::int32_t token = -1;
  };

  // Length and token of the longest pattern starting at pos; token -1 when none does.
  std::pair<std::size_t, std::int32_t> longest_at(std::string_view text, std::size_t pos) const {
    std::pair<std::size_t, std::int32_t> best{0, -1};
    std::int32_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
      const auto& kids = nodes_[static_cast<std::size_t>(node)].children;
      const auto byte = static_cast<unsigned char>(text[i]);
      const auto it = detail::child_at_or_after(kids, byte);
      if (it == kids.end() || it->first != byte) break;
      node = it->second;
      if (const std::int32_t t = nodes_[static_cast<std::size_t>(node)].token; t >= 0) best = {i + 1 - pos, t};
    }
    return best;
  }

  std::vector<Node> nodes_{Node{}};
  bool empty_ = true;
};

}  // namespace accel::tokenize

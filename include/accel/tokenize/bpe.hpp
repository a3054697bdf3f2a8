// The BPE model of tokenizer.json: a vocabulary, ranked merges, and the word -> ids algorithm.
//
//   BpeOptions                                unk_token, fuse_unk, byte_fallback, ignore_merges, prefix / suffix
//   BpeModel::from_json(model)                the "model" object ({"type": "BPE", "vocab", "merges", ...})
//   BpeModel::encode_word(word, out)          appends the ids of one pre-tokenized word
//   token_to_id(token) / id_to_token(id) / size() / options()
//
// A word starts as one symbol per character (a byte of invalid UTF-8 counts as a character),
// looked up with the continuing-subword prefix on every character but the first and the
// end-of-word suffix on the last. A character missing from the vocabulary becomes its bytes'
// "<0xNN>" tokens under byte_fallback, else the unknown token (runs of them fused into one under
// fuse_unk), else it is dropped, as the tokenizers library does. Then the merge of lowest rank
// is applied, the leftmost first among equal ranks, until none applies: a heap over the word's
// adjacent pairs makes that O(n log n) in the word's length, so a 1 MB word without spaces
// costs what 1 MB of short words costs. With ignore_merges a word that is itself a token is
// that token.
//
// Merges may be "a b" strings (a "#version" line is skipped) or ["a", "b"] pairs; every merge
// must name two tokens of the vocabulary whose concatenation (less the second's prefix) is one
// too. A pair listed twice keeps its later rank, as the tokenizers library and GPT-2's encoder do.
// Differences: dropout is ignored (it is a training-time regularizer; encode here is
// deterministic); an unk_token missing from the vocabulary is a FormatError at load, not an
// error at the first unknown character; two tokens with one id are a FormatError; an unk token
// pending when byte-fallback tokens follow is emitted before them, in text order (the tokenizers
// library emits it after them).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accel/tokenize/tokenizer_json.hpp"
#include "accel/tokenize/unicode.hpp"
#include "accel/tokenize/vocab.hpp"

namespace accel::tokenize {

/// The options of a BPE model, as tokenizer.json names them.
struct BpeOptions {
  std::optional<std::string> unk_token;   ///< token for characters the vocabulary lacks
  std::string continuing_subword_prefix;  ///< put before every character but a word's first ("##")
  std::string end_of_word_suffix;         ///< put after a word's last character ("</w>")
  bool fuse_unk = false;                  ///< a run of unknown characters becomes one unk token
  bool byte_fallback = false;             ///< unknown characters become "<0xNN>" tokens
  bool ignore_merges = false;             ///< a word that is a token is encoded as that token
};

/// Working memory of encode_word, reused from word to word.
struct BpeScratch {
  struct Candidate {
    std::int32_t rank;
    std::int32_t pos;  // left symbol of the pair
    friend bool operator>(const Candidate& a, const Candidate& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    }
  };
  std::vector<TokenId> ids;
  std::vector<std::int32_t> next;  // index of the next live symbol, -1 at the end
  std::vector<std::int32_t> prev;  // index of the previous live symbol, -1 at the start
  std::vector<Candidate> heap;
  std::string key;
};

/// A byte-pair-encoding model read from tokenizer.json.
class BpeModel {
 public:
  /// Reads the "model" object; FormatError naming the file and key for anything malformed.
  static BpeModel from_json(const JsonNode& model);

  /// Appends the ids of `word` (one piece of pre-tokenized text) to `out`.
  void encode_word(std::string_view word, std::vector<TokenId>& out, BpeScratch& scratch) const;
  /// As above with fresh working memory.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const {
    BpeScratch scratch;
    encode_word(word, out, scratch);
  }

  /// Id of a token of the vocabulary.
  std::optional<TokenId> token_to_id(std::string_view token) const {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? std::nullopt : std::optional<TokenId>(it->second);
  }
  /// Token of an id of the vocabulary; nullptr when the vocabulary has no such id.
  const std::string* id_to_token(TokenId id) const {
    const auto it = tokens_.find(id);
    return it == tokens_.end() ? nullptr : &it->second;
  }
  /// Number of tokens in the vocabulary.
  std::size_t size() const noexcept { return vocab_.size(); }
  /// The options read from the file.
  const BpeOptions& options() const noexcept { return options_; }
  /// The vocabulary, token -> id.
  const Vocab& vocab() const noexcept { return vocab_; }

 private:
  struct Merge {
    std::int32_t rank;
    TokenId merged;
  };
  static std::uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  const Merge* find_merge(TokenId a, TokenId b) const {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void initial_symbols(std::string_view word, BpeScratch& s) const;

  Vocab vocab_;
  std::unordered_map<TokenId, std::string> tokens_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::array<TokenId, 256> byte_ids_{};  // "<0xNN>" ids, -1 where the vocabulary lacks one
  // Ids of the one-character tokens below U+0144 (ASCII and every byte-level stand-in), -1 where
  // there is none: the first step of every word then needs no string hashing.
  std::array<TokenId, 0x144> small_ids_{};
  std::optional<TokenId> unk_id_;
  BpeOptions options_;
};

inline BpeModel BpeModel::from_json(const JsonNode& model) {
  // Files from before component types were written carry a model without "type".
  if (const auto type = model.find("type"); type && type->str() != "BPE") {
    type->fail("model type " + quote(type->str()) + " is not supported (only \"BPE\")");
  }
  BpeModel m;
  BpeOptions& o = m.options_;
  if (auto n = model.find("unk_token")) o.unk_token = n->str();
  o.continuing_subword_prefix = model.str_or("continuing_subword_prefix", "");
  o.end_of_word_suffix = model.str_or("end_of_word_suffix", "");
  o.fuse_unk = model.bool_or("fuse_unk", false);
  o.byte_fallback = model.bool_or("byte_fallback", false);
  o.ignore_merges = model.bool_or("ignore_merges", false);
  if (auto n = model.find("dropout"); n && !n->json().is_number()) n->fail("expected a number or null");

  const JsonNode vocab = model.at("vocab");
  if (!vocab.json().is_object()) vocab.fail("expected an object of token -> id");
  if (static_cast<std::int64_t>(vocab.json().size()) > tokenizer_limits::max_vocab_size) {
    vocab.fail(std::to_string(vocab.json().size()) + " tokens is more than the limit of " +
               std::to_string(tokenizer_limits::max_vocab_size));
  }
  m.vocab_.reserve(vocab.json().size());
  m.tokens_.reserve(vocab.json().size());
  // Nodes (and their path strings) are made only for an entry that fails: the loops below run
  // once per token and per merge, hundreds of thousands of times for a real vocabulary.
  constexpr std::int64_t id_limit = tokenizer_limits::max_vocab_size;
  for (auto it = vocab.json().begin(); it != vocab.json().end(); ++it) {
    const std::string& token = it.key();
    const nlohmann::json& v = it.value();
    const auto entry = [&] { return JsonNode(v, vocab.path() + "[" + quote(token) + "]", model.source()); };
    const bool plain = v.is_number_unsigned() && v.get<std::uint64_t>() < static_cast<std::uint64_t>(id_limit);
    const auto id = static_cast<TokenId>(plain ? v.get<std::int64_t>() : entry().integer(0, id_limit - 1));
    const auto [other, fresh] = m.tokens_.emplace(id, token);
    if (!fresh) entry().fail("id " + std::to_string(id) + " is also the id of " + quote(other->second));
    m.vocab_.emplace(token, id);
  }
  if (o.unk_token) {
    const auto id = m.token_to_id(*o.unk_token);
    if (!id) model.at("unk_token").fail(quote(*o.unk_token) + " is not in the vocabulary");
    m.unk_id_ = *id;
  }
  for (unsigned b = 0; b < 256; ++b) {
    m.byte_ids_[b] = m.token_to_id(byte_fallback_token(static_cast<std::uint8_t>(b))).value_or(-1);
  }
  for (char32_t c = 0; c < m.small_ids_.size(); ++c) {
    std::string one;
    append_utf8(one, c);
    m.small_ids_[c] = m.token_to_id(one).value_or(-1);
  }

  const JsonNode merges = model.at("merges");
  const std::size_t count = merges.size();
  m.merges_.reserve(count);
  std::int32_t rank = 0;
  const std::string& prefix = o.continuing_subword_prefix;
  std::string merged;
  for (std::size_t i = 0; i < count; ++i) {
    const nlohmann::json& merge = merges.json()[i];
    const auto fail = [&](const std::string& message) { merges.at(i).fail(message); };
    std::string_view a, b;
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail("expected two tokens separated by one space, got " + quote(line));
      }
      a = std::string_view(line).substr(0, space);
      b = std::string_view(line).substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      a = merge[0].get_ref<const std::string&>();
      b = merge[1].get_ref<const std::string&>();
    } else {
      fail("expected \"a b\" or [\"a\", \"b\"]");
    }
    const auto ia = m.token_to_id(a), ib = m.token_to_id(b);
    if (!ia || !ib) fail("merge of " + quote(ia ? b : a) + ", which is not in the vocabulary");
    if (!b.starts_with(prefix)) fail(quote(b) + " does not start with the continuing_subword_prefix");
    merged.assign(a);
    merged.append(b.substr(prefix.size()));
    const auto im = m.token_to_id(merged);
    if (!im) fail("the merged token " + quote(merged) + " is not in the vocabulary");
    m.merges_.insert_or_assign(pair_key(*ia, *ib), Merge{rank++, *im});
  }
  return m;
}

inline void BpeModel::initial_symbols(std::string_view word, BpeScratch& s) const {
  const BpeOptions& o = options_;
  const bool decorated = !o.continuing_subword_prefix.empty() || !o.end_of_word_suffix.empty();
  std::optional<TokenId> pending_unk;
  auto flush_unk = [&] {
    if (pending_unk) s.ids.push_back(*pending_unk);
    pending_unk.reset();
  };
  for (std::size_t pos = 0; pos < word.size();) {
    const Unit u = decode_unit(word, pos);
    const std::size_t size = u.size;
    std::string_view piece = word.substr(pos, size);
    if (decorated) {
      s.key.clear();
      if (pos != 0) s.key += o.continuing_subword_prefix;
      s.key += piece;
      if (pos + size == word.size()) s.key += o.end_of_word_suffix;
      piece = s.key;
    }
    pos += size;
    if (!decorated && u.cp < small_ids_.size() && small_ids_[u.cp] >= 0) {
      flush_unk();
      s.ids.push_back(small_ids_[u.cp]);
      continue;
    }
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      flush_unk();
      s.ids.push_back(it->second);
      continue;
    }
    if (o.byte_fallback && std::all_of(piece.begin(), piece.end(),
                                       [&](char c) { return byte_ids_[static_cast<std::uint8_t>(c)] >= 0; })) {
      // An unknown run before these bytes keeps its place (the tokenizers library appends it after them).
      flush_unk();
      for (const char c : piece) s.ids.push_back(byte_ids_[static_cast<std::uint8_t>(c)]);
      continue;
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped
    if (!(pending_unk && o.fuse_unk)) {
      flush_unk();
      pending_unk = unk_id_;
    }
  }
  flush_unk();
}

inline void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out, BpeScratch& s) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  s.ids.clear();
  initial_symbols(word, s);
  const auto n = static_cast<std::int32_t>(s.ids.size());
  if (n == 0) return;
  s.next.resize(static_cast<std::size_t>(n));
  s.prev.resize(static_cast<std::size_t>(n));
  s.heap.clear();
  for (std::int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n) {
      if (const Merge* m = find_merge(s.ids[i], s.ids[i + 1])) s.heap.push_back({m->rank, i});
    }
  }
  const auto later = std::greater<BpeScratch::Candidate>{};
  std::make_heap(s.heap.begin(), s.heap.end(), later);
  constexpr TokenId dead = -1;
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const BpeScratch::Candidate top = s.heap.back();
    s.heap.pop_back();
    const std::int32_t left = top.pos;
    const std::int32_t right = s.next[left];
    if (s.ids[left] == dead || right < 0) continue;
    const Merge* m = find_merge(s.ids[left], s.ids[right]);
    // A pair has exactly one rank, so an equal rank means the pair is still the one queued.
    if (m == nullptr || m->rank != top.rank) continue;
    s.ids[left] = m->merged;
    s.ids[right] = dead;
    const std::int32_t after = s.next[right];
    s.next[left] = after;
    if (after >= 0) s.prev[after] = left;
    if (const std::int32_t before = s.prev[left]; before >= 0) {
      if (const Merge* p = find_merge(s.ids[before], s.ids[left])) {
        s.heap.push_back({p->rank, before});
        std::push_heap(s.heap.begin(), s.heap.end(), later);
      }
    }
    if (after >= 0) {
      if (const Merge* p = find_merge(s.ids[left], s.ids[after])) {
        s.heap.push_back({p->rank, left});
        std::push_heap(s.heap.begin(), s.heap.end(), later);
      }
    }
  }
  for (std::int32_t i = 0; i >= 0; i = s.next[i]) out.push_back(s.ids[i]);
}

}  // namespace accel::tokenize

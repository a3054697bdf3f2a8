// Tokenizer: a model's tokenizer.json, read in full, to encode text to ids and decode ids to text.
//
//   Tokenizer::from_file(path)                              reads and validates tokenizer.json
//   Tokenizer::from_json(text, source_name)                 the same from its text
//   encode(text, add_special_tokens = true) -> ids          ids are TokenId (std::int32_t)
//   decode(ids, skip_special_tokens = false) -> string      bytes, exactly as encoded
//   token_to_id(token) / id_to_token(id) / vocab_size()
//   bos_id() / eos_id() / added_tokens() / is_special(id)
//   model() / normalizer() / pre_tokenizer() / post_processor() / decoder()   the stages, read-only
//
// encode runs the tokenizers library's pipeline: added tokens that match raw text are cut out
// first (leftmost-longest), each run between them is normalized, added tokens that match
// normalized text are cut out of that, the rest is pre-tokenized into words, each word goes
// through BPE, and with add_special_tokens the post-processor's ids go around the result. Text
// is bytes: invalid UTF-8 is encoded too (byte-level models have a token for every byte; byte
// fallback gives "<0xNN>" tokens; otherwise the unk token, or nothing when there is none).
// decode looks ids up (added tokens first), drops special ones when asked, and runs the decoder.
// An added token with normalized = true goes to the decoder as the normalizer rewrites it (the
// form it was matched in: "hi" is "▁hi" under LLaMA-2's normalizer, decoded " hi"), as in the
// tokenizers library. Differences: an id that is no token is a ValueError naming it (the
// tokenizers library skips it silently); a special token is dropped by its id, also when its
// normalized form differs from its content (the tokenizers library then keeps it); added tokens
// keep the ids the file gives them (the tokenizers library gives one the vocabulary holds the
// vocabulary's id and numbers the others in file order after the vocabulary, whatever the file
// says; in files it writes the two agree).
// "truncation" and "padding" are ignored: encode takes one text and returns all of its ids.
// Everything is read-only after construction: one Tokenizer serves any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/tokenize/added_tokens.hpp"
#include "accel/tokenize/bpe.hpp"
#include "accel/tokenize/decoder.hpp"
#include "accel/tokenize/normalizer.hpp"
#include "accel/tokenize/post_processor.hpp"
#include "accel/tokenize/pre_tokenizer.hpp"
#include "accel/tokenize/tokenizer_json.hpp"
#include "accel/tokenize/vocab.hpp"

namespace accel::tokenize {

/// A BPE tokenizer read from a tokenizer.json (GPT-2, LLaMA-2 / Mistral, LLaMA-3 and alike).
class Tokenizer {
 public:
  /// Reads the tokenizer.json at `path`. IOError when it cannot be read; FormatError naming
  /// the file and the key for anything malformed, unsupported or past tokenizer_limits.
  static Tokenizer from_file(const std::string& path) { return from_json(read_tokenizer_file(path), path); }

  /// Reads tokenizer.json text; `source_name` names it in errors.
  static Tokenizer from_json(std::string_view json, const std::string& source_name = "tokenizer.json");

  /// The ids of `text`; with add_special_tokens the post-processor's ids (a BOS) go around them.
  /// ValueError when the text is 2 GiB or longer.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true) const;

  /// The text of `ids`, special tokens left out when skip_special_tokens. ValueError naming the
  /// first id that is no token.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;
  /// decode for a braced list of ids.
  std::string decode(std::initializer_list<TokenId> ids, bool skip_special_tokens = false) const {
    return decode(std::span<const TokenId>(ids.begin(), ids.size()), skip_special_tokens);
  }

  /// The id of a token (an added token's content, or a vocabulary entry as the vocabulary spells
  /// it: "Ġthe", "▁the", "<0x0A>"); nullopt when there is none.
  std::optional<TokenId> token_to_id(std::string_view token) const {
    if (const auto it = added_by_content_.find(token); it != added_by_content_.end()) return added_[it->second].id;
    return model_.token_to_id(token);
  }
  /// The token of an id, as token_to_id spells it; nullopt when the id is no token. (For an added
  /// token with normalized = true the tokenizers library answers its normalized form, the one
  /// decode uses; here it is the token's content, so that token_to_id finds it again.)
  std::optional<std::string> id_to_token(TokenId id) const {
    const std::string* t = find_token(id);
    return t ? std::optional<std::string>(*t) : std::nullopt;
  }
  /// Number of distinct tokens: the vocabulary plus the added tokens that are not in it.
  std::size_t vocab_size() const noexcept { return vocab_size_; }

  /// The beginning-of-sequence id: the first id the post-processor puts before the text, else
  /// the special added token named "<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>" or
  /// "<|endoftext|>" (the first of these present); nullopt when none says so.
  std::optional<TokenId> bos_id() const noexcept { return bos_; }
  /// The end-of-sequence id: the last id the post-processor puts after the text, else the
  /// special added token named "<|end_of_text|>", "</s>", "<eos>" or "<|endoftext|>"; nullopt
  /// when none says so. (Chat models often end turns with another token, e.g. "<|eot_id|>":
  /// look that up with token_to_id.)
  std::optional<TokenId> eos_id() const noexcept { return eos_; }

  /// The added tokens, in file order.
  const std::vector<AddedToken>& added_tokens() const noexcept { return added_; }
  /// True when id is an added token marked special.
  bool is_special(TokenId id) const { return special_ids_.contains(id); }
  /// The BPE model (vocabulary, merges, options).
  const BpeModel& model() const noexcept { return model_; }
  /// The normalizer encode runs on each run of text between added tokens.
  const Normalizer& normalizer() const noexcept { return normalizer_; }
  /// The pre-tokenizer that cuts normalized text into words.
  const PreTokenizer& pre_tokenizer() const noexcept { return pre_tokenizer_; }
  /// The ids encode(text, true) puts around the text.
  const PostProcessor& post_processor() const noexcept { return post_processor_; }
  /// The decoder that turns tokens back into text.
  const Decoder& decoder() const noexcept { return decoder_; }

 private:
  explicit Tokenizer(BpeModel model) : model_(std::move(model)) {}

  const std::string* find_token(TokenId id) const {
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return &added_[it->second].content;
    return model_.id_to_token(id);
  }
  // The string decode hands the decoder: an added token's normalized form.
  const std::string* find_decoded_token(TokenId id) const {
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return &added_decoded_[it->second];
    return model_.id_to_token(id);
  }
  std::optional<TokenId> special_named(std::initializer_list<std::string_view> names) const {
    for (const std::string_view name : names) {
      if (const auto it = added_by_content_.find(name); it != added_by_content_.end() && added_[it->second].special) {
        return added_[it->second].id;
      }
    }
    return std::nullopt;
  }
  void encode_plain(std::string_view text, bool at_start, std::vector<TokenId>& out, std::vector<PreToken>& words,
                    BpeScratch& scratch) const;

  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  Decoder decoder_;
  PostProcessor post_processor_;
  std::vector<AddedToken> added_;
  std::vector<std::string> added_decoded_;  // per added token: what decode passes on
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> added_by_content_;
  std::unordered_map<TokenId, std::size_t> added_by_id_;
  std::unordered_set<TokenId> special_ids_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized = true
  std::size_t vocab_size_ = 0;
  std::optional<TokenId> bos_;
  std::optional<TokenId> eos_;
};

inline Tokenizer Tokenizer::from_json(std::string_view json, const std::string& source_name) {
  const nlohmann::json doc = parse_tokenizer_json(json, source_name);
  const JsonNode root(doc, "", source_name);
  if (!doc.is_object()) root.fail("expected a JSON object");
  Tokenizer t(BpeModel::from_json(root.at("model")));
  t.normalizer_ = Normalizer::from_json(root.find("normalizer"));
  t.pre_tokenizer_ = PreTokenizer::from_json(root.find("pre_tokenizer"));
  t.decoder_ = Decoder::from_json(root.find("decoder"));
  t.post_processor_ = PostProcessor::from_json(root.find("post_processor"));

  t.added_ = read_added_tokens(root);
  t.vocab_size_ = t.model_.size();
  for (std::size_t i = 0; i < t.added_.size(); ++i) {
    const AddedToken& a = t.added_[i];
    t.added_by_content_.emplace(a.content, i);
    t.added_by_id_.emplace(a.id, i);
    if (a.special) t.special_ids_.insert(a.id);
    if (!t.model_.token_to_id(a.content)) ++t.vocab_size_;  // counted as the tokenizers library counts
    // A normalized token is looked for, and decoded, as the normalizer would have rewritten it.
    std::string pattern = a.normalized ? t.normalizer_.apply(a.content) : a.content;
    t.added_decoded_.push_back(pattern);
    if (!pattern.empty()) {
      (a.normalized ? t.normalized_matcher_ : t.raw_matcher_).add(pattern, static_cast<std::int32_t>(i));
    }
  }

  const auto check_known = [&](const std::vector<TokenId>& ids) {
    for (const TokenId id : ids) {
      if (!t.find_token(id)) {
        root.at("post_processor").fail("id " + std::to_string(id) + " is not a token of the vocabulary");
      }
    }
  };
  check_known(t.post_processor_.prefix());
  check_known(t.post_processor_.suffix());
  const auto& prefix = t.post_processor_.prefix();
  const auto& suffix = t.post_processor_.suffix();
  t.bos_ = !prefix.empty() ? std::optional<TokenId>(prefix.front())
                           : t.special_named({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", "<|endoftext|>"});
  t.eos_ = !suffix.empty() ? std::optional<TokenId>(suffix.back())
                           : t.special_named({"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"});
  return t;
}

inline void Tokenizer::encode_plain(std::string_view text, bool at_start, std::vector<TokenId>& out,
                                    std::vector<PreToken>& words, BpeScratch& scratch) const {
  words.clear();
  pre_tokenizer_.apply(text, at_start, words);
  for (const PreToken& w : words) model_.encode_word(w.text, out, scratch);
}

inline std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (text.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw ValueError("Tokenizer::encode: text of " + std::to_string(text.size()) +
                     " bytes; split texts of 2 GiB or more before encoding");
  }
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + post_processor_.prefix().size() + post_processor_.suffix().size() + 1);
  if (add_special_tokens) out.insert(out.end(), post_processor_.prefix().begin(), post_processor_.prefix().end());
  std::vector<PreToken> words;
  BpeScratch scratch;
  const std::vector<TextSegment> whole{{0, text.size(), -1}};
  for (const TextSegment& seg : raw_matcher_.empty() ? whole : raw_matcher_.split(text, added_)) {
    if (seg.is_token()) {
      out.push_back(added_[static_cast<std::size_t>(seg.token)].id);
      continue;
    }
    const std::string_view raw = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized_text;
    std::string_view normalized = raw;
    if (!normalizer_.empty()) normalized = normalized_text = normalizer_.apply(raw);
    const std::vector<TextSegment> all{{0, normalized.size(), -1}};
    for (const TextSegment& sub : normalized_matcher_.empty() ? all : normalized_matcher_.split(normalized, added_)) {
      if (sub.is_token()) {
        out.push_back(added_[static_cast<std::size_t>(sub.token)].id);
      } else {
        const bool at_start = seg.begin == 0 && sub.begin == 0;
        encode_plain(normalized.substr(sub.begin, sub.end - sub.begin), at_start, out, words, scratch);
      }
    }
  }
  if (add_special_tokens) out.insert(out.end(), post_processor_.suffix().begin(), post_processor_.suffix().end());
  return out;
}

inline std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const TokenId id = ids[i];
    const std::string* token = find_decoded_token(id);
    if (!token) {
      throw ValueError("Tokenizer::decode: id " + std::to_string(id) + " (at position " + std::to_string(i) +
                       ") is not a token of this tokenizer (" + std::to_string(vocab_size_) + " tokens)");
    }
    if (skip_special_tokens && special_ids_.contains(id)) continue;
    tokens.push_back(*token);
  }
  return decoder_.apply(std::move(tokens));
}

}  // namespace accel::tokenize

// Post-processors: the special tokens encode(text, add_special_tokens = true) puts around a
// single sequence.
//
//   PostProcessor::from_json(node)     tokenizer.json's "post_processor"
//   prefix() / suffix()                ids before and after the encoded text
//
// TemplateProcessing's "single" template (LLaMA: [<s>, $A]; LLaMA-3: [<|begin_of_text|>, $A]),
// RobertaProcessing and BertProcessing (cls $A sep), ByteLevel (only offsets: no ids) and a
// Sequence of these, where each processor wraps what the ones before it produced. Pair templates
// are read past: encode takes one sequence.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "accel/tokenize/tokenizer_json.hpp"
#include "accel/tokenize/vocab.hpp"

namespace accel::tokenize {

/// The ids a post-processor adds around a single encoded sequence.
class PostProcessor {
 public:
  /// Reads tokenizer.json's "post_processor" (nullopt when absent or null: nothing is added).
  static PostProcessor from_json(const std::optional<JsonNode>& node) {
    PostProcessor p;
    if (node) p.read(*node);
    return p;
  }

  /// Ids put before the text (the BOS of LLaMA-style templates).
  const std::vector<TokenId>& prefix() const noexcept { return prefix_; }
  /// Ids put after the text (the EOS / SEP of templates that end with one).
  const std::vector<TokenId>& suffix() const noexcept { return suffix_; }

 private:
  static TokenId read_id(const JsonNode& node) {
    return static_cast<TokenId>(node.integer(0, tokenizer_limits::max_vocab_size - 1));
  }

  // ["<s>", 0]: the id of a Roberta / Bert cls or sep entry.
  static TokenId token_pair_id(const JsonNode& node) {
    if (node.size() != 2) node.fail("expected [token, id]");
    (void)node.at(std::size_t{0}).str();
    return read_id(node.at(std::size_t{1}));
  }

  void wrap(const std::vector<TokenId>& before, const std::vector<TokenId>& after) {
    prefix_.insert(prefix_.begin(), before.begin(), before.end());
    suffix_.insert(suffix_.end(), after.begin(), after.end());
  }

  void read_template(const JsonNode& node) {
    const JsonNode single = node.at("single");
    const auto specials = node.find("special_tokens");
    std::vector<TokenId> before, after;
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const JsonNode piece = single.at(i);
      if (auto seq = piece.find("Sequence")) {
        const std::string& which = seq->at("id").str();
        if (which != "A") {
          seq->at("id").fail("a single-sequence template can only hold sequence A, not " + quote(which));
        }
        if (seen_sequence) seq->fail("sequence A appears twice in the template");
        seen_sequence = true;
      } else if (auto special = piece.find("SpecialToken")) {
        const std::string& name = special->at("id").str();
        const auto entry = specials ? specials->find(name) : std::nullopt;
        if (!entry) special->at("id").fail("special token " + quote(name) + " is not in the template's special_tokens");
        const JsonNode ids = entry->at("ids");
        for (std::size_t k = 0; k < ids.size(); ++k) (seen_sequence ? after : before).push_back(read_id(ids.at(k)));
      } else {
        piece.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) single.fail("the template has no sequence A");
    wrap(before, after);
  }

  void read(const JsonNode& node) {
    const std::string& type = node.type();
    if (type == "Sequence") {
      const JsonNode list = node.at("processors");
      for (std::size_t i = 0; i < list.size(); ++i) read(list.at(i));
    } else if (type == "TemplateProcessing") {
      read_template(node);
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      wrap({token_pair_id(node.at("cls"))}, {token_pair_id(node.at("sep"))});
    } else if (type != "ByteLevel") {
      node.at("type").fail("post-processor " + quote(type) +
                           " is not supported (supported: Sequence, TemplateProcessing, RobertaProcessing, "
                           "BertProcessing, ByteLevel)");
    }
  }

  std::vector<TokenId> prefix_;
  std::vector<TokenId> suffix_;
};

}  // namespace accel::tokenize

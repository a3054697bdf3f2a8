// Normalizers: rewrites of each plain run of text before it is cut into words.
//
//   NormalizerStep                      one rewrite: Prepend, Replace (String pattern) or Strip
//   Normalizer::from_json(node)         tokenizer.json's "normalizer" (a Sequence is flattened)
//   Normalizer::apply(text) -> string   the rewrites, in order
//   Normalizer::empty()                 true when there is nothing to do
//
// These cover LLaMA-2 / Mistral's Sequence[Prepend("▁"), Replace(" ", "▁")], the normalizer BPE
// tokenizers use. Normalizers that need Unicode data (NFC, NFD, NFKC, NFKD, Lowercase,
// BertNormalizer, ...) and Replace with a Regex pattern are refused with a FormatError naming
// them rather than run approximately.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accel/tokenize/tokenizer_json.hpp"
#include "accel/tokenize/unicode.hpp"

namespace accel::tokenize {

/// One rewrite of a normalizer.
struct NormalizerStep {
  enum class Kind { prepend, replace, strip };
  Kind kind;
  std::string pattern;  ///< prepend: the text put in front; replace: the text replaced
  std::string content;  ///< replace: what replaces it
  bool left = false;    ///< strip: white space removed on the left
  bool right = false;   ///< strip: ... and on the right
};

/// Replaces every occurrence of `pattern` in `text` with `content`, left to right.
inline std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
  if (pattern.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t from = 0;
  for (std::size_t at; (at = text.find(pattern, from)) != std::string_view::npos; from = at + pattern.size()) {
    out.append(text.substr(from, at - from));
    out.append(content);
  }
  out.append(text.substr(from));
  return out;
}

/// The text of a {"String": "..."} pattern; FormatError for {"Regex": "..."} or anything else.
inline std::string string_pattern(const JsonNode& pattern) {
  if (auto s = pattern.find("String")) return s->str();
  if (auto r = pattern.find("Regex")) {
    r->fail("Regex pattern " + quote(r->str()) + " is not supported here (only {\"String\": ...})");
  }
  pattern.fail("expected {\"String\": ...}");
}

/// A sequence of normalizer rewrites.
class Normalizer {
 public:
  /// Reads tokenizer.json's "normalizer" (pass nullopt when it is absent or null).
  static Normalizer from_json(const std::optional<JsonNode>& node) {
    Normalizer n;
    if (node) n.read(*node);
    return n;
  }

  /// True when the normalizer changes nothing.
  bool empty() const noexcept { return steps_.empty(); }
  /// The steps, in order.
  const std::vector<NormalizerStep>& steps() const noexcept { return steps_; }

  /// `text` rewritten by every step in turn. Prepend leaves empty text empty, as in the
  /// tokenizers library, so a run between two added tokens that is empty stays empty.
  std::string apply(std::string_view text) const {
    std::string s(text);
    for (const auto& step : steps_) {
      switch (step.kind) {
        case NormalizerStep::Kind::prepend:
          if (!s.empty()) s.insert(0, step.pattern);
          break;
        case NormalizerStep::Kind::replace: s = replace_all(s, step.pattern, step.content); break;
        case NormalizerStep::Kind::strip: s = strip_spaces(s, step.left, step.right); break;
      }
    }
    return s;
  }

 private:
  static std::string strip_spaces(std::string_view s, bool left, bool right) {
    std::size_t b = 0, e = s.size();
    while (left && b < e) {
      const Unit u = decode_unit(s, b);
      if (!is_space(u.cp)) break;
      b += u.size;
    }
    while (right && e > b) {
      const Unit u = unit_before(s, e);
      if (!is_space(u.cp)) break;
      e -= u.size;
    }
    return std::string(s.substr(b, e - b));
  }

  void read(const JsonNode& node) {
    const std::string& type = node.type();
    if (type == "Sequence") {
      const JsonNode list = node.at("normalizers");
      for (std::size_t i = 0; i < list.size(); ++i) read(list.at(i));
    } else if (type == "Prepend") {
      steps_.push_back({NormalizerStep::Kind::prepend, node.at("prepend").str(), {}});
    } else if (type == "Replace") {
      steps_.push_back({NormalizerStep::Kind::replace, string_pattern(node.at("pattern")), node.at("content").str()});
    } else if (type == "Strip") {
      NormalizerStep step{NormalizerStep::Kind::strip, {}, {}};
      step.left = node.bool_or("strip_left", true);
      step.right = node.bool_or("strip_right", true);
      steps_.push_back(step);
    } else {
      node.at("type").fail("normalizer " + quote(type) +
                           " is not supported (supported: Sequence, Prepend, Replace with a String pattern, Strip)");
    }
  }

  std::vector<NormalizerStep> steps_;
};

}  // namespace accel::tokenize

// Pre-tokenizers: how a plain run of normalized text is cut into the words BPE encodes.
//
//   SplitBehavior                                 what becomes of a match: removed, isolated, merged, ...
//   apply_split_behavior(segments, behavior)      the pieces a Split keeps, as byte ranges
//   PreTokenizerStep                              one step: ByteLevel, Split or Metaspace
//   PreTokenizer::from_json(node)                 tokenizer.json's "pre_tokenizer" (Sequences flattened)
//   PreTokenizer::apply(text, at_start, words)    appends the words of one run of text
//
// ByteLevel: a space in front when add_prefix_space and the piece has none, GPT-2's pattern when
// use_regex, then every byte as its printable stand-in (byte_level.hpp). Split: a Regex pattern
// must be one of split_patterns.hpp (GPT-2's, LLaMA-3's, Qwen2's), a String pattern is matched
// literally; all five behaviors and `invert` are honoured. Metaspace: spaces become the
// replacement ("▁"), which is put in front as prepend_scheme says ("always"; "first": only on the
// run that starts the text; "never"; the legacy add_prefix_space: false means "never"), and with
// `split` each replacement starts a new word. Other pre-tokenizers (Whitespace, Digits,
// BertPreTokenizer, ...) are refused with a FormatError naming them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/tokenize/byte_level.hpp"
#include "accel/tokenize/normalizer.hpp"
#include "accel/tokenize/split_patterns.hpp"
#include "accel/tokenize/tokenizer_json.hpp"

namespace accel::tokenize {

/// What a Split does with the text its pattern matches (tokenizer.json's "behavior").
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// A byte range of a piece and whether the split pattern matched it.
struct MatchSegment {
  std::size_t begin;
  std::size_t end;
  bool match;
};

/// The ranges a split keeps from `segments` (consecutive, covering the text): a match alone
/// (isolated), dropped (removed), glued to the piece before or after it (merged_with_*), or glued
/// to the matches next to it (contiguous), as the tokenizers library defines them.
inline std::vector<std::pair<std::size_t, std::size_t>> apply_split_behavior(const std::vector<MatchSegment>& segments,
                                                                             SplitBehavior behavior) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  out.reserve(segments.size());
  bool previous_match = false;
  auto fold = [&](const MatchSegment& s, bool extend, bool at_front) {
    if (extend && !out.empty()) {
      (at_front ? out.back().first : out.back().second) = at_front ? s.begin : s.end;
    } else {
      out.emplace_back(s.begin, s.end);
    }
    previous_match = s.match;
  };
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const auto& s : segments) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::removed:
      for (const auto& s : segments) {
        if (!s.match) out.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::contiguous:
      for (const auto& s : segments) fold(s, s.match == previous_match, false);
      break;
    case SplitBehavior::merged_with_previous:
      for (const auto& s : segments) fold(s, s.match && !previous_match, false);
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) fold(*it, it->match && !previous_match, true);
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

/// One step of a pre-tokenizer.
struct PreTokenizerStep {
  enum class Kind { byte_level, split, metaspace };
  enum class Prepend { always, first, never };
  Kind kind;
  // byte_level
  bool add_prefix_space = false;
  bool use_regex = true;
  // split
  std::optional<SplitPattern> regex;  ///< a known regex; nullopt: `literal` is the pattern
  std::string literal;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  // metaspace
  std::string replacement;
  Prepend prepend = Prepend::always;
  bool split = true;
};

/// A run of text between pre-tokenizer steps; `at_start` when it begins the encoded text.
struct PreToken {
  std::string text;
  bool at_start;
};

/// A sequence of pre-tokenizer steps.
class PreTokenizer {
 public:
  /// Reads tokenizer.json's "pre_tokenizer" (nullopt when absent or null: the run is one word).
  static PreTokenizer from_json(const std::optional<JsonNode>& node) {
    PreTokenizer p;
    if (node) p.read(*node);
    return p;
  }

  /// The steps, in order.
  const std::vector<PreTokenizerStep>& steps() const noexcept { return steps_; }

  /// Appends the words of `text` to `words`; `at_start` when the text begins the whole input
  /// (Metaspace's "first" scheme prepends only there).
  void apply(std::string_view text, bool at_start, std::vector<PreToken>& words) const {
    if (text.empty()) return;
    std::vector<PreToken> pieces{{std::string(text), at_start}}, next;
    for (const auto& step : steps_) {
      next.clear();
      for (auto& piece : pieces) run(step, std::move(piece), next);
      pieces.swap(next);
    }
    for (auto& p : pieces) words.push_back(std::move(p));
  }

 private:
  static void emit(const PreTokenizerStep& step, std::string_view text, bool at_start, std::vector<PreToken>& out) {
    if (text.empty()) return;
    if (step.kind == PreTokenizerStep::Kind::byte_level) {
      PreToken t{{}, at_start};
      to_byte_level(text, t.text);
      out.push_back(std::move(t));
    } else {
      out.push_back({std::string(text), at_start});
    }
  }

  static void split_ranges(const PreTokenizerStep& step, std::string_view text,
                           const std::vector<MatchSegment>& segments, bool at_start, std::vector<PreToken>& out) {
    for (const auto& [b, e] : apply_split_behavior(segments, step.behavior)) {
      emit(step, text.substr(b, e - b), at_start && b == 0, out);
    }
  }

  static std::vector<MatchSegment> literal_segments(std::string_view text, std::string_view literal, bool invert) {
    std::vector<MatchSegment> segs;
    std::size_t from = 0;
    if (!literal.empty()) {
      for (std::size_t at; (at = text.find(literal, from)) != std::string_view::npos; from = at + literal.size()) {
        if (at > from) segs.push_back({from, at, invert});
        segs.push_back({at, at + literal.size(), !invert});
      }
    }
    if (from < text.size()) segs.push_back({from, text.size(), invert});
    return segs;
  }

  static void run(const PreTokenizerStep& step, PreToken piece, std::vector<PreToken>& out) {
    std::string& s = piece.text;
    switch (step.kind) {
      case PreTokenizerStep::Kind::byte_level: {
        if (step.add_prefix_space && !s.starts_with(' ')) s.insert(0, 1, ' ');
        if (!step.use_regex) return emit(step, s, piece.at_start, out);
        bool first = piece.at_start;
        for (const std::string_view w : split_by_pattern(SplitPattern::gpt2, s)) {
          emit(step, w, std::exchange(first, false), out);
        }
        return;
      }
      case PreTokenizerStep::Kind::split: {
        if (!step.regex) {
          return split_ranges(step, s, literal_segments(s, step.literal, step.invert), piece.at_start, out);
        }
        std::vector<MatchSegment> segs;
        std::size_t pos = 0;
        for (const std::string_view m : split_by_pattern(*step.regex, s)) {
          segs.push_back({pos, pos + m.size(), !step.invert});
          pos += m.size();
        }
        return split_ranges(step, s, segs, piece.at_start, out);
      }
      case PreTokenizerStep::Kind::metaspace: {
        s = replace_all(s, " ", step.replacement);
        const bool prepend = step.prepend == PreTokenizerStep::Prepend::always ||
                             (step.prepend == PreTokenizerStep::Prepend::first && piece.at_start);
        if (prepend && !s.starts_with(step.replacement)) s.insert(0, step.replacement);
        if (!step.split) return emit(step, s, piece.at_start, out);
        PreTokenizerStep merge = step;
        merge.behavior = SplitBehavior::merged_with_next;
        return split_ranges(merge, s, literal_segments(s, step.replacement, false), piece.at_start, out);
      }
    }
  }

  void read(const JsonNode& node) {
    const std::string& type = node.type();
    PreTokenizerStep step{};
    if (type == "Sequence") {
      const JsonNode list = node.at("pretokenizers");
      for (std::size_t i = 0; i < list.size(); ++i) read(list.at(i));
      return;
    }
    if (type == "ByteLevel") {
      step.kind = PreTokenizerStep::Kind::byte_level;
      step.add_prefix_space = node.bool_or("add_prefix_space", true);
      step.use_regex = node.bool_or("use_regex", true);
    } else if (type == "Split") {
      step.kind = PreTokenizerStep::Kind::split;
      const JsonNode pattern = node.at("pattern");
      if (auto r = pattern.find("Regex")) {
        step.regex = split_pattern_from_regex(r->str());
        if (!step.regex) {
          r->fail("Split pattern " + quote(r->str()) +
                  " is not supported (supported: GPT-2's, LLaMA-3's and Qwen2's regexes, or a String pattern)");
        }
      } else {
        step.literal = string_pattern(pattern);
      }
      step.behavior = read_behavior(node.at("behavior"));
      step.invert = node.bool_or("invert", false);
    } else if (type == "Metaspace") {
      step.kind = PreTokenizerStep::Kind::metaspace;
      step.replacement = node.find("replacement") ? node.at("replacement").character() : std::string("\xE2\x96\x81");
      step.prepend = read_prepend_scheme(node);
      step.split = node.bool_or("split", true);
    } else {
      node.at("type").fail("pre-tokenizer " + quote(type) +
                           " is not supported (supported: Sequence, ByteLevel, Split, Metaspace)");
    }
    steps_.push_back(std::move(step));
  }

  static SplitBehavior read_behavior(const JsonNode& node) {
    const std::string& b = node.str();
    if (b == "Removed") return SplitBehavior::removed;
    if (b == "Isolated") return SplitBehavior::isolated;
    if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
    if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
    if (b == "Contiguous") return SplitBehavior::contiguous;
    node.fail("unknown behavior " + quote(b) +
              " (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
  }

  static PreTokenizerStep::Prepend read_prepend_scheme(const JsonNode& node) {
    using P = PreTokenizerStep::Prepend;
    P scheme = P::always;
    if (auto s = node.find("prepend_scheme")) {
      const std::string& v = s->str();
      if (v == "always") scheme = P::always;
      else if (v == "first") scheme = P::first;
      else if (v == "never") scheme = P::never;
      else s->fail("unknown prepend_scheme " + quote(v) + " (expected always, first or never)");
    }
    if (!node.bool_or("add_prefix_space", true)) scheme = P::never;
    return scheme;
  }

  std::vector<PreTokenizerStep> steps_;
};

}  // namespace accel::tokenize

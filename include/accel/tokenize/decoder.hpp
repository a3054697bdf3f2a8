// Decoders: how the tokens of a list of ids become text again.
//
//   DecoderStep                          ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder
//   Decoder::from_json(node)             tokenizer.json's "decoder" (Sequences flattened)
//   Decoder::apply(tokens) -> string     the steps over the token strings, then joined
//
// The steps follow the tokenizers library, token list in, token list out, joined at the end
// (with " " when there is no decoder at all). One difference throughout: the result is bytes,
// not repaired text. Where the tokenizers library turns bytes that are not UTF-8 into U+FFFD
// (ByteLevel, ByteFallback), these are kept as they are, so decode(encode(s)) == s for any
// bytes s, and a caller streaming tokens can join partial characters itself. And the Metaspace
// decoder removes only the one replacement character its pre-tokenizer put in front of the first
// token (the tokenizers library removes every one in that token, losing leading spaces).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accel/tokenize/byte_level.hpp"
#include "accel/tokenize/normalizer.hpp"
#include "accel/tokenize/tokenizer_json.hpp"
#include "accel/tokenize/unicode.hpp"

namespace accel::tokenize {

/// One step of a decoder.
struct DecoderStep {
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace, bpe_suffix };
  Kind kind;
  /// replace: the text replaced; strip: the character; metaspace: the replacement; bpe_suffix: the suffix
  std::string pattern;
  std::string content;    ///< replace: what replaces it
  std::size_t start = 0;  ///< strip: how many leading `pattern` characters at most
  std::size_t stop = 0;   ///< strip: how many trailing ones
  bool prepended = true;  ///< metaspace: whether the pre-tokenizer put one in front of the text
};

/// The byte of a "<0xNN>" token (hex digits of either case), or -1 for any other token.
inline int byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const int hi = digit(token[3]), lo = digit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/// A sequence of decoder steps.
class Decoder {
 public:
  /// Reads tokenizer.json's "decoder" (nullopt when absent or null: tokens joined with spaces).
  static Decoder from_json(const std::optional<JsonNode>& node) {
    Decoder d;
    if (node) {
      d.present_ = true;
      d.read(*node);
    }
    return d;
  }

  /// The steps, in order.
  const std::vector<DecoderStep>& steps() const noexcept { return steps_; }

  /// The text of `tokens`.
  std::string apply(std::vector<std::string> tokens) const {
    if (!present_) return join(tokens, " ");
    for (const auto& step : steps_) run(step, tokens);
    return join(tokens, "");
  }

 private:
  static std::string join(const std::vector<std::string>& tokens, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += sep;
      out += tokens[i];
    }
    return out;
  }

  static void run(const DecoderStep& step, std::vector<std::string>& tokens) {
    using K = DecoderStep::Kind;
    switch (step.kind) {
      case K::byte_level: {
        std::string bytes;
        for (const auto& t : tokens) {
          if (!from_byte_level(t, bytes)) bytes += t;
        }
        tokens.assign(1, std::move(bytes));
        return;
      }
      case K::replace:
        for (auto& t : tokens) t = replace_all(t, step.pattern, step.content);
        return;
      case K::byte_fallback: {
        std::vector<std::string> out;
        std::string bytes;
        bool in_bytes = false;
        for (auto& t : tokens) {
          if (const int b = byte_fallback_value(t); b >= 0) {
            bytes += static_cast<char>(b);
            in_bytes = true;
            continue;
          }
          if (in_bytes) out.push_back(std::move(bytes)), bytes.clear(), in_bytes = false;
          out.push_back(std::move(t));
        }
        if (in_bytes) out.push_back(std::move(bytes));
        tokens = std::move(out);
        return;
      }
      case K::fuse: tokens.assign(1, join(tokens, "")); return;
      case K::strip:
        for (auto& t : tokens) t = strip(t, step);
        return;
      case K::metaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          std::string_view t = tokens[i];
          if (i == 0 && step.prepended && t.starts_with(step.pattern)) t.remove_prefix(step.pattern.size());
          tokens[i] = replace_all(t, step.pattern, " ");
        }
        return;
      case K::bpe_suffix:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_all(tokens[i], step.pattern, i + 1 == tokens.size() ? "" : " ");
        }
        return;
    }
  }

  // Up to step.start copies of the character step.pattern off the front, step.stop off the back.
  static std::string strip(std::string_view t, const DecoderStep& step) {
    const std::string_view c = step.pattern;
    for (std::size_t n = 0; n < step.start && t.starts_with(c); ++n) t.remove_prefix(c.size());
    for (std::size_t n = 0; n < step.stop && t.ends_with(c); ++n) t.remove_suffix(c.size());
    return std::string(t);
  }

  void read(const JsonNode& node) {
    using K = DecoderStep::Kind;
    const std::string& type = node.type();
    DecoderStep step{};
    if (type == "Sequence") {
      const JsonNode list = node.at("decoders");
      for (std::size_t i = 0; i < list.size(); ++i) read(list.at(i));
      return;
    }
    if (type == "ByteLevel") {
      step.kind = K::byte_level;
    } else if (type == "Replace") {
      step.kind = K::replace;
      step.pattern = string_pattern(node.at("pattern"));
      step.content = node.at("content").str();
    } else if (type == "ByteFallback") {
      step.kind = K::byte_fallback;
    } else if (type == "Fuse") {
      step.kind = K::fuse;
    } else if (type == "Strip") {
      step.kind = K::strip;
      step.pattern = node.at("content").character();
      step.start = static_cast<std::size_t>(node.at("start").integer(0, 1 << 20));
      step.stop = static_cast<std::size_t>(node.at("stop").integer(0, 1 << 20));
    } else if (type == "Metaspace") {
      step.kind = K::metaspace;
      step.pattern = node.find("replacement") ? node.at("replacement").character() : std::string("\xE2\x96\x81");
      const std::string scheme = node.str_or("prepend_scheme", "always");
      step.prepended = scheme != "never" && node.bool_or("add_prefix_space", true);
    } else if (type == "BPEDecoder") {
      step.kind = K::bpe_suffix;
      step.pattern = node.str_or("suffix", "</w>");
    } else {
      node.at("type").fail("decoder " + quote(type) +
                           " is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                           "Metaspace, BPEDecoder)");
    }
    steps_.push_back(std::move(step));
  }

  std::vector<DecoderStep> steps_;
  bool present_ = false;
};

}  // namespace accel::tokenize

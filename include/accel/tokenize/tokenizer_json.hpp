// Reading tokenizer.json: a bounded JSON parse, and a cursor that knows where it stands so that
// every FormatError names the file and the key.
//
//   tokenizer_limits                               the bounds a tokenizer.json must keep
//   read_tokenizer_file(path) -> string            the file's bytes (IOError, FormatError if too big)
//   parse_tokenizer_json(text, source) -> json     depth-limited parse; FormatError on bad JSON
//   quote(text)                                    text in quotes, cut at 60 bytes, for messages
//   JsonNode                                       a value with its path ("model.merges[3]") and file
//     find(key) / at(key) / at(i) / size()         children, by key or index
//     str() / boolean() / integer(lo, hi)          typed reads that throw FormatError on a wrong type
//     character() / str_or(key, d) / bool_or(key, d) / type()
//     fail(message)                                throws FormatError("tokenizer.json 'file': path: message")
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/tokenize/unicode.hpp"

namespace accel::tokenize {

/// Bounds on what a tokenizer.json may hold: generous for real tokenizers (the largest have a
/// few hundred thousand tokens, a few MB of JSON, nesting 6 deep), tight enough that a hostile file
/// cannot make the reader allocate without limit or recurse off the stack.
struct tokenizer_limits {
  static constexpr std::size_t max_file_bytes = std::size_t{1} << 30;  ///< 1 GiB of JSON
  static constexpr int max_depth = 64;                                 ///< JSON nesting
  static constexpr std::int64_t max_vocab_size = std::int64_t{1} << 24;  ///< every id is below this
};

/// The bytes of a tokenizer.json file. IOError when it cannot be read, FormatError when it is
/// larger than tokenizer_limits::max_file_bytes.
inline std::string read_tokenizer_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IOError("tokenizer file '" + path + "' is a directory");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IOError("cannot open tokenizer file '" + path + "'");
  const std::streamoff size = in.tellg();
  if (size < 0) throw IOError("cannot read tokenizer file '" + path + "'");
  if (static_cast<std::uint64_t>(size) > tokenizer_limits::max_file_bytes) {
    throw FormatError("tokenizer.json '" + path + "': " + std::to_string(size) + " bytes is more than the " +
                      std::to_string(tokenizer_limits::max_file_bytes) + " bytes a tokenizer file may have");
  }
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) throw IOError("cannot read tokenizer file '" + path + "'");
  return bytes;
}

/// Parses tokenizer.json text; FormatError naming `source` for malformed JSON (invalid UTF-8 in
/// a string included) or nesting deeper than tokenizer_limits::max_depth.
inline nlohmann::json parse_tokenizer_json(std::string_view text, const std::string& source) {
  const std::string where = "tokenizer.json '" + source + "'";
  if (text.size() > tokenizer_limits::max_file_bytes) {
    throw FormatError(where + ": " + std::to_string(text.size()) + " bytes is more than a tokenizer file may have");
  }
  // Linear in the text and bounded in depth (core/json_read.hpp); a repeated key takes its last
  // value, as nlohmann's own parser gives it.
  return parse_json_bounded<nlohmann::json>(text, where, JsonLimits{tokenizer_limits::max_depth});
}

/// Up to 60 bytes of `text`, for messages that quote a token or a pattern.
inline std::string quote(std::string_view text) {
  return "'" + std::string(text.substr(0, 60)) + (text.size() > 60 ? "...'" : "'");
}

/// A JSON value of a tokenizer.json together with its path, for errors that point at the key.
class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string path, const std::string& source)
      : value_(&value), path_(std::move(path)), source_(&source) {}

  const nlohmann::json& json() const noexcept { return *value_; }
  const std::string& path() const noexcept { return path_; }
  const std::string& source() const noexcept { return *source_; }
  bool is_null() const noexcept { return value_->is_null(); }

  /// Throws FormatError naming the file and this node's path.
  [[noreturn]] void fail(const std::string& message) const {
    throw FormatError("tokenizer.json '" + *source_ + "': " + (path_.empty() ? "top level" : path_) + ": " + message);
  }

  /// The member `key` of this object; nullopt when absent or null. FormatError if this is no object.
  std::optional<JsonNode> find(std::string_view key) const {
    if (!value_->is_object()) fail("expected an object, got " + std::string(value_->type_name()));
    const auto it = value_->find(key);
    if (it == value_->end() || it->is_null()) return std::nullopt;
    return JsonNode(*it, child_path(key), *source_);
  }
  /// The member `key`, which must be present and not null.
  JsonNode at(std::string_view key) const {
    if (auto n = find(key)) return *n;
    fail("missing \"" + std::string(key) + "\"");
  }
  /// Element i of this array.
  JsonNode at(std::size_t i) const {
    return JsonNode((*value_)[i], path_ + "[" + std::to_string(i) + "]", *source_);
  }
  /// Number of elements; FormatError unless this is an array.
  std::size_t size() const {
    if (!value_->is_array()) fail("expected an array, got " + std::string(value_->type_name()));
    return value_->size();
  }

  /// The string value; FormatError for any other type.
  const std::string& str() const {
    if (!value_->is_string()) fail("expected a string, got " + std::string(value_->type_name()));
    return value_->get_ref<const std::string&>();
  }
  /// The boolean value.
  bool boolean() const {
    if (!value_->is_boolean()) fail("expected true or false, got " + std::string(value_->type_name()));
    return value_->get<bool>();
  }
  /// The integer value, which must lie in [lo, hi].
  std::int64_t integer(std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                       std::int64_t hi = std::numeric_limits<std::int64_t>::max()) const {
    std::int64_t v = 0;
    if (value_->is_number_unsigned()) {
      const auto u = value_->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(hi)) fail(std::to_string(u) + " is above " + std::to_string(hi));
      v = static_cast<std::int64_t>(u);
    } else if (value_->is_number_integer()) {
      v = value_->get<std::int64_t>();
    } else {
      fail("expected an integer, got " + std::string(value_->type_name()));
    }
    if (v < lo || v > hi) {
      fail(std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v;
  }

  /// The string value, which must be exactly one character (a replacement, a stripped character).
  const std::string& character() const {
    const std::string& s = str();
    const Unit u = s.empty() ? Unit{0, 0} : decode_unit(s, 0);
    if (s.empty() || !u.valid() || u.size != s.size()) fail("expected one character, got " + quote(s));
    return s;
  }
  /// Member `key` as a string; `fallback` when absent or null.
  std::string str_or(std::string_view key, std::string_view fallback) const {
    const auto n = find(key);
    return n ? n->str() : std::string(fallback);
  }
  /// Member `key` as a boolean; `fallback` when absent or null.
  bool bool_or(std::string_view key, bool fallback) const {
    const auto n = find(key);
    return n ? n->boolean() : fallback;
  }
  /// Member "type" of a component object: which normalizer, model, decoder... it is.
  const std::string& type() const { return at("type").str(); }

 private:
  std::string child_path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const nlohmann::json* value_;
  std::string path_;
  const std::string* source_;
};


}  // namespace accel::tokenize

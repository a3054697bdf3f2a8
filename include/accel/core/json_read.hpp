// Parsing untrusted JSON (checkpoint headers and indexes, tokenizer.json) in linear time under
// explicit bounds.
//
//   JsonLimits{max_depth, max_key_bytes, max_members}    what a document may hold
//   JsonDuplicates::reject / keep_last                   what a repeated key in an object means
//   parse_json_bounded<Json>(text, where, limits, dup)   nlohmann::json or ordered_json; FormatError
//                                                        naming `where` on bad JSON or a broken bound
//   read_json_file<Json>(path, limits, max_bytes)        a regular file read whole, then parsed so:
//                                                        configs, specs, query files
//
// Why not nlohmann's own entry points: the callback parser (`parse(text, callback)`, the usual
// way to cap nesting) scans the enclosing object for discarded members every time an object
// closes (nlohmann 3.11, json_sax_dom_callback_parser::end_object), so an object holding n
// objects, as a safetensors header or an offload index does, parses in O(n^2): 40 s for 40k
// tensors. The plain parser has no depth cap, and for `ordered_json` every insert compares the
// new key with all earlier ones (ordered_map::emplace), O(n^2) again. Here a SAX handler builds
// the tree itself: the depth, key length and member count are checked before anything is
// allocated for them, and an insertion-ordered object past a few members gets a hash index of
// its keys, so a document costs O(bytes) (a std::map-backed object adds its log n).
//
// A pre-scan that counts brackets outside strings and then a plain parse would cap depth too, but
// it leaves the ordered_json insert quadratic and cannot bound key lengths or member counts
// until after the tree is built; the SAX handler does all of it in the one pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/limits.hpp"
#include "accel/core/regular_file.hpp"

namespace accel {

/// Bounds on one JSON document. Depth counts containers: `{"a": [1]}` is 2 deep.
struct JsonLimits {
  int max_depth = 64;
  std::size_t max_key_bytes = std::numeric_limits<std::size_t>::max();  ///< longest object key
  std::size_t max_members = std::numeric_limits<std::size_t>::max();    ///< per object or array
};

/// A key that appears twice in one object: an error, or Python's dict semantics (the key keeps
/// its first place and takes its last value), which is what json.load gives Accelerate.
enum class JsonDuplicates { reject, keep_last };

namespace detail {

/// True for nlohmann::ordered_json, whose objects are vectors of (key, value) pairs.
template <class Json>
inline constexpr bool json_is_ordered =
    std::is_base_of_v<std::vector<typename Json::object_t::value_type, typename Json::object_t::allocator_type>,
                      typename Json::object_t>;

/// nlohmann's SAX interface, building the tree under JsonLimits.
template <class Json>
class BoundedJsonBuilder {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedJsonBuilder(Json& root, const std::string& where, const JsonLimits& limits, JsonDuplicates duplicates)
      : root_(root), where_(where), limits_(limits), duplicates_(duplicates) {}

  bool null() { return value(Json(nullptr)); }
  bool boolean(bool v) { return value(Json(v)); }
  bool number_integer(number_integer_t v) { return value(Json(v)); }
  bool number_unsigned(number_unsigned_t v) { return value(Json(v)); }
  bool number_float(number_float_t v, const string_t&) { return value(Json(v)); }
  bool string(string_t& v) { return value(Json(std::move(v))); }
  bool binary(binary_t& v) { return value(Json::binary(std::move(v))); }

  bool start_object(std::size_t) { return open(Json::value_t::object); }
  bool start_array(std::size_t) { return open(Json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    if (k.size() > limits_.max_key_bytes) {
      throw FormatError(where_ + ": a JSON key of " + std::to_string(k.size()) + " bytes is longer than the " +
                        std::to_string(limits_.max_key_bytes) + " bytes a name may have");
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const typename Json::exception& e) {
    throw FormatError(where_ + ": invalid JSON (" + e.what() + ")");
  }

 private:
  struct Frame {
    Json* value;
    // Hash of a key -> its position, built once an insertion-ordered object outgrows a linear
    // scan. Hashes, not keys: the keys stay in the object alone, and a match is confirmed there.
    std::unique_ptr<std::unordered_multimap<std::size_t, std::size_t>> positions;
  };
  static constexpr std::size_t scan_limit = 8;

  bool value(Json&& v) {
    place(std::move(v));
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  bool open(typename Json::value_t kind) {
    if (stack_.size() >= static_cast<std::size_t>(limits_.max_depth)) {
      throw FormatError(where_ + ": JSON nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    stack_.push_back(Frame{place(Json(kind)), nullptr});
    return true;
  }

  void check_room(std::size_t size, const char* kind) const {
    if (size >= limits_.max_members) {
      throw FormatError(where_ + ": a JSON " + kind + " holds more than " + std::to_string(limits_.max_members) +
                        " entries");
    }
  }

  [[noreturn]] void duplicate() const {
    // Cut: the key may be as long as max_key_bytes.
    const std::size_t shown = 120;
    throw FormatError(where_ + ": duplicate key '" + key_.substr(0, shown) + (key_.size() > shown ? "...'" : "'"));
  }

  // Puts `v` where the parser stands (the root, the end of an array, the pending key of an
  // object) and returns where it now lives.
  Json* place(Json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.value->is_array()) {
      auto& a = top.value->template get_ref<typename Json::array_t&>();
      check_room(a.size(), "array");
      a.push_back(std::move(v));
      return &a.back();
    }
    auto& o = top.value->template get_ref<typename Json::object_t&>();
    if constexpr (json_is_ordered<Json>) {
      if (Json* old = find_ordered(top, o)) return assign_duplicate(*old, std::move(v));
      check_room(o.size(), "object");
      if (top.positions) top.positions->emplace(std::hash<string_t>{}(key_), o.size());
      // The vector's own emplace_back: ordered_map::emplace would scan every key again.
      o.emplace_back(std::move(key_), std::move(v));
      return &o.back().second;
    } else {
      if (auto it = o.find(key_); it != o.end()) return assign_duplicate(it->second, std::move(v));
      check_room(o.size(), "object");
      return &o.emplace(std::move(key_), std::move(v)).first->second;
    }
  }

  Json* assign_duplicate(Json& slot, Json&& v) {
    if (duplicates_ == JsonDuplicates::reject) duplicate();
    slot = std::move(v);
    return &slot;
  }

  // The member of `o` named key_, or nullptr.
  Json* find_ordered(Frame& top, typename Json::object_t& o) {
    if (!top.positions && o.size() < scan_limit) {
      for (auto& [k, v] : o) {
        if (k == key_) return &v;
      }
      return nullptr;
    }
    if (!top.positions) {
      top.positions = std::make_unique<std::unordered_multimap<std::size_t, std::size_t>>();
      for (std::size_t i = 0; i < o.size(); ++i) top.positions->emplace(std::hash<string_t>{}(o.begin()[i].first), i);
    }
    for (auto [it, end] = top.positions->equal_range(std::hash<string_t>{}(key_)); it != end; ++it) {
      auto& [k, v] = o.begin()[it->second];
      if (k == key_) return &v;
    }
    return nullptr;
  }

  Json& root_;
  const std::string& where_;
  JsonLimits limits_;
  JsonDuplicates duplicates_;
  std::vector<Frame> stack_;
  string_t key_;
};

}  // namespace detail

/// Parses `text` as one JSON value of type `Json` (nlohmann::json or nlohmann::ordered_json) in
/// time linear in its size. Malformed JSON, nesting past `limits.max_depth`, a key longer than
/// `limits.max_key_bytes`, a container with more than `limits.max_members` entries, or (with
/// JsonDuplicates::reject) a repeated key is a FormatError whose message starts with `where`.
template <class Json = nlohmann::json>
Json parse_json_bounded(std::string_view text, const std::string& where, const JsonLimits& limits,
                        JsonDuplicates duplicates = JsonDuplicates::keep_last) {
  Json root;
  detail::BoundedJsonBuilder<Json> builder(root, where, limits, duplicates);
  Json::sax_parse(text.begin(), text.end(), &builder);
  return root;
}

/// The bounds of any JSON file accel reads whose format sets none tighter: core/limits.hpp's.
inline constexpr JsonLimits file_json_limits{static_cast<int>(limits::max_json_depth), limits::max_json_key_bytes,
                                             limits::max_tensor_count};

/// The JSON document in the file at `path`, read as read_small_file reads it (regular files only,
/// at most `max_bytes`) and parsed by parse_json_bounded with `path` named in every error. The
/// default bounds are those of any JSON accel reads (limits::max_json_depth deep, keys and
/// member counts of core/limits.hpp), so recursion over the result (copies, dumps, the spec
/// builder) stays within a bound the file cannot raise.
template <class Json = nlohmann::json>
Json read_json_file(const std::string& path, const JsonLimits& limits = file_json_limits,
                    std::size_t max_bytes = std::size_t{1} << 28) {
  return parse_json_bounded<Json>(read_small_file(path, max_bytes), path, limits);
}

}  // namespace accel

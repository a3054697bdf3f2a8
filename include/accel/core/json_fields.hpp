// Typed fields of a parsed JSON object, read one way everywhere: config.json, generation and
// quantization configs, and the JSON bitsandbytes stores beside its tensors. One wording for what
// is wrong, and the error type the caller's format calls for (ValueError for a config a user wrote,
// FormatError for a file's contents).
//
//   json_field<T, Error = ValueError>(j, key, where)               T, or nullopt when absent or null
//   json_field_or<T, Error = ValueError>(j, key, fallback, where)  ... or `fallback`
//   required_json_field<T, Error = ValueError>(j, key, where)      present, not null, a T
//   json_kind<T>                                                   "a boolean (true or false)", ...
//
// T is bool, double (any JSON number), std::int64_t (a JSON integer that fits), std::string or
// std::vector<std::string>. Errors read "<where>: '<key>' must be <kind>, got <value>" or
// "<where>: '<key>' is missing (<kind>)"; a value is shown cut to 200 characters, since a file may
// put anything there. `j` not being an object reads as every key absent.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"

namespace accel {

/// What a field of type T must be, as the errors say it.
template <class T>
inline constexpr std::string_view json_kind = [] {
  if constexpr (std::is_same_v<T, bool>) return std::string_view("a boolean (true or false)");
  else if constexpr (std::is_same_v<T, double>) return std::string_view("a number");
  else if constexpr (std::is_same_v<T, std::int64_t>) return std::string_view("an integer");
  else if constexpr (std::is_same_v<T, std::string>) return std::string_view("a string");
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return std::string_view("a list of strings");
}();

namespace detail {

inline std::string json_shown(const nlohmann::json& v) {
  constexpr std::size_t shown = 200;
  std::string s = v.dump();
  if (s.size() > shown) s = s.substr(0, shown) + "...";
  return s;
}

/// `v` as a T, or nullopt when it is not one.
template <class T>
std::optional<T> json_as(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) return v.get<bool>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (v.is_number()) return v.get<double>();
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return std::nullopt;
    }
    if (v.is_number_integer()) return v.get<std::int64_t>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (v.is_string()) return v.get<std::string>();
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>, "json_field: no reading for this type");
    if (!v.is_array()) return std::nullopt;
    T out;
    for (const auto& e : v) {
      if (!e.is_string()) return std::nullopt;
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace detail

/// j[key] as a T; nullopt when `key` is absent or null; Error naming `where` and the key when the
/// value is of another kind.
template <class T, class Error = ValueError>
std::optional<T> json_field(const nlohmann::json& j, std::string_view key, std::string_view where) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(std::string(key));
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (auto v = detail::json_as<T>(*it)) return v;
  throw Error(std::string(where) + ": '" + std::string(key) + "' must be " + std::string(json_kind<T>) + ", got " +
              detail::json_shown(*it));
}

/// j[key] as a T, `fallback` when absent or null (json_field's errors).
template <class T, class Error = ValueError>
T json_field_or(const nlohmann::json& j, std::string_view key, T fallback, std::string_view where) {
  auto v = json_field<T, Error>(j, key, where);
  return v ? std::move(*v) : std::move(fallback);
}

/// j[key] as a T; absent or null is an Error too.
template <class T, class Error = ValueError>
T required_json_field(const nlohmann::json& j, std::string_view key, std::string_view where) {
  auto v = json_field<T, Error>(j, key, where);
  if (!v) throw Error(std::string(where) + ": '" + std::string(key) + "' is missing (" + std::string(json_kind<T>) + ")");
  return std::move(*v);
}

}  // namespace accel

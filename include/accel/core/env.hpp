// Reading environment variables, as Accelerate reads them:
//
//   get_env(key) -> optional<string>                 nullopt when unset
//   str_to_bool(s)                                   y/yes/t/true/on/1, n/no/f/false/off/0 (any case)
//   parse_flag_from_env(key, default = false)        str_to_bool of the value, default when unset
//   get_int_from_env({keys...}, default)             the first value >= 0, parsed as Python's int()
//
// They sit in core because every layer that reads its launcher or its switches needs them (the
// dist layer reads RANK and the debug flag, below utils); utils re-exports them under its own
// namespace with the rest of its environment helpers (utils/environment.hpp).
//
// Differences from Accelerate: str_to_bool returns a bool (Accelerate: 1 / 0 unless
// to_bool=True); get_int_from_env reads an int64, so a value beyond it is a ValueError where
// Python's int is unbounded.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "accel/core/errors.hpp"

namespace accel {

/// The value of `key`, or nullopt when unset.
inline std::optional<std::string> get_env(const std::string& key) {
  const char* v = std::getenv(key.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

/// Accelerate's str_to_bool: y/yes/t/true/on/1 -> true, n/no/f/false/off/0 -> false (any case);
/// anything else is a ValueError.
inline bool str_to_bool(std::string_view value) {
  std::string v(value);
  for (char& c : v) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  for (const char* t : {"y", "yes", "t", "true", "on", "1"}) {
    if (v == t) return true;
  }
  for (const char* f : {"n", "no", "f", "false", "off", "0"}) {
    if (v == f) return false;
  }
  throw ValueError("invalid truth value '" + std::string(value) + "'; expected y/yes/t/true/on/1 or n/no/f/false/off/0");
}

/// The boolean flag `key`, or `default_value` when unset.
inline bool parse_flag_from_env(const std::string& key, bool default_value = false) {
  const auto v = get_env(key);
  return v ? str_to_bool(*v) : default_value;
}

namespace detail {
/// Python's int(text): surrounding whitespace, an optional sign, decimal digits with single
/// underscores between them. ValueError otherwise, or beyond int64.
inline std::int64_t parse_python_int(const std::string& key, std::string_view text) {
  auto bad = [&](const char* why) {
    return ValueError("environment variable " + key + "='" + std::string(text) + "' is not an integer (" + why + ")");
  };
  std::string_view t = text;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
  while (!t.empty() && space(t.front())) t.remove_prefix(1);
  while (!t.empty() && space(t.back())) t.remove_suffix(1);
  std::string digits;
  bool negative = false;
  if (!t.empty() && (t.front() == '+' || t.front() == '-')) {
    negative = t.front() == '-';
    t.remove_prefix(1);
  }
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (c == '_' && i > 0 && i + 1 < t.size() && t[i - 1] != '_' && t[i + 1] >= '0' && t[i + 1] <= '9') {
      continue;
    } else {
      throw bad("unexpected character");
    }
  }
  if (digits.empty()) throw bad("no digits");
  if (negative) digits.insert(digits.begin(), '-');
  std::int64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ec == std::errc::result_out_of_range) throw bad("out of the int64 range");
  return v;
}
}  // namespace detail

/// The first of `keys` that is set to a value >= 0, else `default_value` (negative values are
/// skipped, as Accelerate reads -1 as unset). ValueError for a value that is not an integer.
inline std::int64_t get_int_from_env(std::initializer_list<std::string_view> keys, std::int64_t default_value) {
  for (const std::string_view k : keys) {
    const std::string key(k);
    const auto v = get_env(key);
    if (!v) continue;
    const std::int64_t i = detail::parse_python_int(key, *v);
    if (i >= 0) return i;
  }
  return default_value;
}

}  // namespace accel

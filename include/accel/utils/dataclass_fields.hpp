// Accelerate's dataclass behaviour (utils/dataclasses.py) for C++ aggregates, driven by one field
// table per struct:
//
//   to_json(s)                  ordered JSON object, every field under Accelerate's name (to_dict)
//   to_kwargs(s)                the fields whose value differs from S{} (KwargsHandler.to_kwargs)
//   dataclass_from_json<S>(j)   S from a JSON object: absent keys keep their defaults; then
//                               s.post_init() (Accelerate's __post_init__) and s.validate(), if present
//   parse_dataclass<S>(text)    the same from JSON text
//   repr(s), os << s            Python's dataclass repr: GradScalerKwargs(init_scale=65536.0, ...)
//   json j = s; j.get<S>()      nlohmann's conversions, through the same functions
//
// A struct takes part by naming its fields once:
//
//   static constexpr auto fields() {
//     return kwargs_handler_table("S", field("a", &S::a), field("b", &S::b, {.in_kwargs = false}));
//   }
//
// (dataclass_table for a plain dataclass, which has no to_kwargs). Field types: bool, int, double,
// std::string, an Accelerate enum (its string value), std::chrono::seconds (a timedelta, as whole
// seconds in JSON), std::array<T, N> (a tuple), nlohmann::json (a dict, as JSON object), and
// std::optional of any of them (None / null).
//
// Errors: UnknownFieldError (a KeyError) for a key the struct does not have; FieldTypeError (a
// FormatError) for a value of the wrong JSON type; ValueError, prefixed "S.field: ", for a value
// outside its domain (an unknown enum value), and whatever validate() throws.
#pragma once

#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/utils/enums.hpp"

namespace accel::utils {

/// A JSON object names a field that the dataclass does not have (Python: "unexpected keyword argument").
class UnknownFieldError : public KeyError {
 public:
  UnknownFieldError(std::string dataclass, std::string key, const std::string& valid)
      : KeyError(dataclass + " has no field '" + key + "'; its fields: " + valid),
        dataclass_(std::move(dataclass)),
        key_(std::move(key)) {}
  const std::string& dataclass() const noexcept { return dataclass_; }
  const std::string& key() const noexcept { return key_; }

 private:
  std::string dataclass_;
  std::string key_;
};

/// A JSON value does not have the type that its field needs. expected() is spelled as Python's
/// annotation ("float", "Optional[int]", "Tuple[bool, bool, bool]").
class FieldTypeError : public FormatError {
 public:
  FieldTypeError(std::string dataclass, std::string field, std::string expected, const std::string& got)
      : FormatError(dataclass + "." + field + ": expected " + expected + ", got " + got),
        dataclass_(std::move(dataclass)),
        field_(std::move(field)),
        expected_(std::move(expected)) {}
  const std::string& dataclass() const noexcept { return dataclass_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& expected() const noexcept { return expected_; }

 private:
  std::string dataclass_;
  std::string field_;
  std::string expected_;
};

/// How a field departs from the plain rules.
struct field_flags {
  /// false: written by to_json, left out of to_kwargs, because Accelerate's to_dict drops it (it is
  /// not an argument of the object the kwargs construct).
  bool in_kwargs = true;
  /// true: to_json writes the string value lower-case, as TorchDynamoPlugin.to_dict does for torch.
  bool lower_case = false;
};

/// One field: Accelerate's name and the member that holds it.
template <class S, class T>
struct field_info {
  using value_type = T;
  std::string_view name;
  T S::*member;
  field_flags flags;
};

/// `field("init_scale", &GradScalerKwargs::init_scale)`; flags as `{.in_kwargs = false}`.
template <class S, class T>
constexpr field_info<S, T> field(std::string_view name, T S::*member, field_flags flags = {}) {
  return {name, member, flags};
}

/// A struct's Python name and its fields, in Accelerate's order.
template <bool IsKwargsHandler, class... Fields>
struct dataclass_table_t {
  static constexpr bool is_kwargs_handler = IsKwargsHandler;
  std::string_view name;
  std::tuple<Fields...> fields;
};

/// The table of a plain dataclass (no to_kwargs).
template <class... Fields>
constexpr auto dataclass_table(std::string_view name, Fields... f) {
  return dataclass_table_t<false, Fields...>{name, {f...}};
}

/// The table of one of Accelerate's KwargsHandler subclasses.
template <class... Fields>
constexpr auto kwargs_handler_table(std::string_view name, Fields... f) {
  return dataclass_table_t<true, Fields...>{name, {f...}};
}

/// A struct with a field table (see the header comment).
template <class S>
concept Dataclass = requires {
  { S::fields().name } -> std::convertible_to<std::string_view>;
  S::fields().fields;
};

/// A Dataclass that Accelerate derives from KwargsHandler, so it has to_kwargs.
template <class S>
concept KwargsHandler = Dataclass<S> && decltype(S::fields())::is_kwargs_handler;

namespace detail {

template <class S, class F>
void for_each_field(F&& f) {
  std::apply([&](const auto&... info) { (f(info), ...); }, S::fields().fields);
}

/// Python's repr of a float: shortest round trip, fixed notation for exponents -4..15 (with ".0"
/// when integral), otherwise d.ddde+XX.
inline std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  std::string out;
  if (s.front() == '-') {
    out = "-";
    s.remove_prefix(1);
  }
  const auto e = s.find('e');
  const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits += c;
  }
  const auto n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return out + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    if (n <= exp + 1) return out + digits + std::string(static_cast<std::size_t>(exp + 1 - n), '0') + ".0";
    return out + digits.substr(0, static_cast<std::size_t>(exp + 1)) + "." +
           digits.substr(static_cast<std::size_t>(exp + 1));
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  const int a = std::abs(exp);
  return out + (exp < 0 ? "e-" : "e+") + (a < 10 ? "0" : "") + std::to_string(a);
}

/// Python's repr of a str: single quotes unless the text holds ' and no ".
inline std::string python_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const char quote = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out + quote;
}

/// A JSON value written as the Python literal that Accelerate would hold (dicts, lists, True, None).
template <class Json>
void python_literal(std::string& out, const Json& v) {
  if (v.is_null()) {
    out += "None";
  } else if (v.is_boolean()) {
    out += v.template get<bool>() ? "True" : "False";
  } else if (v.is_number_float()) {
    out += python_float_repr(v.template get<double>());
  } else if (v.is_number()) {
    out += v.dump();
  } else if (v.is_string()) {
    out += python_str_repr(v.template get_ref<const std::string&>());
  } else {
    const bool object = v.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      if (object) out += python_str_repr(it.key()) + ": ";
      python_literal(out, it.value());
    }
    out += object ? '}' : ']';
  }
}

/// Reads, writes and prints one field type. decode returns nullopt for a JSON value of the wrong
/// type; python_type() names the type that was expected.
template <class T>
struct field_codec;

template <>
struct field_codec<bool> {
  static std::string python_type() { return "bool"; }
  template <class Json>
  static std::optional<bool> decode(const Json& v) {
    if (!v.is_boolean()) return std::nullopt;
    return v.template get<bool>();
  }
  static nlohmann::ordered_json encode(bool v) { return v; }
  static void repr(std::string& out, bool v) { out += v ? "True" : "False"; }
};

template <>
struct field_codec<int> {
  static std::string python_type() { return "int"; }
  template <class Json>
  static std::optional<int> decode(const Json& v) {
    if (v.is_number_unsigned()) {
      const auto u = v.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) return std::nullopt;
      return static_cast<int>(u);
    }
    if (!v.is_number_integer()) return std::nullopt;
    const auto i = v.template get<std::int64_t>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) return std::nullopt;
    return static_cast<int>(i);
  }
  static nlohmann::ordered_json encode(int v) { return v; }
  static void repr(std::string& out, int v) { out += std::to_string(v); }
};

template <>
struct field_codec<double> {
  static std::string python_type() { return "float"; }
  template <class Json>
  static std::optional<double> decode(const Json& v) {
    if (!v.is_number()) return std::nullopt;  // Python takes an int where a float is annotated
    return v.template get<double>();
  }
  static nlohmann::ordered_json encode(double v) { return v; }
  static void repr(std::string& out, double v) { out += python_float_repr(v); }
};

template <>
struct field_codec<std::string> {
  static std::string python_type() { return "str"; }
  template <class Json>
  static std::optional<std::string> decode(const Json& v) {
    if (!v.is_string()) return std::nullopt;
    return v.template get<std::string>();
  }
  static nlohmann::ordered_json encode(const std::string& v) { return v; }
  static void repr(std::string& out, const std::string& v) { out += python_str_repr(v); }
};

template <AccelerateEnum E>
struct field_codec<E> {
  static std::string python_type() { return std::string(enum_table<E>::name); }
  template <class Json>
  static std::optional<E> decode(const Json& v) {
    if (!v.is_string()) return std::nullopt;
    return enum_from_string<E>(v.template get_ref<const std::string&>());
  }
  static nlohmann::ordered_json encode(E v) { return std::string(to_string(v)); }
  // Accelerate's enums are str subclasses, so their value prints as a string.
  static void repr(std::string& out, E v) { out += python_str_repr(to_string(v)); }
};

/// A timedelta: whole seconds in JSON, datetime.timedelta(days=.., seconds=..) in repr.
template <>
struct field_codec<std::chrono::seconds> {
  static std::string python_type() { return "timedelta (whole seconds)"; }
  template <class Json>
  static std::optional<std::chrono::seconds> decode(const Json& v) {
    if (!v.is_number_integer()) return std::nullopt;
    if (v.is_number_unsigned() &&
        v.template get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return std::nullopt;
    }
    return std::chrono::seconds(v.template get<std::int64_t>());
  }
  static nlohmann::ordered_json encode(std::chrono::seconds v) { return static_cast<std::int64_t>(v.count()); }
  static void repr(std::string& out, std::chrono::seconds v) {
    // Python normalizes to days (which carry the sign) and 0 <= seconds < 86400.
    constexpr std::int64_t day = 86400;
    const std::int64_t s = v.count();
    const std::int64_t days = s >= 0 ? s / day : -((-s + day - 1) / day);
    const std::int64_t rest = s - days * day;
    out += "datetime.timedelta(";
    if (days == 0 && rest == 0) out += "0";
    if (days != 0) out += "days=" + std::to_string(days);
    if (rest != 0) out += std::string(days != 0 ? ", " : "") + "seconds=" + std::to_string(rest);
    out += ")";
  }
};

/// A fixed-size tuple: a JSON array of exactly N elements.
template <class T, std::size_t N>
struct field_codec<std::array<T, N>> {
  static std::string python_type() {
    std::string s = "Tuple[";
    for (std::size_t i = 0; i < N; ++i) s += (i ? ", " : "") + field_codec<T>::python_type();
    return s + "]";
  }
  template <class Json>
  static std::optional<std::array<T, N>> decode(const Json& v) {
    if (!v.is_array() || v.size() != N) return std::nullopt;
    std::array<T, N> a{};
    for (std::size_t i = 0; i < N; ++i) {
      auto e = field_codec<T>::decode(v[i]);
      if (!e) return std::nullopt;
      a[i] = std::move(*e);
    }
    return a;
  }
  static nlohmann::ordered_json encode(const std::array<T, N>& a) {
    auto j = nlohmann::ordered_json::array();
    for (const auto& e : a) j.push_back(field_codec<T>::encode(e));
    return j;
  }
  static void repr(std::string& out, const std::array<T, N>& a) {
    out += '(';
    for (std::size_t i = 0; i < N; ++i) {
      if (i) out += ", ";
      field_codec<T>::repr(out, a[i]);
    }
    out += N == 1 ? ",)" : ")";
  }
};

/// A Python dict of arbitrary values: a JSON object.
template <>
struct field_codec<nlohmann::json> {
  static std::string python_type() { return "dict"; }
  template <class Json>
  static std::optional<nlohmann::json> decode(const Json& v) {
    if (!v.is_object()) return std::nullopt;
    return nlohmann::json(v);
  }
  static nlohmann::ordered_json encode(const nlohmann::json& v) { return nlohmann::ordered_json(v); }
  static void repr(std::string& out, const nlohmann::json& v) { python_literal(out, v); }
};

template <class T>
struct field_codec<std::optional<T>> {
  static std::string python_type() { return "Optional[" + field_codec<T>::python_type() + "]"; }
  template <class Json>
  static std::optional<std::optional<T>> decode(const Json& v) {
    if (v.is_null()) return std::optional<T>();
    auto inner = field_codec<T>::decode(v);
    if (!inner) return std::nullopt;
    return std::optional<T>(std::move(*inner));
  }
  static nlohmann::ordered_json encode(const std::optional<T>& v) {
    return v ? field_codec<T>::encode(*v) : nlohmann::ordered_json(nullptr);
  }
  static void repr(std::string& out, const std::optional<T>& v) {
    if (v) {
      field_codec<T>::repr(out, *v);
    } else {
      out += "None";
    }
  }
};

template <class S, class T>
nlohmann::ordered_json encode_field(const field_info<S, T>& f, const S& s) {
  auto j = field_codec<T>::encode(s.*f.member);
  if (f.flags.lower_case && j.is_string()) {
    for (char& c : j.template get_ref<std::string&>())
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return j;
}

template <class S, class T, class Json>
T decode_field(const field_info<S, T>& f, const Json& v) {
  const std::string_view name = S::fields().name;
  std::optional<T> value;
  try {
    value = field_codec<T>::decode(v);
  } catch (const ValueError& e) {
    throw ValueError(std::string(name) + "." + std::string(f.name) + ": " + e.what());
  }
  if (!value) {
    std::string got = v.dump();
    if (got.size() > 60) got = got.substr(0, 57) + "...";
    throw FieldTypeError(std::string(name), std::string(f.name), field_codec<T>::python_type(),
                         std::string(v.type_name()) + " " + got);
  }
  return std::move(*value);
}

template <class S>
std::string field_names() {
  std::string s;
  for_each_field<S>([&](const auto& f) { s += (s.empty() ? "" : ", ") + std::string(f.name); });
  return s;
}

}  // namespace detail

/// Every field under Accelerate's name, in its order (KwargsHandler.to_dict; unlike Accelerate's
/// DistributedDataParallelKwargs.to_dict the comm_* fields are kept, so the object reads back whole).
template <Dataclass S>
nlohmann::ordered_json to_json(const S& s) {
  auto j = nlohmann::ordered_json::object();
  detail::for_each_field<S>([&](const auto& f) { j[std::string(f.name)] = detail::encode_field(f, s); });
  return j;
}

/// The fields whose JSON value differs from a default-constructed S, as Accelerate passes them on.
template <KwargsHandler S>
nlohmann::ordered_json to_kwargs(const S& s) {
  const S defaults{};
  auto j = nlohmann::ordered_json::object();
  detail::for_each_field<S>([&](const auto& f) {
    if (!f.flags.in_kwargs) return;
    auto v = detail::encode_field(f, s);
    if (v != detail::encode_field(f, defaults)) j[std::string(f.name)] = std::move(v);
  });
  return j;
}

/// S from a JSON object (nlohmann::json or ordered_json), as Accelerate's S(**j) followed by validate().
template <Dataclass S, class Json>
S dataclass_from_json(const Json& j) {
  const std::string name(S::fields().name);
  if (!j.is_object()) throw FormatError(name + ": expected a JSON object, got " + std::string(j.type_name()));
  S s{};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool found = false;
    detail::for_each_field<S>([&](const auto& f) {
      if (found || f.name != it.key()) return;
      found = true;
      s.*f.member = detail::decode_field(f, it.value());
    });
    if (!found) throw UnknownFieldError(name, it.key(), detail::field_names<S>());
  }
  if constexpr (requires { s.post_init(); }) s.post_init();
  if constexpr (requires { s.validate(); }) s.validate();
  return s;
}

/// S from JSON text; FormatError, naming S, for text that is not JSON.
template <Dataclass S>
S parse_dataclass(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(std::string(S::fields().name) + ": not valid JSON: " + e.what());
  }
  return dataclass_from_json<S>(j);
}

/// Python's dataclass repr: `Name(field=value, ...)` with Python literals (True, None, 'text').
template <Dataclass S>
std::string repr(const S& s) {
  std::string out(S::fields().name);
  out += '(';
  bool first = true;
  detail::for_each_field<S>([&](const auto& f) {
    if (!first) out += ", ";
    first = false;
    out += f.name;
    out += '=';
    detail::field_codec<typename std::remove_cvref_t<decltype(f)>::value_type>::repr(out, s.*f.member);
  });
  return out + ')';
}

template <Dataclass S>
std::ostream& operator<<(std::ostream& os, const S& s) {
  return os << repr(s);
}

/// nlohmann's hooks, found by argument-dependent lookup: `nlohmann::json j = s;`, `j.get<S>()`.
template <class Json, Dataclass S>
void to_json(Json& j, const S& s) {
  j = Json(utils::to_json(s));
}

template <class Json, Dataclass S>
void from_json(const Json& j, S& s) {
  s = dataclass_from_json<S>(j);
}

}  // namespace accel::utils

namespace accel {
using utils::dataclass_from_json, utils::FieldTypeError, utils::parse_dataclass, utils::to_kwargs,
    utils::UnknownFieldError;
}  // namespace accel

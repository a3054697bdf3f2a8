// What every quantization config shares on top of core/json_fields.hpp (quantization_config as
// transformers and Diffusers write it): each names the config class and the key in its ValueError.
//
//   detail::join_quoted(names)                  'a', 'b', 'c' (for messages listing what is allowed)
//   detail::modules_field(j, key, cls)          a list of module names, or nullopt for null / absent
//   detail::modules_json(names)                 its JSON (null for nullopt)
//   detail::has_quant_method(j, name)           j is an object whose "quant_method" is the string name
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/json_fields.hpp"

namespace accel::quant::detail {

inline std::string join_quoted(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
  return s;
}

inline std::optional<std::vector<std::string>> modules_field(const nlohmann::json& j, const char* key, const char* cls) {
  return json_field<std::vector<std::string>>(j, key, cls);
}

inline nlohmann::json modules_json(const std::optional<std::vector<std::string>>& m) {
  return m ? nlohmann::json(*m) : nlohmann::json(nullptr);
}

/// Whether `j` is an object whose "quant_method" is the string `name` (any other value, a number or
/// an object, is a no, never a JSON type error).
inline bool has_quant_method(const nlohmann::json& j, std::string_view name) {
  if (!j.is_object()) return false;
  const auto it = j.find("quant_method");
  return it != j.end() && it->is_string() && it->get_ref<const std::string&>() == name;
}

}  // namespace accel::quant::detail

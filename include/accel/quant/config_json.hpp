// The JSON field readers every quantization config shares (quantization_config as transformers
// and Diffusers write it): each names the config class and the key in its ValueError.
//
//   detail::join_quoted(names)                  'a', 'b', 'c' (for messages listing what is allowed)
//   detail::modules_field(j, key, cls)          a list of module names, or nullopt for null / absent
//   detail::modules_json(names)                 its JSON (null for nullopt)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"

namespace accel::quant::detail {

inline std::string join_quoted(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
  return s;
}

inline std::optional<std::vector<std::string>> modules_field(const nlohmann::json& j, const char* key, const char* cls) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  const auto& v = j.at(key);
  std::vector<std::string> out;
  if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_string()) break;
      out.push_back(e.get<std::string>());
    }
    if (out.size() == v.size()) return out;
  }
  throw ValueError(std::string(cls) + ": " + key + " must be a list of module names or null, got " + v.dump());
}

inline nlohmann::json modules_json(const std::optional<std::vector<std::string>>& m) {
  return m ? nlohmann::json(*m) : nlohmann::json(nullptr);
}

}  // namespace accel::quant::detail

// Diffusers' QuantoConfig: its fields, checks and JSON (the quantizer is quant/quantizers/quanto.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/quant/config/config_json.hpp"
#include "accel/quant/formats/affine_scheme.hpp"

namespace accel::quant {

/// Diffusers' QuantoConfig.
struct QuantoConfig {
  /// "float8", "int8", "int4" or "int2".
  std::string weights_dtype = "int8";
  /// Modules kept in float (nullopt: the output head and tied modules).
  std::optional<std::vector<std::string>> modules_to_not_convert = std::nullopt;

  /// The scheme of weights_dtype; ValueError listing the allowed ones.
  AffineScheme scheme() const {
    if (weights_dtype == "int8") return AffineScheme::quanto_int8;
    if (weights_dtype == "int4") return AffineScheme::quanto_int4;
    if (weights_dtype == "int2") return AffineScheme::quanto_int2;
    if (weights_dtype == "float8") return AffineScheme::quanto_float8;
    throw ValueError("QuantoConfig: weights_dtype '" + weights_dtype + "' is not one of 'float8', 'int8', 'int4', 'int2'");
  }
  void validate() const { (void)scheme(); }

  /// {"quant_method": "quanto", "weights_dtype": "int8", "modules_to_not_convert": null}
  nlohmann::json to_json() const {
    return {{"quant_method", "quanto"},
            {"weights_dtype", weights_dtype},
            {"modules_to_not_convert", detail::modules_json(modules_to_not_convert)}};
  }
  /// Reads to_json's form (and transformers' "weights"); ValueError naming what is wrong.
  static QuantoConfig from_json(const nlohmann::json& j) {
    if (!detail::has_quant_method(j, "quanto")) {
      throw ValueError("QuantoConfig: expected {\"quant_method\": \"quanto\", ...}, got " + j.dump());
    }
    QuantoConfig c;
    for (const char* key : {"weights_dtype", "weights"}) {
      if (auto w = json_field<std::string>(j, key, "QuantoConfig")) {
        c.weights_dtype = std::move(*w);
        break;
      }
    }
    if (j.contains("activations") && !j.at("activations").is_null()) {
      throw ValueError("QuantoConfig: activations " + j.at("activations").dump() +
                       " are not supported (weights only: activations must be null)");
    }
    c.modules_to_not_convert = detail::modules_field(j, "modules_to_not_convert", "QuantoConfig");
    c.validate();
    return c;
  }
};

}  // namespace accel::quant

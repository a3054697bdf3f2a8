// Diffusers' TorchAoConfig: its fields, checks and JSON (the quantizer is quant/quantizers/torchao.hpp).
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

/// Diffusers' TorchAoConfig.
struct TorchAoConfig {
  std::string quant_type = "int8wo";
  /// Modules kept in float (nullopt: the output head and tied modules).
  std::optional<std::vector<std::string>> modules_to_not_convert = std::nullopt;
  /// The quantization function's keyword arguments: {"group_size": N} for int4wo.
  nlohmann::json quant_type_kwargs = nlohmann::json::object();

  /// The scheme of quant_type; ValueError listing the supported names.
  AffineScheme scheme() const {
    if (quant_type == "int8wo" || quant_type == "int8_weight_only") return AffineScheme::torchao_int8_weight_only;
    if (quant_type == "int4wo" || quant_type == "int4_weight_only") return AffineScheme::torchao_int4_weight_only;
    if (quant_type == "int8dq" || quant_type == "int8_dynamic_activation_int8_weight") {
      return AffineScheme::torchao_int8_dynamic_activation_int8_weight;
    }
    if (quant_type == "float8wo" || quant_type == "float8wo_e4m3" || quant_type == "float8_weight_only") {
      return AffineScheme::torchao_float8_weight_only;
    }
    throw ValueError("TorchAoConfig: quant_type '" + quant_type +
                     "' is not supported; supported: int8wo (int8_weight_only), int4wo (int4_weight_only), int8dq "
                     "(int8_dynamic_activation_int8_weight), float8wo (float8wo_e4m3, float8_weight_only)");
  }
  /// Columns per scale for int4wo (group_size, default 128); 0 for the per-channel types.
  std::int64_t group_size() const {
    const AffineScheme s = scheme();
    if (!quant_type_kwargs.is_object()) throw ValueError("TorchAoConfig: quant_type_kwargs must be an object, got " + quant_type_kwargs.dump());
    for (const auto& [k, v] : quant_type_kwargs.items()) {
      if (s != AffineScheme::torchao_int4_weight_only || k != "group_size") {
        throw ValueError("TorchAoConfig: " + quant_type + " takes no keyword argument '" + k +
                         "' (int4wo takes group_size; the others none)");
      }
    }
    if (s != AffineScheme::torchao_int4_weight_only) return 0;
    const auto it = quant_type_kwargs.find("group_size");
    if (it == quant_type_kwargs.end() || it->is_null()) return 128;
    const std::int64_t g = it->is_number_integer() ? it->get<std::int64_t>() : -1;
    if (g != 32 && g != 64 && g != 128 && g != 256) {
      throw ValueError("TorchAoConfig: int4wo group_size must be 32, 64, 128 or 256, got " + it->dump());
    }
    return g;
  }
  void validate() const { (void)group_size(); }

  /// {"quant_method": "torchao", "quant_type": ..., "quant_type_kwargs": {...}, "modules_to_not_convert": ...}
  nlohmann::json to_json() const {
    return {{"quant_method", "torchao"},
            {"quant_type", quant_type},
            {"quant_type_kwargs", quant_type_kwargs},
            {"modules_to_not_convert", detail::modules_json(modules_to_not_convert)}};
  }
  /// Reads to_json's form; ValueError naming what is wrong.
  static TorchAoConfig from_json(const nlohmann::json& j) {
    if (!detail::has_quant_method(j, "torchao")) {
      throw ValueError("TorchAoConfig: expected {\"quant_method\": \"torchao\", ...}, got " + j.dump());
    }
    TorchAoConfig c;
    c.quant_type = required_json_field<std::string>(j, "quant_type", "TorchAoConfig");
    if (j.contains("quant_type_kwargs") && !j.at("quant_type_kwargs").is_null()) c.quant_type_kwargs = j.at("quant_type_kwargs");
    c.modules_to_not_convert = detail::modules_field(j, "modules_to_not_convert", "TorchAoConfig");
    c.validate();
    return c;
  }
};

}  // namespace accel::quant

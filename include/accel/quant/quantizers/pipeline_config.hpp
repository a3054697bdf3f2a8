// Diffusers' PipelineQuantizationConfig: one quantization per named component of a pipeline (a
// set of models loaded together: a text encoder, a transformer, a VAE).
//
//   PipelineQuantizationConfig{.quant_backend = "bitsandbytes_4bit",
//                              .quant_kwargs = {{"bnb_4bit_quant_type", "nf4"}},
//                              .components_to_quantize = {{"transformer", "text_encoder_2"}}}
//   PipelineQuantizationConfig{.quant_mapping = {{"transformer", QuantoConfig{}.to_json()}}}
//   c.validate()                     ValueError listing what is allowed
//   c.config_for(component)          the component's quantization_config JSON, or nullopt
//   c.quantizer_for(component)       its quantizer (quant/quantizers/auto_quantizer.hpp), or nullopt
//
// Either quant_backend (with quant_kwargs, applied to components_to_quantize, or to every component
// when that is nullopt) or quant_mapping (component -> quantization_config) is given, not both.
// quant_backend is one of Diffusers' names: "bitsandbytes_4bit", "bitsandbytes_8bit", "gguf",
// "quanto", "torchao"; quant_kwargs are that config's fields as its JSON spells them.
// Differences from Diffusers: quant_mapping holds quantization_config JSON objects (Diffusers holds
// config instances of Diffusers or transformers: both serialize to this JSON), and a backend's
// kwargs are checked by validate() (Diffusers checks them when the component loads).
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/quant/config/config_json.hpp"
#include "accel/quant/quantizers/auto_quantizer.hpp"

namespace accel::quant {

struct PipelineQuantizationConfig {
  std::optional<std::string> quant_backend = std::nullopt;
  nlohmann::json quant_kwargs = nlohmann::json::object();
  /// The components quant_backend applies to; nullopt: all.
  std::optional<std::vector<std::string>> components_to_quantize = std::nullopt;
  /// component -> its quantization_config JSON (instead of quant_backend).
  std::map<std::string, nlohmann::json> quant_mapping = {};

  static std::vector<std::string> backends() { return {"bitsandbytes_4bit", "bitsandbytes_8bit", "gguf", "quanto", "torchao"}; }

  /// ValueError: both or neither of quant_backend / quant_mapping, an unknown backend, kwargs or a
  /// mapped config the backend refuses.
  void validate() const {
    if (quant_backend && !quant_mapping.empty()) {
      throw ValueError("PipelineQuantizationConfig: give quant_backend (with quant_kwargs) or quant_mapping, not both");
    }
    if (!quant_backend && quant_mapping.empty()) {
      throw ValueError("PipelineQuantizationConfig: give quant_backend (with quant_kwargs) or quant_mapping");
    }
    if (quant_backend) {
      (void)quantizer_from_config(backend_config());
    }
    for (const auto& [component, j] : quant_mapping) {
      try {
        (void)quantizer_from_config(j);
      } catch (const ValueError& e) {
        throw ValueError("PipelineQuantizationConfig: quant_mapping['" + component + "']: " + e.what());
      }
    }
  }

  /// The quantization_config of `component`, or nullopt when it is not quantized.
  std::optional<nlohmann::json> config_for(const std::string& component) const {
    validate();
    if (!quant_backend) {
      const auto it = quant_mapping.find(component);
      if (it == quant_mapping.end()) return std::nullopt;
      return it->second;
    }
    if (components_to_quantize && std::find(components_to_quantize->begin(), components_to_quantize->end(), component) ==
                                      components_to_quantize->end()) {
      return std::nullopt;
    }
    return backend_config();
  }

  /// The quantizer of `component`, or nullopt when it is not quantized.
  std::optional<AnyQuantizer> quantizer_for(const std::string& component) const {
    const auto j = config_for(component);
    if (!j) return std::nullopt;
    return quantizer_from_config(*j);
  }

 private:
  nlohmann::json backend_config() const {
    const auto all = backends();
    if (std::find(all.begin(), all.end(), *quant_backend) == all.end()) {
      throw ValueError("PipelineQuantizationConfig: quant_backend '" + *quant_backend + "' is not one of " +
                       detail::join_quoted(all));
    }
    if (!quant_kwargs.is_object()) {
      throw ValueError("PipelineQuantizationConfig: quant_kwargs must be an object, got " + quant_kwargs.dump());
    }
    nlohmann::json j = quant_kwargs;
    if (quant_backend->starts_with("bitsandbytes")) {
      j["quant_method"] = "bitsandbytes";
      const bool four = *quant_backend == "bitsandbytes_4bit";
      j["load_in_4bit"] = four;
      j["load_in_8bit"] = !four;
    } else {
      j["quant_method"] = *quant_backend;
    }
    return j;
  }
};

}  // namespace accel::quant

// A quantizer from a "quantization_config", whichever backend wrote it: transformers'
// AutoHfQuantizer.from_config and Diffusers' DiffusersAutoQuantizer in one function.
//
//   quantizer_from_config(j)       j["quant_method"]: "bitsandbytes", "gguf", "quanto" or "torchao"
//   quant_methods()                those names
//   count_quantized_layers(model)  layers of the model computing on quantized weights
//
// Each backend's own from_json reads the rest and names what is wrong; an unknown or missing
// quant_method is a ValueError listing the known ones.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/dispatch/quantizer.hpp"
#include "accel/nn/module.hpp"
#include "accel/quant/config/bnb_config.hpp"
#include "accel/quant/config/config_json.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"

namespace accel::quant {

inline std::vector<std::string> quant_methods() { return {"bitsandbytes", "gguf", "quanto", "torchao"}; }

/// The layers of `model` that compute on quantized weights (every backend's layer class).
inline std::size_t count_quantized_layers(const nn::Module& model) {
  std::size_t n = 0;
  for (const auto& [name, m] : model.named_modules()) {
    const auto& c = m->class_name();
    n += c == "Linear4bit" || c == "Linear8bitLt" || c == "GGUFLinear" || c == "AffineQuantizedLinear";
  }
  return n;
}

/// The backend of a quantization_config JSON object (see the header comment).
inline AnyQuantizer quantizer_from_config(const nlohmann::json& j) {
  const auto* method = j.is_object() && j.contains("quant_method") ? &j.at("quant_method") : nullptr;
  const std::string m = method && method->is_string() ? method->get<std::string>() : std::string();
  if (m == "bitsandbytes") return BnbQuantizer(BitsAndBytesConfig::from_json(j));
  if (m == "gguf") return GgufQuantizer(GGUFQuantizationConfig::from_json(j));
  if (m == "quanto") return QuantoQuantizer(QuantoConfig::from_json(j));
  if (m == "torchao") return TorchAoQuantizer(TorchAoConfig::from_json(j));
  throw ValueError("quantization_config: quant_method " + (method ? method->dump() : std::string("is missing")) +
                   (method ? " is not one of " : "; expected one of ") + detail::join_quoted(quant_methods()));
}

}  // namespace accel::quant

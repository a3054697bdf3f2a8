// The Quanto backend: Diffusers' QuantoConfig and QuantoQuantizer (optimum-quanto's weight types).
//
//   QuantoConfig{.weights_dtype = "int4"}              {"quant_method": "quanto", "weights_dtype": "int4", ...}
//   c.validate() / c.to_json() / QuantoConfig::from_json(j)   (quant/quanto_config.hpp)
//   QuantoQuantizer q(config);                         a dispatch::Quantizer (quantize on load)
//
// weights_dtype picks the scheme (quant/affine.hpp): "int8" per output channel, "int4" and "int2"
// per group of 128 with a min (Quanto's MaxOptimizer), "float8" (e4m3fn) per output channel.
// Activations stay float. update_torch_dtype picks float32 when none is given, as Diffusers does.
// Differences from Diffusers: from_json also reads transformers' spelling ("weights", and
// "activations", which must be null: activation quantization needs calibration, not built here);
// the rest is AffineQuantizerBase's (quant/affine_quantizer.hpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/quant/affine_quantizer.hpp"
#include "accel/quant/quanto_config.hpp"

namespace accel::quant {

/// Diffusers' QuantoQuantizer (see the header comment).
class QuantoQuantizer : public AffineQuantizerBase {
 public:
  explicit QuantoQuantizer(QuantoConfig config = {})
      : AffineQuantizerBase("quanto", config.scheme(), 0, config.modules_to_not_convert),
        config_(std::move(config)) {}
  const QuantoConfig& config() const noexcept { return config_; }
  /// float32 when no dtype is given (Diffusers).
  std::optional<DType> update_torch_dtype(std::optional<DType> dtype) { return dtype ? dtype : DType::f32; }

 private:
  QuantoConfig config_;
};

static_assert(dispatch::Quantizer<QuantoQuantizer>);

}  // namespace accel::quant

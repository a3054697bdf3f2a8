// The TorchAO backend: Diffusers' TorchAoConfig and TorchAoQuantizer.
//
//   TorchAoConfig{.quant_type = "int4wo", .quant_type_kwargs = {{"group_size", 64}}}
//   c.validate() / c.to_json() / TorchAoConfig::from_json(j)   (quant/config/torchao_config.hpp)
//   TorchAoQuantizer q(config);                         a dispatch::Quantizer (quantize on load)
//
// quant_type, with Diffusers' short names:
//   "int8wo" / "int8_weight_only"                                  int8 per output channel
//   "int4wo" / "int4_weight_only"  (group_size 32, 64, 128, 256)   4 bits per group with a zero point
//   "int8dq" / "int8_dynamic_activation_int8_weight"               int8 weights, int8 activations per row
//   "float8wo" / "float8wo_e4m3" / "float8_weight_only"            float8_e4m3fn per output channel
// (quant/layers/affine_linear.hpp has the arithmetic). update_torch_dtype picks bfloat16 when none is given.
// Differences from Diffusers: the other TorchAO types (int4dq, uintx, float8dq, fpx, ...) are
// ValueErrors listing these; float8 weights are e4m3 only (float8wo_e5m2 is refused); the rest is
// AffineQuantizerBase's (quant/quantizers/affine_quantizer.hpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/quant/config/torchao_config.hpp"
#include "accel/quant/quantizers/affine_quantizer.hpp"

namespace accel::quant {

/// Diffusers' TorchAoQuantizer (see the header comment).
class TorchAoQuantizer : public AffineQuantizerBase {
 public:
  explicit TorchAoQuantizer(TorchAoConfig config = {})
      : AffineQuantizerBase("torchao", config.scheme(), config.group_size(),
                            config.modules_to_not_convert),
        config_(std::move(config)) {}
  const TorchAoConfig& config() const noexcept { return config_; }
  /// bfloat16 when no dtype is given (Diffusers).
  std::optional<DType> update_torch_dtype(std::optional<DType> dtype) { return dtype ? dtype : DType::bf16; }

 private:
  TorchAoConfig config_;
};

static_assert(dispatch::Quantizer<TorchAoQuantizer>);

}  // namespace accel::quant

// GGUF weights kept quantized: Diffusers' GGUFQuantizationConfig and GGUFQuantizer.
//
//   GGUFQuantizationConfig{.compute_dtype = DType::bf16}     {"quant_method": "gguf", "compute_dtype": ...}
//   GgufQuantizer q(config);                                 a dispatch::Quantizer (pre-quantized)
//   load_pretrained_causal_lm("model.gguf", {.quantizer = q})
//
// preprocess_model swaps, on the meta model, every Linear or Conv1D layer whose weight the GGUF file
// stores in a block type for a GGUFLinear of that type (quant/ggml_linear.hpp), so the planner sizes
// the packed bytes and the loader fills them as stored (rows of LLaMA's q / k reordered, nothing
// dequantized). Plain-typed weights, embeddings, norms and a tied head stay float layers in
// compute_dtype. dequantize() turns every GGUFLinear back into a float Linear.
// Differences from Diffusers: its GGUFLinear dequantizes the whole weight at every call and runs a
// float matmul; here the product runs on the blocks (quant/ggml_dot.hpp). Layers named in
// modules_to_not_convert are loaded dequantized instead.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/dispatch/quantizer.hpp"
#include "accel/io/gguf_model.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/quant/ggml_linear.hpp"

namespace accel::quant {

/// Diffusers' GGUFQuantizationConfig: the dtype layers compute in (weights stay ggml blocks).
struct GGUFQuantizationConfig {
  DType compute_dtype = DType::bf16;

  /// {"quant_method": "gguf", "compute_dtype": "bfloat16"}
  nlohmann::json to_json() const {
    return {{"quant_method", "gguf"}, {"compute_dtype", std::string(dtype_name(compute_dtype))}};
  }
  /// Reads to_json's form; ValueError naming what is wrong.
  static GGUFQuantizationConfig from_json(const nlohmann::json& j) {
    if (!j.is_object() || j.value("quant_method", std::string()) != "gguf") {
      throw ValueError("GGUFQuantizationConfig: expected {\"quant_method\": \"gguf\", ...}, got " + j.dump());
    }
    GGUFQuantizationConfig c;
    if (j.contains("compute_dtype")) {
      const auto d = dtype_from_string(j.at("compute_dtype").get<std::string>());
      if (!is_floating_point(d)) throw ValueError("GGUFQuantizationConfig: compute_dtype must be a float dtype");
      c.compute_dtype = d;
    }
    return c;
  }
};

/// The GGUF backend of dispatch::Quantizer (see the header comment).
class GgufQuantizer : public dispatch::QuantizerDefaults {
 public:
  explicit GgufQuantizer(GGUFQuantizationConfig config = {}, std::vector<std::string> modules_to_not_convert = {})
      : config_(config), skip_(std::move(modules_to_not_convert)) {}

  std::string name() const { return "gguf"; }
  std::vector<std::string> modules_to_not_convert() const { return skip_; }
  bool pre_quantized() const { return true; }
  bool is_serializable() const { return false; }
  const GGUFQuantizationConfig& config() const noexcept { return config_; }
  std::optional<DType> update_torch_dtype(std::optional<DType> dtype) { return dtype ? dtype : config_.compute_dtype; }

  /// Swaps the layers the GGUF file stores in block types; `checkpoint_files` must name one GGUF file.
  void preprocess_model(nn::Module& model, std::span<const std::string> checkpoint_files) {
    if (checkpoint_files.size() != 1) {
      throw ValueError("GgufQuantizer: expected one GGUF file, got " + std::to_string(checkpoint_files.size()) + " files");
    }
    const auto ck = io::GgufCheckpoint::open(checkpoint_files[0]);
    const auto cells = model.state_dict_cells();
    auto meta = nn::init_empty_weights(/*include_buffers=*/false);  // the new layers hold no bytes
    for (const auto& name : ck.keys()) {
      const auto& info = ck.info(name);
      if (io::ggml_type_info(info.type).plain || !name.ends_with(".weight") || info.ne.size() != 2) continue;
      const std::string layer = name.substr(0, name.size() - 7);
      if (dispatch::in_keep_in_fp32_modules(layer, skip_)) continue;
      nn::Module* m = model.find_submodule(layer);
      if (!m || (m->class_name() != "Linear" && m->class_name() != "Conv1D")) continue;
      // A weight shared with another module (a tied head) stays a float parameter.
      std::size_t sharing = 0;
      const auto cell = m->parameter_cell("weight");
      for (const auto& [n, c] : cells) sharing += c == cell ? 1 : 0;
      if (sharing > 1) continue;
      const bool has_bias = m->has_parameter("bias");
      const DType bias_dtype = has_bias ? m->get_parameter("bias").dtype() : config_.compute_dtype;
      auto q = std::make_shared<GgmlLinear>(static_cast<std::int64_t>(info.ne[0]), static_cast<std::int64_t>(info.ne[1]),
                                            info.type, has_bias, bias_dtype);
      const auto dot = layer.rfind('.');
      nn::Module& parent = dot == std::string::npos ? model : model.get_submodule(layer.substr(0, dot));
      parent.replace_module(dot == std::string::npos ? layer : layer.substr(dot + 1), q);
      ++swapped_;
    }
  }

  /// Layers swapped by the last preprocess_model.
  std::size_t swapped() const noexcept { return swapped_; }

  /// Every GGUFLinear back to a float Linear in compute_dtype (weights dequantized).
  void dequantize(nn::Module& model) {
    for (const auto& [name, m] : model.named_modules()) {
      auto* q = dynamic_cast<GgmlLinear*>(m);
      if (!q) continue;
      const Tensor b = q->bias();
      auto lin = std::make_shared<nn::Linear>(q->in_features(), q->out_features(), b.defined(), config_.compute_dtype);
      lin->get_parameter("weight");  // the cells exist; fill them
      lin->parameter_cell("weight")->data = q->dequantized_weight().to(config_.compute_dtype);
      if (b.defined()) lin->parameter_cell("bias")->data = b.to(Device::cpu(), config_.compute_dtype);
      const auto dot = name.rfind('.');
      nn::Module& parent = dot == std::string::npos ? model : model.get_submodule(name.substr(0, dot));
      parent.replace_module(dot == std::string::npos ? name : name.substr(dot + 1), lin);
    }
  }

 private:
  GGUFQuantizationConfig config_;
  std::vector<std::string> skip_;
  std::size_t swapped_ = 0;
};

static_assert(dispatch::Quantizer<GgufQuantizer>);

}  // namespace accel::quant

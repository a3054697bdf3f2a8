// GGUF weights kept quantized: Diffusers' GGUFQuantizationConfig and GGUFQuantizer.
//
//   GGUFQuantizationConfig{.compute_dtype = DType::bf16}     {"quant_method": "gguf", "compute_dtype": ...}
//   GgufQuantizer q(config);                                 a dispatch::Quantizer (pre-quantized)
//   load_pretrained_causal_lm("model.gguf", {.quantizer = q})
//   GGUFQuantizationConfig{.quant_type = GgmlType::q4_k}     a float checkpoint quantized on load
//
// preprocess_model swaps, on the meta model, every Linear or Conv1D layer whose weight the GGUF file
// stores in a block type for a GGUFLinear of that type (quant/layers/ggml_linear.hpp), so the planner sizes
// the packed bytes and the loader fills them as stored (rows of LLaMA's q / k reordered, nothing
// dequantized). Plain-typed weights, embeddings, norms and a tied head stay float layers in
// compute_dtype. dequantize() turns every GGUFLinear back into a float Linear.
// With quant_type set, the checkpoint holds float weights and each one is quantized as it streams in
// (quant/formats/ggml_quantize.hpp: ggml's reference quantizers, llama-quantize's bytes): every Linear /
// Conv1D outside the skip list (modules_to_not_convert, else get_keys_to_not_convert: the output head
// and tied modules) whose in_features fill whole blocks becomes a GGUFLinear of that type; the
// planner sizes the blocks, and the CPU holds the packed bytes plus one float weight at a time.
// Differences from Diffusers: its GGUFLinear dequantizes the whole weight at every call and runs a
// float matmul; here the product runs on the blocks (quant/kernels/ggml_dot.hpp). Layers named in
// modules_to_not_convert are loaded dequantized instead. quant_type (quantize on load) is this
// library's: Diffusers reads GGUF files only.
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
#include "accel/quant/config/config_json.hpp"
#include "accel/quant/formats/ggml_quantize.hpp"
#include "accel/quant/layers/ggml_linear.hpp"
#include "accel/quant/quantizers/layer_swap.hpp"

namespace accel::quant {

/// Diffusers' GGUFQuantizationConfig: the dtype layers compute in (weights stay ggml blocks).
struct GGUFQuantizationConfig {
  DType compute_dtype = DType::bf16;
  /// Quantize a float checkpoint on load to this block type (one quant::can_quantize_to accepts:
  /// Q8_0, Q4_0, Q4_K, Q6_K, IQ4_XS, ...); nullopt: the
  /// checkpoint is a GGUF file, read as stored.
  std::optional<GgmlType> quant_type = std::nullopt;

  /// {"quant_method": "gguf", "compute_dtype": "bfloat16"[, "quant_type": "Q4_K"]}
  nlohmann::json to_json() const {
    nlohmann::json j = {{"quant_method", "gguf"}, {"compute_dtype", std::string(dtype_name(compute_dtype))}};
    if (quant_type) j["quant_type"] = std::string(io::ggml_type_name(*quant_type));
    return j;
  }
  /// ValueError when quant_type has no quantizer here.
  void validate() const {
    if (quant_type && !can_quantize_to(*quant_type)) {
      throw ValueError("GGUFQuantizationConfig: quant_type " + std::string(io::ggml_type_name(*quant_type)) +
                       " cannot be quantized to here; allowed: " + quantizable_type_names());
    }
  }
  /// Reads to_json's form; ValueError naming what is wrong.
  static GGUFQuantizationConfig from_json(const nlohmann::json& j) {
    if (!detail::has_quant_method(j, "gguf")) {
      throw ValueError("GGUFQuantizationConfig: expected {\"quant_method\": \"gguf\", ...}, got " + j.dump());
    }
    GGUFQuantizationConfig c;
    if (j.contains("compute_dtype")) {
      const auto d = dtype_from_string(j.at("compute_dtype").get<std::string>());
      if (!is_floating_point(d)) throw ValueError("GGUFQuantizationConfig: compute_dtype must be a float dtype");
      c.compute_dtype = d;
    }
    if (j.contains("quant_type") && !j.at("quant_type").is_null()) {
      const auto& t = j.at("quant_type");
      const auto type = t.is_string() ? io::ggml_type_from_string(t.get<std::string>()) : std::nullopt;
      if (!type) throw ValueError("GGUFQuantizationConfig: quant_type must name a ggml type (" + quantizable_type_names() + "), got " + t.dump());
      c.quant_type = *type;
    }
    c.validate();
    return c;
  }
};

/// The GGUF backend of dispatch::Quantizer (see the header comment).
class GgufQuantizer : public dispatch::QuantizerDefaults {
 public:
  explicit GgufQuantizer(GGUFQuantizationConfig config = {}, std::vector<std::string> modules_to_not_convert = {})
      : config_(config), skip_(std::move(modules_to_not_convert)) {
    config_.validate();
  }

  std::string name() const { return "gguf"; }
  std::vector<std::string> modules_to_not_convert() const { return skip_; }
  bool pre_quantized() const { return !config_.quant_type; }
  bool is_serializable() const { return false; }
  const GGUFQuantizationConfig& config() const noexcept { return config_; }
  std::optional<DType> update_torch_dtype(std::optional<DType> dtype) { return dtype ? dtype : config_.compute_dtype; }

  /// Swaps the layers the GGUF file stores in block types; `checkpoint_files` must name one GGUF file.
  /// With quant_type: the float layers to quantize on load (see the header comment).
  void preprocess_model(nn::Module& model, std::span<const std::string> checkpoint_files) {
    if (config_.quant_type) {
      if (skip_.empty()) skip_ = get_keys_to_not_convert(model);
      const GgmlType type = *config_.quant_type;
      const std::size_t block = io::ggml_type_info(type).block_size;
      swapped_ = on_load_.swap(model, skip_, [&](const std::string&, const FloatLinear& f) -> std::shared_ptr<nn::Module> {
        if (static_cast<std::size_t>(f.in) % block != 0) return nullptr;  // llama.cpp keeps such rows float too
        return std::make_shared<GgmlLinear>(f.in, f.out, type, f.has_bias, f.bias_dtype);
      });
      return;
    }
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
      if (weight_is_shared(cells, *m)) continue;  // a tied head stays a float parameter
      const bool has_bias = m->has_parameter("bias");
      const DType bias_dtype = has_bias ? m->get_parameter("bias").dtype() : config_.compute_dtype;
      auto q = std::make_shared<GgmlLinear>(static_cast<std::int64_t>(info.ne[0]), static_cast<std::int64_t>(info.ne[1]),
                                            info.type, has_bias, bias_dtype);
      replace_layer(model, layer, q);
      ++swapped_;
    }
  }

  /// With quant_type: a float weight of a swapped layer.
  bool check_if_quantized_param(const nn::Module&, const Tensor&, const std::string& name) {
    return config_.quant_type && on_load_.weight_of(name) != nullptr;
  }
  /// The float weight has the layer's element count (its exact shape is checked when quantized).
  bool check_quantized_param_shape(const std::string& name, const Tensor&, const Tensor& loaded) {
    const FloatLinear* f = on_load_.weight_of(name);
    return f && loaded.numel() == f->in * f->out;
  }
  /// Quantizes the float weight row by row (on the CPU) into the layer's blocks on `device`.
  void create_quantized_param(nn::Module& model, const Tensor& value, const std::string& name, Device device) {
    const FloatLinear* f = on_load_.weight_of(name);
    if (!f) throw ValueError("GgufQuantizer: '" + name + "' is not the weight of a layer quantized on load");
    const GgmlType type = *config_.quant_type;
    const Tensor w = SwappedLayers::out_in_f32(name, value, *f);
    Tensor packed = Tensor::empty(gguf_linear_weight_shape(type, f->in, f->out), DType::u8, Device::cpu());
    const auto* x = static_cast<const float*>(w.data_ptr());
    auto* out = static_cast<std::byte*>(packed.data_ptr());
    const std::size_t in = static_cast<std::size_t>(f->in), row_bytes = static_cast<std::size_t>(packed.size(1));
    parallel_for(static_cast<std::size_t>(f->out), 4, [&](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r) quantize_rows(type, x + r * in, out + r * row_bytes, in);
    });
    model.parameter_cell(name)->data = device.is_meta() ? packed.to_meta() : packed.to(device);
  }

  /// After loading: the GGUF layers whose weights stay in the mapped file on the CPU are repacked
  /// for this CPU's kernels where it has them (GgmlLinear::repack_for_cpu; Q4_0 and Q8_0 on x86).
  void postprocess_model(nn::Module& model) {
    for (const auto& [name, m] : model.named_modules()) {
      if (auto* q = dynamic_cast<GgmlLinear*>(m)) q->repack_for_cpu();
    }
  }

  /// Layers swapped by the last preprocess_model.
  std::size_t swapped() const noexcept { return swapped_; }

  /// Every GGUFLinear back to a float layer in compute_dtype (weights dequantized); a layer
  /// quantized on load from a Conv1D becomes a Conv1D again.
  void dequantize(nn::Module& model) {
    for (const auto& [name, m] : model.named_modules()) {
      auto* q = dynamic_cast<GgmlLinear*>(m);
      if (!q) continue;
      const Tensor b = q->bias();
      const auto it = on_load_.layers().find(name);
      restore_float_layer(model, name, q->dequantized_weight().to(config_.compute_dtype),
                          b.defined() ? b.to(Device::cpu(), config_.compute_dtype) : Tensor(),
                          it != on_load_.layers().end() && it->second.conv1d);
    }
  }

 private:
  GGUFQuantizationConfig config_;
  std::vector<std::string> skip_;
  std::size_t swapped_ = 0;
  SwappedLayers on_load_;
};

static_assert(dispatch::Quantizer<GgufQuantizer>);

}  // namespace accel::quant

// The Quanto backend: Diffusers' QuantoConfig and QuantoQuantizer (optimum-quanto's weight types),
// quantizing on load and loading and saving optimum-quanto's serialized layers.
//
//   QuantoConfig{.weights_dtype = "int4"}              {"quant_method": "quanto", "weights_dtype": "int4", ...}
//   c.validate() / c.to_json() / QuantoConfig::from_json(j)   (quant/config/quanto_config.hpp)
//   QuantoQuantizer q(config);                         a dispatch::Quantizer
//   QuantoQuantizer::from_model_config(config_json)    a saved folder's quantization_config
//   save_quanto_model(model, config_json, out_dir, dtype)      model.safetensors + config.json
//
// weights_dtype picks the scheme (quant/layers/affine_linear.hpp): "int8" per output channel, "int4" and "int2"
// per group with a min (Quanto's MaxOptimizer: groups of 128, or 96, 64, 32 where 128 does not
// divide the inputs, one per row for 128 inputs or fewer; quanto_group_size), "float8" (e4m3fn)
// per output channel. Scales and codes are computed in the layer's float dtype, each step rounded
// to it as torch rounds Quanto's arithmetic, so a saved layer holds Quanto's bytes for the same
// weights. Activations stay float. update_torch_dtype picks float32 when none is given, as
// Diffusers does.
// A checkpoint holding optimum-quanto's tensors ("<m>.weight._data", "<m>.weight._scale", ...;
// quant/formats/quanto_format.hpp) is loaded as stored: preprocess_model swaps the layers it holds them for
// (not the config's skip list), and the loader hands their tensors to create_quantized_param,
// which fills a layer once it has them all, on its weight's placement (disk included).
// save_quanto_model writes that form, as Diffusers' save_pretrained of a Quanto model does.
// Differences from Diffusers: from_json also reads transformers' spelling ("weights", and
// "activations", which must be null: activation quantization needs calibration, not built here);
// a GPT-2 Conv1D is quantized and saved as an [out, in] Quanto linear; the rest is
// AffineQuantizerBase's (quant/quantizers/affine_quantizer.hpp).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/quant/config/quanto_config.hpp"
#include "accel/quant/formats/quanto_format.hpp"
#include "accel/quant/quantizers/affine_quantizer.hpp"
#include "accel/quant/quantizers/quantized_folder.hpp"

namespace accel::quant {

/// Diffusers' QuantoQuantizer (see the header comment).
class QuantoQuantizer : public AffineQuantizerBase {
 public:
  explicit QuantoQuantizer(QuantoConfig config = {})
      : AffineQuantizerBase("quanto", config.scheme(), 0, config.modules_to_not_convert), config_(std::move(config)) {
    group_of_ = [s = scheme()](std::int64_t in) { return quanto_group_size(s, in); };
    compute_in_layer_dtype_ = true;
  }
  /// The quantizer of a saved folder: its config.json's "quantization_config".
  static QuantoQuantizer from_model_config(const nlohmann::json& config) {
    if (!config.is_object() || !config.contains("quantization_config")) {
      throw ValueError("QuantoQuantizer: the model config has no \"quantization_config\"");
    }
    return QuantoQuantizer(QuantoConfig::from_json(config.at("quantization_config")));
  }

  const QuantoConfig& config() const noexcept { return config_; }
  bool is_serializable() const { return true; }
  /// True after preprocess_model met optimum-quanto's tensors in the checkpoint.
  bool pre_quantized() const { return !stored_.empty(); }
  /// float32 when no dtype is given (Diffusers).
  std::optional<DType> update_torch_dtype(std::optional<DType> dtype) { return dtype ? dtype : DType::f32; }

  /// Swaps layers on the meta model: those the checkpoint holds Quanto tensors for, else every
  /// float layer outside the skip list (quantized on load).
  void preprocess_model(nn::Module& model, std::span<const std::string> checkpoint_files) {
    stored_.clear();
    parts_.clear();
    filled_.clear();
    for (const auto& file : checkpoint_files) {
      const auto format = io::detect_checkpoint_format(file);
      if (format != io::CheckpointFormat::safetensors && format != io::CheckpointFormat::torch_bin) continue;
      for (const auto& [name, t] : io::load_state_dict(file)) {
        if (name.ends_with(".weight._scale")) stored_.emplace(name.substr(0, name.size() - 14), file);
      }
    }
    if (stored_.empty()) return AffineQuantizerBase::preprocess_model(model, checkpoint_files);
    for (const auto& [layer, file] : stored_) {
      const nn::Module* m = model.find_submodule(layer);
      if (m && !is_float_linear(*m)) {
        throw FormatError("'" + file + "': the checkpoint stores Quanto tensors for '" + layer + "', which is a " +
                          m->class_name() + " here, not a Linear or Conv1D");
      }
    }
    swap_layers(model, {}, [&](const std::string& path) { return stored_.count(path) > 0; });
  }

  bool check_if_quantized_param(const nn::Module& model, const Tensor& value, const std::string& name) {
    if (!pre_quantized()) return AffineQuantizerBase::check_if_quantized_param(model, value, name);
    const std::string_view suffix = quanto_tensor_suffix(name);
    return !suffix.empty() && layers().layers().count(name.substr(0, name.size() - suffix.size())) > 0;
  }

  /// A float weight is quantized; a stored layer's tensors are kept until it has them all, then
  /// decoded (quanto_weight) and set on `device`.
  void create_quantized_param(nn::Module& model, const Tensor& value, const std::string& name, Device device) {
    if (!pre_quantized()) return AffineQuantizerBase::create_quantized_param(model, value, name, device);
    const std::string suffix(quanto_tensor_suffix(name));
    const std::string layer = name.substr(0, name.size() - suffix.size());
    if (suffix == ".input_scale" || suffix == ".output_scale") {
      if (value.numel() != 1) {
        throw FormatError(where(layer) + name + ": is " + value.shape().str() + ", expected a scalar");
      }
      return;  // activations are not quantized: the scales are ones, and unused
    }
    auto& parts = parts_[layer];
    parts.insert_or_assign(suffix, value);
    if (!missing_part(parts).empty()) return;
    const FloatLinear& f = layers().layers().at(layer);
    try {
      auto& q = dynamic_cast<AffineLinear&>(model.get_submodule(layer));
      q.set_quantized_weight(quanto_weight(layer, scheme(), f.in, f.out, parts), device);
    } catch (const FormatError& e) {
      throw FormatError(where(layer) + e.what());
    }
    parts_.erase(layer);
    filled_.insert(layer);
  }

  /// The layer's own cells (codes, scales, mins) of a stored layer are not missing once its Quanto
  /// tensors filled it; a stored layer still lacking some of them is a FormatError naming them.
  std::vector<std::string> update_missing_keys(const nn::Module& model, std::vector<std::string> missing,
                                               const std::string& prefix) {
    if (!pre_quantized()) return AffineQuantizerBase::update_missing_keys(model, std::move(missing), prefix);
    for (const auto& [layer, parts] : parts_) {
      const std::string s = missing_part(parts);
      throw FormatError(where(layer) + layer + s + ": missing (the Quanto weight of '" + layer + "')");
    }
    std::erase_if(missing, [&](const std::string& full) {
      const std::string n = full.starts_with(prefix) ? full.substr(prefix.size()) : full;
      for (const char* side : {".weight", ".weight_scale", ".weight_min"}) {
        if (n.ends_with(side) && filled_.count(n.substr(0, n.size() - std::string_view(side).size()))) return true;
      }
      return false;
    });
    return missing;
  }

 private:
  /// The first tensor a stored layer of this scheme needs that `parts` lacks; empty when complete.
  std::string missing_part(const std::map<std::string, Tensor, std::less<>>& parts) const {
    const bool bytes = affine_scheme_info(scheme()).bits == 8;
    for (const char* s : {".weight._scale", bytes ? ".weight._data" : ".weight._data._data"}) {
      if (!parts.count(s)) return s;
    }
    return bytes || parts.count(".weight._shift") ? std::string() : std::string(".weight._shift");
  }

  std::string where(const std::string& layer) const {
    const auto it = stored_.find(layer);
    return it == stored_.end() ? std::string() : "loading '" + it->second + "': ";
  }

  QuantoConfig config_;
  std::map<std::string, std::string> stored_;  // layer -> the file holding its Quanto tensors
  std::map<std::string, std::map<std::string, Tensor, std::less<>>> parts_;  // layer -> tensors met so far
  std::set<std::string> filled_;
};

static_assert(dispatch::Quantizer<QuantoQuantizer>);

/// Writes a Quanto-quantized model as Diffusers saves one: `out_dir/model.safetensors` holds every
/// state-dict tensor (a tied weight once), each Quanto AffineLinear as optimum-quanto's tensors
/// (quanto_tensors, scales in `dtype`, the dtype the float layers were built in) in place of its
/// codes and scales; `out_dir/config.json` is `config` with "quantization_config" set to the
/// layers' scheme and `modules_to_not_convert` (the float Linear layers, or null when none). Both
/// files are written atomically. ValueError for a weight on meta (offloaded or never loaded), a
/// model without Quanto layers, or layers of two schemes.
inline void save_quanto_model(const nn::Module& model, const nlohmann::json& config, const std::filesystem::path& out_dir,
                              DType dtype) {
  std::map<std::string, const AffineLinear*> quantized;
  std::vector<std::string> kept;
  std::optional<AffineScheme> scheme;
  for (const auto& [path, m] : model.named_modules()) {
    if (const auto* q = dynamic_cast<const AffineLinear*>(m)) {
      if (!detail::is_quanto_scheme(q->scheme()) || (scheme && *scheme != q->scheme())) {
        throw ValueError("save_quanto_model: '" + path + "' is a " + std::string(affine_scheme_info(q->scheme()).name) +
                         " layer" + (scheme ? " beside " + std::string(affine_scheme_info(*scheme).name) + " ones" : "") +
                         "; a Quanto model holds one Quanto scheme");
      }
      scheme = q->scheme();
      quantized.emplace(path, q);
    } else if (!path.empty() && is_float_linear(*m)) {
      kept.push_back(path);
    }
  }
  if (!scheme) throw ValueError("save_quanto_model: the model has no Quanto layer");
  QuantoConfig qc;
  qc.weights_dtype = std::string(affine_scheme_info(*scheme).name).substr(std::string_view("quanto ").size());
  if (!kept.empty()) qc.modules_to_not_convert = kept;
  save_quantized_folder("save_quanto_model", model, config, out_dir, qc.to_json(),
                        [&](const std::string& name, const Tensor& value, io::NamedTensors& out) {
                          const auto dot = name.rfind('.');
                          const auto q = dot == std::string::npos ? quantized.end() : quantized.find(name.substr(0, dot));
                          if (q == quantized.end() || name.substr(dot + 1) == "bias") {
                            out.emplace_back(name, value);
                          } else if (name.substr(dot + 1) == "weight") {  // codes; the scales and mins go with them
                            for (auto& t : quanto_tensors(q->first, q->second->scheme(), q->second->quantized_weight(), dtype)) {
                              out.push_back(std::move(t));
                            }
                          }
                        });
}

}  // namespace accel::quant

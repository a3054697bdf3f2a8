// The part of the Quanto and TorchAO backends they share: quantize on load into AffineLinear layers.
//
//   AffineQuantizerBase(name, scheme, group, skip)     a dispatch::Quantizer over one AffineScheme
//
// preprocess_model swaps every Linear / Conv1D outside the skip list (modules_to_not_convert, else
// get_keys_to_not_convert: the output head and tied modules) for an AffineLinear on the meta model,
// so the planner sizes the codes and scales; each float weight the loader streams in is quantized
// (quant/layers/affine_linear.hpp) and stored, so the CPU holds the quantized model plus one float weight at a
// time. dequantize() restores float layers (a GPT-2 Conv1D a Conv1D) in the dtype they were built in.
// A backend sets group_of_ (the group of a layer from its inputs) and compute_in_layer_dtype_
// (quantize_affine's arithmetic rounded to the layer's dtype) where its library does so.
// Differences from Diffusers: with no map given the model stays on the CPU (a GPU placement quantizes on
// the CPU and moves the codes there); the quantized layers are this library's layout (Quanto
// saves and loads its own, quant/quantizers/quanto.hpp; TorchAO's AffineQuantizedTensor is not written).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/dispatch/quantizer.hpp"
#include "accel/quant/layers/affine_linear.hpp"
#include "accel/quant/quantizers/layer_swap.hpp"

namespace accel::quant {

/// A quantize-on-load backend over one AffineScheme (see the header comment).
class AffineQuantizerBase : public CpuQuantizerDefaults {
 public:
  /// `skip`: the modules kept float; nullopt: get_keys_to_not_convert of the model (transformers'
  /// default for Quanto), an empty list: none.
  AffineQuantizerBase(std::string name, AffineScheme scheme, std::int64_t group,
                      std::optional<std::vector<std::string>> skip)
      : name_(std::move(name)), scheme_(scheme), group_(group), skip_(std::move(skip)) {
    detail::check_affine_group(scheme, group_ == 0 ? affine_scheme_info(scheme).group : group_);
  }

  std::string name() const { return name_; }
  /// The skip list in force: after preprocess_model, the resolved one.
  std::vector<std::string> modules_to_not_convert() const { return skip_.value_or(std::vector<std::string>{}); }
  bool is_serializable() const { return false; }
  AffineScheme scheme() const noexcept { return scheme_; }
  /// Layers swapped by the last preprocess_model.
  std::size_t swapped() const noexcept { return layers_.size(); }


  /// Swaps the float layers on the meta model (see the header comment).
  void preprocess_model(nn::Module& model, std::span<const std::string>) {
    if (!skip_) skip_ = get_keys_to_not_convert(model);
    swap_layers(model, *skip_, [](const std::string&) { return true; });
  }
  bool check_if_quantized_param(const nn::Module&, const Tensor&, const std::string& name) {
    return layers_.weight_of(name) != nullptr;
  }
  bool check_quantized_param_shape(const std::string& name, const Tensor&, const Tensor& loaded) {
    const FloatLinear* f = layers_.weight_of(name);
    return f && loaded.numel() == f->in * f->out;
  }
  /// Quantizes the float weight (on the CPU) into the layer on `device`.
  void create_quantized_param(nn::Module& model, const Tensor& value, const std::string& name, Device device) {
    const FloatLinear* f = layers_.weight_of(name);
    if (!f) throw ValueError(name_ + ": '" + name + "' is not the weight of a layer quantized on load");
    auto& layer = dynamic_cast<AffineLinear&>(model.get_submodule(name.substr(0, name.size() - 7)));
    layer.set_quantized_weight(quantize_affine(scheme_, SwappedLayers::out_in_f32(name, value, *f), layer.group_size(),
                                               compute_in_layer_dtype_ ? f->weight_dtype : DType::f32),
                               device);
  }
  /// The scales (and mins) are filled with the weight: not missing when it was loaded (to a device
  /// or to disk).
  std::vector<std::string> update_missing_keys(const nn::Module&, std::vector<std::string> missing,
                                               const std::string& prefix) {
    const std::set<std::string> absent(missing.begin(), missing.end());
    std::erase_if(missing, [&](const std::string& full) {
      const std::string n = full.starts_with(prefix) ? full.substr(prefix.size()) : full;
      for (const char* side : {".weight_scale", ".weight_min"}) {
        if (!n.ends_with(side)) continue;
        const std::string layer = n.substr(0, n.size() - std::string_view(side).size());
        return layers_.layers().count(layer) && !absent.count(prefix + layer + ".weight");
      }
      return false;
    });
    return missing;
  }

  /// Every AffineLinear back to the float layer it replaced, holding the dequantized weight.
  void dequantize(nn::Module& model) {
    for (const auto& [path, m] : model.named_modules()) {
      auto* q = dynamic_cast<AffineLinear*>(m);
      if (!q) continue;
      const auto it = layers_.layers().find(path);
      const DType dtype = it != layers_.layers().end() ? it->second.weight_dtype : DType::f32;
      const Tensor b = q->bias();
      restore_float_layer(model, path, q->dequantized_weight().to(dtype), b.defined() ? b.to(Device::cpu()) : Tensor(),
                          it != layers_.layers().end() && it->second.conv1d);
    }
  }

 protected:
  /// Swaps the float layers outside `skip` whose path `wanted` accepts.
  void swap_layers(nn::Module& model, const std::vector<std::string>& skip,
                   const std::function<bool(const std::string&)>& wanted) {
    layers_.swap(model, skip, [&](const std::string& path, const FloatLinear& f) -> std::shared_ptr<nn::Module> {
      if (!wanted(path)) return nullptr;
      return std::make_shared<AffineLinear>(f.in, f.out, scheme_, group_of_ ? group_of_(f.in) : group_, f.has_bias,
                                            f.bias_dtype);
    });
  }
  const SwappedLayers& layers() const noexcept { return layers_; }

  /// The group of a layer with `in` inputs (unset: the constructor's group).
  std::function<std::int64_t(std::int64_t in)> group_of_;
  /// Quantize in the float dtype the layer was built in (quantize_affine's `compute`), not float32.
  bool compute_in_layer_dtype_ = false;

 private:
  std::string name_;
  AffineScheme scheme_;
  std::int64_t group_;
  std::optional<std::vector<std::string>> skip_;
  SwappedLayers layers_;
};

}  // namespace accel::quant

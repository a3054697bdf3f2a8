// Float layers swapped for quantized ones on the meta model: the part every backend shares.
//
//   get_keys_to_not_convert(model)                  Accelerate's default skip list
//   is_float_linear(m)                              a Linear, or GPT-2's Conv1D (weight [in, out])
//   FloatLinear float_linear(m)                     its in / out features, bias, weight dtype
//   weight_is_shared(cells, m)                      its weight is tied to another module's
//   replace_layer(model, path, layer)               puts `layer` in the place of the module at `path`
//   restore_float_layer(model, path, w, b, conv1d)  a quantized layer back to a Linear / Conv1D
//                                                   holding w ([out, in]) and b (dequantize())
//   CpuQuantizerDefaults                            the hooks of a backend whose kernels run on the CPU
//   SwappedLayers                                   the layers a quantizer swapped on load: which
//                                                   checkpoint names are theirs, and a float weight
//                                                   of one as float32 [out, in]
//
// A weight shared with another module (a tied head) always stays a float parameter: quantizing it
// would quantize the embedding too. The skip list (modules_to_not_convert) is matched as the
// loader matches keep_in_fp32_modules (dispatch::in_keep_in_fp32_modules).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/dispatch/quantizer.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/tied.hpp"

namespace accel::quant {

namespace detail {

/// "a.b.c" -> {"a.b", "c"}; a name without a dot has the model as parent.
inline std::pair<std::string, std::string> split_last(const std::string& path) {
  const auto dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

}  // namespace detail

/// Accelerate's get_keys_to_not_convert: the modules kept in floating point by default, the last
/// child of `model` (a causal LM's output head) and every module holding a tied parameter.
inline std::vector<std::string> get_keys_to_not_convert(const nn::Module& model) {
  std::vector<std::string> keys;
  auto add = [&](std::string name) {
    for (const char* suffix : {".weight", ".bias"}) {
      if (name.ends_with(suffix)) name.resize(name.size() - std::string_view(suffix).size());
    }
    if (std::find(keys.begin(), keys.end(), name) == keys.end()) keys.push_back(std::move(name));
  };
  for (const auto& group : nn::find_tied_parameters(model)) {
    for (const auto& n : group) add(n);
  }
  if (!model.child_slots().empty()) add(model.child_slots().back().name);
  return keys;
}

/// A Linear or a GPT-2 Conv1D: the layers every backend quantizes.
inline bool is_float_linear(const nn::Module& m) { return m.class_name() == "Linear" || m.class_name() == "Conv1D"; }

/// What a quantized replacement of a float linear layer needs to know about it.
struct FloatLinear {
  std::int64_t in = 0, out = 0;
  bool conv1d = false;  ///< weight stored [in, out] (GPT-2's Conv1D)
  bool has_bias = false;
  DType weight_dtype = DType::f32;  ///< the float dtype the layer was built in
  DType bias_dtype = DType::f32;
};

inline FloatLinear float_linear(const nn::Module& m) {
  FloatLinear f;
  f.conv1d = m.class_name() == "Conv1D";
  const Tensor& w = m.get_parameter("weight");
  f.in = f.conv1d ? w.size(0) : w.size(1);
  f.out = f.conv1d ? w.size(1) : w.size(0);
  f.weight_dtype = w.is_floating_point() ? w.dtype() : DType::f32;
  f.has_bias = m.has_parameter("bias");
  f.bias_dtype = f.has_bias ? m.get_parameter("bias").dtype() : f.weight_dtype;
  return f;
}

/// Whether `m`'s weight cell appears more than once among `cells` (the model's state_dict_cells).
inline bool weight_is_shared(const nn::Module::Named<nn::ParameterPtr>& cells, nn::Module& m) {
  const auto cell = m.parameter_cell("weight");
  std::size_t n = 0;
  for (const auto& [name, c] : cells) n += c == cell ? 1 : 0;
  return n > 1;
}

/// Puts `layer` where the module at `path` is (replace_module on its parent).
inline void replace_layer(nn::Module& model, const std::string& path, std::shared_ptr<nn::Module> layer) {
  const auto [parent, leaf] = detail::split_last(path);
  model.get_submodule(parent).replace_module(leaf, std::move(layer));
}

/// Puts a float Linear (or, for `conv1d`, a Conv1D holding w transposed) with weight `w` [out, in]
/// and bias `b` (undefined: none; a Conv1D always has one) in the place of the layer at `path`.
inline void restore_float_layer(nn::Module& model, const std::string& path, const Tensor& w, const Tensor& b,
                                bool conv1d) {
  const std::int64_t out = w.size(0), in = w.size(1);
  std::shared_ptr<nn::Module> f;
  {
    auto meta = nn::init_empty_weights(false);
    f = conv1d ? std::shared_ptr<nn::Module>(std::make_shared<nn::Conv1D>(in, out, w.dtype()))
               : std::make_shared<nn::Linear>(in, out, b.defined(), w.dtype());
  }
  f->parameter_cell("weight")->data = conv1d ? w.t().contiguous() : w;
  if (b.defined()) f->parameter_cell("bias")->data = b;
  replace_layer(model, path, std::move(f));
}

/// QuantizerDefaults for a backend whose kernels run on the CPU: the map given, or none (the model
/// stays on the CPU it is loaded to; Diffusers' backends put it on the current GPU), and 90% of
/// each budget (Diffusers' headroom for the buffers quantizing needs).
struct CpuQuantizerDefaults : dispatch::QuantizerDefaults {
  plan::MaxMemory adjust_max_memory(const plan::MaxMemory& max_memory) {
    plan::MaxMemory out;
    for (const auto& [k, v] : max_memory) out.add(k, ByteSize(static_cast<std::int64_t>(std::floor(v.bytes() * 0.9))));
    return out;
  }
};

/// The layers a quantize-on-load backend swapped, by module path.
class SwappedLayers {
 public:
  /// Makes a quantized layer for the float layer at a path (its bias is filled by `swap`), or
  /// nullptr to keep that layer float (a shape the scheme cannot pack).
  using Factory = std::function<std::shared_ptr<nn::Module>(const std::string& path, const FloatLinear&)>;

  /// Swaps every Linear / Conv1D outside `skip` whose weight is not shared for make(path, layer),
  /// on the meta model (the new layers hold no bytes); a bias already loaded is carried over.
  /// Returns how many were swapped.
  std::size_t swap(nn::Module& model, const std::vector<std::string>& skip, const Factory& make) {
    layers_.clear();
    const auto cells = model.state_dict_cells();
    std::vector<std::pair<std::string, nn::Module*>> targets;
    for (const auto& [path, m] : model.named_modules()) {
      if (!path.empty() && is_float_linear(*m) && !dispatch::in_keep_in_fp32_modules(path, skip) &&
          !weight_is_shared(cells, *m)) {
        targets.emplace_back(path, m);
      }
    }
    auto meta = nn::init_empty_weights(/*include_buffers=*/false);
    for (const auto& [path, m] : targets) {
      const FloatLinear f = float_linear(*m);
      auto q = make(path, f);
      if (!q) continue;
      if (f.has_bias) {
        const Tensor& b = m->get_parameter("bias");
        if (!b.is_meta()) q->parameter_cell("bias")->data = b.to(f.bias_dtype);
      }
      layers_.emplace(path, f);
      replace_layer(model, path, std::move(q));
    }
    return layers_.size();
  }

  std::size_t size() const noexcept { return layers_.size(); }
  bool empty() const noexcept { return layers_.empty(); }
  const std::map<std::string, FloatLinear>& layers() const noexcept { return layers_; }

  /// The swapped layer a checkpoint name "<path>.weight" belongs to; nullptr for any other name.
  const FloatLinear* weight_of(const std::string& name) const {
    if (!name.ends_with(".weight")) return nullptr;
    const auto it = layers_.find(name.substr(0, name.size() - 7));
    return it == layers_.end() ? nullptr : &it->second;
  }

  /// A float weight of a swapped layer as contiguous float32 [out, in] (a Conv1D's is transposed);
  /// ShapeError naming the tensor when its element count is not the layer's.
  static Tensor out_in_f32(const std::string& name, const Tensor& value, const FloatLinear& f) {
    if (!value.is_floating_point()) {
      throw DTypeError(name + ": expected a float weight to quantize, got " + std::string(dtype_name(value.dtype())));
    }
    const Shape want = f.conv1d ? Shape{f.in, f.out} : Shape{f.out, f.in};
    if (value.shape() != want) {
      throw ShapeError(name + ": the checkpoint holds " + value.shape().str() + ", the layer expects " + want.str());
    }
    const Tensor w = value.to(Device::cpu(), DType::f32);
    return (f.conv1d ? w.transpose(0, 1) : w).contiguous();
  }

 private:
  std::map<std::string, FloatLinear> layers_;
};

}  // namespace accel::quant

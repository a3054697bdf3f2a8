// The bitsandbytes backend of dispatch::Quantizer: Diffusers' BnB4BitDiffusersQuantizer and
// BnB8BitDiffusersQuantizer (transformers' Bnb4BitHfQuantizer / Bnb8BitHfQuantizer) in one class,
// Accelerate's load_and_quantize_model, and saving in transformers' layout.
//
//   BnbQuantizer q(BitsAndBytesConfig{.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4});
//   load_pretrained_causal_lm("model/", {.quantizer = q})           quantized on load, or a bnb folder
//   BnbQuantizer::from_model_config(config_json)                     a bnb folder's quantization_config
//   get_keys_to_not_convert(model)                                   the default skip list (layer_swap.hpp)
//   load_and_quantize_model(model, BnbQuantizationConfig, weights, options)   Accelerate's function
//   save_bnb_model(model, config_json, out_dir)                      model.safetensors + config.json
//
// preprocess_model swaps layers on the meta model (quant/layers/bnb_linear.hpp), so the planner sizes the
// packed bytes and a 4-bit model gets a 4-bit device map:
// - Quantize on load (the checkpoint holds float weights): every Linear and GPT-2 Conv1D outside the
//   skip list becomes a Linear4bit or Linear8bitLt. The skip list is llm_int8_skip_modules, else
//   get_keys_to_not_convert (the output head and the modules tied to the input embedding); a
//   weight shared with another module always stays float. Each float weight the loader streams in
//   is rounded to the dtype the model holds it in, quantized (quantize_4bit, blocksize 64, the
//   config's type and double quantization; or quantize_int8_weight) and stored; the float tensor is
//   a view of the mapped file or one converted copy, dropped before the next: the CPU holds the
//   quantized bytes plus one tensor at any time. With llm_int8_has_fp16_weight the int8 layers keep
//   the float weight (in the model's dtype) and quantize it per call, as bnb's has_fp16_weights;
//   a folder saved so holds the float weights without SCB, as bnb writes it, and loads back so.
// - A pre-quantized checkpoint (transformers' layout: "<m>.weight" packed beside "<m>.weight.absmax",
//   ".quant_map", [".nested_absmax", ".nested_quant_map",] ".quant_state.bitsandbytes__nf4|fp4"; or
//   "<m>.weight" int8 beside "<m>.SCB", "<m>.weight_format"): the checkpoint decides, as a GGUF file
//   does for GgufQuantizer. preprocess_model reads the state tensors of every file (they are small)
//   and swaps exactly the layers that have them; when each packed weight arrives its state is built
//   by quant_state_from_tensors / int8_weight_from_tensors (packed bytes stored in another dtype,
//   bnb_4bit_quant_storage, are read as the same bytes; save_bnb_model writes them so). Every disagreement (a count, a shape, a
//   missing tensor, a float weight where the state says packed) is a FormatError naming the file
//   and the tensor.
// update_torch_dtype picks float16 when no dtype is given, as transformers and Diffusers do; pass
// a dtype to keep the float layers (and the rounding of the weights) in another.
//
// Differences from Diffusers / transformers, each where this backend's kernels or this loader differ:
// - The kernels run on the CPU and on a GPU (quant/kernels/cuda/kernels.cuh): update_device_map keeps
//   the model on the CPU when no map is given (transformers: the current GPU), CPU placements are quantized instead of refused
//   (llm_int8_enable_fp32_cpu_offload is not needed); a layer placed on a GPU is quantized on the
//   CPU and moved there.
// - adjust_target_dtype returns the dtype unchanged: the swapped layers already hold u8 / i8
//   tensors of their real size, so the planner needs no INT4 pseudo-dtype (which would also shrink
//   the float layers the skip list keeps).
// - The layers to swap in a pre-quantized checkpoint are the ones it stores state for, not the
//   config's skip list (transformers trusts the list and fails later on a disagreeing file).
// - dequantize() gives a Conv1D back for a layer that was one (transformers: a Linear).
// - get_keys_to_not_convert has no base-model exception (modules carry no base_model_prefix): the
//   last child of a base model is then kept float too.
// - preprocess_model reads the checkpoint's state tensors ("<m>.weight.absmax", ...): a
//   pre-quantized file decides which layers are swapped. The loader also offers them to
//   check_if_quantized_param / create_quantized_param as it meets them (load_checkpoint.hpp), which
//   buffer them per layer until the layer is complete, so a packed weight met before its state
//   waits for it; update_unexpected_keys (transformers' hook) keeps them out of the unexpected
//   keys of a loader that does not offer them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/dispatch/dispatch_model.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/dispatch/quantizer.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/tied.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/quant/config/bnb_config.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"
#include "accel/quant/layers/bnb_linear.hpp"
#include "accel/quant/quantizers/layer_swap.hpp"
#include "accel/quant/quantizers/quantized_folder.hpp"

namespace accel::quant {

namespace detail {

/// A checkpoint name that belongs to a bitsandbytes layer's state, and the layer it belongs to.
struct BnbStateName {
  std::string layer;
  bool four_bit = true;
};

inline std::optional<BnbStateName> bnb_state_name(std::string_view name) {
  for (const std::string_view s :
       {".weight.absmax", ".weight.quant_map", ".weight.nested_absmax", ".weight.nested_quant_map"}) {
    if (name.ends_with(s)) return BnbStateName{std::string(name.substr(0, name.size() - s.size())), true};
  }
  if (const auto at = name.rfind(".weight.quant_state."); at != std::string_view::npos) {
    return BnbStateName{std::string(name.substr(0, at)), true};
  }
  for (const std::string_view s : {".SCB", ".weight_format"}) {
    if (name.ends_with(s)) return BnbStateName{std::string(name.substr(0, name.size() - s.size())), false};
  }
  return std::nullopt;
}

}  // namespace detail

/// The bitsandbytes backend of dispatch::Quantizer (see the header comment).
class BnbQuantizer : public CpuQuantizerDefaults {
 public:
  /// `weight_dtype`: the dtype float weights are rounded to before quantizing; nullopt: the dtype
  /// each layer was built in (the model's dtype, what transformers quantizes).
  explicit BnbQuantizer(BitsAndBytesConfig config, std::optional<DType> weight_dtype = std::nullopt)
      : config_(std::move(config)), weight_dtype_(weight_dtype) {
    config_.validate();
  }

  /// The quantizer of a bitsandbytes folder: its config.json's "quantization_config". ValueError
  /// when there is none or it is not bitsandbytes'.
  static BnbQuantizer from_model_config(const nlohmann::json& config) {
    if (!config.is_object() || !config.contains("quantization_config")) {
      throw ValueError("BnbQuantizer: the model config has no \"quantization_config\"");
    }
    return BnbQuantizer(BitsAndBytesConfig::from_json(config.at("quantization_config")));
  }

  std::string name() const { return "bitsandbytes"; }
  /// The skip list in force: after preprocess_model, the resolved one.
  std::vector<std::string> modules_to_not_convert() const {
    return skip_ ? *skip_ : config_.llm_int8_skip_modules.value_or(std::vector<std::string>{});
  }
  bool pre_quantized() const { return pre_quantized_; }
  const BitsAndBytesConfig& config() const noexcept { return config_; }
  /// Layers swapped by the last preprocess_model.
  std::size_t swapped() const noexcept { return swapped_; }

  /// The config, checked: something to quantize.
  void validate_environment() {
    config_.validate();
    if (!config_.is_quantizable()) {
      throw ValueError("BnbQuantizer: the config quantizes nothing; set load_in_4bit or load_in_8bit");
    }
  }
  /// float16 when none is given, as transformers and Diffusers choose for bitsandbytes.
  std::optional<DType> update_torch_dtype(std::optional<DType> dtype) { return dtype ? dtype : DType::f16; }
  /// The parameters the skip list keeps float, sized in `dtype` by the planner.
  std::map<std::string, DType> get_special_dtypes_update(const nn::Module& model, DType dtype) {
    const auto skip = skip_ ? *skip_ : config_.llm_int8_skip_modules.value_or(get_keys_to_not_convert(model));
    const auto kept = dispatch::dtypes_in_modules(model.named_parameters(), skip, dtype);
    return {kept.begin(), kept.end()};
  }

  /// Swaps layers on the meta model (see the header comment); `checkpoint_files` are the files the
  /// loader will read (their state tensors decide for a pre-quantized checkpoint).
  void preprocess_model(nn::Module& model, std::span<const std::string> checkpoint_files) {
    read_state_tensors(checkpoint_files);
    std::map<std::string, bool> targets;  // module path -> four_bit
    if (pre_quantized_) {
      for (const auto& [name, t] : state_) {
        const auto s = detail::bnb_state_name(name);
        const std::string path = module_path(model, s->layer);
        if (path.empty()) continue;  // a module the model lacks: the loader reports its keys
        const auto [it, fresh] = targets.emplace(path, s->four_bit);
        if (!fresh && it->second != s->four_bit) {
          throw FormatError(file_of(name) + ": '" + s->layer + "' has both 4-bit and 8-bit bitsandbytes state");
        }
      }
    } else {
      skip_ = config_.llm_int8_skip_modules.value_or(get_keys_to_not_convert(model));
      for (const auto& [path, m] : model.named_modules()) {
        if (is_float_linear(*m) && !dispatch::in_keep_in_fp32_modules(path, *skip_))
          targets.emplace(path, config_.load_in_4bit);
      }
    }
    const auto cells = model.state_dict_cells();
    auto meta = nn::init_empty_weights(/*include_buffers=*/false);  // the new layers hold no bytes
    swapped_ = 0;
    for (const auto& [path, four_bit] : targets) {
      nn::Module& m = model.get_submodule(path);
      if (!is_float_linear(m)) {
        throw FormatError(file_of(path + ".weight") + ": the checkpoint stores bitsandbytes state for '" + path +
                          "', which is a " + m.class_name() + " here, not a Linear or Conv1D");
      }
      if (weight_is_shared(cells, m)) continue;  // a tied head stays a float parameter
      // llm_int8_has_fp16_weight when quantizing on load; a stored int8 weight holds its codes.
      swap(model, path, m, four_bit, !pre_quantized_ && config_.llm_int8_has_fp16_weight);
      ++swapped_;
    }
  }

  /// A weight of a swapped layer, or a state tensor of one.
  bool check_if_quantized_param(const nn::Module& model, const Tensor&, const std::string& name) {
    if (const auto s = detail::bnb_state_name(name)) return bnb_layer(model, s->layer) != nullptr;
    return name.ends_with(".weight") && bnb_layer(model, name.substr(0, name.size() - 7)) != nullptr;
  }
  /// A float weight must have the layer's element count, packed bytes its byte count; the layer
  /// checks the exact shape when it stores it.
  bool check_quantized_param_shape(const std::string&, const Tensor& current, const Tensor& loaded) {
    const bool packed4 = current.dtype() == DType::u8 && current.dim() == 2 && current.size(1) == 1;
    if (packed4 && loaded.is_floating_point()) {
      return (loaded.numel() + 1) / 2 == current.numel() || loaded.nbytes() == current.nbytes();
    }
    if (packed4) return loaded.nbytes() == current.nbytes();
    return loaded.numel() == current.numel();
  }

  /// Quantizes a float weight, or builds a packed one's state (see the header comment); state
  /// tensors are kept until their layer is complete. Quantizing runs on the CPU; the result goes
  /// to `device` (a GPU included).
  void create_quantized_param(nn::Module& model, const Tensor& value, const std::string& name, Device device) {
    if (const auto s = detail::bnb_state_name(name)) {
      if (!state_.count(name)) state_.emplace(name, value);
      if (!s->four_bit) store_int8_side(model, *s, name, value, device);
      if (const auto p = pending_.find(s->layer);
          p != pending_.end() && name.find(".quant_state.") != std::string::npos) {
        const Pending w = p->second;
        pending_.erase(p);
        store_weight(model, s->layer, w.value, device, true);
      }
      return;
    }
    const std::string layer = name.substr(0, name.size() - 7);
    // Packed bytes may be stored in a float dtype (bnb_4bit_quant_storage): state decides.
    const bool packed = !value.is_floating_point() || has_state(layer);
    if (packed && !has_completing_state(layer)) {
      // Packed bytes whose state has not arrived yet (a loader passing state tensors after it).
      pending_.insert_or_assign(layer, Pending{value, device});
      return;
    }
    store_weight(model, layer, value, device, packed);
  }

  /// Keys this backend fills itself are not missing: SCB and weight_format of quantized int8
  /// layers, and of int8 layers holding a float weight (quantized per call; offloaded without
  /// offload_8bit_bnb). A packed weight still waiting for its state is a FormatError naming what
  /// is missing.
  std::vector<std::string> update_missing_keys(const nn::Module& model, std::vector<std::string> missing,
                                               const std::string& prefix) {
    finish_pending();
    std::erase_if(missing, [&](const std::string& full) {
      const std::string n = full.starts_with(prefix) ? full.substr(prefix.size()) : full;
      const auto s = detail::bnb_state_name(n);
      if (!s || s->four_bit || !bnb_layer(model, s->layer)) return false;
      const auto* q = dynamic_cast<const Linear8bitLt*>(bnb_layer(model, s->layer));
      const Tensor* t = model.find_buffer(n);
      return (t && !t->is_meta()) || (q && q->holds_float_weight());
    });
    return missing;
  }

  /// transformers' update_unexpected_keys: the state tensors of swapped layers are not unexpected.
  std::vector<std::string> update_unexpected_keys(const nn::Module& model, std::vector<std::string> unexpected,
                                                  const std::string& prefix = "") {
    std::erase_if(unexpected, [&](const std::string& full) {
      const std::string n = full.starts_with(prefix) ? full.substr(prefix.size()) : full;
      const auto s = detail::bnb_state_name(n);
      return s && bnb_layer(model, s->layer) != nullptr;
    });
    return unexpected;
  }

  /// Accelerate's offload_8bit_bnb=False for an int8 layer placed on disk: its float checkpoint
  /// weight as the layer holds it ([out, in]; a Conv1D's is transposed), to be offloaded as it is
  /// and quantized per call; the layer's SCB, unused while it holds a float weight, is zeroed so
  /// that the hooks have a tensor to place. nullopt for anything else (4-bit layers, stored
  /// codes, has_fp16_weights layers, which hold the float weight anyway).
  std::optional<Tensor> offload_unquantized(nn::Module& model, const Tensor& value, const std::string& name) {
    if (!value.is_floating_point() || !name.ends_with(".weight")) return std::nullopt;
    const std::string layer = name.substr(0, name.size() - 7);
    auto* q = dynamic_cast<Linear8bitLt*>(bnb_layer(model, layer));
    if (!q || q->options().has_fp16_weights || has_state(layer)) return std::nullopt;
    const Tensor w = q->options().transposed_source && value.dim() == 2 ? value.t() : value;
    if (w.shape() != Shape{q->out_features(), q->in_features()}) {
      throw ShapeError("loading " + file_of(name) + ": '" + name + "' is " + value.shape().str() +
                       ", not the float weight of an int8 layer of " + std::to_string(q->in_features()) +
                       " inputs and " + std::to_string(q->out_features()) + " outputs" +
                       (q->options().transposed_source ? " (stored [in, out])" : ""));
    }
    if (q->SCB().is_meta()) q->tensor_cell("SCB")->data = Tensor::zeros(Shape{q->out_features()}, DType::f32);
    return w;
  }

  /// Checks that every swapped layer got its weight, then drops the state tensors read for loading.
  void postprocess_model(nn::Module& model) {
    finish_pending();
    for (const auto& [path, m] : model.named_modules()) {
      if (auto* q = dynamic_cast<Linear4bit*>(m); q && !q->quant_state() && !q->weight().is_meta()) {
        throw ValueError("BnbQuantizer: '" + path + ".weight' was loaded without being quantized");
      }
    }
    state_.clear();
    files_.clear();
  }

  /// Every Linear4bit / Linear8bitLt back to the float layer it replaced, its weight the
  /// dequantized values (dequantize_4bit in the state's dtype; CB * SCB / 127 in the layer's dtype).
  void dequantize(nn::Module& model) {
    for (const auto& [path, m] : model.named_modules()) {
      auto* q4 = dynamic_cast<Linear4bit*>(m);
      auto* q8 = dynamic_cast<Linear8bitLt*>(m);
      if (!q4 && !q8) continue;
      const bool conv1d = q4 ? q4->options().transposed_source : q8->options().transposed_source;
      // Conv1D always has a bias; a Linear4bit that replaced one kept it.
      restore_float_layer(model, path, q4 ? q4->dequantized_weight() : q8->dequantized_weight(),
                          q4 ? q4->bias() : q8->bias(), conv1d);
    }
  }

  /// The config a saved folder carries: this one, with the skip list in force.
  BitsAndBytesConfig quantization_config() const {
    BitsAndBytesConfig c = config_;
    if (skip_) c.llm_int8_skip_modules = *skip_;
    return c;
  }

 private:
  struct Pending {
    Tensor value;
    Device device;
  };

  /// The module at `name` of the checkpoint: the name itself, or under one of the root's children
  /// (a checkpoint saved from the base model). Empty when the model has none.
  static std::string module_path(const nn::Module& model, const std::string& name) {
    if (model.find_submodule(name)) return name;
    for (const auto& c : model.child_slots()) {
      if (model.find_submodule(c.name + "." + name)) return c.name + "." + name;
    }
    return "";
  }
  static nn::Module* bnb_layer(const nn::Module& model, const std::string& path) {
    nn::Module* m = model.find_submodule(path);
    return m && (dynamic_cast<Linear4bit*>(m) || dynamic_cast<Linear8bitLt*>(m)) ? m : nullptr;
  }

  /// Records the bitsandbytes state tensors of the checkpoint files and where each tensor lives.
  void read_state_tensors(std::span<const std::string> files) {
    state_.clear();
    files_.clear();
    pending_.clear();
    for (const auto& file : files) {
      const CheckpointFormat format = io::detect_checkpoint_format(file);
      auto note = [&](const std::string& n, const auto& get) {
        files_.insert_or_assign(n, file);
        if (detail::bnb_state_name(n)) state_.insert_or_assign(n, get());  // a view: the mapping stays alive with it
      };
      if (format == CheckpointFormat::safetensors) {
        const auto f = io::SafetensorsFile::open(file);
        for (const auto& n : f.keys()) note(n, [&] { return f.tensor(n); });
      } else if (format == CheckpointFormat::torch_bin) {
        for (const auto& entry : io::load_torch_bin(file)) {
          const Tensor& t = entry.second;  // a named reference: clang 14 cannot capture a binding
          note(entry.first, [&] { return t; });
        }
      }
    }
    pre_quantized_ = !state_.empty();
    if (pre_quantized_) skip_.reset();
  }
  std::string file_of(const std::string& name) const {
    const auto it = files_.find(name);
    return it == files_.end() ? std::string("the checkpoint") : "'" + it->second + "'";
  }
  /// The files holding `layer`'s weight and state, for messages ("'a.safetensors'").
  std::string files_of_layer(const std::string& layer) const {
    std::set<std::string> fs;
    for (auto it = files_.lower_bound(layer + "."); it != files_.end() && it->first.starts_with(layer + "."); ++it) {
      const std::string rest = it->first.substr(layer.size() + 1);
      if (rest == "weight" || detail::bnb_state_name(it->first)) fs.insert(it->second);
    }
    std::string out;
    for (const auto& f : fs) out += (out.empty() ? "'" : ", '") + f + "'";
    return out.empty() ? std::string("the checkpoint") : out;
  }
  bool has_state(const std::string& layer) const {
    const auto it = state_.lower_bound(layer + ".");
    for (auto i = it; i != state_.end() && i->first.starts_with(layer + "."); ++i) {
      if (const auto s = detail::bnb_state_name(i->first); s && s->layer == layer) return true;
    }
    return false;
  }
  /// The tensor a packed weight's state is built from has been seen (the 4-bit quant_state JSON,
  /// which sorts last among a layer's names, or SCB).
  bool has_completing_state(const std::string& layer) const {
    for (auto i = state_.lower_bound(layer + ".weight.quant_state."); i != state_.end(); ++i) {
      if (!i->first.starts_with(layer + ".weight.quant_state.")) break;
      return true;
    }
    return state_.count(layer + ".SCB") > 0;
  }
  std::map<std::string, Tensor> layer_tensors(const std::string& layer, const Tensor& weight) const {
    std::map<std::string, Tensor> out;
    for (auto i = state_.lower_bound(layer + "."); i != state_.end() && i->first.starts_with(layer + "."); ++i) {
      if (const auto s = detail::bnb_state_name(i->first); s && s->layer == layer) out.insert(*i);
    }
    out.insert_or_assign(layer + ".weight", weight);
    return out;
  }

  void store_weight(nn::Module& model, const std::string& layer, const Tensor& value, Device device, bool packed) {
    nn::Module* m = bnb_layer(model, layer);
    auto* q4 = dynamic_cast<Linear4bit*>(m);
    const std::string name = layer + ".weight";
    const std::string where = "loading " + files_of_layer(layer) + ": ";
    const bool bytes_fit = q4 ? value.nbytes() == static_cast<std::size_t>(linear_4bit_weight_shape(
                                                      q4->in_features(), q4->out_features())[0])
                              : value.dtype() == DType::i8;
    if (packed && value.is_floating_point() && !bytes_fit) {
      throw FormatError(where + "'" + name + "' is " + std::string(dtype_name(value.dtype())) + " " +
                        value.shape().str() +
                        ", but the checkpoint stores bitsandbytes state for it; expected its quantized weight");
    }
    try {
      if (auto* q = q4) {
        if (!packed) return q->quantize(value, device);
        const BnbQuantState s = quant_state_from_tensors(name, layer_tensors(layer, value));
        if (s.shape != Shape{q->out_features(), q->in_features()}) {
          throw FormatError(name + ".quant_state.bitsandbytes__" + std::string(bnb_quant_type_name(s.quant_type)) +
                            ": shape " + s.shape.str() + " is not the layer's [" + std::to_string(q->out_features()) +
                            ", " + std::to_string(q->in_features()) + "] (out, in)");
        }
        return q->set_quantized(value, s, device);
      }
      auto* q = dynamic_cast<Linear8bitLt*>(m);
      if (!packed) return q->quantize(value, device);
      const Int8Weight w = int8_weight_from_tensors(layer, layer_tensors(layer, value));
      if (w.CB.shape() != Shape{q->out_features(), q->in_features()}) {
        throw FormatError(name + ": int8 weight " + w.CB.shape().str() + " is not the layer's [" +
                          std::to_string(q->out_features()) + ", " + std::to_string(q->in_features()) + "] (out, in)");
      }
      q->set_quantized(w, device);
    } catch (const FormatError& e) {
      throw FormatError(where + e.what());
    }
  }

  // SCB fills its buffer as it arrives (before the weight, in name order); weight_format is checked.
  void store_int8_side(nn::Module& model, const detail::BnbStateName& s, const std::string& name, const Tensor& value,
                       Device device) {
    auto* q = dynamic_cast<Linear8bitLt*>(bnb_layer(model, s.layer));
    if (!q) return;
    if (name.ends_with(".SCB")) {
      if (value.dtype() != DType::f32 || value.numel() != q->out_features()) {
        throw FormatError("loading " + file_of(name) + ": " + name + ": is " + std::string(dtype_name(value.dtype())) +
                          " " + value.shape().str() + ", expected " + std::to_string(q->out_features()) +
                          " float32 values");
      }
      if (q->SCB().is_meta())
        q->tensor_cell("SCB")->data =
            device.is_meta() ? value.to_meta() : value.to(device).reshape(Shape{q->out_features()});
      return;
    }
    const Tensor f = value.to(Device::cpu(), DType::i64).contiguous();
    if (f.numel() != 1 || f.data_ptr<std::int64_t>()[0] != 0) {
      throw FormatError("loading " + file_of(name) + ": " + name +
                        ": only format 0 (row) is supported (col32, col_turing, col_ampere are bnb's old layouts)");
    }
  }

  void finish_pending() {
    for (const auto& [layer, p] : pending_) {
      const std::string name = layer + ".weight";
      throw FormatError("loading " + files_of_layer(layer) + ": " + name +
                        ".quant_state.bitsandbytes__nf4 or __fp4 (or " + layer +
                        ".SCB): missing (the state of the quantized weight '" + name + "')");
    }
  }

  /// Replaces the float layer at `path` with its bitsandbytes counterpart.
  void swap(nn::Module& model, const std::string& path, nn::Module& m, bool four_bit, bool has_fp16_weights) {
    const bool conv1d = m.class_name() == "Conv1D";
    const Tensor& w = m.get_parameter("weight");
    const std::int64_t in = conv1d ? w.size(0) : w.size(1), out = conv1d ? w.size(1) : w.size(0);
    const bool has_bias = m.has_parameter("bias");
    const DType dtype = weight_dtype_.value_or(w.is_floating_point() ? w.dtype() : DType::f32);
    std::shared_ptr<nn::Module> q;
    if (four_bit) {
      auto l = std::make_shared<Linear4bit>(in, out, has_bias,
                                            Linear4bitOptions{.compute_dtype = config_.bnb_4bit_compute_dtype,
                                                              .quant_type = config_.bnb_4bit_quant_type,
                                                              .compress_statistics = config_.bnb_4bit_use_double_quant,
                                                              .blocksize = 64,
                                                              .weight_dtype = dtype,
                                                              .transposed_source = conv1d,
                                                              .quant_storage = config_.bnb_4bit_quant_storage});
      if (!w.is_meta()) l->quantize(w, w.device());
      q = l;
    } else {
      auto l =
          std::make_shared<Linear8bitLt>(in, out, has_bias,
                                         Linear8bitOptions{.threshold = static_cast<float>(config_.llm_int8_threshold),
                                                           .weight_dtype = dtype,
                                                           .transposed_source = conv1d,
                                                           .has_fp16_weights = has_fp16_weights});
      if (!w.is_meta()) l->quantize(w, w.device());
      q = l;
    }
    if (has_bias) {
      const Tensor& b = m.get_parameter("bias");
      q->parameter_cell("bias")->data = b.is_meta() ? Tensor::empty(b.shape(), dtype, Device::meta()) : b.to(dtype);
    }
    replace_layer(model, path, q);
  }

  BitsAndBytesConfig config_;
  std::optional<DType> weight_dtype_;
  std::optional<std::vector<std::string>> skip_;
  bool pre_quantized_ = false;
  std::size_t swapped_ = 0;
  std::map<std::string, Tensor> state_;       // checkpoint name -> state tensor (views of the files)
  std::map<std::string, std::string> files_;  // checkpoint name -> the file holding it
  std::map<std::string, Pending> pending_;    // layer -> packed weight waiting for its state
};

static_assert(dispatch::Quantizer<BnbQuantizer>);

// ---- saving ------------------------------------------------------------------------------------

/// The BitsAndBytesConfig a quantized model's layers stand for: 4-bit (type, double quantization
/// and compute dtype of its first Linear4bit) or 8-bit (threshold and has_fp16_weights of its
/// first Linear8bitLt), and
/// the Linear / Conv1D layers left in float as llm_int8_skip_modules. ValueError when the model has
/// no bitsandbytes layer.
inline BitsAndBytesConfig bnb_config_of(const nn::Module& model) {
  BitsAndBytesConfig c;
  std::vector<std::string> kept;
  for (const auto& [path, m] : model.named_modules()) {
    if (const auto* q = dynamic_cast<const Linear4bit*>(m); q && !c.is_quantizable()) {
      c.load_in_4bit = true;
      c.bnb_4bit_compute_dtype = q->options().compute_dtype;
      c.bnb_4bit_quant_type = q->quant_state() ? q->quant_state()->quant_type : q->options().quant_type;
      c.bnb_4bit_use_double_quant = q->quant_state() ? q->quant_state()->nested() : q->options().compress_statistics;
      c.bnb_4bit_quant_storage = q->options().quant_storage;
    } else if (const auto* q8 = dynamic_cast<const Linear8bitLt*>(m); q8 && !c.is_quantizable()) {
      c.load_in_8bit = true;
      c.llm_int8_threshold = q8->options().threshold;
      c.llm_int8_has_fp16_weight = q8->options().has_fp16_weights;
    } else if (is_float_linear(*m)) {
      kept.push_back(path);
    }
  }
  if (!c.is_quantizable()) throw ValueError("bnb_config_of: the model has no Linear4bit or Linear8bitLt layer");
  if (!kept.empty()) c.llm_int8_skip_modules = kept;
  return c;
}

/// Writes a bitsandbytes-quantized model as transformers saves one: `out_dir/model.safetensors`
/// holds every state-dict tensor (a tied weight once) with each Linear4bit's state tensors beside
/// its packed weight (quant_state_to_tensors; the packed bytes as elements of
/// bnb_4bit_quant_storage, uint8 by default) and each Linear8bitLt's weight, SCB and
/// weight_format (its float weight alone with has_fp16_weights); `out_dir/config.json` is `config` (the model's config.json) with
/// "quantization_config" set to `quantization_config`, else bnb_config_of(model). Both files are
/// written atomically. ValueError for a weight on meta (offloaded or never loaded) or a model
/// without bitsandbytes layers. A saved folder loads back with BnbQuantizer::from_model_config.
namespace detail {
/// Packed 4-bit bytes (u8 [n, 1]) as bnb_4bit_quant_storage `storage` holds them: [n / itemsize, 1]
/// of it. ValueError naming the weight when n is not a whole number of its elements (bnb would
/// drop the remainder).
inline Tensor packed_as_storage(const std::string& name, const Tensor& packed, DType storage) {
  if (storage == DType::u8) return packed;
  const Tensor bytes = packed.to(Device::cpu()).contiguous();
  const std::size_t size = itemsize(storage);
  if (bytes.nbytes() % size != 0) {
    throw ValueError("save_bnb_model: '" + name + "' holds " + std::to_string(bytes.nbytes()) +
                     " packed bytes, not a whole number of " + std::string(dtype_name(storage)) +
                     " values (bnb_4bit_quant_storage)");
  }
  Tensor stored = Tensor::empty(Shape{static_cast<std::int64_t>(bytes.nbytes() / size), 1}, storage);
  if (bytes.nbytes()) std::memcpy(stored.data_ptr(), bytes.data_ptr(), bytes.nbytes());
  return stored;
}
}  // namespace detail

inline void save_bnb_model(const nn::Module& model, const nlohmann::json& config, const std::filesystem::path& out_dir,
                           const std::optional<BitsAndBytesConfig>& quantization_config = std::nullopt) {
  const BitsAndBytesConfig qc = quantization_config ? *quantization_config : bnb_config_of(model);
  std::map<std::string, const Linear4bit*> four;
  std::set<std::string> conv1d_float;  // float weights of int8 layers that replaced a Conv1D
  for (const auto& [path, m] : model.named_modules()) {
    const std::string w = path.empty() ? "weight" : path + ".weight";
    if (const auto* q = dynamic_cast<const Linear4bit*>(m)) four.emplace(w, q);
    if (const auto* q = dynamic_cast<const Linear8bitLt*>(m); q && q->holds_float_weight() && q->options().transposed_source)
      conv1d_float.insert(w);
  }
  save_quantized_folder("save_bnb_model", model, config, out_dir, qc.to_json(),
                        [&](const std::string& name, const Tensor& value, io::NamedTensors& out) {
                          const auto it = four.find(name);
                          if (it == four.end()) {
                            // A float weight keeps its source's layout ([in, out] for a Conv1D),
                            // so the folder reads back as the float checkpoint it came from.
                            out.emplace_back(name, conv1d_float.count(name) ? value.t().contiguous() : value);
                            return;
                          }
                          if (!it->second->quant_state()) throw ValueError("save_bnb_model: '" + name + "' has not been quantized");
                          out.emplace_back(name, detail::packed_as_storage(name, value, qc.bnb_4bit_quant_storage));
                          for (auto& st : quant_state_to_tensors(*it->second->quant_state(), name)) out.push_back(std::move(st));
                        });
}

// ---- load_and_quantize_model -------------------------------------------------------------------

/// Keyword arguments of load_and_quantize_model, with Accelerate's names and defaults.
/// Differences from Accelerate, each where its choice needs a GPU or sizes the plan wrongly:
/// - device_map nullopt places everything on the CPU (Accelerate: the current GPU); CPU
///   placements are quantized (Accelerate keeps 4-bit CPU modules float, as its kernels need a
///   GPU). Layers placed on "disk" are quantized and offloaded for both widths: an 8-bit weight
///   with its SCB beside it in the offload folder, as Accelerate writes them; a 4-bit layer's
///   packed weight, its quant state kept in memory (Accelerate refuses 4-bit layers on the CPU or
///   disk).
/// - A strategy sizes the model as loaded: swapped layers by their packed bytes, the others in
///   torch_dtype (float32 for keep_in_fp32_modules). Accelerate passes int8 / INT4 as the target
///   dtype, which also shrinks the embeddings, norms and head it keeps float.
/// - GPT-2's Conv1D layers are quantized too (Accelerate swaps nn.Linear only and warns).
struct LoadAndQuantizeOptions {
  /// A strategy ("auto", "balanced", "balanced_low_0", "sequential") or an explicit map;
  /// nullopt: {"": cpu}.
  std::optional<dispatch::DeviceMapArg> device_map{};
  /// Classes a strategy never splits across devices.
  std::vector<std::string> no_split_module_classes{};
  /// Budgets for a strategy; nullopt: get_max_memory()'s probe of the machine.
  std::optional<plan::MaxMemory> max_memory{};
  /// Where float weights placed on "disk" go; required when the map holds "disk".
  std::optional<std::string> offload_folder{};
  /// Park CPU float weights in a temporary folder while loading (Accelerate's default, false).
  bool offload_state_dict = false;
  /// A progress bar over several shards when stderr is a terminal.
  bool show_progress = true;
  /// Where the loader's warnings go (none when null).
  std::ostream* warnings = nullptr;
};

/// What load_and_quantize_model did.
struct QuantizedLoad {
  /// The placement used (dispatch_model has attached its hooks when it holds several devices).
  plan::DeviceMap device_map;
  /// What loading did, the state tensors of a pre-quantized checkpoint not counted as unexpected.
  dispatch::LoadResult load;
  /// The config in force: the skip list resolved (get_keys_to_not_convert and
  /// keep_in_fp32_modules added), as a saved folder records it.
  BitsAndBytesConfig quantization_config;
  /// Layers swapped for Linear4bit / Linear8bitLt.
  std::size_t swapped = 0;
};

namespace detail {
inline bool on_meta(const nn::Module& model) {
  for (const auto& [n, t] : model.named_parameters()) {
    if (t.is_meta()) return true;
  }
  return false;
}
}  // namespace detail

/// Accelerate's load_and_quantize_model: swaps `model`'s Linear (and Conv1D) layers for
/// bitsandbytes layers, plans (for a strategy), loads `weights_location` quantizing each weight as
/// it streams in (a bitsandbytes checkpoint is taken as stored), then dispatches. A model already
/// loaded (not on meta) is quantized in place from its own weights, its other floating weights
/// converted to torch_dtype (float32 in keep_in_fp32_modules), and stays on the CPU. ValueError for
/// a meta model without weights_location or an unknown strategy;
/// the loader's errors otherwise (see LoadAndQuantizeOptions for the differences from Accelerate).
template <policy::Offload Offload = dispatch::default_offload>
QuantizedLoad load_and_quantize_model(nn::Module& model, const BnbQuantizationConfig& config,
                                      const std::optional<std::string>& weights_location,
                                      const LoadAndQuantizeOptions& o = {}) {
  config.validate();
  const DType torch_dtype = config.torch_dtype_or_default();
  const std::vector<std::string> keep_fp32 = config.keep_in_fp32_modules.value_or(std::vector<std::string>{});
  std::vector<std::string> skip = config.skip_modules ? *config.skip_modules : get_keys_to_not_convert(model);
  skip.insert(skip.end(), keep_fp32.begin(), keep_fp32.end());
  BitsAndBytesConfig bc = config.to_bits_and_bytes_config();
  bc.llm_int8_skip_modules = skip;

  QuantizedLoad out;
  out.quantization_config = bc;
  dispatch::AnyQuantizer any{BnbQuantizer(bc, torch_dtype)};
  BnbQuantizer& q = *any.target<BnbQuantizer>();
  q.validate_environment();

  if (!detail::on_meta(model)) {
    q.preprocess_model(model, {});
    for (const auto& [name, cell] : model.state_dict_cells()) {
      if (!cell->data.is_floating_point()) continue;
      const DType d = dispatch::in_keep_in_fp32_modules(name, keep_fp32) ? DType::f32 : torch_dtype;
      if (cell->data.dtype() != d) cell->data = cell->data.to(d);
    }
    out.device_map.set("", Placement::cpu());
    out.swapped = q.swapped();
    return out;
  }
  if (!weights_location) {
    throw ValueError(
        "load_and_quantize_model: `weights_location` needs to be the folder path containing the weights of "
        "the model (the model is on the meta device)");
  }
  const std::vector<std::string> files = io::resolve_checkpoint_files(*weights_location);
  q.preprocess_model(model, files);
  out.swapped = q.swapped();

  if (const auto* s = o.device_map ? std::get_if<std::string>(&*o.device_map) : nullptr) {
    dispatch::LoadAndDispatchOptions po;
    po.no_split_module_classes = o.no_split_module_classes;
    po.dtype = torch_dtype;
    po.warnings = o.warnings;
    // Kept float32 first: a parameter in both lists stays float32.
    po.special_dtypes = dispatch::dtypes_in_modules(model.named_parameters(), keep_fp32, DType::f32);
    po.special_dtypes.merge(dispatch::dtypes_in_modules(model.named_parameters(), skip, torch_dtype));
    out.device_map = dispatch::resolve_device_map(model, *s, o.max_memory ? *o.max_memory : plan::get_max_memory(), po);
  } else {
    // No map: Accelerate places the model on the current GPU; here on the CPU, where it was loaded.
    std::optional<plan::DeviceMap> dm =
        q.update_device_map(o.device_map ? std::optional(std::get<plan::DeviceMap>(*o.device_map)) : std::nullopt);
    if (!dm) dm.emplace().set("", Placement::cpu());
    out.device_map = std::move(*dm);
    plan::check_device_map(model, out.device_map);
  }
  dispatch::LoadCheckpointOptions lo;
  lo.device_map = out.device_map;
  lo.offload_folder = o.offload_folder;
  lo.dtype = torch_dtype;
  lo.offload_state_dict = o.offload_state_dict;
  lo.keep_in_fp32_modules = keep_fp32;
  lo.show_progress = o.show_progress;
  lo.warnings = o.warnings;
  lo.quantizer = any;
  lo.offload_8bit_bnb = bc.load_in_8bit;  // Accelerate: load_in_8bit and offload
  out.load = dispatch::load_checkpoint_in_model(model, *weights_location, lo);  // unexpected keys: the hook ran
  q.postprocess_model(model);
  dispatch::dispatch_model<Offload>(model, out.device_map, {.offload_dir = o.offload_folder});
  return out;
}

}  // namespace accel::quant

namespace accel {
using quant::BnbQuantizer, quant::load_and_quantize_model, quant::save_bnb_model;
}  // namespace accel

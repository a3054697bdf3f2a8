// What a bitsandbytes checkpoint holds, read from its tensors alone (transformers keeps every
// weight's quant state in the file beside it):
//
//   auto tensors = bnb_checkpoint_tensors("model.safetensors");     // a file or a sharded index
//   auto some = bnb_checkpoint_tensors(path, "model.layers.0.mlp.up_proj");   // names under a prefix
//   std::vector<BnbWeightInfo> ws = bnb_weights(tensors);            // each 4-bit / int8 weight
//   std::optional<Tensor> w = bnb_dequantize(tensors, "model.layers.0.mlp.up_proj.weight");
//
// A 4-bit weight is "<name>" (packed uint8) beside "<name>.quant_state.bitsandbytes__nf4|fp4",
// "<name>.absmax", "<name>.quant_map" [, ".nested_absmax", ".nested_quant_map"]; an int8 weight is
// "<module>.weight" (int8) beside "<module>.SCB" [, "<module>.weight_format"]. The readers are
// quant_state_from_tensors / int8_weight_from_tensors: a disagreement is their FormatError naming
// the tensor. Tensors are mapped views; nothing is copied until a weight is dequantized.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/shape.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"

namespace accel::quant {

/// One quantized weight of a bitsandbytes checkpoint.
struct BnbWeightInfo {
  std::string name;            ///< the weight's name in the model ("<module>.weight")
  std::string scheme;          ///< "nf4", "fp4" or "int8"
  bool double_quant = false;   ///< 4-bit absmax quantized again
  Shape shape;                 ///< the logical (unpacked) shape
  DType dtype = DType::f32;    ///< the dtype dequantization gives back (4-bit: the state's)
  std::int64_t blocksize = 0;  ///< 4-bit blocks (0 for int8: one scale per row)
};

/// The tensors of a safetensors file or a sharded safetensors index whose names start with
/// `prefix` (all of them by default), by name, as mapped views; only the shards holding them are
/// opened. Other formats hold no bitsandbytes state: an empty map.
inline std::map<std::string, Tensor> bnb_checkpoint_tensors(const std::string& path, std::string_view prefix = {}) {
  const io::ResolvedCheckpoint c = io::resolve_checkpoint(path);
  std::map<std::string, Tensor> out;
  if (c.format == io::CheckpointFormat::safetensors) {
    const auto f = io::SafetensorsFile::open(c.path.string());
    for (const auto& name : f.keys()) {
      if (name.starts_with(prefix)) out.emplace(name, f.tensor(name));
    }
  } else if (c.format == io::CheckpointFormat::sharded_index) {
    const auto ck = io::ShardedCheckpoint::open(c.path.string());
    for (const auto& name : ck.keys()) {
      if (name.starts_with(prefix)) out.emplace(name, ck.tensor(name));
    }
  }
  return out;
}

namespace detail {
/// FormatError when `name` is a tensor only a bitsandbytes weight has beside it, and the tensor
/// that says how to read that weight is gone: a 4-bit weight's absmax or code book without its
/// "<weight>.quant_state.bitsandbytes__nf4|fp4", an int8 weight's weight_format without its
/// "<module>.SCB". Read as plain tensors, their codes would pass for floats.
inline void check_bnb_companion(const std::map<std::string, Tensor>& tensors, std::string_view name) {
  constexpr std::string_view state_tag = ".quant_state.bitsandbytes__";
  for (const std::string_view suffix : {".nested_absmax", ".nested_quant_map", ".absmax", ".quant_map"}) {
    if (!name.ends_with(suffix)) continue;
    const std::string weight(name.substr(0, name.size() - suffix.size()));
    const std::string state = weight + std::string(state_tag);
    const auto it = tensors.lower_bound(state);
    if (it == tensors.end() || !it->first.starts_with(state)) {
      throw FormatError(state + "nf4|fp4: missing, though " + std::string(name) + " is beside " + weight +
                        ": a bitsandbytes 4-bit weight without its quant state cannot be read");
    }
    return;
  }
  constexpr std::string_view format = ".weight_format";
  if (name.ends_with(format)) {
    const std::string module(name.substr(0, name.size() - format.size()));
    if (!tensors.contains(module + ".SCB")) {
      throw FormatError(module + ".SCB: missing, though " + std::string(name) + " is beside " + module +
                        ".weight: a bitsandbytes int8 weight without its row scales cannot be read");
    }
  }
}
}  // namespace detail

/// The quantized weights among `tensors`, in name order. FormatError naming the tensor when a
/// weight's state is incomplete (detail::check_bnb_companion, quant_state_from_tensors,
/// int8_weight_from_tensors).
inline std::vector<BnbWeightInfo> bnb_weights(const std::map<std::string, Tensor>& tensors) {
  constexpr std::string_view state_tag = ".quant_state.bitsandbytes__", scb = ".SCB";
  std::vector<BnbWeightInfo> out;
  for (const auto& [name, t] : tensors) {
    detail::check_bnb_companion(tensors, name);
    if (const auto at = name.find(state_tag); at != std::string::npos) {
      const std::string weight = name.substr(0, at);
      const BnbQuantState s = quant_state_from_tensors(weight, tensors);
      out.push_back({weight, std::string(bnb_4bit_info(s.quant_type).name), s.nested(), s.shape, s.dtype, s.blocksize});
    } else if (name.ends_with(scb)) {
      const std::string module = name.substr(0, name.size() - scb.size());
      const Int8Weight w = int8_weight_from_tensors(module, tensors);
      out.push_back({module + ".weight", "int8", false, w.CB.shape(), DType::f32, 0});
    }
  }
  std::sort(out.begin(), out.end(), [](const BnbWeightInfo& a, const BnbWeightInfo& b) { return a.name < b.name; });
  return out;
}

/// Weight `name` dequantized to float32 in its logical shape, when `tensors` holds it quantized by
/// bitsandbytes; nullopt for any other tensor. FormatError naming the missing tensor when `name`
/// has a bitsandbytes weight's companions (absmax, quant_map, weight_format) without the tensor
/// that says how to read it.
inline std::optional<Tensor> bnb_dequantize(const std::map<std::string, Tensor>& tensors, const std::string& name) {
  for (const char* companion : {".absmax", ".quant_map"}) {
    if (tensors.contains(name + companion)) detail::check_bnb_companion(tensors, name + companion);
  }
  const std::string state_prefix = name + ".quant_state.bitsandbytes__";
  if (const auto it = tensors.lower_bound(state_prefix); it != tensors.end() && it->first.starts_with(state_prefix)) {
    const auto packed = tensors.find(name);
    if (packed == tensors.end()) throw FormatError(name + ": the packed 4-bit weight is missing beside its quant state");
    return dequantize_4bit(packed->second, quant_state_from_tensors(name, tensors)).to(DType::f32).contiguous();
  }
  constexpr std::string_view weight = ".weight";
  if (name.ends_with(weight)) {
    const std::string module = name.substr(0, name.size() - weight.size());
    if (tensors.contains(module + ".SCB")) return int8_vectorwise_dequant(int8_weight_from_tensors(module, tensors));
    if (tensors.contains(module + ".weight_format")) detail::check_bnb_companion(tensors, module + ".weight_format");
  }
  return std::nullopt;
}

}  // namespace accel::quant

// dequantize_tensor(path, name): one tensor of any checkpoint file accel reads, as float32.
//
//   Tensor t = dequantize_tensor("model.gguf", "blk.0.attn_q.weight");   // Q4_K -> f32, GGUF order
//   Tensor u = dequantize_tensor("model.safetensors", "lm_head.weight");  // bf16 -> f32
//
// GGUF block types are dequantized bit-identically to ggml (io/ggml_dequantize.hpp); a
// bitsandbytes weight of a safetensors file or index (4-bit packed beside its quant state, or int8
// beside its SCB) is dequantized to its logical shape (quant/formats/bnb_checkpoint.hpp); every other
// stored dtype is converted (exactly for the floating types narrower than f32). The result
// is a contiguous cpu tensor in the file's element order: torch order for safetensors, torch .bin,
// sharded checkpoints and offload folders, and for GGUF the shape ne reversed (the same bytes as
// ne[0]-fastest order). KeyError names the file when it holds no tensor `name`.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/quant/formats/bnb_checkpoint.hpp"

namespace accel::quant {

/// Tensor `name` of the checkpoint at `path` as a contiguous float32 cpu tensor (header comment).
inline Tensor dequantize_tensor(const std::string& path, std::string_view name) {
  const io::ResolvedCheckpoint c = io::resolve_checkpoint(path);
  const std::string file = c.path.string();
  const auto missing = [&] {
    return KeyError("'" + file + "' has no tensor named '" + io::printable_entry(name) + "'");
  };
  Tensor t;
  switch (c.format) {
    case io::CheckpointFormat::gguf:
      return io::dequantize(io::GgufFile::open(file), name);
    case io::CheckpointFormat::safetensors:
    case io::CheckpointFormat::sharded_index: {
      // Only the module's tensors: a 4-bit weight's state sits under "<name>.", an int8 weight's
      // SCB beside it under "<module>.".
      const std::string_view module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
      const auto tensors = bnb_checkpoint_tensors(file, module);
      try {
        // The state readers name the tensor; the file is named here.
        if (auto w = bnb_dequantize(tensors, std::string(name))) return *w;
      } catch (const FormatError& e) {
        throw FormatError("'" + file + "': " + e.what());
      }
      const auto it = tensors.find(std::string(name));
      if (it == tensors.end()) throw missing();
      t = it->second;
      break;
    }
    case io::CheckpointFormat::torch_bin:
    case io::CheckpointFormat::offload_folder: {
      const auto sd = c.format == io::CheckpointFormat::torch_bin ? io::load_torch_bin(file) : io::load_offloaded_weights(file);
      if (!sd.contains(name)) throw missing();
      t = sd.at(name);
      break;
    }
    case io::CheckpointFormat::torch_legacy:
    case io::CheckpointFormat::model_folder:
      io::require_readable(c);
      throw FormatError("'" + file + "' is " + std::string(io::checkpoint_format_info(c.format).description) +
                        ", which holds no tensors of its own");
  }
  return t.to(Device::cpu(), DType::f32).contiguous();
}

}  // namespace accel::quant

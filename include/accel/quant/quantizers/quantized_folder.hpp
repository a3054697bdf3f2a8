// Writing a quantized model folder as save_pretrained does: one model.safetensors and a
// config.json carrying "quantization_config". Each backend's save function (save_bnb_model,
// save_quanto_model) says what a state-dict tensor becomes in its library's layout.
//
//   save_quantized_folder(who, model, config, out_dir, quantization_config, tensors_of)
#pragma once

#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/nn/module.hpp"

namespace accel::quant {

/// What a state-dict tensor (on the CPU) is saved as: the named tensors appended to `out`.
using SavedTensors = std::function<void(const std::string& name, const Tensor& value, io::NamedTensors& out)>;

/// Writes `out_dir/model.safetensors` with what `tensors_of` makes of every state-dict tensor of
/// `model` (a tied weight once: the loader re-ties it) and `out_dir/config.json`, `config` with
/// "quantization_config" set; both atomically. ValueError, prefixed by `who`, for a config that is
/// not a JSON object or a tensor on meta (offloaded or never loaded).
inline void save_quantized_folder(const std::string& who, const nn::Module& model, const nlohmann::json& config,
                                  const std::filesystem::path& out_dir, const nlohmann::json& quantization_config,
                                  const SavedTensors& tensors_of) {
  if (!config.is_object()) throw ValueError(who + ": config must be the model's config.json object");
  io::NamedTensors tensors;
  std::set<const nn::Parameter*> seen;
  for (const auto& [name, cell] : model.state_dict_cells()) {
    if (!seen.insert(cell.get()).second) continue;
    if (cell->data.is_meta()) {
      throw ValueError(who + ": '" + name +
                       "' is on the meta device (offloaded or not loaded); load the model in memory before saving it");
    }
    tensors_of(name, cell->data.to(Device::cpu()), tensors);
  }
  std::filesystem::create_directories(out_dir);
  nlohmann::json out = config;
  out["quantization_config"] = quantization_config;
  io::save_file(tensors, (out_dir / "model.safetensors").string(), {{"format", "pt"}});
  io::AtomicFile f((out_dir / "config.json").string());
  f.write(out.dump(2) + "\n");
  f.commit();
}

}  // namespace accel::quant

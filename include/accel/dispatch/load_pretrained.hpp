// load_pretrained_causal_lm(folder, options): a Hugging Face model folder (config.json + a
// checkpoint) as a ready CausalLM, the way transformers' from_pretrained loads it.
//
//   auto p = dispatch::load_pretrained_causal_lm("tiny-llama/", {.dtype = DType::bf16});
//   models::generate(*p.model, ids, {.max_new_tokens = 16});
//
// The model is built on meta from config.json, then load_checkpoint_in_model fills it (each
// tensor read once, converted once). The checkpoint is what io::resolve_checkpoint_folder finds in
// the folder, in transformers' order: model.safetensors, its index, pytorch_model.bin, its index,
// then one other *.index.json. Checkpoints saved from the base model
// (keys without the `transformer.` / `model.` prefix, as the original gpt2 repository has them)
// are loaded into the base module, as transformers does. Every weight must be filled: a missing
// tensor is a KeyError naming it and the folder; a tensor whose shape disagrees with the config
// is a ShapeError naming it. Keys the model does not have (GPT-2's stored attn.bias masks) are
// ignored, as transformers ignores them.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"

namespace accel::dispatch {

/// Options of load_pretrained_causal_lm.
struct LoadPretrainedOptions {
  /// The dtype floating weights are held and computed in; nullopt: config.json's torch_dtype
  /// (or dtype), else float32.
  std::optional<DType> dtype{};
  /// A progress bar over several shards when stderr is a terminal.
  bool show_progress = true;
  /// Weights in memory of their own rather than views of the mapped checkpoint: faster decoding,
  /// slower loading (LoadCheckpointOptions::disable_mmap).
  bool disable_mmap = false;
};

/// A loaded model and what loading it took.
struct PretrainedModel {
  std::shared_ptr<models::CausalLM> model;
  nlohmann::json config;
  DType dtype = DType::f32;
  LoadResult load;
  double load_seconds = 0;
};

namespace detail {
inline nlohmann::json read_config_json(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw IOError(path.string() + ": not found (a model folder needs config.json)");
  }
  // Regular files only (a FIFO or a folder is an error, never a wait), nesting bounded.
  return read_json_file(path.string(), file_json_limits, std::size_t{1} << 24);
}
inline std::optional<DType> config_dtype(const nlohmann::json& j, const std::string& source) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!j.contains(key) || !j[key].is_string()) continue;
    const std::string s = j[key].get<std::string>();
    if (s == "auto") return std::nullopt;
    if (const auto d = try_dtype_from_string(s)) return d;
    throw FormatError(source + ": '" + key + "' names an unknown dtype '" + s + "'");
  }
  return std::nullopt;
}
}  // namespace detail

/// Loads the causal LM of a Hugging Face model folder (see the header comment).
inline PretrainedModel load_pretrained_causal_lm(const std::filesystem::path& folder,
                                                 const LoadPretrainedOptions& options = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path config_path = folder / "config.json";
  PretrainedModel out;
  out.config = detail::read_config_json(config_path);
  out.dtype = options.dtype.value_or(detail::config_dtype(out.config, config_path.string()).value_or(DType::f32));
  {
    auto guard = nn::init_empty_weights(/*include_buffers=*/false);
    out.model = models::causal_lm_from_hf_config(out.config, out.dtype, config_path.string());
  }
  nn::Module& root = out.model->module();
  // Found once: both loads below read the same checkpoint.
  const std::string checkpoint = io::resolve_checkpoint_folder(folder).path.string();
  LoadCheckpointOptions lo;
  lo.dtype = out.dtype;
  lo.show_progress = options.show_progress;
  lo.disable_mmap = options.disable_mmap;
  out.load = load_checkpoint_in_model(root, checkpoint, lo);
  // A base-model checkpoint: every key lacks the base prefix; load it again into the base module.
  const std::string base = out.model->info().model_type == "gpt2" ? "transformer" : "model";
  const std::string prefix = base + ".";
  const bool base_keys = !out.load.unexpected_keys.empty() &&
                         std::none_of(out.load.unexpected_keys.begin(), out.load.unexpected_keys.end(),
                                      [&](const std::string& k) { return k.starts_with(prefix); }) &&
                         std::all_of(out.load.missing_keys.begin(), out.load.missing_keys.end(), [&](const std::string& k) {
                           return k.starts_with(prefix) || k.starts_with("lm_head.");
                         });
  if (base_keys && root.find_submodule(base)) {
    LoadResult inner = load_checkpoint_in_model(root.get_submodule(base), checkpoint, lo);
    for (auto& k : inner.missing_keys) k = prefix + k;
    out.load = std::move(inner);
  }
  // Every weight must now hold data; a tied name counts as filled through its cell.
  out.load.missing_keys.clear();
  for (const auto& [name, t] : root.state_dict()) {
    if (t.is_meta()) out.load.missing_keys.push_back(name);
  }
  if (!out.load.missing_keys.empty()) {
    throw KeyError(folder.string() + ": the checkpoint has no tensor '" + out.load.missing_keys.front() + "' (the " +
                   out.model->info().model_type + " model of config.json needs it; " +
                   std::to_string(out.load.missing_keys.size()) + " missing in all)");
  }
  out.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace accel::dispatch

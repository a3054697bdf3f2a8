// load_pretrained_causal_lm(folder, options): a Hugging Face model folder (config.json + a
// checkpoint) as a ready CausalLM, the way transformers' from_pretrained loads it. A GGUF file in
// place of the folder is read as its config and checkpoint (io/gguf_model.hpp).
//
//   auto p = dispatch::load_pretrained_causal_lm("tiny-llama/", {.dtype = DType::bf16});
//   models::generate(*p.model, ids, {.max_new_tokens = 16});
//   config_dtype(config_json, source)    the dtype config.json names, if any
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
//
// Placement (from_pretrained's device_map / max_memory / offload_folder): with `device_map` a
// strategy ("auto", "balanced", "balanced_low_0", "sequential", planned under `max_memory`, by
// default what get_max_memory() probes, minus `reserve`) or an explicit DeviceMap, each weight is
// loaded straight to its placement and the model is dispatched (dispatch_model, hooks that stream
// the offloaded blocks under the policy `offload_depth` names). Disk weights of a safetensors
// checkpoint are read from its shards in place; `offload_folder` is then only where the offload index goes (a temporary folder
// when unset, removed with the model), and a .bin checkpoint's disk weights are written there.
//
// A strategy plans what `accel run` plans: besides `reserve`, the device that computes keeps free
// the KV cache and one block's activations for `reserve_tokens`, and, when blocks stream, the
// read-ahead ring of `offload_depth` blocks, lowered (prefetch<2> to prefetch<1> or sync) when the
// budget cannot hold it (plan::generation_reserve); the result says what was kept and the depth
// used. Weights are sized as they will be held: the quantizer's adjust_target_dtype and
// get_special_dtypes_update, and float32 for keep_in_fp32_modules.
//
// A quantizer's update_device_map is consulted for an explicit map or none, as transformers does;
// a map it answers is dispatched, nullopt (the defaults' answer to none) leaves the model unplaced.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/dispatch/dispatch_model.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/dispatch/quantizer.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/gguf_model.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/policy/offload.hpp"

namespace accel::dispatch {

/// Options of load_pretrained_causal_lm.
struct LoadPretrainedOptions {
  /// The dtype floating weights are held and computed in; nullopt: config.json's torch_dtype
  /// (or dtype), else float32.
  std::optional<DType> dtype{};
  /// A progress bar over several shards when stderr is a terminal.
  bool show_progress = true;
  /// Hears the checkpoint bytes read so far and their total (LoadCheckpointOptions::progress).
  std::function<void(std::size_t done_bytes, std::size_t total_bytes)> progress{};
  /// Weights in memory of their own rather than views of the mapped checkpoint: faster decoding,
  /// slower loading (LoadCheckpointOptions::disable_mmap).
  bool disable_mmap = false;
  /// Where the weights go (see the header comment); nullopt: every weight on the CPU, no hooks.
  std::optional<DeviceMapArg> device_map{};
  /// Budgets for a strategy; nullopt: get_max_memory()'s probe of the machine.
  std::optional<MaxMemory> max_memory{};
  /// Where disk weights and the offload index go (see the header comment).
  std::optional<std::string> offload_folder{};
  /// Bytes each device keeps free for what runs, beside what reserve_tokens and the read-ahead
  /// keep (a workspace of the caller's own).
  MaxMemory reserve{};
  /// Tokens generation will hold (prompt and new ones): a strategy keeps their KV cache and one
  /// block's activations free on the device that computes (plan::generation_reserve); 0: none.
  /// The read-ahead ring of offload_depth blocks is kept whatever this is, when blocks stream.
  std::int64_t reserve_tokens = 0;
  /// Modules whose weights stay in float32 whatever `dtype` says (transformers'
  /// keep_in_fp32_modules; matched as LoadCheckpointOptions matches them), sized so by the plan.
  std::vector<std::string> keep_in_fp32_modules{};
  /// A quantization backend (dispatch/quantizer.hpp; accel/quant/ has them): it may change the
  /// dtype, swaps layers on the meta model before the plan, and stores the tensors it claims.
  std::optional<AnyQuantizer> quantizer{};
  /// Blocks read ahead while one computes when blocks stream (prefetch<N>'s N; 0: sync_offload,
  /// Accelerate's way). A strategy lowers it until the read-ahead ring fits; the depth used picks
  /// the hooks' offload policy (policy::with_offload_depth), once, when the model is dispatched.
  std::size_t offload_depth = default_offload::prefetch_depth;
};

/// A loaded model and what loading it took.
struct PretrainedModel {
  /// The temporary offload folder of a placed model (first: it outlives the model's hooks).
  std::shared_ptr<detail::TempFolder> scratch;
  std::shared_ptr<models::CausalLM> model;
  nlohmann::json config;
  DType dtype = DType::f32;
  LoadResult load;
  double load_seconds = 0;
  /// The placement used, when one was asked for.
  std::optional<DeviceMap> device_map;
  /// What a strategy kept free beside the weights (the KV cache and activations of
  /// reserve_tokens, the read-ahead ring when blocks stream) and the depth that fits
  /// (plan::generation_reserve); unset without a strategy.
  std::optional<plan::GenerationReserve> generation{};
  /// The read-ahead depth the hooks use: options.offload_depth, or generation->depth when lower
  /// (0: each block read when called).
  std::size_t offload_depth = 0;
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
}  // namespace detail

/// The dtype config.json names (torch_dtype, or transformers' newer dtype); nullopt for "auto" or
/// none. FormatError naming `source` and the key for a dtype it does not know.
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

namespace detail {
/// The entries of `dm` under module `base`, named relative to it (a base-model checkpoint is
/// loaded into the base module).
inline DeviceMap relative_device_map(const DeviceMap& dm, const std::string& base) {
  DeviceMap out;
  for (const auto& [k, p] : dm) {
    if (k.empty() || k == base) out.set("", p);
    else if (k.starts_with(base + ".")) out.set(k.substr(base.size() + 1), p);
  }
  return out;
}
}  // namespace detail

/// True when `model` is a GGUF file (the model is then the file, its config in its metadata).
inline bool is_gguf_model(const std::filesystem::path& model) {
  std::error_code ec;
  return std::filesystem::is_regular_file(model, ec) && io::detect_checkpoint_format(model) == CheckpointFormat::gguf;
}

/// The config.json of a model folder, or the config a GGUF file's metadata stands for.
inline nlohmann::json read_model_config(const std::filesystem::path& model) {
  return is_gguf_model(model) ? io::GgufCheckpoint::open(model.string()).config() : detail::read_config_json(model / "config.json");
}

/// The dtype a model loads in through `options`: the quantizer's update_torch_dtype of
/// options.dtype (its environment checked first), else config.json's (`source` names it), else
/// float32.
inline DType load_dtype(const nlohmann::json& config, const std::string& source, const LoadPretrainedOptions& options) {
  std::optional<DType> dtype = options.dtype;
  if (options.quantizer) {
    options.quantizer->validate_environment();
    dtype = options.quantizer->update_torch_dtype(dtype);
  }
  return dtype.value_or(config_dtype(config, source).value_or(DType::f32));
}

/// How a planner sizes `root` loading through `options` in `dtype`, its layers already swapped by
/// the quantizer's preprocess_model: the quantizer's adjust_target_dtype and
/// get_special_dtypes_update, and float32 for keep_in_fp32_modules.
inline plan::SizeOptions planned_sizes(nn::Module& root, DType dtype, const LoadPretrainedOptions& options) {
  plan::SizeOptions s{.dtype = options.quantizer ? options.quantizer->adjust_target_dtype(dtype) : dtype, .special_dtypes = {}};
  if (options.quantizer) {
    for (auto& [name, d] : options.quantizer->get_special_dtypes_update(root, dtype)) s.special_dtypes.emplace(name, d);
  }
  for (const auto& [name, d] : dtypes_in_modules(root.state_dict(), options.keep_in_fp32_modules, DType::f32)) {
    s.special_dtypes.insert_or_assign(name, d);
  }
  return s;
}

/// The checkpoint `model` loads from: the GGUF file itself, or the one resolve_checkpoint_folder finds.
inline std::string checkpoint_of(const std::filesystem::path& model) {
  return is_gguf_model(model) ? model.string() : io::resolve_checkpoint_folder(model).path.string();
}

/// Loads the causal LM of a Hugging Face model folder (see the header comment); a placed model's
/// offloaded weights travel as options.offload_depth says.
inline PretrainedModel load_pretrained_causal_lm(const std::filesystem::path& folder, const LoadPretrainedOptions& options = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  policy::check_offload_depth(options.offload_depth);
  // A GGUF file carries its config in its metadata (io/gguf_model.hpp).
  const bool gguf = is_gguf_model(folder);
  const std::filesystem::path config_path = gguf ? folder : folder / "config.json";
  PretrainedModel out;
  out.config = read_model_config(folder);
  out.dtype = load_dtype(out.config, config_path.string(), options);
  {
    auto guard = nn::init_empty_weights(/*include_buffers=*/false);
    out.model = models::causal_lm_from_hf_config(out.config, out.dtype, config_path.string());
  }
  nn::Module& root = out.model->module();
  // Found once: both loads below read the same checkpoint.
  const std::string checkpoint = checkpoint_of(folder);
  if (options.quantizer) options.quantizer->preprocess_model(root, io::resolve_checkpoint_files(checkpoint));
  LoadCheckpointOptions lo{.dtype = out.dtype,
                           .keep_in_fp32_modules = options.keep_in_fp32_modules,
                           .show_progress = options.show_progress,
                           .progress = options.progress,
                           .disable_mmap = options.disable_mmap,
                           .quantizer = options.quantizer,
                           .offload_8bit_bnb = true};  // int8 layers on disk offloaded as codes
  out.offload_depth = options.offload_depth;
  bool has_disk = false;
  // The quantizer's default placement (transformers' update_device_map), for an explicit map or
  // none (nullopt: no placement); a strategy is planned below.
  std::optional<DeviceMapArg> device_map = options.device_map;
  if (options.quantizer && !(device_map && std::holds_alternative<std::string>(*device_map))) {
    std::optional<DeviceMap> given;
    if (device_map) given = std::get<DeviceMap>(*device_map);
    if (std::optional<DeviceMap> updated = options.quantizer->update_device_map(given)) device_map = std::move(*updated);
  }
  if (device_map) {
    if (const auto* s = std::get_if<std::string>(&*device_map)) {
      LoadAndDispatchOptions plan;
      plan.no_split_module_classes = root.no_split_modules();
      // Sized as they will be held: the quantizer's target dtype, its kept weights, float32 ones.
      plan::SizeOptions sizes = planned_sizes(root, out.dtype, options);
      plan.dtype = sizes.dtype;
      plan.special_dtypes = std::move(sizes.special_dtypes);
      MaxMemory budgets = options.max_memory ? *options.max_memory : plan::get_max_memory();
      if (options.quantizer) budgets = options.quantizer->adjust_max_memory(std::move(budgets));
      out.generation = plan::generation_reserve(root, out.config, out.dtype, budgets, options.reserve_tokens, options.offload_depth);
      out.offload_depth = out.generation->depth;
      plan.reserve = options.reserve;
      for (const auto& [where, bytes] : out.generation->reserve()) plan.reserve.add(where, bytes);
      out.device_map = resolve_device_map(root, *s, budgets, plan);
    } else {
      out.device_map = std::get<DeviceMap>(*device_map);
      check_device_map(root, *out.device_map);
    }
    for (const auto& [k, p] : *out.device_map) has_disk |= p.is_disk();
    if (has_disk && !options.offload_folder) out.scratch = std::make_shared<detail::TempFolder>("accel_offload_");
    lo.offload_folder = options.offload_folder ? *options.offload_folder : (out.scratch ? out.scratch->path() : std::string());
    if (!has_disk && !options.offload_folder) lo.offload_folder.reset();
    lo.device_map = out.device_map;
  }
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
    LoadCheckpointOptions inner_options = lo;
    if (lo.device_map) inner_options.device_map = detail::relative_device_map(*lo.device_map, base);
    LoadResult inner = load_checkpoint_in_model(root.get_submodule(base), checkpoint, inner_options);
    for (auto& k : inner.missing_keys) k = prefix + k;
    out.load = std::move(inner);
  }
  // Every weight must now hold data or be placed on disk; a tied name counts as filled through its cell.
  out.load.missing_keys.clear();
  for (const auto& [name, t] : root.state_dict()) {
    // Disk weights stay on meta until streamed in; "meta" ones are another process's.
    const auto where = out.device_map ? out.device_map->lookup(name) : std::nullopt;
    const bool elsewhere = where && (where->is_disk() || where->kind() == Placement::Kind::meta);
    if (t.is_meta() && !elsewhere) out.load.missing_keys.push_back(name);
  }
  if (!out.load.missing_keys.empty()) {
    throw KeyError(folder.string() + ": the checkpoint has no tensor '" + out.load.missing_keys.front() + "' (the " +
                   out.model->info().model_type + " model of config.json needs it; " +
                   std::to_string(out.load.missing_keys.size()) + " missing in all)");
  }
  if (options.quantizer) options.quantizer->postprocess_model(root);
  // A plan that puts everything on disk still runs: the hooks stream every block in.
  if (out.device_map) {
    // The one point where the depth that fits becomes the hooks' policy.
    policy::with_offload_depth(out.offload_depth, [&]<class Offload>(Offload) {
      dispatch_model<Offload>(root, *out.device_map, {.offload_dir = lo.offload_folder, .force_hooks = has_disk});
    });
  }
  out.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace accel::dispatch

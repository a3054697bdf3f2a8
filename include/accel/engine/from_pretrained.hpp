// engine::from_pretrained(model, options): what `accel run` does before it generates, as one call,
// so that a program including the headers can do all the CLI does.
//
//   auto m = engine::from_pretrained("TinyLlama/", {.device_map = std::string("auto"), .reserve_tokens = 256});
//   auto ids = m.tokenizer->encode("The sea");                       // when the model has a tokenizer
//   auto out = models::generate(m.model(), input_ids, {.max_new_tokens = 32});
//   engine::from_pretrained(state, "TinyLlama/", options)            several processes split the model
//   engine::load_tokenizer(model)                                    the tokenizer alone
//   engine::input_device(m.model())                                  where its input ids go
//   engine::warm_up(m.model())                                       one token through it (done by default)
//
// `model` is a Hugging Face folder (config.json and model.safetensors, a sharded index or
// pytorch_model.bin) or a LLaMA / GPT-2 .gguf file. In order:
// - the tokenizer: tokenizer.json beside a folder's config, a GGUF file's metadata; none: nullopt;
// - the quantizer: `quantize` quantizes on load; a folder saved quantized is read through its
//   config.json's quantization_config by quant::quantizer_from_config, the one registry
//   (bitsandbytes, GGUF, Quanto, TorchAO); a GGUF file keeps its weights in their blocks
//   (quant::GgufQuantizer), computing in `dtype`, else the file's own float dtype, else bfloat16.
//   Float layers keep `dtype`, else the config's (bitsandbytes' own default would be float16);
// - the placement: `device_map` (a strategy or an explicit map) under `max_memory` (unset: what
//   get_max_memory() probes), a strategy keeping free what generating `reserve_tokens` tokens needs
//   and the read-ahead ring of `offload_depth` blocks, lowered until it fits
//   (dispatch::load_pretrained_causal_lm, plan::generation_reserve); the depth that fits picks the
//   offload policy among the compiled ones when the model is dispatched (policy::with_offload_depth);
// - processes: under a PartialState of several processes the model is split across them
//   (dist::load_pretrained_split): a strategy (auto, balanced, sequential) plans from every
//   process's budget, or `split_map` places it. Disk blocks go to the last process, so it alone
//   keeps the read-ahead ring. A quantized model splits too: the plan sizes the quantized layers,
//   and each process quantizes (or reads the quantized state of) its own blocks only;
// - the warm-up: one token through a model whose weights all stay where they compute (`warmup`,
//   as llama.cpp warms up by default), so that the first prompt does not pay for what runs once.
//
// Errors: `quantize` for a model saved quantized or a GGUF file, balanced_low_0 or an explicit
// DeviceMap across processes: ValueError naming the model.
//
// Differences from transformers' from_pretrained: no hub (a local path), no trust_remote_code (the
// model types are the library's), the placement and read-ahead options are Accelerate's, and the
// warm-up is llama.cpp's (transformers has none).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/dist/split_model.hpp"
#include "accel/hooks/attach.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/gguf_tokenizer.hpp"
#include "accel/models/generate.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/quant/quantizers/auto_quantizer.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/tokenize/tokenizer.hpp"

namespace accel::engine {

/// from_pretrained's options: every `accel run` flag that shapes the load, with Accelerate's and
/// transformers' defaults.
struct FromPretrainedOptions {
  /// The dtype float weights are held and computed in; nullopt: config.json's torch_dtype, else
  /// float32 (a GGUF file: its own float dtype, else bfloat16).
  std::optional<DType> dtype{};
  /// Hears the checkpoint bytes read so far and their total.
  std::function<void(std::size_t done_bytes, std::size_t total_bytes)> progress{};
  /// Weights in memory of their own rather than views of the mapped checkpoint.
  bool disable_mmap = false;
  /// A strategy ("auto", "balanced", "balanced_low_0", "sequential") or an explicit map; nullopt:
  /// every weight on the CPU, no hooks.
  std::optional<dispatch::DeviceMapArg> device_map{};
  /// Budgets for a strategy; nullopt: get_max_memory()'s probe (per process when split).
  std::optional<plan::MaxMemory> max_memory{};
  /// Where disk weights and the offload index go (a temporary folder when unset).
  std::optional<std::string> offload_folder{};
  /// Blocks read ahead while one computes (prefetch<N>); 0: sync_offload, Accelerate's.
  std::size_t offload_depth = dispatch::default_offload::prefetch_depth;
  /// Tokens generation will hold (prompt and new ones): a strategy keeps their KV cache and one
  /// block's activations free on the device that computes; 0: none.
  std::int64_t reserve_tokens = 0;
  /// Modules whose weights stay in float32.
  std::vector<std::string> keep_in_fp32_modules{};
  /// Quantize on load with this backend (quant/); nullopt: as the model was saved.
  std::optional<AnyQuantizer> quantize{};
  /// Across processes: the placement of each block on a process, instead of a strategy.
  std::optional<dist::SplitDeviceMap> split_map{};
  /// Read the model's tokenizer too (false: a caller that has it already).
  bool with_tokenizer = true;
  /// Run one token through the model once it is placed (warm_up), as llama.cpp does unless told
  /// `--no-warmup`: the first touch of every weight page, the kernels' buffers and the compute
  /// libraries' set-up then happen while loading, not in the first prompt. On the 483M BF16 GGUF
  /// model the first 64-token prompt took 342 ms without it and 155 ms with it (Zen 5, 2
  /// threads, in a VM whose first touch of a page is dear). Skipped where a weight is offloaded
  /// (it would stream every offloaded weight once for nothing) and for a model split across
  /// processes (a forward there is a collective every process must enter).
  bool warmup = true;
};

/// A model loaded and placed, with what it needs to run and what loading it did.
struct LoadedModel {
  /// The model, its config, dtype, load statistics, placement and the reserve a strategy kept.
  dispatch::PretrainedModel pretrained;
  std::optional<tokenize::Tokenizer> tokenizer;
  /// The quantizer's name ("bitsandbytes", "gguf", ...) when the model loaded through one, and
  /// the number of layers computing on quantized weights.
  std::optional<std::string> quantization;
  std::size_t quantized_layers = 0;
  /// What a strategy kept free beside the weights and the read-ahead depth that fits (for a
  /// split model: this process's).
  std::optional<plan::GenerationReserve> generation;
  /// The read-ahead depth the offloading hooks use.
  std::size_t offload_depth = 0;
  /// Split across processes: the placement every process shares, and the stages' traffic.
  std::optional<dist::SplitDeviceMap> split_map;
  std::optional<dist::PipelineStages> stages;
  /// The warm-up's time (FromPretrainedOptions::warmup); nullopt when none ran.
  std::optional<double> warmup_seconds;

  models::CausalLM& model() const { return *pretrained.model; }
  /// Weight bytes per placement ("cpu", "disk", "0", or "rank1:cpu" when split); empty when the
  /// model was not placed.
  std::map<std::string, double> placed_bytes() const {
    std::map<std::string, double> out;
    if (!split_map && !pretrained.device_map) return out;
    for (const auto& [name, t] : pretrained.model->module().named_parameters()) {
      std::optional<std::string> where;
      if (split_map) {
        if (const auto p = split_map->lookup(name)) where = p->str();
      } else if (const auto p = pretrained.device_map->lookup(name)) {
        where = p->str();
      }
      out[where.value_or(split_map ? "?" : "cpu")] += static_cast<double>(t.nbytes());
    }
    return out;
  }
  /// The stream the offloading hooks read through (its stats: bytes read, waits), or null.
  std::shared_ptr<hooks::WeightStream> offload_stream() const { return hooks::offload_stream(pretrained.model->module()); }
};

/// The tokenizer of `model`: tokenizer.json in a folder, the metadata of a GGUF file; nullopt when
/// it has none.
inline std::optional<tokenize::Tokenizer> load_tokenizer(const std::filesystem::path& model) {
  if (dispatch::is_gguf_model(model)) {
    const auto f = io::GgufFile::open(model.string());
    if (io::has_gguf_tokenizer(f)) return io::gguf_tokenizer(f);
    return std::nullopt;
  }
  std::error_code ec;
  const auto path = model / "tokenizer.json";
  if (std::filesystem::is_regular_file(path, ec)) return tokenize::Tokenizer::from_file(path.string());
  return std::nullopt;
}

/// Where `model`'s input ids go: the device of its weights when it runs without hooks (placed
/// whole on one device), else the CPU (the hooks move inputs to where each block computes).
inline Device input_device(models::CausalLM& model) {
  if (model.module().hook()) return Device::cpu();
  for (const auto& [name, t] : model.module().named_parameters()) {
    if (t.defined() && !t.is_meta()) return t.device();
  }
  return Device::cpu();
}

/// Runs one token (the model's bos id when its embedding has it, else 0) through `model` and returns the seconds it took, or
/// nullopt without running when a weight is offloaded (on the meta device, loaded by a hook when
/// its block runs). What the first forward does once (mapping weight pages, sizing the kernels'
/// buffers, the compute libraries' set-up) then happens here.
inline std::optional<double> warm_up(models::CausalLM& model) {
  for (const auto& [name, t] : model.module().named_parameters()) {
    if (!t.defined() || t.is_meta()) return std::nullopt;
  }
  const auto start = std::chrono::steady_clock::now();
  // A bos id past the embedding (a trimmed vocabulary keeps the tokenizer's) would be refused.
  const std::int64_t bos = model.info().bos_token_id.value_or(0);
  const std::int64_t id = bos >= 0 && bos < model.info().vocab_size ? bos : 0;
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{id}, Shape{1, 1});
  const Device where = input_device(model);
  (void)models::generate(model, where.is_cpu() ? ids : ids.to(where), {.max_new_tokens = 1});
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

namespace detail {

/// The loader's options for `model`: the quantizer it loads through and the dtype (see the
/// header comment), with everything that does not depend on the placement.
inline dispatch::LoadPretrainedOptions load_options(const std::filesystem::path& model, const nlohmann::json& config,
                                                    const FromPretrainedOptions& o) {
  dispatch::LoadPretrainedOptions lo{.dtype = o.dtype, .show_progress = false, .progress = o.progress,
                                     .disable_mmap = o.disable_mmap};
  lo.keep_in_fp32_modules = o.keep_in_fp32_modules;
  if (dispatch::is_gguf_model(model)) {
    if (o.quantize) throw ValueError("from_pretrained: " + model.string() + " is a GGUF file, quantized already");
    const DType compute = o.dtype.value_or(dispatch::config_dtype(config, model.string()).value_or(DType::bf16));
    lo.quantizer = quant::GgufQuantizer({.compute_dtype = compute});
    return lo;
  }
  const DType dtype = o.dtype.value_or(dispatch::config_dtype(config, (model / "config.json").string()).value_or(DType::f32));
  if (o.quantize) {
    if (config.contains("quantization_config")) {
      throw ValueError("from_pretrained: " + model.string() + " is quantized already (its config.json has a "
                       "quantization_config); load it without quantize");
    }
    lo.quantizer = *o.quantize;
    lo.dtype = dtype;
  } else if (config.contains("quantization_config")) {
    lo.quantizer = quant::quantizer_from_config(config.at("quantization_config"));
    lo.dtype = dtype;
  }
  return lo;
}

inline void finish(LoadedModel& out, const dispatch::LoadPretrainedOptions& lo) {
  if (lo.quantizer) {
    out.quantization = lo.quantizer->name();
    out.quantized_layers = quant::count_quantized_layers(out.pretrained.model->module());
  }
}

/// generation_reserve of `model` as load_pretrained_causal_lm plans it: on a scratch meta model
/// with the quantizer's layers swapped in (a quantized block is the ring's buffer, not its float
/// twin), under the budgets as the quantizer adjusts them, with read-ahead `depth`.
inline plan::GenerationReserve planned_generation_reserve(const std::filesystem::path& model,
                                                          const nlohmann::json& config,
                                                          const dispatch::LoadPretrainedOptions& lo,
                                                          const FromPretrainedOptions& o, std::size_t depth) {
  const DType dtype = dispatch::load_dtype(config, model.string(), lo);
  std::shared_ptr<models::CausalLM> meta;
  {
    auto guard = nn::init_empty_weights(false);
    meta = models::causal_lm_from_hf_config(config, dtype);
  }
  plan::MaxMemory budgets = o.max_memory ? *o.max_memory : plan::get_max_memory();
  if (lo.quantizer) {
    lo.quantizer->preprocess_model(meta->module(), io::resolve_checkpoint_files(dispatch::checkpoint_of(model)));
    budgets = lo.quantizer->adjust_max_memory(std::move(budgets));
  }
  return plan::generation_reserve(meta->module(), config, dtype, budgets, o.reserve_tokens, depth);
}

}  // namespace detail

/// Loads `model` in this process alone (see the header comment).
inline LoadedModel from_pretrained(const std::filesystem::path& model, const FromPretrainedOptions& o = {}) {
  LoadedModel out;
  if (o.with_tokenizer) out.tokenizer = load_tokenizer(model);
  const nlohmann::json config = dispatch::read_model_config(model);
  dispatch::LoadPretrainedOptions lo = detail::load_options(model, config, o);
  if (o.device_map) {
    lo.device_map = *o.device_map;
    lo.max_memory = o.max_memory;
    lo.offload_folder = o.offload_folder;
    lo.reserve_tokens = o.reserve_tokens;
  }
  lo.offload_depth = o.offload_depth;
  out.pretrained = dispatch::load_pretrained_causal_lm(model, lo);
  out.generation = out.pretrained.generation;
  out.offload_depth = out.pretrained.offload_depth;
  detail::finish(out, lo);
  if (o.warmup) out.warmup_seconds = warm_up(*out.pretrained.model);
  return out;
}

/// Loads `model` across the processes of `state`, split when there are several; every process
/// calls it with the same options (see the header comment).
template <class D>
LoadedModel from_pretrained(const dist::PartialState<D>& state, const std::filesystem::path& model,
                            const FromPretrainedOptions& o = {}) {
  if (state.num_processes() <= 1) return from_pretrained(model, o);
  LoadedModel out;
  if (o.with_tokenizer) out.tokenizer = load_tokenizer(model);
  const nlohmann::json config = dispatch::read_model_config(model);
  dispatch::LoadPretrainedOptions lo = detail::load_options(model, config, o);
  lo.offload_folder = o.offload_folder;
  dist::SplitLoadOptions so;
  so.max_memory = o.max_memory;
  std::size_t depth = o.offload_depth;
  if (o.split_map) {
    so.split_map = *o.split_map;
  } else {
    if (o.device_map && std::holds_alternative<plan::DeviceMap>(*o.device_map)) {
      throw ValueError("from_pretrained: across processes a model is placed by a strategy or a split_map, not a DeviceMap");
    }
    const std::string how = o.device_map ? std::get<std::string>(*o.device_map) : std::string("auto");
    if (how == "balanced_low_0") {
      throw ValueError("from_pretrained: device_map 'balanced_low_0' has no meaning across processes (auto, balanced, sequential)");
    }
    so.plan.strategy = how;
    // Disk blocks go to the last process naming a disk budget (every process takes the same
    // options, so the last one): it alone streams and keeps the read-ahead ring.
    const bool streams = state.is_last_process();
    out.generation = detail::planned_generation_reserve(model, config, lo, o, streams ? o.offload_depth : 0);
    if (streams) depth = out.generation->depth;
    for (const auto& [where, bytes] : out.generation->reserve()) lo.reserve.add(where, bytes);
  }
  lo.offload_depth = depth;
  dist::SplitModel m = dist::load_pretrained_split(state, model, lo, so);
  out.pretrained = std::move(m.model);
  out.split_map = std::move(m.split_map);
  out.stages = m.stages;
  out.offload_depth = depth;
  detail::finish(out, lo);
  return out;
}

}  // namespace accel::engine

namespace accel {
using engine::from_pretrained, engine::FromPretrainedOptions, engine::LoadedModel;
}  // namespace accel

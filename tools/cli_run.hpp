// accel run [MODEL_DIR] [--prompt TEXT | --ids 1,2,3] [--max-new-tokens N] [--temperature T]
//           [--top-k K] [--top-p P] [--seed S] [--dtype float32|float16|bfloat16] [--disable-mmap]
//           [--device-map auto|balanced|balanced_low_0|sequential|FILE.json] [--max-memory DEV=SIZE,...]
//           [--quantize SCHEME [--double-quant]] [--offload-folder DIR] [--offload sync|prefetch:N]
//           [--check] [--json | --quiet] [--progress]
//
// Without MODEL_DIR it runs the built-in default model (default_model.hpp), written into the
// cache on first use, on its default prompt unless one is given. Without --device-map or
// --max-memory too, that is the demo: a CPU budget of demo_cpu_share of the model's weights
// (with a GPU: demo_gpu_share of them on GPU 0 and demo_cpu_share_beside_gpu on the CPU), the
// rest on disk, and --check.
//
// Placement: --device-map or --max-memory (which implies --device-map auto) loads each weight
// straight to its place and runs the model with hooks that stream the offloaded blocks in
// (dispatch::load_pretrained_causal_lm<Offload>). A strategy plans under --max-memory (default:
// the free memory of each GPU and the CPU memory available now), keeping free on the execution
// device what generation needs besides the weights: the KV cache for prompt + max_new_tokens, one
// block's activations, and the read-ahead (N largest layers under prefetch:N, beside the one the
// planner keeps for the block that computes, as Accelerate's does); each reservation is printed. --offload picks how offloaded weights travel (default prefetch:2;
// compiled instantiations for sync and prefetch:1..4). The output adds bytes per device, peak
// bytes per device (the allocator's and the process's resident set) and the offload stream rate.
//
// Loads a Hugging Face model folder (config.json + model.safetensors, a sharded index or
// pytorch_model.bin, + tokenizer.json for --prompt), or a LLaMA / GPT-2 .gguf file (its block-typed
// weights kept quantized), and generates: greedy unless a sampling
// option is given (--temperature, --top-k or --top-p turn sampling on, as do_sample does). The
// text output shows the placement (once loaded), the generated text (or ids), the load time, the
// time to first token and the decode speed; --json prints {"prompt_ids", "generated_ids" (new
// tokens only), "text" (with a tokenizer), "load_s", "ttft_s", "tokens_per_s", ...}; --quiet
// prints the generated text alone. --check generates again with every weight on the CPU (on the
// GPU, when the placed run computed on one) and no hooks (sampling runs share one seed) and compares the new tokens: a difference exits 1 naming
// the first differing position. A progress bar over the checkpoint's bytes goes to stderr while
// loading, when stderr is a terminal or --progress is given (never under --quiet).
//
// Under mpirun with several processes the model is split across them (dist/split_model.hpp): each
// process plans from its own --max-memory (or what it probes), the budgets are gathered, each
// process loads only its blocks, and the hidden states travel between processes. --device-map is
// then a strategy (auto and balanced even the processes, sequential fills them in order) or a JSON
// file whose values name processes ("rank1:cpu"). Process 0 prints; the output adds the split map,
// bytes and peaks per process, and what crossed between them; --check runs the unrestricted
// reference on process 0 alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <fstream>
#include <iostream>
#include <map>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/dist/split_model.hpp"
#include "accel/hooks/align_devices_hook.hpp"
#include "accel/io/weight_reader.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/models/generate.hpp"
#include "accel/io/gguf_tokenizer.hpp"
#include "accel/quant/auto_quantizer.hpp"
#include "accel/quant/gguf_quantizer.hpp"
#include "accel/tokenize/tokenizer.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"
#include "cli_progress.hpp"
#include "cli_quantize.hpp"
#include "cli_values.hpp"
#include "default_model.hpp"

namespace accel::cli {

/// The demo's CPU budget, as a share of the default model's weights: a few blocks stay in
/// memory beside the read-ahead ring, the rest is read from disk at every token.
inline constexpr double demo_cpu_share = 0.6;
/// Where a GPU is visible the demo spans the three tiers: GPU 0 holds this share of the weights
/// (less what generation keeps free there), the CPU the next, disk the rest.
inline constexpr double demo_gpu_share = 0.6;
inline constexpr double demo_cpu_share_beside_gpu = 0.3;

/// What `accel run` was asked.
struct RunRequest {
  std::filesystem::path model_dir;
  /// No MODEL_DIR: the built-in default model (model_dir is set once it is found or written).
  bool default_model = false;
  /// The default model without --device-map or --max-memory: the demo budget and --check.
  bool demo = false;
  /// Generate again with every weight on one device and no hooks, and compare the tokens.
  bool check = false;
  bool quiet = false;
  /// --progress: progress bars on stderr even when it is not a terminal.
  bool progress = false;
  std::optional<std::string> prompt;
  std::vector<std::int64_t> ids;
  std::optional<DType> dtype;
  models::GenerationConfig generation;
  bool disable_mmap = false;
  bool json = false;
  /// --device-map: a strategy or a JSON file; set (to "auto") by --max-memory alone.
  std::optional<std::string> device_map;
  std::optional<plan::MaxMemory> max_memory;
  std::optional<std::string> offload_folder;
  /// --offload: blocks read ahead (prefetch:N), 0 for sync.
  std::size_t prefetch = 2;
  /// Run in this process alone even under mpirun (the token check's reference).
  bool single_process = false;
  /// Every weight on this device, no hooks (the token check's reference where the placed run
  /// computed on a GPU: the same kernels, so the same tokens); unset: the CPU.
  std::optional<Placement> whole_on;
  /// --quantize: quantize on load (cli_quantize.hpp's run_quantizer); --double-quant.
  std::optional<std::string> quantize;
  bool double_quant = false;
};

using plan::Reservation;

/// The tokens of an unrestricted run (every weight on one device, no hooks) against the placed run's.
struct TokenCheck {
  Placement device;  ///< where the unrestricted run's weights were
  bool identical = false;
  std::optional<std::size_t> first_difference;  ///< index into the new tokens
  std::vector<std::int64_t> reference_ids;
  double reference_tokens_per_s = 0;
};

/// What `accel run` produced.
struct RunResult {
  std::vector<std::int64_t> prompt_ids, generated_ids;
  std::optional<std::string> text;  ///< with a tokenizer
  std::string model_type;
  DType dtype = DType::f32;
  double load_s = 0, ttft_s = 0, tokens_per_s = 0;
  std::optional<DeviceMap> device_map;               ///< the placement, when one was asked for
  std::map<std::string, double> placed_bytes;        ///< weight bytes per placement ("cpu", "disk", "0")
  std::vector<Reservation> reservations;
  std::map<std::string, double> peak_bytes;          ///< allocator peak per device, and "rss" (VmHWM)
  std::optional<double> offload_gb_per_s;            ///< disk bytes streamed / generation time
  std::string offload = "none";                      ///< "sync" or "prefetch:N" when placed
  std::string note;                                  ///< why the read-ahead is shallower than asked
  std::optional<TokenCheck> check;                   ///< with --check
  int processes = 1;                                 ///< > 1: split across mpirun's processes
  std::optional<dist::SplitDeviceMap> split_map;     ///< the placement across processes
  dist::PipelineStats pipeline;                      ///< what process 0 sent and received
  std::optional<std::string> quantization;           ///< the quantizer's name, when there is one
  std::size_t quantized_layers = 0;                  ///< layers computing on quantized weights
};

/// The process state of `accel run`: under mpirun with several processes the model is split.
inline const dist::PartialState<policy::multi_cpu<>>& run_state() {
  static const dist::PartialState<policy::multi_cpu<>> state;
  return state;
}

/// Arguments -> RunRequest (values checked, each error naming its option).
inline RunRequest parse_run_request(const ParsedArgs& args) {
  RunRequest r;
  r.default_model = args.positionals().empty();
  if (!r.default_model) r.model_dir = args.positional(0);
  if (args.value("--prompt") && args.value("--ids")) throw UsageError("give --prompt or --ids, not both");
  if (!args.value("--prompt") && !args.value("--ids") && !r.default_model) {
    throw UsageError("give the prompt: --prompt TEXT or --ids 1,2,3");
  }
  r.prompt = args.value("--prompt");
  if (r.default_model && !r.prompt && !args.value("--ids")) r.prompt = std::string(default_model_prompt);
  if (const auto ids = args.list("--ids")) {
    for (const auto& s : *ids) r.ids.push_back(parse_integer("--ids", s, 0, std::numeric_limits<std::int32_t>::max()));
    if (r.ids.empty()) throw ValueError("--ids: no token id given");
  }
  auto& g = r.generation;
  if (const auto v = args.value("--max-new-tokens")) g.max_new_tokens = parse_integer("--max-new-tokens", *v, 0, 1 << 20);
  if (const auto v = args.value("--temperature")) {
    g.temperature = parse_real("--temperature", *v, 0.0, 1e6);
    g.do_sample = g.temperature > 0.0;  // temperature 0 means greedy, as in most CLIs
    if (!g.do_sample) g.temperature = 1.0;
  }
  if (const auto v = args.value("--top-k")) {
    g.top_k = parse_integer("--top-k", *v, 0, std::numeric_limits<std::int32_t>::max());
    g.do_sample = g.do_sample || !args.value("--temperature");
  }
  if (const auto v = args.value("--top-p")) {
    g.top_p = parse_real("--top-p", *v, 0.0, 1.0);
    if (g.top_p <= 0.0) throw ValueError("--top-p: " + *v + " is out of range (above 0, at most 1)");
    g.do_sample = g.do_sample || !args.value("--temperature");
  }
  if (const auto v = args.value("--seed")) {
    g.seed = static_cast<std::uint64_t>(parse_integer("--seed", *v, 0, std::numeric_limits<std::int64_t>::max()));
  }
  if (const auto v = args.value("--dtype")) r.dtype = parse_float_dtype("--dtype", *v);
  r.disable_mmap = args.flag("--disable-mmap");
  r.json = args.flag("--json");
  r.quiet = args.flag("--quiet");
  r.progress = args.flag("--progress");
  if (r.json && r.quiet) throw UsageError("--json and --quiet exclude each other");
  r.device_map = args.value("--device-map");
  r.demo = r.default_model && !r.device_map && args.values("--max-memory").empty();
  r.check = args.flag("--check") || r.demo;
  if (!args.values("--max-memory").empty()) {
    r.max_memory = plan::parse_max_memory(detail::join_values(args.values("--max-memory")), "--max-memory", &std::cerr);
    if (!r.device_map) r.device_map = "auto";
  }
  r.quantize = args.value("--quantize");
  r.double_quant = args.flag("--double-quant");
  if (r.double_quant && !r.quantize) throw UsageError("--double-quant goes with --quantize nf4 or fp4");
  if (r.quantize) (void)run_quantizer("--quantize", *r.quantize, r.double_quant, DType::f32);
  r.offload_folder = args.value("--offload-folder");
  if (const auto v = args.value("--offload")) r.prefetch = parse_offload_policy(*v);
  if ((r.offload_folder || args.value("--offload")) && !r.device_map && !r.demo) {
    throw UsageError("--offload-folder and --offload need a placement: give --device-map or --max-memory");
  }
  return r;
}

namespace detail {

/// The peak resident set of this process (VmHWM), in bytes; 0 when unreadable.
inline double peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmHWM:")) return std::stod(line.substr(6)) * 1024.0;
  }
  return 0;
}

/// Runs f(), an error about the library's max_memory renamed for the option that set it.
template <class F>
decltype(auto) naming_max_memory_option(F&& f) {
  try {
    return f();
  } catch (const ValueError& e) {
    const std::string m = e.what();
    if (m.starts_with("max_memory:")) throw ValueError("--max-memory:" + m.substr(std::string("max_memory:").size()));
    throw;
  }
}

/// The line saying why the read-ahead is shallower than asked, or "" when it is not.
inline std::string read_ahead_note(const plan::GenerationReserve& g) {
  if (g.depth == g.asked_depth || !g.budget) return {};
  return "read-ahead lowered to " + (g.depth ? "prefetch:" + std::to_string(g.depth) : std::string("sync")) + ": " +
         g.device.str() + "=" + human_bytes(g.budget->bytes()) + " holds " + std::to_string(g.depth + 1) +
         " of the largest layer (" + human_bytes(g.layer.bytes()) + ") beside the KV cache and activations, not " +
         std::to_string(g.asked_depth + 1);
}

/// load_pretrained_split under the offload policy `prefetch` names (0: sync_offload).
template <class State>
dist::SplitModel load_split(const State& state, const std::filesystem::path& dir, const dispatch::LoadPretrainedOptions& o,
                            const dist::SplitLoadOptions& so, std::size_t prefetch) {
  return policy::with_offload_depth(prefetch, [&]<class Offload>(Offload) {
    return dist::load_pretrained_split<Offload>(state, dir, o, so);
  });
}

/// load_pretrained_causal_lm under the offload policy `prefetch` names (0: sync_offload).
inline dispatch::PretrainedModel load_placed(const std::filesystem::path& dir, const dispatch::LoadPretrainedOptions& o,
                                             std::size_t prefetch) {
  return policy::with_offload_depth(prefetch, [&]<class Offload>(Offload) {
    return dispatch::load_pretrained_causal_lm<Offload>(dir, o);
  });
}

}  // namespace detail

/// Loads the model (and tokenizer), encodes the prompt and generates. `loaded` hears the result
/// once the model is placed (placement and reservations filled), before generation starts.
inline RunResult compute_run(const RunRequest& req, const std::function<void(const RunResult&)>& loaded = {},
                             const std::string& progress_label = "Loading checkpoint") {
  RunResult out;
  std::optional<tokenize::Tokenizer> tok;
  const auto tok_path = req.model_dir / "tokenizer.json";
  std::error_code ec;
  if (dispatch::is_gguf_model(req.model_dir)) {
    // A GGUF file carries its tokenizer in its metadata (io/gguf_tokenizer.hpp), when it has one.
    const auto f = io::GgufFile::open(req.model_dir.string());
    if (io::has_gguf_tokenizer(f)) tok = io::gguf_tokenizer(f);
    if (req.prompt && !tok) {
      throw IOError(req.model_dir.string() + ": no tokenizer in its metadata (--prompt needs one; give --ids instead)");
    }
  } else if (std::filesystem::is_regular_file(tok_path, ec)) {
    tok = tokenize::Tokenizer::from_file(tok_path.string());
  }
  if (req.prompt && !tok) {
    throw IOError((req.model_dir / "tokenizer.json").string() + ": not found (--prompt needs the model's tokenizer; "
                  "give --ids instead)");
  }
  reset_peak_memory_stats(Device::cpu());
  std::size_t prefetch = req.prefetch;
  const auto& state = run_state();
  const bool split = !req.single_process && state.num_processes() > 1;
  out.processes = split ? state.num_processes() : 1;
  ByteProgressBar bar(progress_label,
                      progress_wanted(req.progress, req.quiet) && state.is_main_process() ? &std::cerr : nullptr);
  dispatch::LoadPretrainedOptions lo{.dtype = req.dtype, .show_progress = false, .progress = bar.callback(),
                                     .disable_mmap = req.disable_mmap};
  if (dispatch::is_gguf_model(req.model_dir)) {
    // GGUF weights stay in their blocks (quant/gguf_quantizer.hpp), computing in --dtype or the
    // dtype the file's own weights suggest (float32 for an F32 file, bfloat16 for block types).
    const nlohmann::json config = dispatch::read_model_config(req.model_dir);
    const DType compute = req.dtype.value_or(dispatch::detail::config_dtype(config, req.model_dir.string()).value_or(DType::bf16));
    lo.quantizer = quant::GgufQuantizer({.compute_dtype = compute});
    if (req.quantize) throw UsageError("--quantize: " + req.model_dir.string() + " is a GGUF file, quantized already");
  } else {
    // Quantized on load (--quantize), or a bitsandbytes or Quanto folder saved quantized. The float
    // layers keep the config's dtype (bitsandbytes' own default would be float16, TorchAO's bfloat16).
    const nlohmann::json config = dispatch::read_model_config(req.model_dir);
    const DType dtype = req.dtype.value_or(dispatch::detail::config_dtype(config, "config.json").value_or(DType::f32));
    if (req.quantize) {
      if (config.contains("quantization_config")) {
        throw UsageError("--quantize: " + req.model_dir.string() + " is quantized already");
      }
      lo.quantizer = run_quantizer("--quantize", *req.quantize, req.double_quant, dtype);
      lo.dtype = dtype;
    } else if (config.contains("quantization_config")) {
      lo.quantizer = quant::quantizer_from_config(config.at("quantization_config"));  // the one registry
      lo.dtype = dtype;
    }
  }
  // The tokens generation holds: a strategy keeps their KV cache and activations free.
  const std::int64_t tokens = static_cast<std::int64_t>(req.ids.size() + (req.prompt ? req.prompt->size() : 0)) +
                              req.generation.max_new_tokens;
  dist::SplitLoadOptions so;
  if (split) {
    if (lo.quantizer) throw UsageError("a quantized model (a GGUF file, a bitsandbytes folder, --quantize) runs in one process: quantized layers are not split across processes yet");
    out.offload = req.prefetch == 0 ? "sync" : "prefetch:" + std::to_string(req.prefetch);
    lo.offload_folder = req.offload_folder;
    so.max_memory = req.max_memory;
    const std::string how = req.device_map.value_or("auto");
    if (how == "balanced_low_0") throw UsageError("--device-map balanced_low_0 has no meaning across processes (auto, balanced, sequential)");
    if (how == "auto" || how == "balanced" || how == "sequential") {
      so.plan.strategy = how;
      // Disk blocks go to the last process naming a disk budget (every process takes the same
      // options, so the last one), so only it streams: the others keep no read-ahead room.
      const nlohmann::json config = dispatch::read_model_config(req.model_dir);
      const DType dtype = req.dtype.value_or(dispatch::detail::config_dtype(config, "config.json").value_or(DType::f32));
      std::shared_ptr<models::CausalLM> meta;
      {
        auto guard = nn::init_empty_weights(false);
        meta = models::causal_lm_from_hf_config(config, dtype);
      }
      const plan::GenerationReserve g = detail::naming_max_memory_option([&] {
        return plan::generation_reserve(meta->module(), config, dtype, req.max_memory ? *req.max_memory : plan::get_max_memory(),
                                        tokens, state.is_last_process() ? req.prefetch : 0);
      });
      out.reservations = g.reservations;
      if (state.is_last_process()) {
        prefetch = g.depth;
        out.note = detail::read_ahead_note(g);
      }
      out.offload = prefetch == 0 ? "sync" : "prefetch:" + std::to_string(prefetch);
      for (const auto& [where, bytes] : g.reserve()) lo.reserve.add(where, bytes);
    } else {
      so.split_map = dist::split_device_map_from_json(read_json_file(how, file_json_limits, std::size_t{1} << 26));
    }
  } else if (req.device_map) {
    out.offload = req.prefetch == 0 ? "sync" : "prefetch:" + std::to_string(req.prefetch);
    lo.offload_folder = req.offload_folder;
    lo.max_memory = req.max_memory;
    const bool strategy = *req.device_map == "auto" || *req.device_map == "balanced" ||
                          *req.device_map == "balanced_low_0" || *req.device_map == "sequential";
    if (strategy) {
      lo.device_map = *req.device_map;
      lo.reserve_tokens = tokens;
    } else {
      lo.device_map = plan::device_map_from_json(read_json_file(*req.device_map, file_json_limits, std::size_t{1} << 26));
    }
  } else if (req.whole_on) {
    plan::DeviceMap whole;
    whole.set("", *req.whole_on);
    lo.device_map = std::move(whole);
  }
  std::optional<dist::PipelineStages> stages;
  dispatch::PretrainedModel p;
  if (split) {
    auto m = detail::load_split(state, req.model_dir, lo, so, prefetch);
    p = std::move(m.model);
    out.split_map = std::move(m.split_map);
    stages = m.stages;
  } else {
    p = detail::naming_max_memory_option([&] {
      return req.device_map || req.whole_on ? detail::load_placed(req.model_dir, lo, prefetch)
                                            : dispatch::load_pretrained_causal_lm(req.model_dir, lo);
    });
  }
  bar.finish();
  if (out.split_map) {
    for (const auto& [name, t] : p.model->module().named_parameters()) {
      const auto place = out.split_map->lookup(name);
      out.placed_bytes[place ? place->str() : "?"] += static_cast<double>(t.nbytes());
    }
  } else if (p.device_map) {
    out.device_map = p.device_map;
    if (p.generation) {
      out.reservations = p.generation->reservations;
      out.note = detail::read_ahead_note(*p.generation);
    }
    if (req.device_map) out.offload = p.offload_depth == 0 ? "sync" : "prefetch:" + std::to_string(p.offload_depth);
    for (const auto& [name, t] : p.model->module().named_parameters()) {
      const auto place = p.device_map->lookup(name);
      out.placed_bytes[place ? place->str() : "cpu"] += static_cast<double>(t.nbytes());
    }
  }
  out.model_type = p.model->info().model_type;
  out.dtype = p.dtype;
  if (lo.quantizer) {
    out.quantization = lo.quantizer->name();
    out.quantized_layers = count_quantized_layers(p.model->module());
    if (out.quantized_layers == 0 && req.quantize && !req.quiet) {
      std::cerr << "accel run: --quantize " << *req.quantize
                << ": no layer of this model fits the scheme (GGUF blocks need rows of whole blocks: 32, or 256 for "
                   "q4_k); it runs unquantized\n";
    }
  }
  out.load_s = p.load_seconds;
  if (loaded) loaded(out);
  if (req.prompt) {
    for (auto id : tok->encode(*req.prompt)) out.prompt_ids.push_back(id);
    if (out.prompt_ids.empty()) throw ValueError("--prompt: the text encodes to no token");
  } else {
    out.prompt_ids = req.ids;
  }
  const std::int64_t vocab = p.model->info().vocab_size;
  for (auto id : out.prompt_ids) {
    if (id >= vocab) {
      throw ValueError("prompt token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                       std::to_string(vocab));
    }
  }
  models::GenerationConfig g = req.generation;
  if (tok && g.eos_token_ids.empty() && p.model->info().eos_token_ids.empty() && tok->eos_id()) {
    g.eos_token_ids = {static_cast<std::int64_t>(*tok->eos_id())};
  }
  // Hooks move the inputs to where the blocks compute; a model placed whole on one device (a plan
  // that fits one GPU, or the check's reference) has none, so the ids start on its device.
  const Tensor host_ids = Tensor::from_vector(out.prompt_ids, Shape{1, static_cast<std::int64_t>(out.prompt_ids.size())});
  Device input_device = Device::cpu();
  if (!p.model->module().hook()) {
    for (const auto& [name, t] : p.model->module().named_parameters()) {
      if (t.defined() && !t.is_meta()) {
        input_device = t.device();
        break;
      }
    }
  }
  const Tensor ids = input_device.is_cpu() ? host_ids : host_ids.to(input_device);
  const auto stream = hooks::offload_stream(p.model->module());
  if (stream) stream->reset_stats();
  if (stages) stages->reset_stats();
  const auto gen = models::generate(*p.model, ids, g);
  double streamed = stream ? static_cast<double>(stream->stats().bytes_read) : 0.0;
  std::map<std::string, double> peaks;
  peaks["cpu"] = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes);
  for (int i = 0; i < cuda_device_count(); ++i) {
    peaks[std::to_string(i)] = static_cast<double>(memory_stats(Device::cuda(i)).peak_allocated_bytes);
  }
  peaks["rss"] = detail::peak_rss_bytes();
  if (split) {
    // Every process's peaks, named by process; the disk bytes every process streamed.
    using Wire = std::vector<std::pair<std::string, double>>;
    Wire mine(peaks.begin(), peaks.end());
    mine.emplace_back("streamed", streamed);
    const auto all = dist::gather_object(state, std::vector<Wire>{mine});
    streamed = 0;
    for (std::size_t r = 0; r < all.size(); ++r) {
      for (const auto& [k, v] : all[r]) {
        if (k == "streamed") streamed += v;
        else out.peak_bytes["rank" + std::to_string(r) + ":" + k] = v;
      }
    }
    out.pipeline = stages->stats();
  } else {
    out.peak_bytes = peaks;
  }
  if ((stream || split) && streamed > 0 && gen.prefill_seconds + gen.decode_seconds > 0) {
    out.offload_gb_per_s = streamed / (gen.prefill_seconds + gen.decode_seconds) / 1e9;
  }
  out.generated_ids = gen.new_tokens.front();
  out.ttft_s = gen.prefill_seconds;
  out.tokens_per_s = gen.tokens_per_second();
  if (tok) {
    std::vector<tokenize::TokenId> t(out.generated_ids.begin(), out.generated_ids.end());
    out.text = tok->decode(t, /*skip_special_tokens=*/true);
  }
  return out;
}

/// The placement lines of the text output: bytes per device and what was kept free.
inline void render_placement(const RunResult& r) {
  if (!r.device_map && !r.split_map) return;
  if (!r.note.empty()) std::cout << r.note << "\n";
  if (r.split_map) std::cout << "split across " << r.processes << " processes, ";
  std::cout << "placement (" << r.offload << "):";
  for (const auto& [where, bytes] : r.placed_bytes) std::cout << " " << where << " " << human_bytes(bytes);
  std::cout << "\n";
  for (const auto& x : r.reservations) {
    std::cout << "  reserved on " << x.device.str() << ": " << human_bytes(x.bytes.bytes()) << " for the " << x.what << "\n";
  }
  std::cout << "\n" << std::flush;
}

/// The token check's line: "token check: identical to an unrestricted run" or where they differ.
inline std::string token_check_line(const RunResult& r) {
  const TokenCheck& c = *r.check;
  const std::string ref = "an unrestricted run (every weight on " + (c.device.is_cpu() ? std::string("the CPU") : c.device.device().str()) + ", no hooks)";
  if (c.identical) return "token check: identical to " + ref;
  const std::size_t i = *c.first_difference;
  const auto id = [](const std::vector<std::int64_t>& v, std::size_t k) {
    return k < v.size() ? std::to_string(v[k]) : std::string("none (ended)");
  };
  return "token check: FAILED: the new token at index " + std::to_string(i) + " is " + id(r.generated_ids, i) +
         ", " + ref + " gives " + id(c.reference_ids, i);
}

/// RunResult -> stdout. The placement lines come earlier, from compute_run's `loaded`, in text mode.
inline void render_run(const RunRequest& req, const RunResult& r, const std::optional<DefaultModel>& model = std::nullopt) {
  if (req.json) {
    nlohmann::ordered_json j;
    j["model_dir"] = req.model_dir.string();
    if (model) {
      j["default_model"] = {{"parameters", model->parameters}, {"weight_bytes", model->weight_bytes}, {"shards", model->shards},
                            {"written_now", model->written_now}, {"write_s", model->write_seconds}};
    }
    j["model_type"] = r.model_type;
    j["dtype"] = std::string(dtype_name(r.dtype));
    if (req.prompt) j["prompt"] = *req.prompt;
    j["prompt_ids"] = r.prompt_ids;
    j["generated_ids"] = r.generated_ids;
    if (r.text) j["text"] = *r.text;
    j["load_s"] = r.load_s;
    j["ttft_s"] = r.ttft_s;
    j["tokens_per_s"] = r.tokens_per_s;
    j["cpu_tier"] = std::string(simd::active_tier());
    if (r.split_map) {
      j["processes"] = r.processes;
      j["split_map"] = dist::to_json(*r.split_map);
      j["pipeline"] = {{"transfers", r.pipeline.transfers}, {"bytes_sent", r.pipeline.bytes_sent},
                       {"bytes_received", r.pipeline.bytes_received}, {"broadcasts", r.pipeline.broadcasts}};
    }
    if (r.device_map || r.split_map) {
      if (r.device_map) j["device_map"] = plan::to_ordered_json(*r.device_map);
      j["offload"] = r.offload;
      if (!r.note.empty()) j["offload_note"] = r.note;
      j["placed_bytes"] = r.placed_bytes;
      nlohmann::ordered_json res = nlohmann::ordered_json::array();
      for (const auto& x : r.reservations) res.push_back({{"what", x.what}, {"device", x.device.str()}, {"bytes", x.bytes.bytes()}});
      j["reservations"] = res;
      j["offload_gb_per_s"] = r.offload_gb_per_s ? nlohmann::ordered_json(*r.offload_gb_per_s) : nlohmann::ordered_json();
    }
    j["peak_bytes"] = r.peak_bytes;
    if (r.quantization) {
      j["quantization"] = {{"method", *r.quantization},
                           {"scheme", req.quantize ? nlohmann::ordered_json(*req.quantize) : nlohmann::ordered_json()},
                           {"layers", r.quantized_layers}};
    }
    if (r.check) {
      j["check"] = {{"identical", r.check->identical},
                    {"first_difference", r.check->first_difference ? nlohmann::ordered_json(*r.check->first_difference)
                                                                   : nlohmann::ordered_json()},
                    {"unrestricted_device", r.check->device.device().str()},
                    {"unrestricted_ids", r.check->reference_ids},
                    {"unrestricted_tokens_per_s", r.check->reference_tokens_per_s}};
    }
    std::cout << dump_json(j, 2) << "\n";
    return;
  }
  if (req.quiet) {
    if (r.text) {
      std::cout << *r.text << "\n";
    } else {
      for (std::size_t i = 0; i < r.generated_ids.size(); ++i) std::cout << (i ? " " : "") << r.generated_ids[i];
      std::cout << "\n";
    }
    return;
  }
  if (r.text) {
    std::cout << (req.prompt ? *req.prompt : std::string()) << *r.text << "\n";
  } else {
    std::cout << "generated ids:";
    for (auto id : r.generated_ids) std::cout << ' ' << id;
    std::cout << "\n";
  }
  std::cout << std::fixed << std::setprecision(3) << "\n" << r.model_type << " (" << dtype_name(r.dtype) << "): load "
            << r.load_s << " s, " << r.prompt_ids.size() << " prompt tokens, time to first token " << r.ttft_s
            << " s, " << r.generated_ids.size() << " new tokens, " << std::setprecision(1) << r.tokens_per_s
            << " tokens/s\n";
  if (r.offload_gb_per_s) std::cout << "offload stream " << std::setprecision(2) << *r.offload_gb_per_s << " GB/s\n";
  if (r.quantization) {
    std::cout << "quantized: " << r.quantized_layers << " layers (" << *r.quantization
              << (req.quantize ? " " + *req.quantize : std::string()) << ")\n";
  }
  std::cout << "peak:";
  for (const auto& [where, bytes] : r.peak_bytes) {
    const bool rss = where == "rss" || where.ends_with(":rss");
    std::cout << " " << (rss ? where.substr(0, where.size() - 3) + "resident set" : where) << " " << human_bytes(bytes);
  }
  std::cout << "\n";
  if (r.split_map) {
    std::cout << "between processes: " << r.pipeline.transfers << " stage transfers sent or received by process 0 ("
              << human_bytes(static_cast<double>(r.pipeline.bytes_sent + r.pipeline.bytes_received)) << "), "
              << r.pipeline.broadcasts << " logits broadcasts\n";
  }
  if (r.check) {
    std::cout << token_check_line(r) << std::setprecision(1) << " [" << r.check->reference_tokens_per_s
              << " tokens/s unrestricted]\n";
  }
}

/// The tokens of `r` against those of the same request run without placement.
inline TokenCheck check_tokens(const RunRequest& req, const RunResult& r) {
  RunRequest plain = req;
  plain.single_process = true;
  plain.device_map.reset();
  plain.max_memory.reset();
  plain.offload_folder.reset();
  // A run that computed on a GPU is checked against the whole model on that GPU: the CPU's
  // kernels round differently, and greedy decoding amplifies the last bit into other tokens.
  TokenCheck c;
  if (r.device_map && !r.split_map) {
    for (const auto& [name, place] : *r.device_map) {
      if (place.is_gpu()) {
        c.device = place;
        break;
      }
    }
  }
  if (c.device.is_gpu()) plain.whole_on = c.device;
  const RunResult ref = compute_run(plain, {}, "Loading checkpoint (unrestricted run)");
  c.reference_ids = ref.generated_ids;
  c.reference_tokens_per_s = ref.tokens_per_s;
  const auto& a = r.generated_ids;
  const auto& b = ref.generated_ids;
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  c.identical = i == a.size() && i == b.size();
  if (!c.identical) c.first_difference = i;
  return c;
}

/// `accel run`.
inline int run_run(const ParsedArgs& args) {
  RunRequest req = parse_run_request(args);
  const auto& state = run_state();
  const int processes = state.num_processes();
  // Under mpirun process 0 alone prints (and runs the check's reference).
  const bool main = state.is_main_process();
  if (!main) {
    req.quiet = true;
    req.json = false;
  }
  std::optional<DefaultModel> model;
  if (req.default_model) {
    // Process 0 writes the cache; the others find it written.
    state.main_process_first([&] {
      ByteProgressBar bar("Writing the default model", progress_wanted(req.progress, req.quiet) ? &std::cerr : nullptr);
      model = ensure_default_model(DefaultModelShape::from_env(), bar.callback(), req.quiet ? nullptr : &std::cerr);
      bar.finish();
    });
    req.model_dir = model->dir;
    // The demo's budgets are shares of the float weights, which a quantized model is a fraction of:
    // quantized, it runs in memory (--max-memory places it across CPU and disk).
    if (req.demo && req.quantize) req.demo = false;
    if (req.demo) {
      // The demo's CPU share of the weights, spread over the processes when there are several;
      // one process that sees a GPU spans GPU, CPU and disk.
      req.device_map = "auto";
      req.max_memory = plan::MaxMemory{};
      const auto share = [&](double s) { return ByteSize(static_cast<std::int64_t>(s * static_cast<double>(model->weight_bytes) / processes)); };
      if (processes == 1 && cuda_device_count() > 0) {
        req.max_memory->add(Placement::gpu(0), share(demo_gpu_share));
        req.max_memory->add(Placement::cpu(), share(demo_cpu_share_beside_gpu));
      } else {
        req.max_memory->add(Placement::cpu(), share(demo_cpu_share));
      }
    }
  }
  // Both runs of a check sample with one seed, or their tokens could not agree.
  if (req.check && req.generation.do_sample && !req.generation.seed) req.generation.seed = std::random_device{}();
  const bool text = !req.json && !req.quiet;
  if (text && model) {
    std::cout << std::fixed << std::setprecision(1) << "default model: " << model->dir.string() << " (LlamaForCausalLM, "
              << static_cast<double>(model->parameters) / 1e6 << "M parameters, " << human_bytes(static_cast<double>(model->weight_bytes))
              << " of bfloat16 weights in " << model->shards << (model->shards == 1 ? " file" : " shards");
    if (model->written_now) std::cout << ", written in " << model->write_seconds << " s";
    std::cout << ")\n";
    if (req.demo) {
      const bool gpu = req.max_memory->find(Placement::gpu(0)) != nullptr;
      std::string budgets;
      for (const auto& [where, bytes] : *req.max_memory) budgets += (budgets.empty() ? "" : ",") + where.str() + "=" + human_bytes(bytes.bytes());
      const auto pct = [](double s) { return std::to_string(static_cast<int>(s * 100 + 0.5)) + "%"; };
      std::cout << "demo budget: --max-memory " << budgets << " ("
                << (gpu ? pct(demo_gpu_share) + " of the weights on GPU 0, " + pct(demo_cpu_share_beside_gpu) + " on the CPU"
                        : pct(demo_cpu_share) + " of the weights")
                << (processes > 1 ? ", shared by " + std::to_string(processes) + " processes" : std::string())
                << "); what does not fit is read from disk\n";
    }
    std::cout << std::flush;
  }
  RunResult r = compute_run(req, text ? std::function<void(const RunResult&)>(render_placement) : nullptr);
  if (!main) return exit_ok;
  if (req.check) r.check = check_tokens(req, r);
  render_run(req, r, model);
  if (r.check && !r.check->identical) {
    if (!text && !req.json) std::cerr << "accel run: " << token_check_line(r) << "\n";
    return exit_failed;
  }
  return exit_ok;
}

/// The `accel run` entry of the command table.
inline Command run_command() {
  return {
      .name = "run",
      .summary = "generate with a Hugging Face model folder (GPT-2, LLaMA, Mistral, Qwen2) or the built-in model",
      .usage = "[MODEL_DIR] [--prompt TEXT | --ids 1,2,3] [--max-new-tokens N] [--temperature T] [--top-k K]\n"
               "       [--top-p P] [--seed S] [--dtype float32|float16|bfloat16] [--device-map STRATEGY|FILE.json]\n"
               "       [--max-memory DEV=SIZE,...] [--quantize SCHEME [--double-quant]] [--offload-folder DIR]\n"
               "       [--offload sync|prefetch:N] [--check]\n"
               "       [--json | --quiet] [--progress]",
      .positionals = {{.name = "MODEL_DIR",
                       .help = "config.json + model.safetensors, a sharded index or pytorch_model.bin\n"
                               "(+ tokenizer.json for --prompt), or a LLaMA / GPT-2 .gguf file;\n"
                               "none: the built-in default model",
                       .required = false}},
      .options = {{.name = "--prompt", .placeholder = "TEXT",
                   .help = "the prompt text (needs tokenizer.json; the default model has its own)"},
                  {.name = "--ids", .placeholder = "1,2,3", .help = "the prompt as token ids"},
                  {.name = "--max-new-tokens", .placeholder = "N", .help = "tokens to generate (default 32)"},
                  {.name = "--temperature", .placeholder = "T",
                   .help = "sample with this temperature (0: greedy; default: greedy)"},
                  {.name = "--top-k", .placeholder = "K", .help = "sample from the K most likely tokens (0: all)"},
                  {.name = "--top-p", .placeholder = "P", .help = "sample from the smallest set holding mass P"},
                  {.name = "--seed", .placeholder = "S", .help = "seed of the sampler (reproducible output)"},
                  {.name = "--dtype", .placeholder = "DTYPE",
                   .help = "float32, float16 or bfloat16 (default: config.json's torch_dtype)"},
                  {.name = "--disable-mmap",
                   .help = "copy the weights into memory instead of viewing the mapped checkpoint:\n"
                           "huge pages whatever the page cache holds (decoding 0-9% faster as\n"
                           "measured), about 1 s more load time per GB"},
                  {.name = "--device-map", .placeholder = "MAP",
                   .help = "place the weights: auto, balanced, balanced_low_0, sequential (planned under\n"
                           "--max-memory) or a device-map JSON file; the rest is streamed in per call"},
                  {.name = "--max-memory", .placeholder = "DEV=SIZE,...",
                   .help = "budgets per device (0=20GiB,cpu=8GB,disk=...); implies --device-map auto;\n"
                           "default: each GPU's free memory and the CPU memory available now",
                   .repeatable = true},
                  {.name = "--quantize", .placeholder = "SCHEME",
                   .help = "quantize on load: nf4, fp4, int8 (bitsandbytes), q8_0, q4_0, q4_k (GGUF\n"
                           "blocks), int4-g128 (or -g32, -g64, -g256: TorchAO int4 weight-only groups)\n"
                           "or fp8 (TorchAO float8 weight-only); a folder saved by `accel quantize`\n"
                           "(or transformers) is read as it is"},
                  {.name = "--double-quant", .help = "with --quantize nf4 / fp4: quantize the absmax again"},
                  {.name = "--offload-folder", .placeholder = "DIR",
                   .help = "where disk weights go (a safetensors checkpoint's are read in place, and\n"
                           "a temporary folder holds the index when this is not given)"},
                  {.name = "--offload", .placeholder = "POLICY",
                   .help = "sync (Accelerate's: read when called) or prefetch:N (N 1-4 blocks read\n"
                           "ahead while one computes; default prefetch:2)"},
                  {.name = "--check",
                   .help = "generate again with every weight on the CPU (the GPU, when the run computes\n"
                           "on one) and no hooks, and compare the tokens (exit 1 at a difference); on\n"
                           "for the default model's demo"},
                  {.name = "--json", .help = "one JSON object: model_dir, prompt_ids, generated_ids, text, load_s, ttft_s,\n"
                                             "tokens_per_s, cpu_tier (the CPU kernels' tier, ACCEL_CPU_ARCH caps it), peak_bytes; device_map, placed_bytes, reservations,\n"
                                             "offload_gb_per_s when placed; quantization (method, scheme, layers) when\n"
                                             "quantized; check with --check"},
                  {.name = "--quiet", .help = "print the generated text alone (no prompt, figures or progress)"},
                  {.name = "--progress", .help = "progress bars on stderr even when it is not a terminal"}},
      .details = "Without MODEL_DIR: a LLaMA-architecture model of 155M parameters (310 MB in bfloat16) that\n"
                 "continues the word statistics of a short story, written into $XDG_CACHE_HOME/accel (else\n"
                 "~/.cache/accel) on first use. Without --device-map or --max-memory too, it runs under a CPU\n"
                 "budget of 60% of its weights, the rest read from disk, and checks its tokens (--check); with\n"
                 "a GPU, 60% go to GPU 0, 30% to the CPU and the rest to disk.\n"
                 "\n"
                 "Greedy decoding unless --temperature, --top-k or --top-p asks for sampling; generation stops\n"
                 "at the model's eos token. Timings: load_s builds and loads the model, ttft_s is the prompt's\n"
                 "forward and first token, tokens_per_s the decode speed after it.\n"
                 "\n"
                 "Under mpirun -np N the model is split across the N processes: each plans from its own\n"
                 "--max-memory, loads only its blocks, and passes the hidden states on; --device-map is a\n"
                 "strategy or a JSON file naming processes ({\"model.layers.0\": \"rank1:cpu\", ...}).",
      .run = run_run,
  };
}

}  // namespace accel::cli

// What `accel run` is asked and what it produces: RunRequest, parsed from the arguments with
// every value checked (each error naming its option), RunResult and the token check's result, and
// the process state a split run shares. The command itself: cli_run.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/dist/split_device_map.hpp"
#include "accel/dist/split_model.hpp"
#include "accel/models/generate.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"
#include "cli_quantize.hpp"
#include "cli_values.hpp"
#include "default_model_text.hpp"

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
  /// One token through the loaded model before the prompt (engine::warm_up); --no-warmup: none.
  bool warmup = true;
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
  std::string mixed_precision = "no";  ///< the precision the forward was compiled for (Accelerate's spelling)
  double load_s = 0, ttft_s = 0, tokens_per_s = 0;
  std::optional<double> warmup_s;  ///< the warm-up's time, when one ran
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
  r.warmup = !args.flag("--no-warmup");
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


/// The `accel run` entry of the command table, without its handler (cli_run.hpp adds run_run).
inline Command run_command_spec() {
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
                  {.name = "--no-warmup",
                   .help = "no token through the model before the prompt (by default one runs once it\n"
                           "is loaded, as llama.cpp does: the first prompt then pays nothing once-only)"},
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
                  {.name = "--json", .help = "one JSON object: model_dir, prompt_ids, generated_ids, text, load_s, warmup_s, ttft_s,\n"
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
                 "at the model's eos token. Timings: load_s builds and loads the model, warmup_s runs one token\n"
                 "through it (not for an offloaded model, nor with --no-warmup), ttft_s is the prompt's\n"
                 "forward and first token, tokens_per_s the decode speed after it.\n"
                 "\n"
                 "Under mpirun -np N the model is split across the N processes: each plans from its own\n"
                 "--max-memory, loads only its blocks, and passes the hidden states on; --device-map is a\n"
                 "strategy or a JSON file naming processes ({\"model.layers.0\": \"rank1:cpu\", ...}).",
  };
}

}  // namespace accel::cli

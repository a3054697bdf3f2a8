// accel run MODEL_DIR (--prompt TEXT | --ids 1,2,3) [--max-new-tokens N] [--temperature T]
//           [--top-k K] [--top-p P] [--seed S] [--dtype float32|float16|bfloat16] [--disable-mmap]
//           [--device-map auto|balanced|balanced_low_0|sequential|FILE.json] [--max-memory DEV=SIZE,...]
//           [--offload-folder DIR] [--offload sync|prefetch:N] [--json]
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
// pytorch_model.bin, + tokenizer.json for --prompt) and generates: greedy unless a sampling
// option is given (--temperature, --top-k or --top-p turn sampling on, as do_sample does). The
// text output shows the generated text (or ids), the load time, the time to first token and the
// decode speed; --json prints {"prompt_ids", "generated_ids" (new tokens only), "text" (with a
// tokenizer), "load_s", "ttft_s", "tokens_per_s", ...}.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <fstream>
#include <iostream>
#include <map>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/hooks/align_devices_hook.hpp"
#include "accel/io/weight_reader.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/models/generate.hpp"
#include "accel/tokenize/tokenizer.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"
#include "cli_values.hpp"

namespace accel::cli {

/// What `accel run` was asked.
struct RunRequest {
  std::filesystem::path model_dir;
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
};

/// One amount the planner kept free, and why.
struct Reservation {
  std::string what;
  Placement device;
  double bytes = 0;
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
};

/// Arguments -> RunRequest (values checked, each error naming its option).
inline RunRequest parse_run_request(const ParsedArgs& args) {
  RunRequest r;
  r.model_dir = args.positional(0);
  if (args.value("--prompt") && args.value("--ids")) throw UsageError("give --prompt or --ids, not both");
  if (!args.value("--prompt") && !args.value("--ids")) throw UsageError("give the prompt: --prompt TEXT or --ids 1,2,3");
  r.prompt = args.value("--prompt");
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
  if (const auto v = args.value("--dtype")) {
    const auto d = try_dtype_from_string(*v);
    if (!d || (*d != DType::f32 && *d != DType::f16 && *d != DType::bf16)) {
      throw ValueError("--dtype: '" + *v + "' is not one of float32, float16, bfloat16");
    }
    r.dtype = d;
  }
  r.disable_mmap = args.flag("--disable-mmap");
  r.json = args.flag("--json");
  r.device_map = args.value("--device-map");
  if (!args.values("--max-memory").empty()) {
    r.max_memory = plan::parse_max_memory(detail::join_values(args.values("--max-memory")), "--max-memory", &std::cerr);
    if (!r.device_map) r.device_map = "auto";
  }
  r.offload_folder = args.value("--offload-folder");
  if (const auto v = args.value("--offload")) {
    if (*v == "sync") {
      r.prefetch = 0;
    } else if (v->starts_with("prefetch")) {
      r.prefetch = *v == "prefetch" ? 2 : static_cast<std::size_t>(parse_integer("--offload", v->substr(v->find(':') + 1), 1, 4));
      if (*v != "prefetch" && v->find(':') != 8) throw ValueError("--offload: '" + *v + "' is not sync or prefetch:N (N 1-4)");
    } else {
      throw ValueError("--offload: '" + *v + "' is not sync or prefetch:N (N 1-4)");
    }
  }
  if ((r.offload_folder || args.value("--offload")) && !r.device_map) {
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

/// What generation needs beside the weights, on the device that computes (the first GPU with a
/// budget, else the CPU): the KV cache, one block's activations, the offload ring.
inline std::vector<Reservation> runtime_reservations(const nlohmann::json& config, DType dtype, const plan::MaxMemory& budgets,
                                                     std::int64_t tokens, std::size_t& prefetch, std::string& note) {
  Placement where = Placement::cpu();
  for (const auto& [k, v] : budgets) {
    if (k.is_gpu()) {
      where = k;
      break;
    }
  }
  std::shared_ptr<models::CausalLM> meta;
  {
    auto guard = nn::init_empty_weights(false);
    meta = models::causal_lm_from_hf_config(config, dtype);
  }
  std::vector<Reservation> out;
  const ByteSize kv = plan::estimate_kv_cache_bytes(plan::kv_cache_shape_from_hf_config(config, tokens, 1, dtype));
  out.push_back({"KV cache for " + std::to_string(tokens) + " tokens", where, kv.bytes()});
  // One block's activations in the prompt's forward, in f32: the hidden states and the MLP's
  // intermediates (a few of each), and the attention scores of every head.
  auto count = [&](const char* key, std::int64_t fallback) {
    const auto it = config.find(key);
    return it != config.end() && it->is_number_integer() && it->get<std::int64_t>() > 0 ? it->get<std::int64_t>() : fallback;
  };
  const std::int64_t hidden = count("hidden_size", count("n_embd", 0));
  const std::int64_t inter = count("intermediate_size", count("n_inner", 4 * hidden));
  const std::int64_t heads = count("num_attention_heads", count("n_head", 1));
  const double act = 4.0 * static_cast<double>(tokens) *
                     (6.0 * static_cast<double>(hidden) + 3.0 * static_cast<double>(inter) + static_cast<double>(heads) * static_cast<double>(tokens));
  out.push_back({"activations of one block", where, act});
  // The planner keeps one largest layer free for the offloaded block that computes (Accelerate's
  // rule); read-ahead needs N more.
  const auto block = plan::get_max_layer_size(meta->module(), std::nullopt, meta->module().no_split_modules(), {.dtype = dtype});
  // A ring buffer holds a block's bytes as aligned direct reads: a page of slack each side.
  const double layer = block.max_size.bytes() + 3.0 * static_cast<double>(io::WeightFileReader::alignment);
  // A budget that cannot hold the read-ahead gets less of it: a promise kept beats a deeper ring.
  if (const ByteSize* budget = budgets.find(where)) {
    const double fixed = kv.bytes() + act;
    const std::size_t asked = prefetch;
    while (prefetch > 0 && fixed + static_cast<double>(prefetch + 1) * layer > budget->bytes()) --prefetch;
    if (fixed + layer > budget->bytes()) {
      throw ValueError("--max-memory: " + where.str() + "=" + human_bytes(budget->bytes()) + " cannot hold one block of the model (" +
                       human_bytes(layer) + ", " + block.layer_names.front() + ") beside the KV cache and activations (" +
                       human_bytes(fixed) + ")");
    }
    if (prefetch != asked) {
      note = "read-ahead lowered to " + (prefetch ? "prefetch:" + std::to_string(prefetch) : std::string("sync")) +
             ": " + where.str() + "=" + human_bytes(budget->bytes()) + " holds " + std::to_string(prefetch + 1) +
             " of the largest layer (" + human_bytes(layer) + ") beside the KV cache and activations, not " +
             std::to_string(asked + 1);
    }
  }
  if (prefetch > 0) {
    out.push_back({"read-ahead (" + std::to_string(prefetch) + " x the largest layer, " + block.layer_names.front() +
                       ", beside the one the planner keeps)",
                   where, static_cast<double>(prefetch) * layer});
  }
  return out;
}

/// The stream a placed model's offloading hooks share, or null.
inline std::shared_ptr<hooks::WeightStream> offload_stream(nn::Module& root) {
  for (nn::Module* m : root.modules()) {
    if (const auto* h = dynamic_cast<const hooks::AlignDevicesHookBase*>(m->hook().get()); h && h->options().stream) {
      return h->options().stream;
    }
  }
  return nullptr;
}

/// load_pretrained_causal_lm under the offload policy `prefetch` names (0: sync_offload).
inline dispatch::PretrainedModel load_placed(const std::filesystem::path& dir, const dispatch::LoadPretrainedOptions& o,
                                             std::size_t prefetch) {
  switch (prefetch) {
    case 0: return dispatch::load_pretrained_causal_lm<policy::sync_offload>(dir, o);
    case 1: return dispatch::load_pretrained_causal_lm<policy::prefetch<1>>(dir, o);
    case 2: return dispatch::load_pretrained_causal_lm<policy::prefetch<2>>(dir, o);
    case 3: return dispatch::load_pretrained_causal_lm<policy::prefetch<3>>(dir, o);
    case 4: return dispatch::load_pretrained_causal_lm<policy::prefetch<4>>(dir, o);
    default: throw ValueError("--offload: prefetch:" + std::to_string(prefetch) + " is out of range (1-4)");
  }
}

}  // namespace detail

/// Loads the model (and tokenizer), encodes the prompt and generates.
inline RunResult compute_run(const RunRequest& req) {
  RunResult out;
  std::optional<tokenize::Tokenizer> tok;
  const auto tok_path = req.model_dir / "tokenizer.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(tok_path, ec)) tok = tokenize::Tokenizer::from_file(tok_path.string());
  if (req.prompt && !tok) {
    throw IOError((req.model_dir / "tokenizer.json").string() + ": not found (--prompt needs the model's tokenizer; "
                  "give --ids instead)");
  }
  reset_peak_memory_stats(Device::cpu());
  std::size_t prefetch = req.prefetch;
  dispatch::LoadPretrainedOptions lo{.dtype = req.dtype, .show_progress = !req.json, .disable_mmap = req.disable_mmap};
  if (req.device_map) {
    out.offload = req.prefetch == 0 ? "sync" : "prefetch:" + std::to_string(req.prefetch);
    lo.offload_folder = req.offload_folder;
    lo.max_memory = req.max_memory;
    const bool strategy = *req.device_map == "auto" || *req.device_map == "balanced" ||
                          *req.device_map == "balanced_low_0" || *req.device_map == "sequential";
    if (strategy) {
      lo.device_map = *req.device_map;
      const nlohmann::json config = dispatch::detail::read_config_json(req.model_dir / "config.json");
      const DType dtype = req.dtype.value_or(dispatch::detail::config_dtype(config, "config.json").value_or(DType::f32));
      const std::int64_t tokens = static_cast<std::int64_t>(req.ids.size() + (req.prompt ? req.prompt->size() : 0)) +
                                  req.generation.max_new_tokens;
      const plan::MaxMemory budgets = req.max_memory ? *req.max_memory : plan::get_max_memory();
      out.reservations = detail::runtime_reservations(config, dtype, budgets, tokens, prefetch, out.note);
      out.offload = prefetch == 0 ? "sync" : "prefetch:" + std::to_string(prefetch);
      for (const auto& r : out.reservations) lo.reserve.add(r.device, ByteSize::from_bits(static_cast<std::int64_t>(r.bytes * 8)));
    } else {
      lo.device_map = plan::device_map_from_json(read_json_file(*req.device_map, file_json_limits, std::size_t{1} << 26));
    }
  }
  auto p = req.device_map ? detail::load_placed(req.model_dir, lo, prefetch)
                          : dispatch::load_pretrained_causal_lm(req.model_dir, lo);
  if (p.device_map) {
    out.device_map = p.device_map;
    for (const auto& [name, t] : p.model->module().named_parameters()) {
      const auto place = p.device_map->lookup(name);
      out.placed_bytes[place ? place->str() : "cpu"] += static_cast<double>(t.nbytes());
    }
  }
  out.model_type = p.model->info().model_type;
  out.dtype = p.dtype;
  out.load_s = p.load_seconds;
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
  const Tensor ids = Tensor::from_vector(out.prompt_ids, Shape{1, static_cast<std::int64_t>(out.prompt_ids.size())});
  const auto stream = detail::offload_stream(p.model->module());
  if (stream) stream->reset_stats();
  const auto gen = models::generate(*p.model, ids, g);
  if (stream && gen.prefill_seconds + gen.decode_seconds > 0) {
    out.offload_gb_per_s = static_cast<double>(stream->stats().bytes_read) / (gen.prefill_seconds + gen.decode_seconds) / 1e9;
  }
  out.peak_bytes["cpu"] = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes);
  for (int i = 0; i < cuda_device_count(); ++i) {
    out.peak_bytes[std::to_string(i)] = static_cast<double>(memory_stats(Device::cuda(i)).peak_allocated_bytes);
  }
  out.peak_bytes["rss"] = detail::peak_rss_bytes();
  out.generated_ids = gen.new_tokens.front();
  out.ttft_s = gen.prefill_seconds;
  out.tokens_per_s = gen.tokens_per_second();
  if (tok) {
    std::vector<tokenize::TokenId> t(out.generated_ids.begin(), out.generated_ids.end());
    out.text = tok->decode(t, /*skip_special_tokens=*/true);
  }
  return out;
}

/// RunResult -> stdout.
inline void render_run(const RunRequest& req, const RunResult& r) {
  if (req.json) {
    nlohmann::ordered_json j;
    j["model_type"] = r.model_type;
    j["dtype"] = std::string(dtype_name(r.dtype));
    j["prompt_ids"] = r.prompt_ids;
    j["generated_ids"] = r.generated_ids;
    if (r.text) j["text"] = *r.text;
    j["load_s"] = r.load_s;
    j["ttft_s"] = r.ttft_s;
    j["tokens_per_s"] = r.tokens_per_s;
    if (r.device_map) {
      j["device_map"] = plan::to_ordered_json(*r.device_map);
      j["offload"] = r.offload;
      if (!r.note.empty()) j["offload_note"] = r.note;
      j["placed_bytes"] = r.placed_bytes;
      nlohmann::ordered_json res = nlohmann::ordered_json::array();
      for (const auto& x : r.reservations) res.push_back({{"what", x.what}, {"device", x.device.str()}, {"bytes", x.bytes}});
      j["reservations"] = res;
      j["offload_gb_per_s"] = r.offload_gb_per_s ? nlohmann::ordered_json(*r.offload_gb_per_s) : nlohmann::ordered_json();
    }
    j["peak_bytes"] = r.peak_bytes;
    std::cout << dump_json(j, 2) << "\n";
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
  if (r.device_map) {
    if (!r.note.empty()) std::cout << r.note << "\n";
    std::cout << "placement (" << r.offload << "):";
    for (const auto& [where, bytes] : r.placed_bytes) std::cout << " " << where << " " << human_bytes(bytes);
    std::cout << "\n";
    for (const auto& x : r.reservations) {
      std::cout << "  reserved on " << x.device.str() << ": " << human_bytes(x.bytes) << " for the " << x.what << "\n";
    }
    if (r.offload_gb_per_s) std::cout << "offload stream " << std::setprecision(2) << *r.offload_gb_per_s << " GB/s\n";
  }
  std::cout << "peak:";
  for (const auto& [where, bytes] : r.peak_bytes) std::cout << " " << (where == "rss" ? "resident set" : where) << " " << human_bytes(bytes);
  std::cout << "\n";
}

/// `accel run`.
inline int run_run(const ParsedArgs& args) {
  const RunRequest req = parse_run_request(args);
  render_run(req, compute_run(req));
  return exit_ok;
}

/// The `accel run` entry of the command table.
inline Command run_command() {
  return {
      .name = "run",
      .summary = "generate with a Hugging Face model folder (GPT-2, LLaMA, Mistral, Qwen2)",
      .usage = "MODEL_DIR (--prompt TEXT | --ids 1,2,3) [--max-new-tokens N] [--temperature T] [--top-k K]\n"
               "       [--top-p P] [--seed S] [--dtype float32|float16|bfloat16] [--device-map STRATEGY|FILE.json]\n"
               "       [--max-memory DEV=SIZE,...] [--offload-folder DIR] [--offload sync|prefetch:N] [--json]",
      .positionals = {{"MODEL_DIR",
                       "config.json + model.safetensors, a sharded index or pytorch_model.bin\n"
                       "(+ tokenizer.json for --prompt)"}},
      .options = {{.name = "--prompt", .placeholder = "TEXT", .help = "the prompt text (needs tokenizer.json)"},
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
                  {.name = "--offload-folder", .placeholder = "DIR",
                   .help = "where disk weights go (a safetensors checkpoint's are read in place, and\n"
                           "a temporary folder holds the index when this is not given)"},
                  {.name = "--offload", .placeholder = "POLICY",
                   .help = "sync (Accelerate's: read when called) or prefetch:N (N 1-4 blocks read\n"
                           "ahead while one computes; default prefetch:2)"},
                  {.name = "--json", .help = "one JSON object: prompt_ids, generated_ids, text, load_s, ttft_s, tokens_per_s,\n"
                                             "peak_bytes; device_map, placed_bytes, reservations, offload_gb_per_s when placed"}},
      .details = "Greedy decoding unless --temperature, --top-k or --top-p asks for sampling; generation stops\n"
                 "at the model's eos token. Timings: load_s builds and loads the model, ttft_s is the prompt's\n"
                 "forward and first token, tokens_per_s the decode speed after it.",
      .run = run_run,
  };
}

}  // namespace accel::cli

// accel run [MODEL_DIR] [--prompt TEXT | --ids 1,2,3] [--max-new-tokens N] [--temperature T]
//           [--top-k K] [--top-p P] [--seed S] [--dtype float32|float16|bfloat16] [--disable-mmap] [--no-warmup]
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
// Loading is one library call, engine::from_pretrained (the flags are its options); this file
// parses, generates and renders. Placement: --device-map or --max-memory (which implies
// --device-map auto) loads each weight straight to its place and runs the model with hooks that
// stream the offloaded blocks in. A strategy plans under --max-memory (default:
// the free memory of each GPU and the CPU memory available now), keeping free on the execution
// device what generation needs besides the weights: the KV cache for prompt + max_new_tokens, one
// block's activations, and the read-ahead (N largest layers under prefetch:N, beside the one the
// planner keeps for the block that computes, as Accelerate's does); each reservation is printed. --offload picks how offloaded weights travel (default prefetch:2;
// compiled instantiations for sync and prefetch:1..4). The output adds bytes per device, peak
// bytes per device (the allocator's and the process's resident set) and the offload stream rate.
//
// What it loads, generates and prints: cli_run_render.hpp.
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
#include "accel/engine/from_pretrained.hpp"
#include "accel/hooks/align_devices_hook.hpp"
#include "accel/io/gguf_tokenizer.hpp"
#include "accel/io/weight_reader.hpp"
#include "accel/models/generate.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/quant/quantizers/auto_quantizer.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/tokenize/tokenizer.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"
#include "cli_progress.hpp"
#include "cli_quantize.hpp"
#include "cli_run_render.hpp"
#include "cli_run_request.hpp"
#include "cli_values.hpp"
#include "default_model.hpp"

namespace accel::cli {

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

/// Loads the model (and tokenizer), encodes the prompt and generates. `loaded` hears the result
/// once the model is placed (placement and reservations filled), before generation starts.
inline RunResult compute_run(const RunRequest& req, const std::function<void(const RunResult&)>& loaded = {},
                             const std::string& progress_label = "Loading checkpoint") {
  RunResult out;
  // Found first: a prompt the model cannot encode fails before the load.
  std::optional<tokenize::Tokenizer> tok = engine::load_tokenizer(req.model_dir);
  if (req.prompt && !tok) {
    throw IOError(dispatch::is_gguf_model(req.model_dir)
                      ? req.model_dir.string() + ": no tokenizer in its metadata (--prompt needs one; give --ids instead)"
                      : (req.model_dir / "tokenizer.json").string() + ": not found (--prompt needs the model's tokenizer; "
                                                                    "give --ids instead)");
  }
  reset_peak_memory_stats(Device::cpu());
  const auto& state = run_state();
  const bool split = !req.single_process && state.num_processes() > 1;
  out.processes = split ? state.num_processes() : 1;
  if (req.quantize && dispatch::is_gguf_model(req.model_dir)) {
    throw UsageError("--quantize: " + req.model_dir.string() + " is a GGUF file, quantized already");
  }
  if (split && req.device_map == "balanced_low_0") {
    throw UsageError("--device-map balanced_low_0 has no meaning across processes (auto, balanced, sequential)");
  }
  ByteProgressBar bar(progress_label,
                      progress_wanted(req.progress, req.quiet) && state.is_main_process() ? &std::cerr : nullptr);
  engine::FromPretrainedOptions o{.dtype = req.dtype, .progress = bar.callback(), .disable_mmap = req.disable_mmap};
  o.with_tokenizer = false;
  o.warmup = req.warmup;
  o.offload_depth = req.prefetch;
  if (req.quantize) {
    // The float layers keep the config's dtype (bitsandbytes' own default would be float16).
    const nlohmann::json config = dispatch::read_model_config(req.model_dir);
    o.quantize = run_quantizer("--quantize", *req.quantize, req.double_quant,
                               req.dtype.value_or(dispatch::config_dtype(config, "config.json").value_or(DType::f32)));
  }
  // The tokens generation holds: a strategy keeps their KV cache and activations free.
  o.reserve_tokens = static_cast<std::int64_t>(req.ids.size() + (req.prompt ? req.prompt->size() : 0)) +
                     req.generation.max_new_tokens;
  o.max_memory = req.max_memory;
  o.offload_folder = req.offload_folder;
  if (req.device_map && dispatch::is_device_map_strategy(*req.device_map)) {
    o.device_map = *req.device_map;
  } else if (req.device_map && split) {
    o.split_map = dist::split_device_map_from_json(read_json_file(*req.device_map, file_json_limits, std::size_t{1} << 26));
  } else if (req.device_map) {
    o.device_map = plan::device_map_from_json(read_json_file(*req.device_map, file_json_limits, std::size_t{1} << 26));
  } else if (req.whole_on) {
    plan::DeviceMap whole;
    whole.set("", *req.whole_on);
    o.device_map = std::move(whole);
  }
  engine::LoadedModel m = naming_max_memory_option([&] {
    return split ? engine::from_pretrained(state, req.model_dir, o) : engine::from_pretrained(req.model_dir, o);
  });
  bar.finish();
  dispatch::PretrainedModel& p = m.pretrained;
  std::optional<dist::PipelineStages> stages = m.stages;
  out.split_map = m.split_map;
  out.device_map = p.device_map;
  out.placed_bytes = m.placed_bytes();
  if (m.generation) {
    out.reservations = m.generation->reservations;
    out.note = read_ahead_note(*m.generation);
  }
  if (split || req.device_map) out.offload = m.offload_depth == 0 ? "sync" : "prefetch:" + std::to_string(m.offload_depth);
  out.model_type = p.model->info().model_type;
  out.dtype = p.dtype;
  out.mixed_precision = std::string(policy::to_string(p.model->precision()));
  out.quantization = m.quantization;
  out.quantized_layers = m.quantized_layers;
  if (m.quantization && out.quantized_layers == 0 && req.quantize && !req.quiet) {
    std::cerr << "accel run: --quantize " << *req.quantize
              << ": no layer of this model fits the scheme (GGUF blocks need rows of whole blocks: 32, or 256 for "
                 "q4_k); it runs unquantized\n";
  }
  out.load_s = p.load_seconds;
  out.warmup_s = m.warmup_seconds;
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
  const Device input_device = engine::input_device(*p.model);
  const Tensor ids = input_device.is_cpu() ? host_ids : host_ids.to(input_device);
  const auto stream = m.offload_stream();
  if (stream) stream->reset_stats();
  if (stages) stages->reset_stats();
  const auto gen = models::generate(*p.model, ids, g);
  double streamed = stream ? static_cast<double>(stream->stats().bytes_read) : 0.0;
  std::map<std::string, double> peaks;
  peaks["cpu"] = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes);
  for (int i = 0; i < cuda_device_count(); ++i) {
    peaks[std::to_string(i)] = static_cast<double>(memory_stats(Device::cuda(i)).peak_allocated_bytes);
  }
  peaks["rss"] = static_cast<double>(peak_resident_bytes());
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
  Command c = run_command_spec();
  c.run = run_run;
  return c;
}

}  // namespace accel::cli

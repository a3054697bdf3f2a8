// How `accel run` prints what it did: the placement lines (once loaded), then the text, --quiet
// or --json output.
//
// Loads a Hugging Face model folder (config.json + model.safetensors, a sharded index or
// pytorch_model.bin, + tokenizer.json for --prompt), or a LLaMA / GPT-2 .gguf file (its block-typed
// weights kept quantized), and generates: greedy unless a sampling
// option is given (--temperature, --top-k or --top-p turn sampling on, as do_sample does). The
// text output shows the placement (once loaded), the generated text (or ids), the load time, the
// time to first token and the decode speed; --json prints {"prompt_ids", "generated_ids" (new
// tokens only), "text" (with a tokenizer), "load_s", "warmup_s", "ttft_s", "tokens_per_s", ...}; --quiet
// prints the generated text alone. --check generates again with every weight on the CPU (on the
// GPU, when the placed run computed on one) and no hooks (sampling runs share one seed) and compares the new tokens: a difference exits 1 naming
// the first differing position. A progress bar over the checkpoint's bytes goes to stderr while
// loading, when stderr is a terminal or --progress is given (never under --quiet).
//
#pragma once

#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/simd_arch.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "cli_common.hpp"
#include "cli_run_request.hpp"
#include "default_model.hpp"

namespace accel::cli {

/// The line saying why the read-ahead is shallower than asked, or "" when it is not.
inline std::string read_ahead_note(const plan::GenerationReserve& g) {
  if (g.depth == g.asked_depth || !g.budget) return {};
  return "read-ahead lowered to " + (g.depth ? "prefetch:" + std::to_string(g.depth) : std::string("sync")) + ": " +
         g.device.str() + "=" + human_bytes(g.budget->bytes()) + " holds " + std::to_string(g.depth + 1) +
         " of the largest layer (" + human_bytes(g.layer.bytes()) + ") beside the KV cache and activations, not " +
         std::to_string(g.asked_depth + 1);
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
    j["mixed_precision"] = r.mixed_precision;
    if (req.prompt) j["prompt"] = *req.prompt;
    j["prompt_ids"] = r.prompt_ids;
    j["generated_ids"] = r.generated_ids;
    if (r.text) j["text"] = *r.text;
    j["load_s"] = r.load_s;
    if (r.warmup_s) j["warmup_s"] = *r.warmup_s;
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
            << r.load_s << " s";
  if (r.warmup_s) std::cout << " (warm-up " << *r.warmup_s << " s)";
  std::cout << ", " << r.prompt_ids.size() << " prompt tokens, time to first token " << r.ttft_s
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

}  // namespace accel::cli

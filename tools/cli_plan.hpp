// accel plan MODEL --max-memory 0=20GiB,1=20GiB,cpu=64GB [--no-split A,B] [--dtype bfloat16]
//                  [--reserve 0=2GiB,1=2GiB] [--kv-cache SEQ[xBATCH]] [--offload sync|prefetch:N]
//                  [--balanced | --balanced-low-0] [--json] [--verbose]
//
//   PlanRequest r = parse_plan_request(args);   the command line, checked (no file is read)
//   PlanResult  p = compute_plan(r, log);       the model loaded and placed by the library
//   render_plan(p, r.json, out, notes);         a table, or Accelerate's device-map JSON
//
// Prints infer_auto_device_map's device map as a table (module, device, size) followed by the
// bytes per device, or as Accelerate's JSON with --json (the map alone, so Accelerate can load
// it; notes go to stderr). A config.json is planned as the causal LM (GPT2LMHeadModel,
// LlamaForCausalLM), the model a checkpoint loads into. --no-split defaults to the model's own
// no_split_modules(). --reserve keeps bytes free per device (activations, workspace);
// --kv-cache adds the KV cache of SEQ tokens ("max": the config's context length) x BATCH
// sequences, in the --dtype (float32 without one, like a config's weights), spread evenly over
// the GPUs of --max-memory (the cpu when there is none). --offload prefetch:N keeps free, where
// offloaded blocks run, the read-ahead ring that `accel run` reserves (plan::read_ahead_reserve). With --balanced the reserve comes off
// the budgets before they are balanced, so every GPU keeps its share free.
#pragma once

#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"
#include "cli_values.hpp"

namespace accel::cli {

/// plan's sizes: binary units labelled as such (Accelerate's convert_bytes says "MB" for MiB;
/// estimate-memory keeps that for parity, plan has no Accelerate output to match).
inline std::string plan_bytes(double size) { return human_bytes(size, ByteUnits::binary); }

/// `--kv-cache SEQ[xBATCH]`: `tokens` unset means the config's context length ("max").
struct KVCacheRequest {
  std::optional<std::int64_t> tokens;
  std::int64_t batch = 1;
};

/// What `accel plan` was asked, every value parsed and checked; nothing read from disk yet.
struct PlanRequest {
  std::string model;                                 ///< MODEL as given
  plan::MaxMemory budgets;                           ///< --max-memory, in Accelerate's device order
  std::optional<std::vector<std::string>> no_split;  ///< unset: the model's own no_split_modules()
  std::optional<DType> dtype;                        ///< unset: weights as stored (float32 for configs)
  plan::MaxMemory reserve;                           ///< --reserve
  std::optional<KVCacheRequest> kv_cache;
  std::optional<std::size_t> prefetch;               ///< --offload: blocks read ahead (0: sync)
  bool balanced = false;  ///< --balanced or --balanced-low-0
  bool low_zero = false;  ///< --balanced-low-0
  bool json = false;
  bool verbose = false;
};

/// The KV cache a plan keeps free, and where.
struct KVCacheReserve {
  plan::KVCacheShape shape;
  ByteSize total;
  plan::MaxMemory share;  ///< per GPU of --max-memory, or all on the cpu when it names none
  bool on_gpus = false;
};

/// What compute_plan found: the map and everything its table shows.
struct PlanResult {
  DeviceMap device_map;
  plan::ModuleSizes sizes;                          ///< every module, sized as planned
  plan::MaxMemory budgets;                          ///< --max-memory
  plan::MaxMemory reserve;                          ///< --reserve plus the KV cache
  std::optional<plan::MaxMemory> balanced_budgets;  ///< what was planned under, when balanced
  std::optional<KVCacheReserve> kv_cache;
  std::optional<plan::ReadAheadReserve> read_ahead;  ///< --offload prefetch:N
  Placement read_ahead_on = Placement::cpu();        ///< where the offloaded blocks run
};

namespace detail {

/// "4096", "4096x8", "max", "maxx8" -> tokens (unset for the config's context length) and batch.
inline KVCacheRequest parse_kv_cache_arg(const std::string& text) {
  const auto positive = [&](const std::string& s) {
    if (!detail::all_digits(s)) {
      throw ValueError("--kv-cache '" + text + "' is not SEQ[xBATCH] (SEQ a token count or \"max\")");
    }
    return parse_integer("--kv-cache", s, 1, std::numeric_limits<std::int64_t>::max());
  };
  const auto x = text.find('x', text.starts_with("max") ? 3 : 0);
  const std::string seq = text.substr(0, x);
  KVCacheRequest r;
  r.batch = x == std::string::npos ? 1 : positive(text.substr(x + 1));
  if (seq != "max") r.tokens = positive(seq);
  return r;
}

/// The KV cache of `r` for MODEL's config, shared out over the GPUs that have a budget.
inline KVCacheReserve kv_cache_reserve(const std::string& model, const KVCacheRequest& r, DType dtype,
                                       const plan::MaxMemory& budgets) {
  const auto config = find_hf_config(model);
  if (!config) throw ValueError("--kv-cache needs a transformers config.json: MODEL itself or one beside it");
  KVCacheReserve kv;
  kv.shape = plan::kv_cache_shape_from_hf_config(*config, r.tokens, r.batch, dtype);
  kv.total = plan::estimate_kv_cache_bytes(kv.shape);
  std::vector<int> gpus;
  for (const auto& [k, v] : budgets) {
    if (k.is_gpu() && v > ByteSize{}) gpus.push_back(k.index());
  }
  kv.on_gpus = !gpus.empty();
  kv.share = gpus.empty() ? plan::MaxMemory{{Placement::cpu(), kv.total}} : plan::spread_kv_cache_reserve(kv.total, gpus);
  return kv;
}

/// "KV cache: 2 x 32 layers x ... = 4 GB, reserved on GPU 0, 1 (2 GB each)".
inline std::string kv_cache_note(const KVCacheReserve& kv) {
  std::string where;
  for (const auto& [k, v] : kv.share) where += (where.empty() ? "" : ", ") + k.str();
  const auto& s = kv.shape;
  return "KV cache: 2 x " + std::to_string(s.layers) + " layers x " + std::to_string(s.kv_heads) + " KV heads x " +
         std::to_string(s.head_dim) + " head dim x " + std::to_string(s.max_seq) + " tokens x batch " +
         std::to_string(s.batch) + " in " + std::string(dtype_name(s.dtype)) + " = " + plan_bytes(kv.total.bytes()) +
         ", reserved on " + (kv.on_gpus ? "GPU " : "cpu") + where + " (" + plan_bytes(kv.share.begin()->second.bytes()) +
         (kv.share.size() > 1 ? " each" : "") + ")";
}

}  // namespace detail

/// The command line of `accel plan` as a PlanRequest. ValueError (exit 1) on a value it cannot
/// read, UsageError (exit 2) on options that exclude each other.
inline PlanRequest parse_plan_request(const ParsedArgs& args) {
  if (args.flag("--balanced") && args.flag("--balanced-low-0")) {
    throw UsageError("--balanced and --balanced-low-0 exclude each other");
  }
  PlanRequest r;
  r.model = args.positional(0);
  // A size such as "200mb" counts bits, as Accelerate reads it: said on stderr, never silently.
  r.budgets = plan::parse_max_memory(detail::join_values(args.values("--max-memory")), "--max-memory", &std::cerr);
  r.no_split = args.list("--no-split");
  if (auto d = args.value("--dtype")) {
    try {
      r.dtype = dtype_from_string(*d);
    } catch (const Error& e) {
      throw ValueError(std::string("--dtype: ") + e.what());
    }
  }
  r.reserve = plan::parse_max_memory(detail::join_values(args.values("--reserve")), "--reserve", &std::cerr);
  if (auto kv = args.value("--kv-cache")) r.kv_cache = detail::parse_kv_cache_arg(*kv);
  if (auto v = args.value("--offload")) r.prefetch = parse_offload_policy(*v);
  r.low_zero = args.flag("--balanced-low-0");
  r.balanced = args.flag("--balanced") || r.low_zero;
  r.json = args.flag("--json");
  r.verbose = args.flag("--verbose");
  return r;
}

/// Loads MODEL and places it: infer_auto_device_map under the budgets (balanced first when asked),
/// with the reserve and KV cache kept free. The planner's log (--verbose) and warnings go to `log`.
inline PlanResult compute_plan(const PlanRequest& r, std::ostream& log) {
  auto model = load_cli_model(r.model);
  plan::InferOptions o;
  o.no_split_module_classes = r.no_split ? *r.no_split : model->no_split_modules();
  o.sizes.dtype = r.dtype;
  o.verbose = r.verbose;
  o.log = &log;
  o.warnings = &log;

  PlanResult p;
  p.budgets = r.budgets;
  p.reserve = r.reserve;
  if (r.kv_cache) {
    p.kv_cache = detail::kv_cache_reserve(r.model, *r.kv_cache, r.dtype.value_or(DType::f32), r.budgets);
    for (const auto& [k, v] : p.kv_cache->share) p.reserve.add(k, v);
  }
  if (r.prefetch.value_or(0) > 0) {
    // Offloaded blocks run on the first GPU with a budget, else on the CPU (dispatch_model's rule).
    for (const auto& [k, v] : r.budgets) {
      if (k.is_gpu() && v > ByteSize{}) {
        p.read_ahead_on = k;
        break;
      }
    }
    p.read_ahead = plan::read_ahead_reserve(*model, o.no_split_module_classes, *r.prefetch, o.sizes);
    p.reserve.add(p.read_ahead_on, p.read_ahead->bytes);
  }
  plan::MaxMemory placed_under = r.budgets;
  if (r.balanced) {
    plan::MaxMemory free = r.budgets;
    for (const auto& [k, v] : p.reserve) free.reserve(k, v);
    placed_under = plan::get_balanced_memory(*model, free, o.no_split_module_classes, o.sizes, r.low_zero);
    p.balanced_budgets = placed_under;
  } else {
    o.reserve = p.reserve;
  }
  p.device_map = infer_auto_device_map(*model, placed_under, o);
  p.sizes = plan::compute_module_sizes(*model, o.sizes);
  return p;
}

/// Writes the plan to `out`: Accelerate's device-map JSON alone when `json` (the KV-cache note then
/// goes to `notes`), else the note, the module table and the per-device table.
inline void render_plan(const PlanResult& p, bool json, std::ostream& out, std::ostream& notes) {
  const std::string kv_note = p.kv_cache ? detail::kv_cache_note(*p.kv_cache) : "";
  std::string ra_note;
  if (p.read_ahead) {
    ra_note = "read-ahead: prefetch:" + std::to_string(p.read_ahead->depth) + " = " + std::to_string(p.read_ahead->depth) +
              " x the largest layer (" + p.read_ahead->largest_layer + ", " + plan_bytes(p.read_ahead->layer.bytes()) +
              " with read alignment) = " + plan_bytes(p.read_ahead->bytes.bytes()) + ", reserved on " + p.read_ahead_on.str() +
              " beside the layer the planner keeps for the block that computes";
  }
  if (json) {
    if (!kv_note.empty()) notes << kv_note << "\n";
    if (!ra_note.empty()) notes << ra_note << "\n";
    out << dump_json(plan::to_ordered_json(p.device_map), 1) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  std::map<Placement, ByteSize> per_device;
  for (const auto& [name, placement] : p.device_map) {
    rows.push_back({name.empty() ? "(whole model)" : name, placement.str(), plan_bytes(p.sizes[name].bytes())});
    per_device[placement] += p.sizes[name];
  }
  if (!kv_note.empty()) out << kv_note << "\n";
  if (!ra_note.empty()) out << ra_note << "\n";
  print_table(out, {"module", "device", "size"}, rows);
  const bool balanced = p.balanced_budgets.has_value();
  std::vector<std::string> headers = {"device", "placed", "reserved", "budget"};
  if (balanced) headers.push_back("balanced budget");
  std::vector<std::vector<std::string>> totals;
  for (const auto& [k, budget] : p.budgets) {
    const auto it = per_device.find(k);
    const ByteSize* reserved = p.reserve.find(k);
    std::vector<std::string> row = {k.str(), plan_bytes(it == per_device.end() ? 0.0 : it->second.bytes()),
                                    plan_bytes(reserved ? reserved->bytes() : 0.0), plan_bytes(budget.bytes())};
    if (balanced) {
      const ByteSize* b = p.balanced_budgets->find(k);
      row.push_back(plan_bytes(b ? b->bytes() : 0.0));
    }
    totals.push_back(std::move(row));
  }
  if (const auto disk = per_device.find(Placement::disk()); !p.budgets.find(Placement::disk()) && disk != per_device.end()) {
    std::vector<std::string> row = {disk->first.str(), plan_bytes(disk->second.bytes()), plan_bytes(0.0), "unbounded"};
    if (balanced) row.push_back("unbounded");
    totals.push_back(std::move(row));
  }
  print_table(out, headers, totals);
}

/// `accel plan`: parse, compute, render.
inline int run_plan(const ParsedArgs& args) {
  const PlanRequest r = parse_plan_request(args);
  render_plan(compute_plan(r, std::cerr), r.json, std::cout, std::cerr);
  return exit_ok;
}

/// The `accel plan` entry of the command table.
inline Command plan_command() {
  return {
      .name = "plan",
      .summary = "a device map for MODEL under memory budgets, like Accelerate's infer_auto_device_map",
      .usage = "MODEL --max-memory DEVICE=SIZE,... [--no-split A,B] [--dtype DTYPE]\n"
               "       [--reserve DEVICE=SIZE,...] [--kv-cache SEQ[xBATCH]] [--offload sync|prefetch:N]\n"
               "       [--balanced | --balanced-low-0] [--json] [--verbose]",
      .positionals = {{"MODEL",
                       "a transformers config.json, a model spec JSON, a checkpoint\n"
                       "(.safetensors, .bin, a sharded *.index.json) or a folder of one"}},
      .options =
          {
              {.name = "--max-memory",
               .placeholder = "DEVICE=SIZE,...",
               .help = "budget per device (0, 1, ... for GPUs, cpu, disk), e.g.\n"
                       "0=20GiB,1=20GiB,cpu=64GB; what fits nowhere goes to disk",
               .repeatable = true,
               .required = true},
              {.name = "--no-split",
               .placeholder = "CLASS,...",
               .help = "module classes kept whole (default: the model's own)",
               .repeatable = true},
              {.name = "--dtype", .placeholder = "DTYPE", .help = "size floating-point weights as float16, bfloat16, ..."},
              {.name = "--reserve",
               .placeholder = "DEVICE=SIZE,...",
               .help = "bytes each device keeps free (activations, workspace)",
               .repeatable = true},
              {.name = "--kv-cache",
               .placeholder = "SEQ[xBATCH]",
               .help = "also keep free the KV cache of SEQ tokens (\"max\": the\n"
                       "config's context length) x BATCH sequences in --dtype\n"
                       "(float32 without it), split evenly over the GPUs"},
              {.name = "--offload",
               .placeholder = "POLICY",
               .help = "prefetch:N (N 1-4) also keeps free, where offloaded blocks run\n"
                       "(the first GPU, else the cpu), the read-ahead ring: N x the\n"
                       "largest layer; sync keeps nothing more (the default)"},
              {.name = "--balanced",
               .help = "balance the GPU budgets first (get_balanced_memory); the\n"
                       "reserve comes off the budgets before they are balanced"},
              {.name = "--balanced-low-0", .help = "like --balanced, keeping GPU 0 as free as possible"},
              {.name = "--json", .help = "the device map alone, as Accelerate's device_map JSON"},
              {.name = "--verbose", .help = "explain every placement decision on stderr"},
          },
      .details = "A config.json is planned as the causal LM (with lm_head), the model its checkpoint\n"
                 "loads into. SIZE is bytes or a number with a unit: 10GB and 512MB count in powers of\n"
                 "10, 1.5GiB and 512MiB in powers of 2.",
      .run = run_plan,
  };
}

}  // namespace accel::cli

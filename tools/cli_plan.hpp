// accel plan MODEL --max-memory 0=20GiB,1=20GiB,cpu=64GB [--no-split A,B] [--dtype bfloat16]
//                  [--reserve 0=2GiB,1=2GiB] [--kv-cache SEQ[xBATCH]] [--balanced | --balanced-low-0]
//                  [--json] [--verbose]
//
// Prints infer_auto_device_map's device map as a table (module, device, size) followed by the
// bytes per device, or as Accelerate's JSON with --json (the map alone, so Accelerate can load
// it; notes go to stderr). A config.json is planned as the causal LM (GPT2LMHeadModel,
// LlamaForCausalLM), the model a checkpoint loads into. --no-split defaults to the model's own
// no_split_modules(). --reserve keeps bytes free per device (activations, workspace);
// --kv-cache adds the KV cache of SEQ tokens ("max": the config's context length) x BATCH
// sequences, in the --dtype (float32 without one, like a config's weights), spread evenly over
// the GPUs of --max-memory (the cpu when there is none). With --balanced the reserve comes off
// the budgets before they are balanced, so every GPU keeps its share free.
#pragma once

#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "cli_common.hpp"

namespace accel::cli {

namespace detail {

/// "4096", "4096x8", "max", "maxx8" -> (tokens or nullopt for the config's context length, batch).
inline std::pair<std::optional<std::int64_t>, std::int64_t> parse_kv_cache_arg(const std::string& text) {
  const auto bad = [&] { return ValueError("--kv-cache '" + text + "' is not SEQ[xBATCH] (SEQ a token count or \"max\")"); };
  const auto positive = [&](const std::string& s) {
    if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos) throw bad();
    const std::int64_t v = std::stoll(s);
    if (v <= 0) throw bad();
    return v;
  };
  const auto x = text.find('x', text.starts_with("max") ? 3 : 0);
  const std::string seq = text.substr(0, x);
  const std::int64_t batch = x == std::string::npos ? 1 : positive(text.substr(x + 1));
  if (seq == "max") return {std::nullopt, batch};
  return {positive(seq), batch};
}

inline void add_reserve(plan::MaxMemory& reserve, plan::MemoryKey key, ByteSize bytes) {
  for (auto& [k, v] : reserve) {
    if (k == key) {
      v += bytes;
      return;
    }
  }
  reserve.emplace_back(key, bytes);
}

}  // namespace detail

inline int run_plan(int argc, char** argv) {
  const CliArgs args(argc, argv, 2, {"--json", "--verbose", "--balanced", "--balanced-low-0"});
  const auto unknown = args.unknown({"--max-memory", "--no-split", "--dtype", "--reserve", "--kv-cache", "--json",
                                     "--verbose", "--balanced", "--balanced-low-0"});
  if (args.positionals().size() != 1 || !args.option("--max-memory") || !unknown.empty()) {
    std::cerr << "usage: accel plan MODEL --max-memory 0=20GiB,1=20GiB,cpu=64GB [--no-split A,B] [--dtype bfloat16]\n"
                 "                  [--reserve 0=2GiB] [--kv-cache SEQ[xBATCH]] [--balanced | --balanced-low-0]\n"
                 "                  [--json] [--verbose]\n"
                 "  a config.json is planned as the causal LM (with lm_head), the model its checkpoint loads into\n"
                 "  --max-memory: DEVICE=SIZE items (0, 1, ..., cpu, disk); what fits nowhere goes to disk\n"
                 "  --reserve: bytes each device keeps free (activations, workspace)\n"
                 "  --kv-cache: also keep free the KV cache of SEQ tokens (\"max\": the config's context length)\n"
                 "              x BATCH sequences in --dtype (float32 without it), split evenly over the GPUs\n"
                 "  --json: the device map alone, as Accelerate's device_map JSON\n";
    for (const auto& u : unknown) std::cerr << "unknown option " << u << "\n";
    return 2;
  }
  if (args.flag("--balanced") && args.flag("--balanced-low-0")) throw ValueError("--balanced and --balanced-low-0 exclude each other");
  const std::string input = args.positionals()[0];
  auto model = load_cli_model(input);
  const plan::MaxMemory budgets = plan::parse_max_memory(*args.option("--max-memory"));
  plan::InferOptions o;
  o.no_split_module_classes = args.option("--no-split") ? split_list(*args.option("--no-split")) : model->no_split_modules();
  if (auto d = args.option("--dtype")) o.sizes.dtype = dtype_from_string(*d);
  plan::MaxMemory reserve;
  if (auto r = args.option("--reserve")) reserve = plan::parse_max_memory(*r);

  std::string kv_note;
  if (auto kv = args.option("--kv-cache")) {
    const auto config = find_hf_config(input);
    if (!config) throw ValueError("--kv-cache needs a transformers config.json: MODEL itself or one beside it");
    const auto [seq, batch] = detail::parse_kv_cache_arg(*kv);
    const plan::KVCacheShape shape =
        plan::kv_cache_shape_from_hf_config(*config, seq, batch, o.sizes.dtype.value_or(DType::f32));
    const ByteSize total = plan::estimate_kv_cache_bytes(shape);
    std::vector<int> gpus;
    for (const auto& [k, v] : budgets) {
      if (k.is_gpu() && v > ByteSize{}) gpus.push_back(k.index);
    }
    const plan::MaxMemory share =
        gpus.empty() ? plan::MaxMemory{{plan::MemoryKey::cpu(), total}} : plan::spread_kv_cache_reserve(total, gpus);
    std::string where;
    for (const auto& [k, v] : share) {
      detail::add_reserve(reserve, k, v);
      where += (where.empty() ? "" : ", ") + k.str();
    }
    kv_note = "KV cache: 2 x " + std::to_string(shape.layers) + " layers x " + std::to_string(shape.kv_heads) +
              " KV heads x " + std::to_string(shape.head_dim) + " head dim x " + std::to_string(shape.max_seq) +
              " tokens x batch " + std::to_string(shape.batch) + " in " + std::string(dtype_name(shape.dtype)) + " = " +
              human_bytes(total.bytes()) + ", reserved on " + (gpus.empty() ? "cpu" : "GPU ") + where + " (" +
              human_bytes(share.front().second.bytes()) + (share.size() > 1 ? " each" : "") + ")";
  }
  o.verbose = args.flag("--verbose");
  o.log = &std::cerr;
  o.warnings = &std::cerr;

  const bool balanced = args.flag("--balanced") || args.flag("--balanced-low-0");
  plan::MaxMemory placed_under = budgets;
  if (balanced) {
    plan::MaxMemory free = budgets;
    for (auto& [k, v] : free) {
      if (const ByteSize* r = plan::find_budget(reserve, k)) v = *r > v ? ByteSize{} : v - *r;
    }
    placed_under = plan::get_balanced_memory(*model, free, o.no_split_module_classes, o.sizes, args.flag("--balanced-low-0"));
  } else {
    o.reserve = reserve;
  }
  const DeviceMap dm = infer_auto_device_map(*model, placed_under, o);
  if (args.flag("--json")) {
    if (!kv_note.empty()) std::cerr << kv_note << "\n";
    std::cout << plan::to_ordered_json(dm).dump(1) << "\n";
    return 0;
  }
  const auto sizes = plan::compute_module_sizes(*model, o.sizes);
  std::vector<std::vector<std::string>> rows;
  std::map<std::string, ByteSize> per_device;
  for (const auto& [name, p] : dm) {
    rows.push_back({name.empty() ? "(whole model)" : name, p.str(), human_bytes(sizes[name].bytes())});
    per_device[p.str()] += sizes[name];
  }
  if (!kv_note.empty()) std::cout << kv_note << "\n";
  print_table(std::cout, {"module", "device", "size"}, rows);
  std::vector<std::string> headers = {"device", "placed", "reserved", "budget"};
  if (balanced) headers.push_back("balanced budget");
  std::vector<std::vector<std::string>> totals;
  for (const auto& [k, budget] : budgets) {
    const auto it = per_device.find(k.str());
    const ByteSize* r = plan::find_budget(reserve, k);
    std::vector<std::string> row = {k.str(), human_bytes(it == per_device.end() ? 0.0 : it->second.bytes()),
                                    human_bytes(r ? r->bytes() : 0.0), human_bytes(budget.bytes())};
    if (balanced) {
      const ByteSize* b = plan::find_budget(placed_under, k);
      row.push_back(human_bytes(b ? b->bytes() : 0.0));
    }
    totals.push_back(std::move(row));
  }
  if (!plan::find_budget(budgets, plan::MemoryKey::disk()) && per_device.count("disk")) {
    std::vector<std::string> row = {"disk", human_bytes(per_device["disk"].bytes()), human_bytes(0.0), "unbounded"};
    if (balanced) row.push_back("unbounded");
    totals.push_back(std::move(row));
  }
  print_table(std::cout, headers, totals);
  return 0;
}

}  // namespace accel::cli

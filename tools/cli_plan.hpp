// accel plan MODEL --max-memory 0=20GiB,1=20GiB,cpu=64GB [--no-split A,B] [--dtype bfloat16]
//                  [--reserve 0=2GiB,1=2GiB] [--balanced | --balanced-low-0] [--json] [--verbose]
//
// Prints infer_auto_device_map's device map as a table (module, device, size) followed by the
// bytes per device, or as Accelerate's JSON with --json. --no-split defaults to the model's own
// no_split_modules(); --reserve keeps bytes free per device (KV cache, activations).
#pragma once

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/module_sizes.hpp"
#include "cli_common.hpp"

namespace accel::cli {

inline int run_plan(int argc, char** argv) {
  const CliArgs args(argc, argv, 2, {"--json", "--verbose", "--balanced", "--balanced-low-0"});
  const auto unknown = args.unknown({"--max-memory", "--no-split", "--dtype", "--reserve", "--json", "--verbose",
                                     "--balanced", "--balanced-low-0"});
  if (args.positionals().size() != 1 || !args.option("--max-memory") || !unknown.empty()) {
    std::cerr << "usage: accel plan MODEL --max-memory 0=20GiB,1=20GiB,cpu=64GB [--no-split A,B] [--dtype bfloat16]\n"
                 "                  [--reserve 0=2GiB] [--balanced | --balanced-low-0] [--json] [--verbose]\n";
    for (const auto& u : unknown) std::cerr << "unknown option " << u << "\n";
    return 2;
  }
  auto model = load_cli_model(args.positionals()[0]);
  plan::MaxMemory mm = plan::parse_max_memory(*args.option("--max-memory"));
  plan::InferOptions o;
  o.no_split_module_classes = args.option("--no-split") ? split_list(*args.option("--no-split")) : model->no_split_modules();
  if (auto d = args.option("--dtype")) o.sizes.dtype = dtype_from_string(*d);
  if (auto r = args.option("--reserve")) o.reserve = plan::parse_max_memory(*r);
  o.verbose = args.flag("--verbose");
  o.log = &std::cerr;
  o.warnings = &std::cerr;
  if (args.flag("--balanced") || args.flag("--balanced-low-0")) {
    mm = plan::get_balanced_memory(*model, mm, o.no_split_module_classes, o.sizes, args.flag("--balanced-low-0"));
  }
  const DeviceMap dm = infer_auto_device_map(*model, mm, o);
  if (args.flag("--json")) {
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
  print_table(std::cout, {"module", "device", "size"}, rows);
  std::vector<std::vector<std::string>> totals;
  for (const auto& [k, budget] : mm) {
    const auto it = per_device.find(k.str());
    totals.push_back({k.str(), human_bytes(it == per_device.end() ? 0.0 : it->second.bytes()), human_bytes(budget.bytes())});
  }
  if (!plan::find_budget(mm, plan::MemoryKey::disk()) && per_device.count("disk")) {
    totals.push_back({"disk", human_bytes(per_device["disk"].bytes()), "unbounded"});
  }
  print_table(std::cout, {"device", "placed", "budget"}, totals);
  return 0;
}

}  // namespace accel::cli

// A device map across processes: which process (rank) holds each block, and where on it. The plan
// of a model split over several processes (or hosts) whose memory together holds it.
//
//   RankPlacement p = parse_rank_placement("rank1:cpu");     {rank 1, cpu}; "rank0:0", "rank2:cuda:1", "rank1:disk"
//   SplitDeviceMap sm;  sm.set("model.layers.0", {1, Placement::cpu()});
//   sm.lookup("model.layers.0.mlp.up_proj.weight") -> {1, cpu}     (longest dotted prefix, as DeviceMap)
//   sm.local(rank)          this process's DeviceMap: its entries' placements, every other entry "meta"
//                           (load_checkpoint_in_model leaves them unread, dispatch_model leaves them alone)
//   to_json(sm) / split_device_map_from_json(j)     {"model.embed_tokens": "rank0:cpu", "lm_head": "rank1:disk"}
//   check_split_device_map(model, sm, num_processes)   every tensor covered once, every rank < num_processes
//
//   std::vector<MaxMemory> budgets = gather_max_memory(state, get_max_memory());   each process's own budget
//   SplitDeviceMap sm = infer_split_device_map(model, budgets, {.strategy = "balanced", .infer = {...}});
//
// Planning. infer_split_device_map runs the planner of one process (plan::infer_auto_device_map)
// over every rank's devices in rank order (rank 0's GPUs by id and its CPU, then rank 1's, ...),
// each standing for one GPU of a single process: the greedy walk Accelerate uses to fill GPU 0,
// then GPU 1, fills rank 0, then rank 1, with the same rules (no-split classes stay whole, tied
// weights share a device, each device a contiguous run of blocks). "auto" and "balanced" first
// even the ranks' totals with plan::get_balanced_memory, as Accelerate's "auto" and "balanced"
// even GPUs, and cut each rank's devices to its share; "sequential" does not. What fits on no
// rank goes to disk on the last rank that names a disk budget, else on the last rank (every
// rank's memory comes first); when something goes to disk, that rank's first device keeps room
// for the largest layer, which streams the disk blocks in (a second plan). No other device keeps
// that room: nothing else is offloaded. Every process computes the same plan from the same
// gathered budgets.
//
// Differences from Accelerate: Accelerate places a model within one process (its pipeline
// inference, prepare_pippy, splits a traced torch graph instead). The rank prefix ("rank1:cpu")
// is this library's spelling; a map without it is a plan::DeviceMap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/byte_size.hpp"
#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/nn/module.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"

namespace accel::dist {

/// A placement on one process: rank `rank`'s GPU, CPU or disk.
struct RankPlacement {
  int rank = 0;
  Placement where = Placement::cpu();

  /// "rank1:cpu", "rank0:0", "rank2:disk".
  std::string str() const { return "rank" + std::to_string(rank) + ":" + where.str(); }
  friend bool operator==(const RankPlacement&, const RankPlacement&) = default;
};

/// "rankN:" followed by a device-map value ("cpu", "disk", "N", "cuda:N"); ValueError otherwise.
inline RankPlacement parse_rank_placement(std::string_view s) {
  const auto fail = [&] {
    return ValueError("'" + std::string(s) + "' is not a placement on a process: expected rankN:cpu, rankN:disk, "
                      "rankN:cuda:I or rankN:I (N the process index, I a GPU id)");
  };
  if (!s.starts_with("rank")) throw fail();
  const std::size_t colon = s.find(':');
  if (colon == std::string_view::npos || colon == 4 || colon > 13) throw fail();
  int rank = 0;
  for (char c : s.substr(4, colon - 4)) {
    if (c < '0' || c > '9') throw fail();
    rank = rank * 10 + (c - '0');
  }
  const std::string_view rest = s.substr(colon + 1);
  if (rest == "meta") throw fail();
  Placement where;
  try {
    where = rest == "disk" || rest == "cpu" || rest.starts_with("cuda") ? Placement::parse(rest) : plan::parse_memory_key(rest);
  } catch (const Error&) {
    throw fail();
  }
  return {rank, where};
}

/// Ordered dotted module / tensor name -> RankPlacement (see the header comment).
class SplitDeviceMap {
 public:
  using Entry = std::pair<std::string, RankPlacement>;

  /// Sets `name` (kept at its position when present, appended otherwise).
  void set(std::string name, RankPlacement p) {
    if (const auto it = index_.find(name); it != index_.end()) {
      entries_[it->second].second = p;
      return;
    }
    entries_.emplace_back(std::move(name), p);
    index_.emplace(entries_.back().first, entries_.size() - 1);
  }
  /// The placement of tensor or module `name`: its longest covering key's (plan::DeviceMap::lookup).
  std::optional<RankPlacement> lookup(std::string_view name) const {
    std::optional<RankPlacement> found;
    plan::DeviceMap::for_each_covering_key(name, [&](std::string_view key) {
      const auto it = index_.find(std::string(key));
      if (it != index_.end()) found = entries_[it->second].second;
      return found.has_value();
    });
    return found;
  }
  /// Process `rank`'s view: its own entries' placements; every other entry on meta.
  plan::DeviceMap local(int rank) const {
    plan::DeviceMap dm;
    for (const auto& [name, p] : entries_) dm.set(name, p.rank == rank ? p.where : Placement(Device::meta()));
    return dm;
  }
  /// The ranks that hold something, ascending.
  std::vector<int> ranks() const {
    std::vector<int> r;
    for (const auto& e : entries_) r.push_back(e.second.rank);
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    return r;
  }
  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  auto begin() const noexcept { return entries_.begin(); }
  auto end() const noexcept { return entries_.end(); }
  const std::vector<Entry>& entries() const noexcept { return entries_; }
  friend bool operator==(const SplitDeviceMap& a, const SplitDeviceMap& b) { return a.entries_ == b.entries_; }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// {"name": "rank1:cpu", ...} in the map's order.
inline nlohmann::ordered_json to_json(const SplitDeviceMap& sm) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [name, p] : sm) j[name] = p.str();
  return j;
}

/// The map of to_json; ValueError naming the key whose value is not a "rankN:..." string.
template <class Json>
SplitDeviceMap split_device_map_from_json(const Json& j) {
  if (!j.is_object()) throw ValueError("a split device map is a JSON object of name -> \"rankN:device\"");
  SplitDeviceMap sm;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string()) {
      throw ValueError("split device map: the value of '" + it.key() + "' is not a string like \"rank1:cpu\"");
    }
    try {
      sm.set(it.key(), parse_rank_placement(it.value().template get<std::string>()));
    } catch (const ValueError& e) {
      throw ValueError("split device map: '" + it.key() + "': " + e.what());
    }
  }
  return sm;
}

/// Every tensor of `model` covered by exactly one key (plan::check_device_map's rules) and every
/// rank below `num_processes`; ValueError naming the entry otherwise.
inline void check_split_device_map(const nn::Module& model, const SplitDeviceMap& sm, int num_processes) {
  for (const auto& [name, p] : sm) {
    if (p.rank < 0 || p.rank >= num_processes) {
      throw ValueError("split device map: '" + name + "' is placed on " + p.str() + ", but there are " +
                       std::to_string(num_processes) + " processes");
    }
  }
  plan::check_device_map(model, sm.local(-1));
}

/// Options of infer_split_device_map.
struct SplitPlanOptions {
  /// "auto" and "balanced" even the ranks' budgets first (Accelerate's "auto" balances GPUs the
  /// same way); "sequential" fills rank 0 first, then rank 1, ...
  std::string strategy = "auto";
  /// The single-process planner's options (no_split_module_classes, sizes, reserve is ignored:
  /// reserve per rank by lowering that rank's budget before gathering).
  plan::InferOptions infer{};
};

/// The plan of `model` over the processes whose budgets `budgets` lists, in rank order (see the
/// header comment). ValueError when no rank has a budget, or the strategy is unknown.
inline SplitDeviceMap infer_split_device_map(const nn::Module& model, const std::vector<plan::MaxMemory>& budgets,
                                             SplitPlanOptions o = {}) {
  if (o.strategy != "auto" && o.strategy != "sequential" && o.strategy != "balanced") {
    throw ValueError("infer_split_device_map: unknown strategy '" + o.strategy + "' (auto, sequential, balanced)");
  }
  if (budgets.empty()) throw ValueError("infer_split_device_map: no process budget given");
  // Each rank's devices in its order (GPUs by id, then the CPU), and the last rank naming a disk.
  std::vector<std::vector<std::pair<Placement, ByteSize>>> devices(budgets.size());
  std::optional<int> disk_rank;
  std::optional<ByteSize> disk_budget;
  for (std::size_t r = 0; r < budgets.size(); ++r) {
    for (const auto& [k, v] : plan::get_max_memory(budgets[r])) {
      if (k.is_disk()) {
        disk_rank = static_cast<int>(r);
        disk_budget = v;
      } else if (v > ByteSize{}) {
        devices[r].emplace_back(k, v);
      }
    }
  }
  if (std::all_of(devices.begin(), devices.end(), [](const auto& d) { return d.empty(); })) {
    throw ValueError("infer_split_device_map: no process has a GPU or CPU budget");
  }
  if (o.strategy != "sequential") {
    // Even the ranks' totals as device_map="balanced" evens GPUs, then cut each rank's devices
    // down to its share, its first devices first.
    plan::MaxMemory totals;
    for (std::size_t r = 0; r < devices.size(); ++r) {
      ByteSize t{};
      for (const auto& d : devices[r]) t += d.second;
      if (t > ByteSize{}) totals.insert(Placement::gpu(static_cast<int>(r)), t);
    }
    totals = plan::get_balanced_memory(model, totals, o.infer.no_split_module_classes, o.infer.sizes);
    for (std::size_t r = 0; r < devices.size(); ++r) {
      const ByteSize* cap = totals.find(Placement::gpu(static_cast<int>(r)));
      ByteSize left = cap ? *cap : ByteSize{};
      for (auto& d : devices[r]) {
        d.second = std::min(d.second, left);
        left = left - d.second;
      }
    }
  }
  // The single-process planner over every rank's devices in rank order, each as one of its
  // "GPUs": virtual GPU 0 holds nothing, so the room the planner keeps for an offloaded layer on
  // its first GPU is kept only where disk blocks stream in (the disk rank's first device).
  plan::MaxMemory virt;
  virt.insert(Placement::gpu(0), ByteSize{});
  std::vector<RankPlacement> of{{0, Placement::cpu()}};
  for (std::size_t r = 0; r < devices.size(); ++r) {
    for (const auto& [k, v] : devices[r]) {
      virt.insert(Placement::gpu(static_cast<int>(of.size())), v);
      of.push_back({static_cast<int>(r), k});
    }
  }
  if (disk_budget) virt.insert(Placement::disk(), *disk_budget);
  plan::InferOptions infer = o.infer;
  infer.reserve = {};
  plan::DeviceMap planned = plan::infer_auto_device_map(model, virt, infer);
  // Disk blocks stream in on their rank's first device, which then keeps room for the largest
  // layer; planned again with that room kept when the first plan used the disk.
  const int streaming = disk_rank.value_or(static_cast<int>(budgets.size()) - 1);
  const auto first = std::find_if(of.begin() + 1, of.end(), [&](const RankPlacement& p) { return p.rank == streaming; });
  const bool uses_disk = std::any_of(planned.begin(), planned.end(), [](const auto& e) { return e.second.is_disk(); });
  if (uses_disk && first != of.end()) {
    infer.reserve.add(Placement::gpu(static_cast<int>(first - of.begin())),
                      plan::get_max_layer_size(model, std::nullopt, infer.no_split_module_classes, infer.sizes).max_size);
    planned = plan::infer_auto_device_map(model, virt, infer);
  }
  SplitDeviceMap out;
  for (const auto& [name, p] : planned) {
    if (p.is_disk()) {
      out.set(name, {streaming, Placement::disk()});
    } else {
      out.set(name, of.at(static_cast<std::size_t>(p.index())));
    }
  }
  return out;
}

}  // namespace accel::dist

// infer_auto_device_map: Accelerate 0.34.2's greedy placement (plus 1.2.x's fallback_allocation).
//
//   DeviceMap dm = infer_auto_device_map(model, get_max_memory(mm), {.no_split_module_classes = {"LlamaDecoderLayer"}});
//   DeviceMap probed = infer_auto_device_map(model);   // max_memory=None: get_max_memory()'s probe
//
// Entries (root's direct parameters, children, direct buffers) are placed in order on the devices
// of max_memory (then "disk"); one that does not fit is split into its direct parameters and
// children unless it is a layer, else the walk moves to the next device for good. The first GPU
// and cpu keep room for the largest layer not placed yet. A tensor tied to a module not placed yet
// drags that module along. Differences from Accelerate, on inputs where it crashes: owners of
// tied parameters are matched by whole path components, a tied parameter that is already placed
// is ignored, and fallback_allocation sizes a candidate's ties against the queue the walk will
// see (Accelerate 1.2 raises IndexError on a tie to an entry it searched past). Where Accelerate
// does not crash the maps are its maps but for the ties of ties (see size_with_ties): an entry
// dragged along for one tie group brings the partners of its other groups too, and no shared
// weight is counted short when an entry is placed out of order, so tied parameters always share
// a device and every device keeps within its budget.
//
// The model is flattened once (ModelIndex); the loop works on node ids, so it allocates no
// strings until the result is built.
#pragma once

#include <algorithm>
#include <functional>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/errors.hpp"
#include "accel/nn/module.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/loop_bound.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/model_index.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/policy/policies.hpp"

namespace accel::plan {

/// Options of infer_auto_device_map, with Accelerate's defaults.
struct InferOptions {
  std::vector<std::string> no_split_module_classes;
  /// dtype / special_dtypes used to size the weights.
  SizeOptions sizes;
  /// Explain each decision on `log` (std::clog when null).
  bool verbose = false;
  std::ostream* log = nullptr;
  /// Group children sharing a device under their parent (clean_device_map).
  bool clean_result = true;
  /// Only silences the warning about buffers of offloaded modules fitting no GPU.
  bool offload_buffers = false;
  /// When nothing fits on the current device yet, look ahead for one module that fits.
  bool fallback_allocation = false;
  /// Opt-in bytes kept free per device (KV cache, activations, workspace); see runtime_reserve.hpp.
  MaxMemory reserve;
  /// Where warnings go (none when null).
  std::ostream* warnings = nullptr;
};

namespace detail {

class Placer {
 public:
  using Id = ModelIndex::Id;

  Placer(const ModelIndex& idx, const LayerScan& scan, const MaxMemory& max_memory, const InferOptions& opts)
      : idx_(idx), scan_(scan), opts_(opts) {
    MaxMemory budgets = get_max_memory(max_memory);
    for (const auto& [k, r] : opts.reserve) budgets.reserve(k, r);
    for (const auto& [k, budget] : budgets) devices_.push_back({k, budget, false, {}, {}, {}});
    if (devices_.empty() || !devices_.back().key.is_disk()) devices_.push_back({Placement::disk(), {}, false, {}, {}, {}});
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      const Placement key = devices_[i].key;
      // The first GPU and cpu keep room for the largest layer (cpu alone when there is no GPU).
      devices_[i].main = (key.is_gpu() && i == 0) || key.is_cpu();
    }
    find_tied_groups();
    if (opts.verbose) log_ = opts.log ? opts.log : &std::clog;
  }

  std::vector<std::pair<Id, Placement>> run() {
    // Queue as a reversed stack: back() is the front.
    for (Id i : initial_entries(idx_)) stack_.push_back(i);
    std::reverse(stack_.begin(), stack_.end());
    {
      auto [m, names] = scan_.over(std::vector<Id>(stack_.rbegin(), stack_.rend()));
      max_layer_ = m;
      max_names_ = std::move(names);
      std::sort(max_names_.begin(), max_names_.end(), std::greater<>());
    }
    std::vector<Id> tied_params, tied_modules;
    // Why the walk ends: every node enters the queue at most once (as a starting entry, or as a
    // split child when its parent leaves the queue for good), so at most N iterations place
    // something and at most N split a module. A fallback iteration moves one entry to the front
    // that the next iteration places (fallback() sizes it as that iteration will), so fallbacks
    // are at most as many as placements; moving to the next device happens at most D - 1 times
    // and disk takes everything. N = nodes of the model, D = devices.
    LoopBound walk("infer_auto_device_map", 3 * idx_.node_count() + devices_.size());
    while (!stack_.empty()) {
      walk.step();
      const Id cur = stack_.back();
      stack_.pop_back();
      if (log_) *log_ << "\nTreating module " << idx_.name(cur) << ".\n";
      // Rescanning the queue only when the last largest layer left it, or modules were queued
      // since the last scan, keeps a queue of n plain tensors linear: otherwise the scan would
      // find again the nothing it found before.
      // max_names_ is sorted by descending id and cur's subtree is the id range [cur, end(cur)):
      // the queue mostly advances in id order, so the erased run sits at the back, O(1) a step.
      const std::size_t max_before = max_names_.size();
      {
        const auto first = std::lower_bound(max_names_.begin(), max_names_.end(), idx_.end(cur) - 1, std::greater<>());
        const auto last = std::upper_bound(first, max_names_.end(), cur, std::greater<>());
        max_names_.erase(first, last);
      }
      if (max_names_.empty() && (max_before > 0 || max_stale_)) recompute_max_layer();
      const ByteSize size = idx_.size(cur);
      tied_outside(cur, tied_params);
      Device& dev = devices_[current_];
      const bool bounded = !dev.key.is_disk();
      ByteSize max_size = dev.budget;
      ByteSize reserved;
      if (dev.main) {
        max_size -= max_layer_;
        reserved = max_layer_;
      }
      ByteSize with_ties = size;
      if (!tied_params.empty()) {
        with_ties = size_with_ties(cur, size, tied_modules, [this](Id p) { return entry_holding(p); });
      }
      if (bounded && dev.used + size > max_size) {
        if (log_) {
          *log_ << "Not enough space on " << dev.key.str() << " to put " << idx_.name(cur) << " (space available "
                << (max_size - dev.used) << ", module size " << size << ").\n";
        }
        if (splittable(cur)) {
          if (log_) *log_ << "Splitting " << idx_.name(cur) << ".\n";
          push_front_children(cur, stack_.size());
          recompute_max_layer();
          continue;
        }
        if (log_) *log_ << "This module cannot be split, going to the next device.\n";
      } else if (!tied_params.empty()) {
        if (!bounded || dev.used + with_ties <= max_size) {
          if (log_) {
            *log_ << "Putting " << idx_.name(cur) << " and its tied modules";
            for (Id t : tied_modules) *log_ << " " << idx_.name(t);
            *log_ << " on " << dev.key.str() << ".\n";
          }
          dev.used += with_ties;
          place(cur);
          for (Id t : tied_modules) {
            auto it = std::find(stack_.begin(), stack_.end(), t);
            if (it != stack_.end()) stack_.erase(it);
            place(t);
          }
          continue;
        }
        if (log_) {
          *log_ << "Not enough space on " << dev.key.str() << " to put " << idx_.name(cur)
                << " and its tied modules (space available " << (max_size - dev.used) << ", needed size "
                << with_ties << ").\n";
        }
        bool split = false;
        for (Id t : tied_modules) {
          if (!splittable(t)) continue;
          if (log_) *log_ << "Splitting " << idx_.name(t) << ".\n";
          auto it = std::find(stack_.begin(), stack_.end(), t);
          const std::size_t pos = static_cast<std::size_t>(it - stack_.begin());
          stack_.erase(it);
          push_front_children(t, pos);
          stack_.push_back(cur);
          recompute_max_layer();
          split = true;
          break;
        }
        if (split) continue;
        if (log_) *log_ << "None of the tied modules can be split, going to the next device.\n";
      } else {
        if (log_) {
          *log_ << "Putting " << idx_.name(cur) << " (size=" << size << ") on " << dev.key.str();
          if (bounded) *log_ << " (available=" << (max_size - dev.used) << ")";
          *log_ << ".\n";
        }
        dev.used += size;
        dev.peak = dev.used + reserved;
        place(cur);
        continue;
      }
      // Nothing of `cur` goes here: maybe one later module does (fallback), else next device.
      if (opts_.fallback_allocation && dev.used == ByteSize{} && bounded) {
        const ByteSize limit = dev.budget - std::max(max_layer_, with_ties);
        if (fallback(cur, limit)) continue;
      }
      dev.peak = dev.used + reserved;
      if (current_ + 1 >= devices_.size()) throw ValueError("infer_auto_device_map: no device left (internal error)");
      ++current_;
      stack_.push_back(cur);
    }
    warn_about_buffers();
    return std::move(placed_);
  }

 private:
  struct Device {
    Placement key;
    ByteSize budget;
    bool main = false;
    ByteSize used;
    ByteSize peak;
    ByteSize buffers;
  };

  bool splittable(Id i) const { return idx_.is_module(i) && !idx_.module_children(i).empty() && !scan_.is_layer(i); }

  // Replaces nothing: inserts i's split children so that they come first, in order, at stack
  // position `pos` (the slot the split entry occupied).
  void push_front_children(Id i, std::size_t pos) {
    const auto kids = idx_.split_children(i);
    stack_.insert(stack_.begin() + static_cast<std::ptrdiff_t>(pos), kids.rbegin(), kids.rend());
  }

  void recompute_max_layer() {
    max_stale_ = false;
    queue_modules_.clear();
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      if (idx_.is_module(*it)) queue_modules_.push_back(*it);
    }
    auto [m, names] = scan_.over(queue_modules_);
    max_layer_ = m;
    max_names_ = std::move(names);
    std::sort(max_names_.begin(), max_names_.end(), std::greater<>());
  }

  void place(Id i) {
    Device& dev = devices_[current_];
    const Placement p = dev.key;
    // Where each node sits in placed_, so placing n entries costs O(n), not a scan per entry.
    if (placed_at_.empty()) placed_at_.assign(idx_.node_count(), -1);
    auto& at = placed_at_[static_cast<std::size_t>(i)];
    if (at >= 0) {
      placed_[static_cast<std::size_t>(at)].second = p;
      return;
    }
    at = static_cast<std::int64_t>(placed_.size());
    placed_.emplace_back(i, p);
    if (idx_.is_module(i) && !opts_.offload_buffers) dev.buffers += idx_.buffer_size(i);
  }

  void find_tied_groups() {
    std::size_t params = 0, counted = 0;
    for (Id i = 0; i < static_cast<Id>(idx_.node_count()); ++i) {
      if (idx_.kind(i) != ModelIndex::Kind::parameter) continue;
      ++params;
      counted += idx_.counted(i) ? 1 : 0;
    }
    if (params == counted) return;  // no cell is reachable twice: no ties
    std::unordered_map<const nn::Parameter*, std::vector<Id>> by_cell;
    std::vector<const nn::Parameter*> order;
    for (Id i = 0; i < static_cast<Id>(idx_.node_count()); ++i) {
      if (idx_.kind(i) != ModelIndex::Kind::parameter) continue;
      auto& v = by_cell[idx_.cell(i)];
      if (v.empty()) order.push_back(idx_.cell(i));
      v.push_back(i);
    }
    for (const auto* c : order) {
      auto& v = by_cell[c];
      if (v.size() < 2) continue;
      std::vector<std::pair<std::string, Id>> named;
      for (Id i : v) named.emplace_back(idx_.name(i), i);
      std::sort(named.begin(), named.end());
      std::vector<Id> g;
      for (auto& [n, i] : named) g.push_back(i);
      groups_.push_back(std::move(g));
    }
  }

  // Tied parameters outside `cur` whose group has a member inside it.
  void tied_outside(Id cur, std::vector<Id>& out) const {
    out.clear();
    for (const auto& g : groups_) {
      bool any = false, all = true;
      for (Id p : g) {
        const bool in = idx_.contains(cur, p);
        any = any || in;
        all = all && in;
      }
      if (!any || all) continue;
      for (Id p : g) {
        if (!idx_.contains(cur, p)) out.push_back(p);
      }
    }
  }

  // Size of entry `e` plus the entries that must go where it goes: those holding parameters tied
  // to it, then those holding parameters tied to them, and so on (`owner_of(p)` names the entry
  // holding p, nullopt for a parameter already placed). Fills `modules` with them, each once.
  // Accelerate takes the first step only, counts an entry holding two tied parameters twice and
  // subtracts each tied parameter's own size; where the maps can differ:
  // - the later steps: an entry dragged along for one tie group can hold another group's
  //   parameter, whose partners Accelerate then leaves to be placed on a later device;
  // - the subtraction: a shared tensor is counted under its first path only, so the subtraction
  //   is 0 unless the dragged entry holds that first path, and there it drops the shared weight
  //   from the sum; only an entry treated out of order (fallback) meets that case.
  template <class OwnerOf>
  ByteSize size_with_ties(Id e, ByteSize size, std::vector<Id>& modules, const OwnerOf& owner_of) const {
    modules.clear();
    ByteSize total = size;
    const auto taken = [&](Id p) {
      const auto holds_p = [&](Id m) { return idx_.contains(m, p); };
      return holds_p(e) || std::any_of(modules.begin(), modules.end(), holds_p);
    };
    std::vector<Id> tied;
    // Each pass takes the next entry of the closure, and a node joins the closure at most once
    // (`taken` skips what it already holds): at most N passes, N = nodes of the model.
    LoopBound passes("tie closure", idx_.node_count());
    for (std::size_t next = 0; next <= modules.size(); ++next) {
      passes.step();
      tied_outside(next == 0 ? e : modules[next - 1], tied);
      for (Id p : tied) {
        if (taken(p)) continue;
        if (const std::optional<Id> o = owner_of(p)) {
          modules.push_back(*o);
          total += idx_.size(*o);
        }
      }
    }
    return total;
  }

  // The queue entry holding `p` (the entries are disjoint subtrees), nullopt when none does.
  std::optional<Id> entry_holding(Id p) const {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      if (idx_.contains(*it, p)) return *it;
    }
    return std::nullopt;
  }

  // The entry that will own tied parameter `p` when `n` is treated right after fallback() has moved
  // it ahead of `cur`: `cur` back in the queue, and n's queued ancestor split down to n. A
  // parameter beside n in that ancestor is then owned by the child of their common ancestor on
  // its side (nullopt when that child is a repeated cell or module, which no split yields).
  std::optional<Id> owner_after_fallback(Id n, Id p, Id cur) const {
    if (idx_.contains(cur, p)) return cur;
    const std::optional<Id> e = entry_holding(p);
    if (!e || !idx_.contains(*e, n)) return e;
    Id a = p;
    // Climbs from p towards *e, which holds n, so it stops at the latest one step below *e: at
    // most the depth of the tree.
    while (!idx_.contains(idx_.parent(a), n)) a = idx_.parent(a);
    const auto kids = idx_.split_children(idx_.parent(a));
    if (std::find(kids.begin(), kids.end(), a) == kids.end()) return std::nullopt;
    return a;
  }

  // Accelerate 1.2's fallback_allocate: the first entry (searching depth-first through splits)
  // whose size with its ties fits `limit`, moved to the front of the queue ahead of `cur`.
  // Accelerate sizes the ties against its search list, which lacks `cur` and the entries searched
  // before the candidate (it raises IndexError on a tie to one of them). Skipping those ties
  // under-counts: the walk then finds the candidate too large with them, and the next fallback
  // picks `cur`, whose ties are under-counted the same way, and so on forever (modules sharing one
  // weight under a small budget). The ties are sized here against the queue as the walk will see
  // it, so the entry moved ahead is placed by the next iteration.
  bool fallback(Id cur, ByteSize limit) {
    if (limit < ByteSize{}) return false;
    std::vector<Id> search(stack_.begin(), stack_.end());  // reversed: back() is the front
    std::vector<Id> tied, mods;
    std::optional<Id> found;
    // Each iteration pops one entry and pushes only the split children of the popped one: every
    // node of the model is popped at most once, at most N iterations.
    LoopBound searched("fallback_allocation search", idx_.node_count());
    while (!search.empty()) {
      searched.step();
      const Id n = search.back();
      search.pop_back();
      tied_outside(n, tied);
      const ByteSize with_ties =
          tied.empty() ? idx_.size(n)
                       : size_with_ties(n, idx_.size(n), mods, [&](Id p) { return owner_after_fallback(n, p, cur); });
      if (with_ties <= limit) {
        found = n;
        break;
      }
      if (!splittable(n)) continue;
      const auto kids = idx_.split_children(n);
      search.insert(search.end(), kids.rbegin(), kids.rend());
    }
    if (!found) return false;
    // Expand the found entry's ancestors that sit in the queue, top-down, then take it out.
    std::vector<Id> chain;  // parents have smaller ids than their children: depth steps to the root
    for (Id a = idx_.parent(*found); a >= 0; a = idx_.parent(a)) chain.push_back(a);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      auto pos = std::find(stack_.begin(), stack_.end(), *it);
      if (pos == stack_.end()) continue;
      const std::size_t at = static_cast<std::size_t>(pos - stack_.begin());
      stack_.erase(pos);
      push_front_children(*it, at);
      max_stale_ = true;
    }
    auto pos = std::find(stack_.begin(), stack_.end(), *found);
    if (pos == stack_.end()) return false;
    stack_.erase(pos);
    if (log_) *log_ << "Fallback: moving " << idx_.name(*found) << " ahead to fill " << devices_[current_].key.str() << ".\n";
    stack_.push_back(cur);
    stack_.push_back(*found);
    return true;
  }

  void warn_about_buffers() {
    ByteSize non_gpu;
    bool any_gpu = false;
    for (const auto& d : devices_) {
      if (d.key.is_cpu() || d.key.is_disk()) non_gpu += d.buffers;
      if (d.key.is_gpu()) any_gpu = true;
    }
    if (opts_.offload_buffers || non_gpu == ByteSize{} || !any_gpu) return;
    for (const auto& d : devices_) {
      if (d.key.is_gpu() && d.budget >= non_gpu + std::max(d.peak, d.used)) return;
    }
    if (opts_.warnings) {
      *opts_.warnings << "Current model requires " << non_gpu
                      << " bytes of buffer for offloaded layers, which seems does not fit any GPU's remaining "
                         "memory. If you are experiencing a OOM later, please consider using offload_buffers=True.\n";
    }
  }

  const ModelIndex& idx_;
  const LayerScan& scan_;
  const InferOptions& opts_;
  std::ostream* log_ = nullptr;
  std::vector<Device> devices_;
  std::size_t current_ = 0;
  std::vector<Id> stack_;
  std::vector<Id> queue_modules_;
  ByteSize max_layer_;
  std::vector<Id> max_names_;
  bool max_stale_ = false;  ///< modules were queued since the last scan for the largest layer
  std::vector<std::vector<Id>> groups_;
  std::vector<std::pair<Id, Placement>> placed_;
  std::vector<std::int64_t> placed_at_;  ///< node -> index in placed_, -1 when not placed
};

}  // namespace detail

/// Accelerate's infer_auto_device_map on an explicit `max_memory` (see the header comment; an
/// empty one, like Accelerate's {}, leaves only "disk").
inline DeviceMap infer_auto_device_map(const nn::Module& model, const MaxMemory& max_memory,
                                       const InferOptions& opts = {}) {
  const ModelIndex idx(model, opts.sizes);
  const detail::LayerScan scan(idx, opts.no_split_module_classes);
  detail::Placer placer(idx, scan, max_memory, opts);
  auto placed = placer.run();
  if (opts.clean_result) {
    // The node ids of a module's subtree are contiguous, so "below" is a range test.
    using Id = ModelIndex::Id;
    const auto below = [&](Id m, Id k) { return m == 0 || (k > m && k < idx.end(m)); };
    // Asked only for keys strictly below m, so the climb meets m within the depth of the tree.
    const auto child_of = [&](Id m, Id k) {
      while (idx.parent(k) != m) k = idx.parent(k);
      return k;
    };
    detail::clean_device_map_core(placed, Id{0}, below, child_of);
  }
  DeviceMap dm;
  for (const auto& [id, p] : placed) dm.set(idx.name(id), p);
  return dm;
}

/// Accelerate's infer_auto_device_map with max_memory=None: under get_max_memory()'s probe of the
/// machine (each GPU's free memory, the CPU memory available), as Accelerate plans.
inline DeviceMap infer_auto_device_map(const nn::Module& model, std::nullopt_t = std::nullopt, const InferOptions& opts = {}) {
  return infer_auto_device_map(model, get_max_memory(), opts);
}

/// The reserve an offload policy adds: prefetch<N> keeps N more of the largest layers free on the
/// execution device (the lowest GPU in `max_memory`, else the cpu) for the staging buffers of
/// weights travelling in while a block computes (read_ahead_reserve: each with the slack of an
/// aligned read). Accelerate copies synchronously and keeps one.
template <PolicyBundle P>
MaxMemory offload_policy_reserve(const nn::Module& model, const MaxMemory& max_memory, const InferOptions& opts) {
  constexpr std::size_t depth = P::offload::prefetch_depth;
  if constexpr (depth == 0) {
    return {};
  } else {
    // max_memory lists GPUs first, lowest id first: its first key is the lowest GPU when any.
    const Placement exec =
        !max_memory.empty() && max_memory.begin()->first.is_gpu() ? max_memory.begin()->first : Placement::cpu();
    return {{exec, read_ahead_reserve(model, opts.no_split_module_classes, depth, opts.sizes).bytes}};
  }
}

/// infer_auto_device_map under a policy bundle: when the bundle names a precision, weights are
/// sized in its storage dtype (unless opts.sizes.dtype names one), and the offload policy's staging reserve
/// (offload_policy_reserve) is added to opts.reserve. With default_policies the map equals the
/// plain function's, that is Accelerate's. The map is a plain DeviceMap: the bundle changes the
/// plan, and the map carries no policy (dispatch_model's Offload is the one that travels).
template <PolicyBundle P>
DeviceMap infer_auto_device_map(const nn::Module& model, const MaxMemory& max_memory, InferOptions opts = {}) {
  if (!opts.sizes.dtype && P::precision_search::count > 0) {
    opts.sizes.dtype = P::precision::storage_dtype;
  }
  for (const auto& [key, extra] : offload_policy_reserve<P>(model, max_memory, opts)) opts.reserve.add(key, extra);
  return infer_auto_device_map(model, max_memory, static_cast<const InferOptions&>(opts));
}
/// The same under get_max_memory()'s probe (Accelerate's max_memory=None).
template <PolicyBundle P>
DeviceMap infer_auto_device_map(const nn::Module& model, std::nullopt_t = std::nullopt, InferOptions opts = {}) {
  return infer_auto_device_map<P>(model, get_max_memory(), std::move(opts));
}

}  // namespace accel::plan

namespace accel {
using plan::infer_auto_device_map, plan::offload_policy_reserve, plan::InferOptions;
}  // namespace accel

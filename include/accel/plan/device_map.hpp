// DeviceMap: ordered dotted module/tensor name -> Placement (GPU id, "cpu", "disk"), as Accelerate.
//
//   dm.set("model.layers.0", 0);  dm.lookup("model.layers.0.mlp.up_proj.weight") -> 0 (longest prefix)
//   clean_device_map(dm)          groups children that share a device under their parent
//   check_device_map(model, dm)   every tensor covered by exactly one key (ValueError otherwise)
//   to_json(dm) / device_map_from_json(j)   {"transformer.h.0": 0, "lm_head": "cpu"}
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/nn/module.hpp"

namespace accel::plan {

class DeviceMap {
 public:
  using Entry = std::pair<std::string, Placement>;

  /// Sets `name` (kept at its position when present, appended otherwise), as dict[name] = p.
  void set(std::string name, Placement p) {
    if (const auto it = index_.find(name); it != index_.end()) {
      entries_[it->second].second = p;
      return;
    }
    // The vector first: if either insert throws, neither keeps the name.
    entries_.emplace_back(std::move(name), p);
    try {
      index_.emplace(entries_.back().first, entries_.size() - 1);
    } catch (...) {
      entries_.pop_back();
      throw;
    }
  }
  /// Replaces every entry (a name given twice keeps its first place and its last placement).
  void assign(std::vector<Entry> entries) {
    entries_.clear();
    index_.clear();
    for (auto& [name, p] : entries) set(std::move(name), p);
  }
  /// Removes `name`; true when it was present. Linear: the positions after it move.
  bool erase(std::string_view name) {
    const auto it = index_.find(name);
    if (it == index_.end()) return false;
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
    reindex();
    return true;
  }
  /// The placement of exactly `name`.
  std::optional<Placement> find(std::string_view name) const {
    const auto it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    return entries_[it->second].second;
  }
  /// The placement of tensor or module `name`: the value of the longest key that is `name` or one
  /// of its dotted prefixes ("" covers everything). nullopt when no key covers it. Looks up each
  /// prefix of `name` (its depth in hash probes), not every key: loading a checkpoint asks this
  /// once per tensor, and the map of a split mixture-of-experts model holds tens of thousands.
  std::optional<Placement> lookup(std::string_view name) const {
    std::optional<Placement> found;
    for_each_covering_key(name, [&](std::string_view key) { return bool(found = find(key)); });
    return found;
  }
  /// Calls `f(key)` for each key that could cover `name` (see covers()), longest first: `name`,
  /// its dotted prefixes, then "". Stops when `f` returns true.
  template <class F>
  static void for_each_covering_key(std::string_view name, F&& f) {
    if (f(name)) return;
    for (std::size_t dot = name.rfind('.'); dot != std::string_view::npos && dot > 0; dot = name.rfind('.', dot - 1)) {
      if (f(name.substr(0, dot))) return;
    }
    if (!name.empty()) f(std::string_view{});
  }
  /// True when key `key` places `name` ("" covers all; "a.b" covers "a.b" and "a.b.*").
  static bool covers(std::string_view key, std::string_view name) {
    if (key.empty()) return true;
    return name == key || (name.size() > key.size() && name.starts_with(key) && name[key.size()] == '.');
  }

  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  auto begin() const noexcept { return entries_.begin(); }
  auto end() const noexcept { return entries_.end(); }
  const std::vector<Entry>& entries() const noexcept { return entries_; }
  friend bool operator==(const DeviceMap& a, const DeviceMap& b) { return a.entries_ == b.entries_; }

 private:
  void reindex() {
    index_.clear();
    for (std::size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  }

  // Looked up by string_view without building a string (lookup probes every prefix of a name).
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };

  std::vector<Entry> entries_;
  std::unordered_map<std::string, std::size_t, NameHash, std::equal_to<>> index_;  // name -> position in entries_
};

namespace detail {

/// Accelerate's clean_device_map on any keying of the module tree, so the name-keyed map here and
/// the node-id map of infer_auto_device_map share one algorithm. `below(m, k)`: key `k` lies
/// strictly under module `m` (every key for the root `root`); `child_of(m, k)`: the direct child
/// of `m` on the way down to such a `k`. Wherever every key below `m` shares one placement (and
/// there is more than one), they become `m`'s own key (kept at its position when present,
/// appended otherwise); then each child is cleaned, in order of first appearance.
///
/// Each module receives the positions of the keys below it from its parent, grouped by child in
/// one pass, so the work is O(keys x depth): a module holding 50,000 keys directly is cleaned in
/// milliseconds (rescanning the whole map per child, as the recursion reads in Python, is
/// quadratic there). The result is the one that rescanning gives: a child's cleaning only removes
/// keys below that child and only adds the child's own key, which no sibling's group contains.
template <class Key, class Below, class ChildOf>
void clean_device_map_core(std::vector<std::pair<Key, Placement>>& dm, const Key& root, const Below& below,
                           const ChildOf& child_of) {
  std::vector<bool> alive(dm.size(), true);
  std::unordered_map<Key, std::size_t> position;  // alive key -> its index in dm
  position.reserve(dm.size());
  for (std::size_t i = 0; i < dm.size(); ++i) position.emplace(dm[i].first, i);

  const auto clean = [&](const auto& self, const Key& m, const std::vector<std::size_t>& keys) -> void {
    bool uniform = true;
    for (std::size_t i : keys) uniform = uniform && dm[i].second == dm[keys.front()].second;
    if (keys.size() > 1 && uniform) {
      const Placement value = dm[keys.front()].second;
      for (std::size_t i : keys) {
        alive[i] = false;
        position.erase(dm[i].first);
      }
      if (const auto it = position.find(m); it != position.end()) {
        dm[it->second].second = value;
      } else {
        position.emplace(m, dm.size());
        dm.emplace_back(m, value);
        alive.push_back(true);
      }
      return;
    }
    std::vector<Key> children;
    std::vector<std::vector<std::size_t>> groups;
    std::unordered_map<Key, std::size_t> group_of;
    for (std::size_t i : keys) {
      if (dm[i].first == m) continue;
      Key c = child_of(m, dm[i].first);
      const auto [it, fresh] = group_of.emplace(c, groups.size());
      if (fresh) {
        children.push_back(std::move(c));
        groups.emplace_back();
      }
      groups[it->second].push_back(i);
    }
    for (std::size_t g = 0; g < children.size(); ++g) self(self, children[g], groups[g]);
  };

  std::vector<std::size_t> keys;
  for (std::size_t i = 0; i < dm.size(); ++i) {
    if (below(root, dm[i].first)) keys.push_back(i);
  }
  clean(clean, root, keys);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < dm.size(); ++i) {
    if (alive[i]) dm[kept++] = std::move(dm[i]);
  }
  dm.resize(kept);
}

}  // namespace detail

/// Accelerate's clean_device_map: wherever every key below a module shares one device (and there is
/// more than one), they are replaced by the module's own key. Works from the root down.
inline DeviceMap clean_device_map(DeviceMap dm, const std::string& module_name = "") {
  // Dotted names: "a.b" is below "a"; the root "" has every key below it.
  const auto below = [](const std::string& m, const std::string& k) {
    return m.empty() || (k.size() > m.size() && k.starts_with(m) && k[m.size()] == '.');
  };
  const auto child_of = [](const std::string& m, const std::string& k) {
    return k.substr(0, k.find('.', m.empty() ? 0 : m.size() + 1));
  };
  std::vector<DeviceMap::Entry> entries = dm.entries();
  detail::clean_device_map_core(entries, module_name, below, child_of);
  dm.assign(std::move(entries));
  return dm;
}

/// JSON in Accelerate's shape: GPU ids as integers, "cpu", "disk" as strings.
inline nlohmann::json placement_to_json(Placement p) {
  if (p.is_gpu()) return p.index();
  return p.str();
}
inline nlohmann::json to_json(const DeviceMap& dm) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, p] : dm) j[k] = placement_to_json(p);
  return j;
}
/// As to_json, keeping the map's order. The keys are unique, so each entry is appended (an
/// ordered_json insert by key compares it with every key before it).
inline nlohmann::ordered_json to_ordered_json(const DeviceMap& dm) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  auto& entries = j.get_ref<nlohmann::ordered_json::object_t&>();
  entries.reserve(dm.size());
  for (const auto& [k, p] : dm) entries.emplace_back(k, placement_to_json(p));
  return j;
}
/// Parses a device-map value: an integer GPU id, "cpu", "disk", "cuda:N", "meta".
inline Placement placement_from_json(const nlohmann::json& v) {
  if (v.is_number_integer()) return Placement::gpu(v.get<int>());
  if (v.is_string()) return Placement::parse(v.get<std::string>());
  throw FormatError("device map value " + v.dump() + " is neither a GPU index nor a device name");
}
template <class Json>
DeviceMap device_map_from_json(const Json& j) {
  if (!j.is_object()) throw FormatError("a device map must be a JSON object, got " + j.dump());
  DeviceMap dm;
  for (auto it = j.begin(); it != j.end(); ++it) dm.set(it.key(), placement_from_json(it.value()));
  return dm;
}

/// Checks that every parameter and buffer of `model` (each tensor under the name met first) is
/// placed by exactly one key of `dm`, that no other name is placed twice, and that every key names
/// something in the model. ValueError otherwise.
inline void check_device_map(const nn::Module& model, const DeviceMap& dm) {
  std::vector<std::string> names;
  std::unordered_set<std::string> required;
  for (const auto& [n, t] : model.named_parameters("", true, false)) names.push_back(n);
  for (const auto& [n, t] : model.named_buffers("", true, false)) names.push_back(n);
  for (const auto& [n, t] : model.named_parameters()) required.insert(n);
  for (const auto& [n, t] : model.named_buffers()) required.insert(n);
  // The keys covering a name are the name, its dotted prefixes and "": probed one by one, so the
  // check is linear in names x depth rather than names x keys.
  std::unordered_set<std::string_view> used;
  for (const std::string& n : names) {
    int hits = 0;
    DeviceMap::for_each_covering_key(n, [&](std::string_view key) {
      if (dm.find(key)) {
        ++hits;
        used.insert(key);
      }
      return false;
    });
    if (hits == 0 && required.count(n)) throw ValueError("device map does not place '" + n + "'");
    if (hits > 1) throw ValueError("device map places '" + n + "' under " + std::to_string(hits) + " keys");
  }
  for (const auto& entry : dm) {
    const std::string& k = entry.first;
    if (k.empty() || used.count(k)) continue;
    bool is_module = true;
    try {
      (void)model.get_submodule(k);
    } catch (const KeyError&) {
      is_module = false;
    }
    if (!is_module) throw ValueError("device map key '" + k + "' names nothing in the model");
  }
}

}  // namespace accel::plan

namespace accel {
using plan::check_device_map, plan::clean_device_map, plan::DeviceMap;
}  // namespace accel

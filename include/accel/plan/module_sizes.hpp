// Module sizes as Accelerate computes them.
//
//   compute_module_sizes(model, opts, buffers_only)    ModuleSizes: "" + every module prefix + every tensor
//   compute_module_total_buffer_size(model, opts)      bytes of all buffers
//   get_max_layer_size(model, modules, no_split, opts) {max_size, layer_names}
//   calculate_maximum_sizes(model)                     {total_size, largest_layer} with model.no_split_modules()
//
// A "layer" is a module without children, a module whose class is no-split, or (in a starting list)
// a bare tensor. Tied tensors count once, under the name met first.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/nn/module.hpp"
#include "accel/plan/model_index.hpp"

namespace accel::plan {

/// An ordered size table (Accelerate's insertion order); absent names weigh 0, like its defaultdict.
class ModuleSizes {
 public:
  ModuleSizes() = default;
  // The lookup table views the strings of `entries_`: copies and moves rebuild it.
  ModuleSizes(const ModuleSizes& o) : entries_(o.entries_) {}
  ModuleSizes(ModuleSizes&& o) noexcept : entries_(std::move(o.entries_)) {}
  ModuleSizes& operator=(const ModuleSizes& o) {
    if (this != &o) entries_ = o.entries_, index_.clear();
    return *this;
  }
  ModuleSizes& operator=(ModuleSizes&& o) noexcept {
    entries_ = std::move(o.entries_);
    index_.clear();
    return *this;
  }

  void push_back(std::string name, ByteSize size) {
    entries_.emplace_back(std::move(name), size);
    index_.clear();
  }
  /// Size of `name`, 0 when the table has no such key.
  ByteSize operator[](std::string_view name) const {
    const auto* i = lookup(name);
    return i ? entries_[*i].second : ByteSize{};
  }
  bool contains(std::string_view name) const { return lookup(name) != nullptr; }
  std::size_t size() const noexcept { return entries_.size(); }
  auto begin() const noexcept { return entries_.begin(); }
  auto end() const noexcept { return entries_.end(); }
  const std::vector<std::pair<std::string, ByteSize>>& entries() const noexcept { return entries_; }

 private:
  // The lookup table is built on first use: most callers only iterate.
  const std::size_t* lookup(std::string_view name) const {
    if (index_.size() != entries_.size()) {
      index_.clear();
      index_.reserve(entries_.size());
      for (std::size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
    }
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &it->second;
  }
  std::vector<std::pair<std::string, ByteSize>> entries_;
  mutable std::unordered_map<std::string_view, std::size_t> index_;
};

/// The largest layer and every layer of that size, in traversal order.
struct MaxLayer {
  ByteSize max_size;
  std::vector<std::string> layer_names;
};

/// Size of every module prefix and tensor, keyed as Accelerate keys them ("" = the whole model).
/// `buffers_only` counts buffers alone (persistent or not).
inline ModuleSizes compute_module_sizes(const nn::Module& model, const SizeOptions& opts = {},
                                        bool buffers_only = false) {
  const ModelIndex idx(model, opts);
  ModuleSizes out;
  // Entry order lists every parent before its children, so names grow from the parent's.
  std::vector<std::string> names(idx.node_count());
  for (ModelIndex::Id i : idx.entry_order(!buffers_only, true)) {
    const auto p = idx.parent(i);
    if (i != 0) {
      names[static_cast<std::size_t>(i)] = p <= 0 ? std::string(idx.local_name(i))
                                                  : names[static_cast<std::size_t>(p)] + "." + std::string(idx.local_name(i));
    }
    const bool module = idx.is_module(i);
    out.push_back(names[static_cast<std::size_t>(i)], buffers_only && module ? idx.buffer_size(i) : idx.size(i));
  }
  return out;
}

/// Total size of the model's buffers (compute_module_sizes(..., buffers_only)[""]).
inline ByteSize compute_module_total_buffer_size(const nn::Module& model, const SizeOptions& opts = {}) {
  return ModelIndex(model, opts).buffer_size(0);
}

namespace detail {

/// Which module nodes are layers for a no-split list, and the largest layer under each node.
class LayerScan {
 public:
  LayerScan(const ModelIndex& idx, const std::vector<std::string>& no_split)
      : idx_(idx), layer_(idx.node_count(), 0), max_(idx.node_count()) {
    for (auto i = static_cast<ModelIndex::Id>(idx.node_count()) - 1; i >= 0; --i) {
      const auto si = static_cast<std::size_t>(i);
      if (!idx.is_module(i)) {
        layer_[si] = 1;
        max_[si] = idx.size(i);
        continue;
      }
      const auto kids = idx.module_children(i);
      const auto cls = idx.class_name(i);
      const bool no_split_class = std::find(no_split.begin(), no_split.end(), cls) != no_split.end();
      if (kids.empty() || no_split_class) {
        layer_[si] = 1;
        max_[si] = idx.size(i);
      } else {
        ByteSize m;
        for (auto k : kids) m = std::max(m, max_[static_cast<std::size_t>(k)]);
        max_[si] = m;
      }
    }
  }
  bool is_layer(ModelIndex::Id i) const { return layer_[static_cast<std::size_t>(i)] != 0; }
  /// Largest layer size under (or at) i.
  ByteSize max_under(ModelIndex::Id i) const { return max_[static_cast<std::size_t>(i)]; }
  /// Appends the layers under i whose size equals `size`, in traversal order.
  void collect(ModelIndex::Id i, ByteSize size, std::vector<ModelIndex::Id>& out) const {
    if (is_layer(i)) {
      if (idx_.size(i) == size) out.push_back(i);
      return;
    }
    for (auto k : idx_.module_children(i)) {
      if (max_[static_cast<std::size_t>(k)] == size) collect(k, size, out);
    }
  }
  /// get_max_layer_size over a list of nodes.
  template <class Range>
  std::pair<ByteSize, std::vector<ModelIndex::Id>> over(const Range& nodes) const {
    ByteSize m;
    for (auto i : nodes) m = std::max(m, max_under(i));
    std::vector<ModelIndex::Id> names;
    for (auto i : nodes) {
      if (max_under(i) == m) collect(i, m, names);
    }
    return {m, std::move(names)};
  }

 private:
  const ModelIndex& idx_;
  std::vector<char> layer_;
  std::vector<ByteSize> max_;
};

/// The starting queue of infer_auto_device_map: root's direct parameters, children, direct buffers.
inline std::vector<ModelIndex::Id> initial_entries(const ModelIndex& idx) {
  std::vector<ModelIndex::Id> out;
  for (auto i : idx.split_children(0)) out.push_back(i);
  for (auto i : idx.direct_buffers(0)) out.push_back(i);
  return out;
}

inline MaxLayer to_max_layer(const ModelIndex& idx, const std::pair<ByteSize, std::vector<ModelIndex::Id>>& r) {
  MaxLayer out{r.first, {}};
  for (auto i : r.second) out.layer_names.push_back(idx.name(i));
  return out;
}

}  // namespace detail

/// Accelerate's get_max_layer_size over `modules` (dotted names; nullopt = the starting list of
/// infer_auto_device_map). KeyError for a name the model does not have.
inline MaxLayer get_max_layer_size(const nn::Module& model,
                                   const std::optional<std::vector<std::string>>& modules = std::nullopt,
                                   const std::vector<std::string>& no_split_module_classes = {},
                                   const SizeOptions& opts = {}) {
  const ModelIndex idx(model, opts);
  const detail::LayerScan scan(idx, no_split_module_classes);
  std::vector<ModelIndex::Id> start;
  if (modules) {
    for (const auto& n : *modules) {
      auto id = idx.find(n);
      if (!id) throw KeyError("get_max_layer_size: the model has no module or tensor '" + n + "'");
      start.push_back(*id);
    }
  } else {
    start = detail::initial_entries(idx);
  }
  return detail::to_max_layer(idx, scan.over(start));
}

/// Total size and largest layer, with the model's own no_split_modules() (transformers' habit).
struct MaximumSizes {
  ByteSize total_size;
  MaxLayer largest_layer;
};
inline MaximumSizes calculate_maximum_sizes(const nn::Module& model) {
  const ModelIndex idx(model);
  const detail::LayerScan scan(idx, model.no_split_modules());
  return {idx.size(0), detail::to_max_layer(idx, scan.over(detail::initial_entries(idx)))};
}

}  // namespace accel::plan

namespace accel {
using plan::calculate_maximum_sizes, plan::compute_module_sizes, plan::compute_module_total_buffer_size,
    plan::get_max_layer_size;
}  // namespace accel

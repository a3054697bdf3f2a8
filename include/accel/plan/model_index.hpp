// ModelIndex: a Module tree flattened once into arrays of path nodes, so the planner works on
// integers instead of dotted strings.
//
//   ModelIndex idx(model, size_options);   nodes in pre-order: a node's subtree is [id, end[id])
//   idx.size(id)  idx.name(id)  idx.find(path)  idx.split_children(id)  idx.class_name(id)
//
// Nodes are paths, not objects: a module registered twice has a node per path. Sizes follow
// Accelerate's compute_module_sizes: each tensor counted once, under the first path torch's
// de-duplicating traversal meets it; other paths of the same module or tensor weigh 0.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/checked.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/nn/module.hpp"

namespace accel::plan {

namespace detail {
/// Open-addressing set of pointers: the index inserts thousands of them per call, and a node-based
/// set would allocate for each.
class PointerSet {
 public:
  explicit PointerSet(std::size_t expected = 64) {
    std::size_t cap = 64;
    while (cap < expected * 2) cap *= 2;
    slots_.assign(cap, nullptr);
  }
  /// True when `p` was not in the set yet.
  bool insert(const void* p) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    return place(p);
  }

 private:
  bool place(const void* p) {
    const std::size_t mask = slots_.size() - 1;
    auto h = reinterpret_cast<std::uintptr_t>(p);
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    // insert() keeps the table at most half full, so the probe meets p or an empty slot within
    // slots_.size() steps.
    for (std::size_t i = (h >> 20) & mask;; i = (i + 1) & mask) {
      if (slots_[i] == p) return false;
      if (!slots_[i]) {
        slots_[i] = p;
        ++count_;
        return true;
      }
    }
  }
  void grow() {
    std::vector<const void*> old(slots_.size() * 2, nullptr);
    old.swap(slots_);
    count_ = 0;
    for (const void* p : old) {
      if (p) place(p);
    }
  }
  std::vector<const void*> slots_;
  std::size_t count_ = 0;
};

/// Deduplicates one module's list as it is built. Real modules hold a handful of tensors and
/// children, which a scan of a small array serves fastest; past that a PointerSet takes over, so
/// a checkpoint with 100k tensors directly under the root still indexes in linear time.
class FirstSeen {
 public:
  /// True when `p` was not seen yet.
  bool insert(const void* p) {
    if (set_) return set_->insert(p);
    for (std::size_t i = 0; i < count_; ++i) {
      if (few_[i] == p) return false;
    }
    if (count_ == few_.size()) {
      set_ = std::make_unique<PointerSet>(2 * count_);
      for (const void* q : few_) set_->insert(q);
      return set_->insert(p);
    }
    few_[count_++] = p;
    return true;
  }

 private:
  std::array<const void*, 16> few_{};
  std::size_t count_ = 0;
  std::unique_ptr<PointerSet> set_;
};
}  // namespace detail

/// How tensors are counted: Accelerate's `dtype` and `special_dtypes` arguments.
struct SizeOptions {
  /// Target dtype: floating tensors cost min(size(dtype), own size); integers and bools keep theirs.
  std::optional<DType> dtype;
  /// Exact tensor names whose element size is this dtype's, whatever their own.
  std::map<std::string, DType, std::less<>> special_dtypes;
};

class ModelIndex {
 public:
  enum class Kind : std::uint8_t { module, parameter, buffer };
  using Id = std::int32_t;

  explicit ModelIndex(const nn::Module& model, const SizeOptions& opts = {}) {
    nodes_.reserve(4096);
    split_.reserve(4096);
    detail::PointerSet module_memo(1024), param_memo(1024), buffer_memo(256);
    add_module(model, -1, {}, true, module_memo, param_memo, buffer_memo, 0);
    apply_special_dtypes(opts);
    for (Id i = 0; i < static_cast<Id>(nodes_.size()); ++i) {
      Node& n = nodes_[static_cast<std::size_t>(i)];
      if (n.kind == Kind::module || !n.counted) continue;
      try {
        n.size = tensor_size(n, opts);
      } catch (const OverflowError&) {
        const std::string kind = n.kind == Kind::parameter ? "parameter '" : "buffer '";
        throw OverflowError("sizing the model: " + kind + name(i) + "' (shape " + n.cell->data.shape().str() + ", " +
                            std::string(dtype_name(n.dtype)) + ") has " + std::to_string(n.numel) + " elements of " +
                            element_size(n, opts).str() + " bytes, more than the 2^60 bytes a size can count");
      }
    }
    // Module sizes: children were appended after their parent, so a reverse sweep sums subtrees.
    for (Id i = static_cast<Id>(nodes_.size()) - 1; i > 0; --i) {
      const Node& n = nodes_[static_cast<std::size_t>(i)];
      Node& parent = nodes_[static_cast<std::size_t>(n.parent)];
      try {
        parent.size += n.size;
        if (n.kind == Kind::buffer && n.counted) parent.buffer_size += n.size;
        if (n.kind == Kind::module) parent.buffer_size += n.buffer_size;
      } catch (const OverflowError&) {
        throw OverflowError("sizing the model: the tensors " +
                            (n.parent == 0 ? std::string("of the model") : "under module '" + name(n.parent) + "'") +
                            " add up to more than the 2^60 bytes a size can count (at '" + name(i) + "')");
      }
      if (n.has_entry) parent.has_entry = true;
    }
  }

  std::size_t node_count() const noexcept { return nodes_.size(); }
  Kind kind(Id i) const { return node(i).kind; }
  bool is_module(Id i) const { return node(i).kind == Kind::module; }
  /// Size as compute_module_sizes reports it (0 for paths it has no entry for).
  ByteSize size(Id i) const { return node(i).size; }
  /// Counted buffers in the subtree (compute_module_total_buffer_size of a canonical module).
  ByteSize buffer_size(Id i) const { return node(i).buffer_size; }
  /// True when compute_module_sizes has a key for this path.
  bool has_entry(Id i) const { return node(i).has_entry; }
  /// True for a tensor counted here (first path met), false for tied or aliased repeats.
  bool counted(Id i) const { return node(i).counted; }
  Id parent(Id i) const { return node(i).parent; }
  /// One past the last node of i's subtree.
  Id end(Id i) const { return node(i).end; }
  /// True when `j` is `i` or lies under it.
  bool contains(Id i, Id j) const { return j >= i && j < node(i).end; }
  std::string_view local_name(Id i) const { return node(i).local_name; }
  const nn::Module* module(Id i) const { return node(i).module; }
  const nn::Parameter* cell(Id i) const { return node(i).cell; }
  /// Class name of a module node ("" for tensors).
  std::string_view class_name(Id i) const {
    const Node& n = node(i);
    return n.module && n.kind == Kind::module ? std::string_view(n.module->class_name()) : std::string_view{};
  }
  /// Direct parameters (each cell once) then children (each module once): what a split yields.
  std::span<const Id> split_children(Id i) const {
    const Node& n = node(i);
    return {split_.data() + n.split_begin, n.split_count};
  }
  /// Children modules only (named_children).
  std::span<const Id> module_children(Id i) const {
    const Node& n = node(i);
    return {split_.data() + n.split_begin + n.n_split_params, n.split_count - n.n_split_params};
  }
  /// Direct buffers, each cell once (the tail of the root's initial queue).
  std::span<const Id> direct_buffers(Id i) const {
    const Node& n = node(i);
    return {buffers_.data() + n.buffers_begin, n.buffers_count};
  }

  /// The dotted path of a node ("" for the root).
  std::string name(Id i) const {
    if (i == 0) return {};
    std::size_t len = 0;
    for (Id j = i; j > 0; j = node(j).parent) len += node(j).local_name.size() + 1;
    std::string s(len - 1, '.');
    std::size_t pos = len - 1;
    for (Id j = i; j > 0; j = node(j).parent) {
      const auto ln = node(j).local_name;
      pos -= ln.size();
      s.replace(pos, ln.size(), ln);
      if (pos > 0) --pos;
    }
    return s;
  }

  /// The node at dotted `path` (module or tensor), nullopt when the tree has no such path.
  std::optional<Id> find(std::string_view path) const {
    Id cur = 0;
    while (!path.empty()) {
      const auto dot = path.find('.');
      const std::string_view part = path.substr(0, dot);
      Id next = -1;
      for (Id c = cur + 1; c < node(cur).end; c = node(c).end) {
        if (node(c).local_name == part) {
          next = c;
          break;
        }
      }
      if (next < 0) return std::nullopt;
      cur = next;
      path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
    }
    return cur;
  }

  /// compute_module_sizes' key order: for each counted parameter then each counted buffer (in
  /// traversal order), its prefixes from the root down, each key once.
  std::vector<Id> entry_order(bool parameters = true, bool buffers = true) const {
    std::vector<Id> out;
    std::vector<char> seen(nodes_.size(), 0);
    std::vector<Id> chain;
    for (Kind k : {Kind::parameter, Kind::buffer}) {
      if ((k == Kind::parameter && !parameters) || (k == Kind::buffer && !buffers)) continue;
      for (Id i = 0; i < static_cast<Id>(nodes_.size()); ++i) {
        if (nodes_[static_cast<std::size_t>(i)].kind != k || !nodes_[static_cast<std::size_t>(i)].counted) continue;
        chain.clear();
        for (Id j = i; j >= 0; j = node(j).parent) chain.push_back(j);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          if (!seen[static_cast<std::size_t>(*it)]) {
            seen[static_cast<std::size_t>(*it)] = 1;
            out.push_back(*it);
          }
        }
      }
    }
    return out;
  }

  /// Element count and dtype of a tensor node.
  std::int64_t numel(Id i) const { return node(i).numel; }
  DType dtype(Id i) const { return node(i).dtype; }

 private:
  struct Node {
    Id parent = -1;
    Id end = 0;
    Kind kind = Kind::module;
    bool counted = false;
    bool has_entry = false;
    std::optional<DType> special;
    std::string_view local_name;
    const nn::Module* module = nullptr;  // owning module for tensors
    const nn::Parameter* cell = nullptr;
    ByteSize size;
    ByteSize buffer_size;
    std::int64_t numel = 0;
    DType dtype = DType::f32;
    std::uint32_t split_begin = 0, split_count = 0, n_split_params = 0;
    std::uint32_t buffers_begin = 0, buffers_count = 0;
  };

  const Node& node(Id i) const { return nodes_[static_cast<std::size_t>(i)]; }

  Id add_module(const nn::Module& m, Id parent, std::string_view local, bool canonical, detail::PointerSet& module_memo,
                detail::PointerSet& param_memo, detail::PointerSet& buffer_memo, int depth) {
    if (depth > 4096) throw ValueError("module tree deeper than 4096 levels (a module registered inside itself?)");
    const Id id = next_id();
    if (canonical) canonical = module_memo.insert(&m);
    {
      Node n;
      n.parent = parent;
      n.local_name = local;
      n.module = &m;
      nodes_.push_back(n);
    }
    // Split list, gathered on a shared stack (children push their own lists above ours): direct
    // parameters (each cell once), then children (each module once).
    const std::size_t base = scratch_.size();
    detail::FirstSeen own_cells, own_buffers, own_children;
    for (const auto& p : m.parameter_slots()) {
      const Id pid = add_tensor(m, id, p.name, p.cell.get(), Kind::parameter, canonical && param_memo.insert(p.cell.get()));
      if (own_cells.insert(p.cell.get())) scratch_.push_back(pid);
    }
    const auto n_params = static_cast<std::uint32_t>(scratch_.size() - base);
    const std::size_t buf_base = buf_scratch_.size();
    for (const auto& b : m.buffer_slots()) {
      const Id bid = add_tensor(m, id, b.name, b.cell.get(), Kind::buffer, canonical && buffer_memo.insert(b.cell.get()));
      if (own_buffers.insert(b.cell.get())) buf_scratch_.push_back(bid);
    }
    const auto n_bufs = buf_scratch_.size() - buf_base;
    if (n_bufs) {
      buffers_begin_of(id) = static_cast<std::uint32_t>(buffers_.size());
      buffers_.insert(buffers_.end(), buf_scratch_.begin() + static_cast<std::ptrdiff_t>(buf_base), buf_scratch_.end());
      nodes_[static_cast<std::size_t>(id)].buffers_count = static_cast<std::uint32_t>(n_bufs);
      buf_scratch_.resize(buf_base);
    }
    for (const auto& c : m.child_slots()) {
      const Id cid = add_module(*c.module, id, c.name, canonical, module_memo, param_memo, buffer_memo, depth + 1);
      if (own_children.insert(c.module.get())) scratch_.push_back(cid);
    }
    Node& n = nodes_[static_cast<std::size_t>(id)];
    n.end = static_cast<Id>(nodes_.size());
    n.split_begin = static_cast<std::uint32_t>(split_.size());
    n.split_count = static_cast<std::uint32_t>(scratch_.size() - base);
    n.n_split_params = n_params;
    split_.insert(split_.end(), scratch_.begin() + static_cast<std::ptrdiff_t>(base), scratch_.end());
    scratch_.resize(base);
    return id;
  }

  std::uint32_t& buffers_begin_of(Id i) { return nodes_[static_cast<std::size_t>(i)].buffers_begin; }

  Id add_tensor(const nn::Module& owner, Id parent, std::string_view local, const nn::Parameter* cell, Kind kind,
                bool counted) {
    Node n;
    n.parent = parent;
    n.kind = kind;
    n.local_name = local;
    n.module = &owner;
    n.cell = cell;
    n.counted = counted && cell->data.defined();
    n.has_entry = n.counted;
    n.dtype = cell->data.dtype();
    n.end = next_id() + 1;
    nodes_.push_back(n);
    const Id id = n.end - 1;
    if (cell->data.defined()) nodes_.back().numel = element_count(id);
    return id;
  }

  // A meta tensor's extents are bounded by the address space in bytes only: one-byte elements can
  // still count past INT64_MAX, where Shape::numel would wrap. The check is inline and its message
  // out of line, since the planner's benchmark meets thousands of tensors per call.
  std::int64_t element_count(Id id) const {
    std::int64_t n = 1;
    for (const std::int64_t e : node(id).cell->data.shape()) {
      if (__builtin_mul_overflow(n, e, &n)) too_many_elements(id);
    }
    return n;
  }
  [[noreturn, gnu::cold, gnu::noinline]] void too_many_elements(Id id) const {
    throw OverflowError("sizing the model: tensor '" + name(id) + "' of shape " + node(id).cell->data.shape().str() +
                        " has more elements than a 64-bit count holds");
  }

  // The id the next node gets; node ids are 32-bit, so a tree with more paths is refused.
  Id next_id() const {
    if (nodes_.size() >= static_cast<std::size_t>(std::numeric_limits<Id>::max())) too_many_paths();
    return static_cast<Id>(nodes_.size());
  }
  [[noreturn, gnu::cold, gnu::noinline]] static void too_many_paths() {
    throw ValueError("sizing the model: more than " + std::to_string(std::numeric_limits<Id>::max()) +
                     " module and tensor paths (modules registered many times over?)");
  }

  void apply_special_dtypes(const SizeOptions& opts) {
    for (const auto& [name, dt] : opts.special_dtypes) {
      if (auto id = find(name); id && nodes_[static_cast<std::size_t>(*id)].kind != Kind::module) {
        nodes_[static_cast<std::size_t>(*id)].special = dt;
      }
    }
  }

  // One element as counted: a special dtype wins, a target dtype only shrinks floating tensors.
  static ByteSize element_size(const Node& n, const SizeOptions& opts) {
    if (n.special) return dtype_byte_size(*n.special);
    const ByteSize own = dtype_byte_size(n.dtype);
    if (!opts.dtype || !is_floating_point(n.dtype)) return own;
    const ByteSize target = dtype_byte_size(*opts.dtype);
    return target < own ? target : own;
  }
  static ByteSize tensor_size(const Node& n, const SizeOptions& opts) { return element_size(n, opts) * n.numel; }

  std::vector<Node> nodes_;
  std::vector<Id> split_;
  std::vector<Id> buffers_;
  std::vector<Id> scratch_, buf_scratch_;
};

}  // namespace accel::plan

// accel::nn::Module: a node with parameters, buffers and children reachable by dotted name, in
// registration order, with libtorch's verbs and torch's traversal rules.
//
//   register_parameter / register_buffer(persistent) / register_module
//   named_parameters / named_buffers / named_children / named_modules / state_dict / parameters
//   get_submodule / get_parameter / get_buffer / parameter_cell (mutable slot) / apply / to
//   class_name()    what no_split_module_classes matches
//   operator()(x)   hook slot -> forward(x) -> hook slot
//
// A slot holds a shared_ptr<Parameter>; tied weights are slots sharing one Parameter, so replacing
// `cell->data` (a loader swapping a meta tensor for a real one) keeps the tie. Traversals follow
// torch: named_modules/named_parameters/named_buffers skip a module or tensor already met,
// state_dict lists every name.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/init.hpp"

namespace accel::nn {

/// The shared cell behind a parameter or buffer slot. Two slots holding the same cell are tied.
struct Parameter {
  Tensor data;
  bool requires_grad = true;
};
using ParameterPtr = std::shared_ptr<Parameter>;

class Module;

/// What a hook attached to a module sees around its forward. Hooks of a later layer derive from
/// this; the default does nothing.
class ModuleHook {
 public:
  virtual ~ModuleHook() = default;
  /// Called before forward; may replace the input (move it to the execution device, ...).
  virtual void pre_forward(Module& /*module*/, Tensor& /*input*/) {}
  /// Called after forward; may replace the output.
  virtual void post_forward(Module& /*module*/, Tensor& /*output*/) {}
};

class Module {
 public:
  struct ParameterSlot {
    std::string name;
    ParameterPtr cell;
  };
  struct BufferSlot {
    std::string name;
    ParameterPtr cell;
    bool persistent = true;
  };
  struct ChildSlot {
    std::string name;
    std::shared_ptr<Module> module;
  };
  template <class T>
  using Named = std::vector<std::pair<std::string, T>>;

  explicit Module(std::string class_name = "Module") : class_name_(std::move(class_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The class name `no_split_module_classes` matches ("LlamaDecoderLayer").
  const std::string& class_name() const noexcept { return class_name_; }
  void set_class_name(std::string name) { class_name_ = std::move(name); }

  /// transformers' `_no_split_modules`: read by calculate_maximum_sizes only.
  const std::vector<std::string>& no_split_modules() const noexcept { return no_split_modules_; }
  void set_no_split_modules(std::vector<std::string> classes) { no_split_modules_ = std::move(classes); }

  // ---- registration ----------------------------------------------------------------------------

  /// Registers (or replaces) parameter `name`. Under init_empty_weights / init_on_device the
  /// tensor is moved to the scope's device first (meta: no storage). Returns the stored tensor.
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true) {
    check_name(name, "parameter", has_parameter(name));
    const Device d = init_device_for(false, t.device());
    if (t.defined() && d != t.device()) t = t.to(d);
    auto cell = std::make_shared<Parameter>(Parameter{std::move(t), requires_grad});
    return set_param_cell(name, std::move(cell)).data;
  }
  /// Registers an existing cell under `name`: the slot is tied to every other slot holding it.
  Parameter& register_parameter(const std::string& name, ParameterPtr cell) {
    if (!cell) throw ValueError(class_name_ + ": register_parameter('" + name + "') with a null cell");
    check_name(name, "parameter", has_parameter(name));
    return set_param_cell(name, std::move(cell));
  }
  /// Registers (or replaces) buffer `name`; non-persistent buffers are left out of state_dict().
  Tensor& register_buffer(const std::string& name, Tensor t, bool persistent = true) {
    check_name(name, "buffer", find_slot(buffers_, name) != nullptr);
    const Device d = init_device_for(true, t.device());
    if (t.defined() && d != t.device()) t = t.to(d);
    auto cell = std::make_shared<Parameter>(Parameter{std::move(t), false});
    if (auto* s = find_slot(buffers_, name)) {
      s->cell = std::move(cell);
      s->persistent = persistent;
      return s->cell->data;
    }
    buffers_.push_back({name, std::move(cell), persistent});
    return buffers_.back().cell->data;
  }
  /// Registers `module` as child `name`. The same module may sit under several names or parents.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module takes a std::shared_ptr to a Module subclass");
    if (!module) throw ValueError(class_name_ + ": register_module('" + name + "') with a null module");
    check_name(name, "module", find_slot(children_, name) != nullptr);
    if (auto* s = find_slot(children_, name)) {
      s->module = module;
    } else {
      children_.push_back({name, module});
    }
    return module;
  }

  // ---- direct slots ----------------------------------------------------------------------------

  const std::vector<ParameterSlot>& parameter_slots() const noexcept { return params_; }
  const std::vector<BufferSlot>& buffer_slots() const noexcept { return buffers_; }
  const std::vector<ChildSlot>& child_slots() const noexcept { return children_; }
  bool has_parameter(std::string_view name) const { return find_slot(params_, name) != nullptr; }
  bool has_buffer(std::string_view name) const { return find_slot(buffers_, name) != nullptr; }

  // ---- traversal (torch's order and de-duplication) ------------------------------------------

  /// Every module once (a module registered twice is reported under its first path), pre-order.
  Named<Module*> named_modules(const std::string& prefix = "", bool remove_duplicate = true) {
    Named<Module*> out;
    std::unordered_set<const Module*> memo;
    collect_modules(const_cast<Module*>(this), prefix, remove_duplicate, memo, out);
    return out;
  }
  Named<const Module*> named_modules(const std::string& prefix = "", bool remove_duplicate = true) const {
    Named<Module*> tmp = const_cast<Module*>(this)->named_modules(prefix, remove_duplicate);
    return Named<const Module*>(tmp.begin(), tmp.end());
  }
  /// Direct children, a module registered twice under this parent reported once.
  Named<Module*> named_children() const {
    Named<Module*> out;
    std::unordered_set<const Module*> memo;
    for (const auto& c : children_) {
      if (memo.insert(c.module.get()).second) out.emplace_back(c.name, c.module.get());
    }
    return out;
  }
  /// Parameters by dotted name; a tied parameter appears once, under the name met first.
  Named<Tensor> named_parameters(const std::string& prefix = "", bool recurse = true,
                                 bool remove_duplicate = true) const {
    Named<Tensor> out;
    for (auto& [n, cell] : named_parameter_cells(prefix, recurse, remove_duplicate)) out.emplace_back(n, cell->data);
    return out;
  }
  /// As named_parameters, with the shared cells (to compare identities or replace tensors).
  Named<ParameterPtr> named_parameter_cells(const std::string& prefix = "", bool recurse = true,
                                            bool remove_duplicate = true) const {
    return collect_cells(prefix, recurse, remove_duplicate, /*buffers=*/false);
  }
  /// Buffers (persistent or not) by dotted name, each tensor once.
  Named<Tensor> named_buffers(const std::string& prefix = "", bool recurse = true,
                              bool remove_duplicate = true) const {
    Named<Tensor> out;
    for (auto& [n, cell] : named_buffer_cells(prefix, recurse, remove_duplicate)) out.emplace_back(n, cell->data);
    return out;
  }
  Named<ParameterPtr> named_buffer_cells(const std::string& prefix = "", bool recurse = true,
                                         bool remove_duplicate = true) const {
    return collect_cells(prefix, recurse, remove_duplicate, /*buffers=*/true);
  }
  /// Every parameter tensor once, in traversal order.
  std::vector<Tensor> parameters(bool recurse = true) const {
    std::vector<Tensor> out;
    for (auto& [n, t] : named_parameters("", recurse)) out.push_back(t);
    return out;
  }
  /// torch's state_dict(keep_vars=True): every name of every parameter (tied names included) and
  /// of every persistent buffer, modules registered twice listed under each path.
  Named<Tensor> state_dict(const std::string& prefix = "") const {
    Named<ParameterPtr> cells = state_dict_cells(prefix);
    Named<Tensor> out;
    out.reserve(cells.size());
    for (auto& [n, c] : cells) out.emplace_back(n, c->data);
    return out;
  }
  /// state_dict with the cells: names sharing a cell share one storage.
  Named<ParameterPtr> state_dict_cells(const std::string& prefix = "") const {
    Named<ParameterPtr> out;
    collect_state(prefix, out, 0);
    return out;
  }

  // ---- lookup by dotted path -------------------------------------------------------------------

  /// The module at `path` ("" is this one); KeyError names the missing component.
  Module& get_submodule(std::string_view path) {
    Module* m = this;
    std::string walked;
    while (!path.empty()) {
      const auto dot = path.find('.');
      const std::string_view part = path.substr(0, dot);
      const auto* slot = find_slot(m->children_, part);
      if (!slot) {
        throw KeyError(m->class_name_ + (walked.empty() ? std::string(" (the root)") : " '" + walked + "'") +
                       " has no submodule '" + std::string(part) + "'");
      }
      walked += (walked.empty() ? "" : ".") + std::string(part);
      m = slot->module.get();
      path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
    }
    return *m;
  }
  const Module& get_submodule(std::string_view path) const { return const_cast<Module*>(this)->get_submodule(path); }

  /// The mutable slot of parameter or buffer `path`: assign `->data` to replace the tensor
  /// (ties kept), or assign the pointer itself to re-tie. KeyError when absent.
  ParameterPtr& tensor_cell(std::string_view path) {
    const auto [owner, leaf] = split_path(path);
    Module& m = get_submodule(owner);
    if (auto* p = find_slot(m.params_, leaf)) return p->cell;
    if (auto* b = find_slot(m.buffers_, leaf)) return b->cell;
    throw KeyError("module '" + std::string(owner) + "' (" + m.class_name_ + ") has no parameter or buffer '" +
                   std::string(leaf) + "'");
  }
  /// The mutable slot of parameter `path`.
  ParameterPtr& parameter_cell(std::string_view path) {
    const auto [owner, leaf] = split_path(path);
    Module& m = get_submodule(owner);
    if (auto* p = find_slot(m.params_, leaf)) return p->cell;
    throw KeyError("module '" + std::string(owner) + "' (" + m.class_name_ + ") has no parameter '" +
                   std::string(leaf) + "'");
  }
  const Tensor& get_parameter(std::string_view path) const {
    return const_cast<Module*>(this)->parameter_cell(path)->data;
  }
  const Tensor& get_buffer(std::string_view path) const {
    const auto [owner, leaf] = split_path(path);
    const Module& m = get_submodule(owner);
    if (const auto* b = find_slot(m.buffers_, leaf)) return b->cell->data;
    throw KeyError("module '" + std::string(owner) + "' (" + m.class_name_ + ") has no buffer '" +
                   std::string(leaf) + "'");
  }
  /// A parameter or buffer by path.
  const Tensor& get_tensor(std::string_view path) const { return const_cast<Module*>(this)->tensor_cell(path)->data; }
  /// True when `path` names a parameter or buffer.
  bool has_tensor(std::string_view path) const {
    try {
      (void)get_tensor(path);
      return true;
    } catch (const KeyError&) {
      return false;
    }
  }

  // ---- whole-tree operations -------------------------------------------------------------------

  /// Calls fn on every child (recursively, children first) and then on this module.
  Module& apply(const std::function<void(Module&)>& fn) {
    for (auto& [n, child] : named_children()) child->apply(fn);
    fn(*this);
    return *this;
  }
  /// Moves every parameter and buffer to `device`; `dtype` converts floating tensors only
  /// (integers and bools keep theirs). Tied tensors are moved once and stay tied.
  Module& to(Device device, std::optional<DType> dtype = std::nullopt) {
    std::unordered_set<const Parameter*> done;
    for (auto& [name, m] : named_modules()) {
      auto move = [&](const ParameterPtr& cell) {
        if (!done.insert(cell.get()).second || !cell->data.defined()) return;
        const bool cast = dtype && cell->data.is_floating_point();
        cell->data = cell->data.to(device, cast ? dtype : std::nullopt);
      };
      for (auto& p : m->params_) move(p.cell);
      for (auto& b : m->buffers_) move(b.cell);
    }
    return *this;
  }
  Module& to(DType dtype) {
    std::unordered_set<const Parameter*> done;
    for (auto& [name, m] : named_modules()) {
      auto cast = [&](const ParameterPtr& cell) {
        if (!done.insert(cell.get()).second || !cell->data.defined() || !cell->data.is_floating_point()) return;
        cell->data = cell->data.to(dtype);
      };
      for (auto& p : m->params_) cast(p.cell);
      for (auto& b : m->buffers_) cast(b.cell);
    }
    return *this;
  }

  // ---- calling ---------------------------------------------------------------------------------

  /// The module's computation on one tensor. Modules without one throw ValueError.
  virtual Tensor forward(const Tensor& /*input*/) {
    throw ValueError(class_name_ + " has no single-tensor forward");
  }
  /// Calls forward through the hook slot: pre_forward may replace the input, post_forward the output.
  Tensor operator()(const Tensor& input) {
    if (!hook_) return forward(input);
    Tensor x = input;
    hook_->pre_forward(*this, x);
    Tensor y = forward(x);
    hook_->post_forward(*this, y);
    return y;
  }
  /// The hook attached to this module (null when none).
  const std::shared_ptr<ModuleHook>& hook() const noexcept { return hook_; }
  void set_hook(std::shared_ptr<ModuleHook> hook) { hook_ = std::move(hook); }

 private:
  template <class Slot>
  static Slot* find_slot(std::vector<Slot>& v, std::string_view name) {
    for (auto& s : v) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }
  template <class Slot>
  static const Slot* find_slot(const std::vector<Slot>& v, std::string_view name) {
    for (const auto& s : v) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }
  static std::pair<std::string_view, std::string_view> split_path(std::string_view path) {
    const auto dot = path.rfind('.');
    if (dot == std::string_view::npos) return {std::string_view{}, path};
    return {path.substr(0, dot), path.substr(dot + 1)};
  }
  // torch keeps parameters, buffers and children in one attribute namespace.
  void check_name(const std::string& name, const char* kind, bool replacing_same_kind) const {
    if (name.empty() || name.find('.') != std::string::npos) {
      throw KeyError(class_name_ + ": " + kind + " name '" + name + "' must be non-empty and contain no '.'");
    }
    if (replacing_same_kind) return;
    const bool clash = find_slot(params_, name) || find_slot(buffers_, name) || find_slot(children_, name);
    if (clash) throw KeyError(class_name_ + ": attribute '" + name + "' already exists (cannot register a " + kind + ")");
  }
  Parameter& set_param_cell(const std::string& name, ParameterPtr cell) {
    if (auto* s = find_slot(params_, name)) {
      s->cell = std::move(cell);
      return *s->cell;
    }
    params_.push_back({name, std::move(cell)});
    return *params_.back().cell;
  }
  static void collect_modules(Module* m, const std::string& prefix, bool remove_duplicate,
                              std::unordered_set<const Module*>& memo, Named<Module*>& out) {
    if (memo.count(m)) return;
    if (remove_duplicate) memo.insert(m);
    out.emplace_back(prefix, m);
    for (const auto& c : m->children_) {
      collect_modules(c.module.get(), prefix.empty() ? c.name : prefix + "." + c.name, remove_duplicate, memo, out);
    }
  }
  Named<ParameterPtr> collect_cells(const std::string& prefix, bool recurse, bool remove_duplicate, bool buffers) const {
    Named<ParameterPtr> out;
    std::unordered_set<const Parameter*> memo;
    auto take = [&](const std::string& mprefix, const Module& m) {
      auto add = [&](const std::string& n, const ParameterPtr& cell) {
        if (remove_duplicate && !memo.insert(cell.get()).second) return;
        out.emplace_back(mprefix.empty() ? n : mprefix + "." + n, cell);
      };
      if (buffers) {
        for (const auto& b : m.buffers_) add(b.name, b.cell);
      } else {
        for (const auto& p : m.params_) add(p.name, p.cell);
      }
    };
    if (!recurse) {
      take(prefix, *this);
      return out;
    }
    for (const auto& [p, m] : named_modules(prefix, remove_duplicate)) take(p, *m);
    return out;
  }
  void collect_state(const std::string& prefix, Named<ParameterPtr>& out, int depth) const {
    if (depth > 10000) throw ValueError("state_dict: module tree deeper than 10000 levels (a cycle?)");
    auto full = [&](const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
    for (const auto& p : params_) out.emplace_back(full(p.name), p.cell);
    for (const auto& b : buffers_) {
      if (b.persistent) out.emplace_back(full(b.name), b.cell);
    }
    for (const auto& c : children_) c.module->collect_state(full(c.name), out, depth + 1);
  }

  std::string class_name_;
  std::vector<std::string> no_split_modules_;
  std::vector<ParameterSlot> params_;
  std::vector<BufferSlot> buffers_;
  std::vector<ChildSlot> children_;
  std::shared_ptr<ModuleHook> hook_;
};

}  // namespace accel::nn

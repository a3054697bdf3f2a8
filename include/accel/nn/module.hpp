// accel::nn::Module: a node with parameters, buffers and children reachable by dotted name, in
// registration order, with libtorch's verbs and torch's traversal rules.
//
//   register_parameter / register_buffer(persistent) / register_module / replace_module
//   parameters(recurse) / buffers(recurse) / children() / modules()
//   named_parameters / named_buffers / named_children / named_modules / state_dict
//   find_submodule / find_parameter / find_buffer / find_tensor_cell   pointer, null when absent
//   get_submodule / get_parameter / get_buffer / tensor_cell           KeyError naming the path
//   as<T>() / apply / to(device, dtype, non_blocking)
//   class_name()          what no_split_module_classes matches
//   execution_device()    where the module computes: its hook's device, else its weights'
//   operator()(x)         the type-erased entry: one tensor, through the call path below
//   Module::invoke(m, a...)  (protected) the call path: hook pre_forward -> m.forward(a...) -> hook post_forward
//   ChildRef<T>           a parent's handle on a child slot (replace_module takes effect)
//
// Names live in one index per module (torch keeps parameters, buffers and children in one
// attribute namespace), so a lookup by dotted path costs one hash probe per component.
//
// The call path (docs/design.md, "Modules and the call path"): every call of a module ends in
// `Module::invoke`, whether it comes through BasicModule's typed operator()(args...) or through
// the type-erased operator()(const Tensor&) (a virtual entry BasicModule overrides so its policy
// scope applies). Calling `forward` directly bypasses the hook, as in torch. Without a hook the
// call is `m.forward(std::forward<Args>(args)...)` plus one null test. With a hook, the arguments
// keep their value category: one holding no tensor is passed on by reference, untouched; one
// holding tensors is moved (an rvalue) or copied (an lvalue that forward accepts as a value there)
// into a pack the hook may edit, so the caller's objects stay as they were; a non-const lvalue
// that forward takes by non-const reference stays the caller's object, and the hook edits its
// tensors in place (forward was going to write to it anyway). Move-only arguments work.
//
// Parents reach their children through ChildRef, which reads the tree's slot at each use: a module
// put in place by replace_module after construction (a quantized layer, a wrapper) is the one that
// runs. A ChildRef<T> of a typed child checks that a replacement is a T (ValueError naming both).
//
// A slot holds a shared_ptr<Parameter>; tied weights are slots sharing one Parameter, so replacing
// `cell->data` (a loader swapping a meta tensor for a real one) keeps the tie. Traversals follow
// torch: named_modules/named_parameters/named_buffers skip a module or tensor already met,
// state_dict lists every name.
#pragma once

#include <deque>
#include <functional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
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
#include "accel/nested/traits.hpp"
#include "accel/nn/module_hook.hpp"

namespace accel::nn {

template <class T>
class ChildRef;

/// The shared cell behind a parameter or buffer slot. Two slots holding the same cell are tied.
struct Parameter {
  Tensor data;
  bool requires_grad = true;
};
using ParameterPtr = std::shared_ptr<Parameter>;

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

  /// Whether this module is kept in float32 inside a lower-precision model (transformers'
  /// keep_in_fp32_modules; the checkpoint loader sets it on every module it keeps): a computing
  /// module so marked runs its calls outside its bundle's autocast scope, as transformers, which
  /// has no scope, runs it in float32.
  bool keeps_fp32() const noexcept { return keeps_fp32_; }
  void set_keeps_fp32(bool keep) noexcept { keeps_fp32_ = keep; }

  /// transformers' `_no_split_modules`: read by calculate_maximum_sizes only.
  const std::vector<std::string>& no_split_modules() const noexcept { return no_split_modules_; }
  void set_no_split_modules(std::vector<std::string> classes) { no_split_modules_ = std::move(classes); }

  // ---- registration ----------------------------------------------------------------------------

  /// Registers (or replaces) parameter `name`. Under init_empty_weights / init_on_device the
  /// tensor is moved to the scope's device first (meta: no storage). Returns the slot: a layer
  /// keeps its address to read the weight without a lookup (slots never move, and the slot follows
  /// re-ties and replacements: `(*slot)->data` is always the current tensor).
  ParameterPtr& register_parameter(const std::string& name, Tensor t, bool requires_grad = true) {
    check_name(name, Kind::parameter);
    const Device d = init_device_for(false, t.device());
    if (t.defined() && d != t.device()) t = t.to(d);
    return set_param_cell(name, std::make_shared<Parameter>(Parameter{std::move(t), requires_grad}));
  }
  /// Registers an existing cell under `name`: the slot is tied to every other slot holding it.
  ParameterPtr& register_parameter(const std::string& name, ParameterPtr cell) {
    if (!cell) throw ValueError(class_name_ + ": register_parameter('" + name + "') with a null cell");
    check_name(name, Kind::parameter);
    return set_param_cell(name, std::move(cell));
  }
  /// Registers (or replaces) buffer `name`; non-persistent buffers are left out of state_dict().
  /// Returns the slot, as register_parameter does.
  ParameterPtr& register_buffer(const std::string& name, Tensor t, bool persistent = true) {
    check_name(name, Kind::buffer);
    const Device d = init_device_for(true, t.device());
    if (t.defined() && d != t.device()) t = t.to(d);
    auto cell = std::make_shared<Parameter>(Parameter{std::move(t), false});
    if (auto* s = slot_of(buffers_, Kind::buffer, name)) {
      s->cell = std::move(cell);
      s->persistent = persistent;
      return s->cell;
    }
    index_.emplace(name, Entry{Kind::buffer, buffers_.size()});
    buffers_.push_back({name, std::move(cell), persistent});
    return buffers_.back().cell;
  }
  /// Registers `module` as child `name` (replacing a child of that name). The same module may sit
  /// under several names or parents.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module takes a std::shared_ptr to a Module subclass");
    if (!module) throw ValueError(class_name_ + ": register_module('" + name + "') with a null module");
    check_name(name, Kind::child);
    if (auto* s = slot_of(children_, Kind::child, name)) {
      s->module = module;
    } else {
      index_.emplace(name, Entry{Kind::child, children_.size()});
      children_.push_back({name, module});
    }
    return module;
  }
  /// Registers `module` as child `name` and returns the parent's handle on the slot (ChildRef<T>,
  /// T the registered class unless named): what a parent keeps to call the child.
  template <class T = void, class M>
  auto register_child(const std::string& name, std::shared_ptr<M> module) {
    using Ref = ChildRef<std::conditional_t<std::is_void_v<T>, M, T>>;
    register_module(name, std::move(module));
    return Ref(*this, name);
  }
  /// libtorch's replace_module: puts `module` in the place of the existing child `name` (its
  /// position in the traversal order kept). KeyError when there is no such child.
  template <class M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    if (!slot_of(children_, Kind::child, name)) {
      throw KeyError(class_name_ + ": replace_module('" + name + "'): there is no child of that name");
    }
    return register_module(name, std::move(module));
  }

  // ---- direct slots ----------------------------------------------------------------------------

  /// Slots in registration order (a deque: registering more never moves existing slots).
  const std::deque<ParameterSlot>& parameter_slots() const noexcept { return params_; }
  const std::deque<BufferSlot>& buffer_slots() const noexcept { return buffers_; }
  const std::deque<ChildSlot>& child_slots() const noexcept { return children_; }
  bool has_parameter(std::string_view name) const { return slot_of(params_, Kind::parameter, name) != nullptr; }
  bool has_buffer(std::string_view name) const { return slot_of(buffers_, Kind::buffer, name) != nullptr; }
  /// The direct child `name`, or null.
  Module* find_child(std::string_view name) const {
    const auto* s = slot_of(children_, Kind::child, name);
    return s ? s->module.get() : nullptr;
  }

  // ---- traversal (torch's order and de-duplication) ------------------------------------------

  /// Every module once (a module registered twice is reported under its first path), pre-order.
  Named<Module*> named_modules(const std::string& prefix = "", bool remove_duplicate = true) {
    Named<Module*> out;
    std::unordered_set<const Module*> memo;
    collect_modules(this, prefix, remove_duplicate, memo, out);
    return out;
  }
  Named<const Module*> named_modules(const std::string& prefix = "", bool remove_duplicate = true) const {
    Named<Module*> tmp = const_cast<Module*>(this)->named_modules(prefix, remove_duplicate);
    return Named<const Module*>(tmp.begin(), tmp.end());
  }
  /// Every module once, pre-order, this one first (libtorch's modules(include_self)).
  std::vector<Module*> modules(bool include_self = true) {
    std::vector<Module*> out;
    for (auto& [n, m] : named_modules()) {
      if (include_self || m != this) out.push_back(m);
    }
    return out;
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
  /// Direct children, each once, in registration order.
  std::vector<Module*> children() const {
    std::vector<Module*> out;
    for (auto& [n, m] : named_children()) out.push_back(m);
    return out;
  }
  /// Parameters by dotted name; a tied parameter appears once, under the name met first.
  Named<Tensor> named_parameters(const std::string& prefix = "", bool recurse = true,
                                 bool remove_duplicate = true) const {
    return tensors_of(named_parameter_cells(prefix, recurse, remove_duplicate));
  }
  /// As named_parameters, with the shared cells (to compare identities or replace tensors).
  Named<ParameterPtr> named_parameter_cells(const std::string& prefix = "", bool recurse = true,
                                            bool remove_duplicate = true) const {
    return collect_cells(prefix, recurse, remove_duplicate, /*buffers=*/false);
  }
  /// Buffers (persistent or not) by dotted name, each tensor once.
  Named<Tensor> named_buffers(const std::string& prefix = "", bool recurse = true,
                              bool remove_duplicate = true) const {
    return tensors_of(named_buffer_cells(prefix, recurse, remove_duplicate));
  }
  Named<ParameterPtr> named_buffer_cells(const std::string& prefix = "", bool recurse = true,
                                         bool remove_duplicate = true) const {
    return collect_cells(prefix, recurse, remove_duplicate, /*buffers=*/true);
  }
  /// Every parameter tensor once, in traversal order.
  std::vector<Tensor> parameters(bool recurse = true) const { return values_of(named_parameters("", recurse)); }
  /// Every buffer tensor once, in traversal order.
  std::vector<Tensor> buffers(bool recurse = true) const { return values_of(named_buffers("", recurse)); }
  /// torch's state_dict(keep_vars=True): every name of every parameter (tied names included) and
  /// of every persistent buffer, modules registered twice listed under each path.
  Named<Tensor> state_dict(const std::string& prefix = "") const { return tensors_of(state_dict_cells(prefix)); }
  /// state_dict with the cells: names sharing a cell share one storage.
  Named<ParameterPtr> state_dict_cells(const std::string& prefix = "") const {
    Named<ParameterPtr> out;
    collect_state(prefix, out, 0);
    return out;
  }

  // ---- lookup by dotted path -------------------------------------------------------------------

  /// The module at `path` ("" is this one), or null when a component is missing.
  Module* find_submodule(std::string_view path) const {
    const Module* m = this;
    while (m && !path.empty()) {
      const auto dot = path.find('.');
      m = m->find_child(path.substr(0, dot));
      path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
    }
    return const_cast<Module*>(m);
  }
  /// The module at `path` ("" is this one); KeyError names the missing component.
  Module& get_submodule(std::string_view path) {
    Module* m = this;
    std::string walked;
    while (!path.empty()) {
      const auto dot = path.find('.');
      const std::string_view part = path.substr(0, dot);
      Module* next = m->find_child(part);
      if (!next) {
        throw KeyError(m->class_name_ + (walked.empty() ? std::string(" (the root)") : " '" + walked + "'") +
                       " has no submodule '" + std::string(part) + "'");
      }
      walked += (walked.empty() ? "" : ".") + std::string(part);
      m = next;
      path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
    }
    return *m;
  }
  const Module& get_submodule(std::string_view path) const { return const_cast<Module*>(this)->get_submodule(path); }

  /// The mutable slot of parameter or buffer `path` (assign `->data` to replace the tensor with
  /// ties kept, or the pointer itself to re-tie), or null when absent.
  ParameterPtr* find_tensor_cell(std::string_view path) const {
    const auto [owner, leaf] = split_path(path);
    Module* m = find_submodule(owner);
    if (!m) return nullptr;
    if (auto* p = m->slot_of(m->params_, Kind::parameter, leaf)) return &p->cell;
    if (auto* b = m->slot_of(m->buffers_, Kind::buffer, leaf)) return &b->cell;
    return nullptr;
  }
  /// Parameter `path`, or null.
  const Tensor* find_parameter(std::string_view path) const {
    const auto [owner, leaf] = split_path(path);
    const Module* m = find_submodule(owner);
    const auto* p = m ? m->slot_of(m->params_, Kind::parameter, leaf) : nullptr;
    return p ? &p->cell->data : nullptr;
  }
  /// Buffer `path`, or null.
  const Tensor* find_buffer(std::string_view path) const {
    const auto [owner, leaf] = split_path(path);
    const Module* m = find_submodule(owner);
    const auto* b = m ? m->slot_of(m->buffers_, Kind::buffer, leaf) : nullptr;
    return b ? &b->cell->data : nullptr;
  }
  /// The mutable slot of parameter or buffer `path`; KeyError when absent.
  ParameterPtr& tensor_cell(std::string_view path) {
    if (auto* c = find_tensor_cell(path)) return *c;
    throw missing(path, "parameter or buffer");
  }
  /// The mutable slot of parameter `path`; KeyError when absent.
  ParameterPtr& parameter_cell(std::string_view path) {
    const auto [owner, leaf] = split_path(path);
    Module& m = get_submodule(owner);
    if (auto* p = m.slot_of(m.params_, Kind::parameter, leaf)) return p->cell;
    throw missing(path, "parameter");
  }
  const Tensor& get_parameter(std::string_view path) const {
    if (const Tensor* t = find_parameter(path)) return *t;
    throw missing(path, "parameter");
  }
  const Tensor& get_buffer(std::string_view path) const {
    if (const Tensor* t = find_buffer(path)) return *t;
    throw missing(path, "buffer");
  }
  /// A parameter or buffer by path; KeyError when absent.
  const Tensor& get_tensor(std::string_view path) const { return const_cast<Module*>(this)->tensor_cell(path)->data; }
  /// True when `path` names a parameter or buffer.
  bool has_tensor(std::string_view path) const { return find_tensor_cell(path) != nullptr; }

  /// This module as a `T` (libtorch's as<T>()), or null when it is not one.
  template <class T>
  T* as() noexcept {
    static_assert(std::is_base_of_v<Module, T>, "Module::as<T>: T must be a Module subclass");
    return dynamic_cast<T*>(this);
  }
  template <class T>
  const T* as() const noexcept {
    static_assert(std::is_base_of_v<Module, T>, "Module::as<T>: T must be a Module subclass");
    return dynamic_cast<const T*>(this);
  }

  // ---- whole-tree operations -------------------------------------------------------------------

  /// Calls fn on every child (recursively, children first) and then on this module.
  Module& apply(const std::function<void(Module&)>& fn) {
    for (auto& [n, child] : named_children()) child->apply(fn);
    fn(*this);
    return *this;
  }
  /// Moves every parameter and buffer to `device`; `dtype` converts floating tensors only
  /// (integers and bools keep theirs). Hooks of the tree are told first (a dispatched model's
  /// hooks warn, or refuse while they hold weights on meta). Tied tensors are moved once and stay tied. Copies are
  /// synchronous whatever `non_blocking` says: the flag is accepted for libtorch's signature, and
  /// asynchronous copies belong to the streams of the CUDA backend.
  Module& to(Device device, std::optional<DType> dtype = std::nullopt, bool non_blocking = false) {
    (void)non_blocking;
    for (auto& [name, m] : named_modules()) {
      if (m->hook_) m->hook_->before_module_to(*m, device);  // dispatched models warn or refuse
    }
    return convert_all([&](const Tensor& t) {
      const bool cast = dtype && t.is_floating_point();
      return t.to(device, cast ? dtype : std::nullopt);
    });
  }
  /// Converts every floating parameter and buffer to `dtype`, on its device.
  Module& to(DType dtype, bool non_blocking = false) {
    (void)non_blocking;
    return convert_all([&](const Tensor& t) { return t.is_floating_point() ? t.to(dtype) : t; });
  }

  // ---- calling ---------------------------------------------------------------------------------

  /// The module's computation on one tensor. Modules without one throw ValueError.
  virtual Tensor forward(const Tensor& /*input*/) {
    throw ValueError(class_name_ + " has no single-tensor forward");
  }
  /// Calls forward(input) through the call path, under the module's policy scope: the entry for a
  /// caller that knows the module only as a Module (containers, a parent's replaceable child).
  Tensor operator()(const Tensor& input) { return call_erased(input); }

  /// The hook attached to this module (null when none).
  const std::shared_ptr<ModuleHook>& hook() const noexcept { return hook_; }
  /// Attaches `hook` (null removes): the previous hook's detach_hook and the new one's init_hook run.
  void set_hook(std::shared_ptr<ModuleHook> hook) {
    if (hook_) hook_->detach_hook(*this);
    hook_ = std::move(hook);
    if (hook_) hook_->init_hook(*this);
  }
  /// Puts `hook` in the slot and returns the one it held, running neither's detach_hook nor
  /// init_hook: for a caller that keeps the old hook attached inside the new one (a chain) and
  /// has initialised what is new (hooks::add_hook_to_module with append).
  std::shared_ptr<ModuleHook> exchange_hook(std::shared_ptr<ModuleHook> hook) noexcept {
    return std::exchange(hook_, std::move(hook));
  }

  /// The device this module computes on (Accelerate's execution device): its hook's, else the
  /// first one found among its submodules' hooks and direct weights, in pre-order (a module whose
  /// weights are parked on meta between calls computes where its hook brings them); meta when it
  /// only has meta weights and no hook says otherwise; cpu when it holds no tensor at all.
  Device execution_device() const {
    bool saw_meta = false;
    if (auto d = find_execution_device(*this, saw_meta, 0)) return *d;
    return saw_meta ? Device::meta() : Device::cpu();
  }

  /// The slot of direct child `name` (its address never changes), or null.
  const std::shared_ptr<Module>* find_child_slot(std::string_view name) const {
    const auto* s = slot_of(children_, Kind::child, name);
    return s ? &s->module : nullptr;
  }

 protected:
  /// The call path (see the header comment): `self.forward(args...)` between self's hook's
  /// pre_forward and post_forward, the arguments keeping their value category. Protected: it
  /// opens no policy scope, so callers come in through operator() (BasicModule's or this one).
  template <class Self, class... Args>
  static auto invoke(Self& self, Args&&... args) {
    static_assert(std::is_base_of_v<Module, Self>, "Module::invoke: self must be a Module");
    using Result = decltype(self.forward(std::forward<Args>(args)...));
    static_assert(!std::is_reference_v<Result>, "Module::invoke: forward must return a value (tensors are handles)");
    ModuleHook* hook = static_cast<Module&>(self).hook_.get();
    if (!hook) return self.forward(std::forward<Args>(args)...);
    return hooked_call(self, *hook, std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
  }

  /// The type-erased entry behind operator()(const Tensor&); BasicModule overrides it so that the
  /// call runs under its policy scope and reaches its Derived::forward through the same path.
  virtual Tensor call_erased(const Tensor& input) { return invoke(*this, input); }

 private:
  // ---- the hooked call: which arguments the pack owns, which it borrows ---------------------

  /// An argument the hook does not see: passed on to forward exactly as it came.
  template <class A>
  class Borrowed {
   public:
    explicit Borrowed(A&& a) noexcept : p_(std::addressof(a)) {}
    A&& get() const noexcept { return static_cast<A&&>(*p_); }

   private:
    std::remove_reference_t<A>* p_;
  };
  template <class T>
  struct is_borrowed : std::false_type {};
  template <class A>
  struct is_borrowed<Borrowed<A>> : std::true_type {};

  /// Whether forward accepts, at position I, an rvalue of the argument's decayed type (so that a
  /// copy may stand in for the caller's object there).
  template <std::size_t I, class Self, class... Args, std::size_t... J>
  static constexpr bool accepts_value_at(std::index_sequence<J...>) {
    return requires(Self& s) {
      s.forward(std::declval<std::conditional_t<J == I, std::remove_cvref_t<Args>&&, Args&&>>()...);
    };
  }
  /// The pack element of argument I (A as forwarded): an owned value, the caller's object, or Borrowed.
  template <std::size_t I, class Self, class... Args>
  static auto pack_kind() {
    using A = std::tuple_element_t<I, std::tuple<Args...>>;
    using D = std::remove_cvref_t<A>;
    if constexpr (!nested::may_hold_leaves_v<nested::tensor_leaf, D>) {
      return std::type_identity<Borrowed<A>>{};
    } else if constexpr (!std::is_lvalue_reference_v<A>) {
      return std::type_identity<D>{};  // an rvalue: moved in
    } else if constexpr (!std::is_const_v<std::remove_reference_t<A>> &&
                         !accepts_value_at<I, Self, Args...>(std::index_sequence_for<Args...>{})) {
      return std::type_identity<D&>{};  // forward wants the caller's object: edited in place
    } else if constexpr (std::is_copy_constructible_v<D>) {
      return std::type_identity<D>{};  // copied: the caller's object stays as it was
    } else {
      return std::type_identity<Borrowed<A>>{};  // a const move-only object: nothing the hook may edit
    }
  }
  /// Element E of the pack as forward receives it: the caller's object as an lvalue, a Borrowed
  /// argument as it came, an owned value as an rvalue (forward accepted one there).
  template <class E, class X>
  static decltype(auto) pass(X& x) {
    if constexpr (std::is_lvalue_reference_v<E>) {
      return static_cast<E>(x);
    } else if constexpr (is_borrowed<E>::value) {
      return x.get();
    } else {
      return std::move(x);
    }
  }
  template <class Self, class... Args, std::size_t... I>
  static auto hooked_call(Self& self, ModuleHook& hook, std::index_sequence<I...>, Args&&... args)
      -> decltype(self.forward(std::forward<Args>(args)...)) {
    using Pack = std::tuple<typename decltype(pack_kind<I, Self, Args&&...>())::type...>;
    Pack pack(std::forward<Args>(args)...);
    hook.pre_forward(self, TensorRefs::of(pack));
    auto out = self.forward(pass<std::tuple_element_t<I, Pack>>(std::get<I>(pack))...);
    hook.post_forward(self, TensorRefs::of(out));
    return out;
  }

  static std::optional<Device> find_execution_device(const Module& m, bool& saw_meta, int depth) {
    if (depth > 10000) throw ValueError("execution_device: module tree deeper than 10000 levels (a cycle?)");
    if (m.hook_) {
      if (auto d = m.hook_->execution_device()) return d;
    }
    auto direct = [&](const ParameterPtr& cell) -> std::optional<Device> {
      if (!cell->data.defined()) return std::nullopt;
      if (cell->data.is_meta()) {
        saw_meta = true;
        return std::nullopt;
      }
      return cell->data.device();
    };
    for (const auto& p : m.params_) {
      if (auto d = direct(p.cell)) return d;
    }
    for (const auto& b : m.buffers_) {
      if (auto d = direct(b.cell)) return d;
    }
    for (const auto& c : m.children_) {
      if (auto d = find_execution_device(*c.module, saw_meta, depth + 1)) return d;
    }
    return std::nullopt;
  }

  enum class Kind : unsigned char { parameter, buffer, child };
  struct Entry {
    Kind kind;
    std::size_t index;
  };
  // Heterogeneous lookup: find by string_view without building a std::string.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using NameIndex = std::unordered_map<std::string, Entry, NameHash, std::equal_to<>>;

  template <class Slot>
  Slot* slot_of(std::deque<Slot>& v, Kind kind, std::string_view name) {
    const auto it = index_.find(name);
    return it != index_.end() && it->second.kind == kind ? &v[it->second.index] : nullptr;
  }
  template <class Slot>
  const Slot* slot_of(const std::deque<Slot>& v, Kind kind, std::string_view name) const {
    const auto it = index_.find(name);
    return it != index_.end() && it->second.kind == kind ? &v[it->second.index] : nullptr;
  }
  static std::pair<std::string_view, std::string_view> split_path(std::string_view path) {
    const auto dot = path.rfind('.');
    if (dot == std::string_view::npos) return {std::string_view{}, path};
    return {path.substr(0, dot), path.substr(dot + 1)};
  }
  KeyError missing(std::string_view path, const char* what) const {
    const auto [owner, leaf] = split_path(path);
    const Module* m = find_submodule(owner);
    if (!m) {
      (void)const_cast<Module*>(this)->get_submodule(owner);  // throws, naming the missing component
    }
    return KeyError("module '" + std::string(owner) + "' (" + m->class_name_ + ") has no " + what + " '" +
                    std::string(leaf) + "'");
  }
  static const char* kind_name(Kind k) {
    return k == Kind::parameter ? "parameter" : k == Kind::buffer ? "buffer" : "module";
  }
  // torch keeps parameters, buffers and children in one attribute namespace: a name may be
  // re-registered as the same kind (replacing it), never as another kind.
  void check_name(const std::string& name, Kind kind) const {
    if (name.empty() || name.find('.') != std::string::npos) {
      throw KeyError(class_name_ + ": " + kind_name(kind) + " name '" + name + "' must be non-empty and contain no '.'");
    }
    const auto it = index_.find(name);
    if (it != index_.end() && it->second.kind != kind) {
      throw KeyError(class_name_ + ": attribute '" + name + "' already exists (cannot register a " + kind_name(kind) +
                     ")");
    }
  }
  ParameterPtr& set_param_cell(const std::string& name, ParameterPtr cell) {
    if (auto* s = slot_of(params_, Kind::parameter, name)) {
      s->cell = std::move(cell);
      return s->cell;
    }
    index_.emplace(name, Entry{Kind::parameter, params_.size()});
    params_.push_back({name, std::move(cell)});
    return params_.back().cell;
  }
  template <class Convert>
  Module& convert_all(Convert convert) {
    std::unordered_set<const Parameter*> done;
    for (auto& [name, m] : named_modules()) {
      auto move = [&](const ParameterPtr& cell) {
        if (!done.insert(cell.get()).second || !cell->data.defined()) return;
        cell->data = convert(cell->data);
      };
      for (auto& p : m->params_) move(p.cell);
      for (auto& b : m->buffers_) move(b.cell);
    }
    return *this;
  }
  static Named<Tensor> tensors_of(const Named<ParameterPtr>& cells) {
    Named<Tensor> out;
    out.reserve(cells.size());
    for (const auto& [n, c] : cells) out.emplace_back(n, c->data);
    return out;
  }
  static std::vector<Tensor> values_of(const Named<Tensor>& named) {
    std::vector<Tensor> out;
    out.reserve(named.size());
    for (const auto& [n, t] : named) out.push_back(t);
    return out;
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
  bool keeps_fp32_ = false;
  std::deque<ParameterSlot> params_;
  std::deque<BufferSlot> buffers_;
  std::deque<ChildSlot> children_;
  NameIndex index_;
  std::shared_ptr<ModuleHook> hook_;
};

/// A parent's handle on one of its child slots: every use reads the slot, so the module put there
/// last (replace_module, a quantizer's layer swap) is the one reached. ChildRef<Module> (the
/// default) calls any module through the type-erased entry; ChildRef<T> reaches T's typed forward
/// and checks, at first use after a replacement, that the new child is a T (ValueError naming the
/// slot and both classes). Valid while the parent lives (slots never move).
template <class T = Module>
class ChildRef {
  static_assert(std::is_base_of_v<Module, T>, "accel::nn::ChildRef<T>: T must be a Module subclass");

 public:
  ChildRef() = default;
  /// The handle on `parent`'s child `name`; KeyError when there is none.
  ChildRef(const Module& parent, std::string_view name) : parent_(&parent), slot_(parent.find_child_slot(name)) {
    if (!slot_) {
      throw KeyError(parent.class_name() + " has no child '" + std::string(name) + "' to refer to");
    }
    (void)get();  // the registered child must be a T already
  }
  /// A handle on the same slot, seen as a base class U of T.
  template <class U>
    requires(std::is_base_of_v<T, U> && !std::is_same_v<T, U>)
  ChildRef(const ChildRef<U>& other) : parent_(other.parent_), slot_(other.slot_) {}

  /// The child now in the slot.
  T* get() const {
    Module* m = slot_ ? slot_->get() : nullptr;
    if constexpr (std::is_same_v<T, Module>) {
      return m;
    } else {
      if (m != seen_) {
        typed_ = dynamic_cast<T*>(m);
        if (m && !typed_) throw wrong_class(*m);
        seen_ = m;
      }
      return typed_;
    }
  }
  T& operator*() const { return *get(); }
  T* operator->() const { return get(); }
  explicit operator bool() const { return get() != nullptr; }
  /// Calls the child: T's typed call path (Module: the type-erased one-tensor entry).
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return (*get())(std::forward<Args>(args)...);
  }

 private:
  template <class>
  friend class ChildRef;

  ValueError wrong_class(const Module& m) const {
    std::string name;
    for (const auto& c : parent_->child_slots()) {
      if (&c.module == slot_) name = c.name;
    }
    return ValueError(parent_->class_name() + "." + name + " is now a " + m.class_name() +
                      ", which is not the class the parent calls there (" + std::string(nested::type_name<T>()) +
                      "): a replacement for a child called with several arguments must derive from its class");
  }

  const Module* parent_ = nullptr;
  const std::shared_ptr<Module>* slot_ = nullptr;
  mutable Module* seen_ = nullptr;  // the child typed_ was computed for
  mutable T* typed_ = nullptr;
};

}  // namespace accel::nn

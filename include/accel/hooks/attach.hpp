// Attaching AlignDevicesHooks over a model, as Accelerate's hooks.py does it.
//
//   attach_execution_device_hook<Offload>(module, device, skip_keys, preload_module_classes, tied)
//   attach_align_device_hook<Offload>(module, {.execution_device, .offload, .weights_map, ...})
//   attach_align_device_hook_on_blocks<Offload>(module, {.execution_device = {{"layers.0", cuda0}, ...},
//                                                        .offload = {{"layers.0", false}, {"layers.1", true}}, ...})
//   auto scope = align_module_device(module, device);   weights on `device` until the scope ends
//   offload_stream(model)                               the WeightStream its offloading hooks share
//
// attach_align_device_hook puts one hook on every module that holds tensors of its own (or one
// hook on a whole module of a `preload_module_classes` class, which then loads its subtree at
// once), each reading its weights from `weights_map` under its dotted name. The block version
// takes per-module execution devices and offload flags (module names as a device map has them):
// a block kept in place gets one hook for its subtree, an offloaded block the per-module hooks,
// and the root a hook that aligns the inputs (io_same_device). Offload picks the travel policy of
// every hook attached (policy/offload.hpp): the offloading hooks of one call share one
// WeightStream (hooks/weight_stream.hpp) of depth N under prefetch<N>, 0 under sync_offload, its
// units in attach order, which is the order of the module tree and so the order a transformer
// calls its blocks.
//
// Differences from Accelerate: execution_device and offload are maps, or a single value through
// the overloads; a module named in one map and absent from the other is a ValueError naming it
// (Accelerate silently skips that module), except the root, which may have a device alone.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/hooks/align_devices_hook.hpp"
#include "accel/hooks/model_hook.hpp"
#include "accel/hooks/weights_map.hpp"
#include "accel/nn/module.hpp"
#include "accel/policy/offload.hpp"

namespace accel::hooks {

/// Arguments of the attach functions, with Accelerate's names and defaults; `Where` and `Offloads`
/// are how execution devices and offload flags are given: one for the whole subtree
/// (AttachOptions) or per module name (BlockAttachOptions).
template <class Where, class Offloads>
struct BasicAttachOptions {
  /// Where forward runs: one device (nullopt: where the arguments are), or module name -> device
  /// ("" names the root).
  Where execution_device{};
  /// Whether weights are offloaded: one flag, or module name -> flag.
  Offloads offload{};
  /// The whole model's weights map; each hook gets the view under its module's name.
  WeightsMap weights_map{};
  bool offload_buffers = false;
  /// The dotted name of `module` in the model (the prefix of its weights in weights_map).
  std::string module_name{};
  std::vector<std::string> skip_keys{};
  /// Classes whose modules load their whole subtree in one hook (no hooks below them).
  std::vector<std::string> preload_module_classes{};
  std::shared_ptr<nn::TiedParamsMap> tied_params_map{};
  /// How the offloading hooks read disk weights, shared; null: one of Offload's depth is made.
  std::shared_ptr<WeightStream> stream{};
};

/// attach_align_device_hook's arguments: one device and one offload flag.
using AttachOptions = BasicAttachOptions<std::optional<Device>, bool>;
/// attach_align_device_hook_on_blocks' arguments: per-module devices and offload flags.
using BlockAttachOptions = BasicAttachOptions<std::map<std::string, Device>, std::map<std::string, bool>>;

namespace detail {
inline bool has_direct_tensors(const nn::Module& m) { return !m.parameter_slots().empty() || !m.buffer_slots().empty(); }
inline bool in_list(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v) {
    if (x == s) return true;
  }
  return false;
}
inline std::string child_name(const std::string& parent, const std::string& child) {
  return parent.empty() ? child : parent + "." + child;
}
/// The options with a stream of Offload's depth (0 under sync_offload: each block read when
/// called), which the offloading hooks of one call share.
template <policy::Offload Offload, class Options>
Options with_stream(Options o) {
  o.stream = std::make_shared<WeightStream>(Offload::prefetch_depth);
  return o;
}
}  // namespace detail

/// Puts a hook that only names `execution_device` on every module of the subtree that has no
/// hook and holds tensors (its state dict is not empty), stopping below preload classes.
template <policy::Offload Offload = policy::sync_offload>
void attach_execution_device_hook(nn::Module& module, Device execution_device, const std::vector<std::string>& skip_keys = {},
                                  const std::vector<std::string>& preload_module_classes = {},
                                  std::shared_ptr<nn::TiedParamsMap> tied_params_map = nullptr) {
  if (!module.hook() && !module.state_dict().empty()) {
    add_hook_to_module(module, std::make_shared<AlignDevicesHook<Offload>>(AlignDevicesOptions{
                                   .execution_device = execution_device, .skip_keys = skip_keys,
                                   .tied_params_map = tied_params_map}));
  }
  if (detail::in_list(preload_module_classes, module.class_name())) return;
  for (nn::Module* child : module.children()) {
    attach_execution_device_hook<Offload>(*child, execution_device, skip_keys, preload_module_classes, tied_params_map);
  }
}

/// Puts an AlignDevicesHook on every module of the subtree holding tensors of its own (appended
/// to any hook already there), or one on the whole subtree of a preload class when offloading.
template <policy::Offload Offload = policy::sync_offload>
void attach_align_device_hook(nn::Module& module, const AttachOptions& o) {
  if (o.offload && !o.stream) return attach_align_device_hook<Offload>(module, detail::with_stream<Offload>(o));
  const bool full_offload = o.offload && detail::in_list(o.preload_module_classes, module.class_name());
  if (detail::has_direct_tensors(module) || full_offload) {
    AlignDevicesOptions h{.execution_device = o.execution_device,
                          .offload = o.offload,
                          .offload_buffers = o.offload_buffers,
                          .place_submodules = full_offload,
                          .skip_keys = o.skip_keys,
                          .tied_params_map = o.tied_params_map,
                          .stream = o.stream};
    if (o.weights_map) h.weights_map = o.weights_map.prefixed(o.module_name.empty() ? "" : o.module_name + ".");
    add_hook_to_module(module, std::make_shared<AlignDevicesHook<Offload>>(std::move(h)), /*append=*/true);
  }
  if (full_offload) return;
  for (const auto& [name, child] : module.named_children()) {
    AttachOptions c = o;
    c.module_name = detail::child_name(o.module_name, name);
    attach_align_device_hook<Offload>(*child, c);
  }
}

/// Accelerate's attach_align_device_hook_on_blocks (see the header comment).
template <policy::Offload Offload = policy::sync_offload>
void attach_align_device_hook_on_blocks(nn::Module& module, const BlockAttachOptions& o) {
  if (!o.stream) return attach_align_device_hook_on_blocks<Offload>(module, detail::with_stream<Offload>(o));
  const std::string& name = o.module_name;
  const auto dev = o.execution_device.find(name);
  const auto off = o.offload.find(name);
  const bool has_dev = dev != o.execution_device.end(), has_off = off != o.offload.end();
  // The root may have a device alone: its hook then only aligns the inputs.
  if (has_dev != has_off && !(name.empty() && has_dev)) {
    throw ValueError("attach_align_device_hook_on_blocks: module '" + name + "' has " +
                     (has_dev ? "an execution device but no offload flag" : "an offload flag but no execution device"));
  }
  if (has_dev && has_off && !off->second) {
    add_hook_to_module(module, std::make_shared<AlignDevicesHook<Offload>>(AlignDevicesOptions{
                                   .execution_device = dev->second, .io_same_device = name.empty(),
                                   .offload_buffers = o.offload_buffers, .place_submodules = true,
                                   .skip_keys = o.skip_keys, .tied_params_map = o.tied_params_map}));
    attach_execution_device_hook<Offload>(module, dev->second, o.skip_keys, {}, o.tied_params_map);
  } else if (has_dev && has_off) {
    attach_align_device_hook<Offload>(module, {.execution_device = dev->second, .offload = true,
                                               .weights_map = o.weights_map, .offload_buffers = o.offload_buffers,
                                               .module_name = name, .skip_keys = o.skip_keys,
                                               .preload_module_classes = o.preload_module_classes,
                                               .tied_params_map = o.tied_params_map, .stream = o.stream});
    if (!module.hook()) {
      add_hook_to_module(module, std::make_shared<AlignDevicesHook<Offload>>(AlignDevicesOptions{
                                     .execution_device = dev->second, .io_same_device = name.empty(),
                                     .skip_keys = o.skip_keys, .tied_params_map = o.tied_params_map}));
    }
    attach_execution_device_hook<Offload>(module, dev->second, o.skip_keys, o.preload_module_classes, o.tied_params_map);
  } else if (name.empty()) {
    add_hook_to_module(module, std::make_shared<AlignDevicesHook<Offload>>(AlignDevicesOptions{
                                   .execution_device = has_dev ? std::optional<Device>(dev->second) : std::nullopt,
                                   .io_same_device = true, .skip_keys = o.skip_keys, .tied_params_map = o.tied_params_map}));
  }
  for (const auto& [child, m] : module.named_children()) {
    BlockAttachOptions c = o;
    c.module_name = detail::child_name(name, child);
    attach_align_device_hook_on_blocks<Offload>(*m, c);
  }
}

/// attach_align_device_hook_on_blocks with one device and one offload flag for the whole model:
/// a single hook on the subtree when nothing is offloaded, per-module offloading hooks otherwise.
template <policy::Offload Offload = policy::sync_offload>
void attach_align_device_hook_on_blocks(nn::Module& module, Device execution_device, bool offload,
                                        const AttachOptions& rest = {}) {
  if (!offload) {
    add_hook_to_module(module, std::make_shared<AlignDevicesHook<Offload>>(AlignDevicesOptions{
                                   .execution_device = execution_device, .io_same_device = true,
                                   .place_submodules = true, .skip_keys = rest.skip_keys,
                                   .tied_params_map = rest.tied_params_map}));
    return;
  }
  AttachOptions o = rest;
  o.execution_device = execution_device;
  o.offload = true;
  attach_align_device_hook<Offload>(module, o);
}

/// The WeightStream the offloading hooks of `root`'s tree share (the first found, in module
/// order), or null when no hook reads through one: where a caller reads the read-ahead's stats.
inline std::shared_ptr<WeightStream> offload_stream(nn::Module& root) {
  for (nn::Module* m : root.modules()) {
    if (const auto* h = find_hook<AlignDevicesHookBase>(*m); h && h->options().stream) return h->options().stream;
  }
  return nullptr;
}

/// While alive, the offloaded weights of every hooked module of a subtree sit on `device` (their
/// hook's execution device when nullopt), and tensors of modules without an offloading hook are
/// moved there and back (Accelerate's align_module_device context manager).
class AlignModuleDevice {
 public:
  AlignModuleDevice(nn::Module& module, std::optional<Device> device) {
    for (const auto& [name, m] : module.named_modules()) {
      auto* hook = find_hook<AlignDevicesHookBase>(*m);
      if (hook && hook->offload()) {
        hooked_.push_back({m, hook, hook->options().execution_device});
        if (device) set_device(*hook, *device);
        hook->materialize(*m);
      } else if (device && !hook) {
        for (const auto& p : m->parameter_slots()) move(*m, p.name, *device);
        for (const auto& b : m->buffer_slots()) move(*m, b.name, *device);
      }
    }
  }
  ~AlignModuleDevice() {
    for (auto& h : hooked_) {
      h.hook->park();
      set_device(*h.hook, h.device);
    }
    for (auto& [slot, cell] : moved_) *slot = cell;
  }
  AlignModuleDevice(const AlignModuleDevice&) = delete;
  AlignModuleDevice& operator=(const AlignModuleDevice&) = delete;

 private:
  struct Hooked {
    nn::Module* module;
    AlignDevicesHookBase* hook;
    std::optional<Device> device;
  };
  static void set_device(AlignDevicesHookBase& h, std::optional<Device> d) { h.set_execution_device(d); }
  void move(nn::Module& m, const std::string& name, Device d) {
    nn::ParameterPtr* slot = m.find_tensor_cell(name);
    if (!(*slot)->data.defined() || (*slot)->data.device() == d || (*slot)->data.is_meta()) return;
    moved_.emplace_back(slot, *slot);
    *slot = std::make_shared<nn::Parameter>(nn::Parameter{(*slot)->data.to(d), (*slot)->requires_grad});
  }
  std::vector<Hooked> hooked_;
  std::vector<std::pair<nn::ParameterPtr*, nn::ParameterPtr>> moved_;
};

/// The RAII scope of Accelerate's `with align_module_device(module, execution_device):`.
[[nodiscard]] inline AlignModuleDevice align_module_device(nn::Module& module,
                                                            std::optional<Device> execution_device = std::nullopt) {
  return AlignModuleDevice(module, execution_device);
}

}  // namespace accel::hooks

namespace accel {
using hooks::align_module_device, hooks::attach_align_device_hook, hooks::attach_align_device_hook_on_blocks,
    hooks::attach_execution_device_hook, hooks::offload_stream;
}  // namespace accel

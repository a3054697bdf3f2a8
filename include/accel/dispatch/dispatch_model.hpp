// dispatch_model<Offload>(model, device_map, options): Accelerate's dispatch of a loaded model
// over its device map, with hooks that run each block on its device and stream offloaded
// weights in.
//
//   auto r = load_checkpoint_in_model(*model, dir, {.device_map = dm, .offload_folder = "offload"});
//   dispatch_model(*model, dm, {.offload_dir = "offload"});          // then call the model as usual
//   dispatch_model<policy::sync_offload>(*model, dm, {...});         // Accelerate's way of moving them
//
// Offloaded weights travel as the Offload policy says: by default prefetch<2> (the next two
// blocks read from disk while one computes, hooks/weight_stream.hpp), each block of the model's
// no-split classes loaded by one hook unless preload_module_classes names others; sync_offload is
// Accelerate's one hook per module holding weights, each reading them when called.
//
// With one placement in the map (and no force_hooks) the model is moved there and no hook is
// attached. Otherwise the main device is `main_device`, else the first GPU of the map (the CPU
// when the map names only cpu and disk); blocks placed on a GPU run there with their weights resident, and blocks placed
// on "disk" (and on "cpu" when the main device is a GPU) run on the main device with their weights
// read for each call: CPU blocks from the CPU tensors the model holds, disk blocks from
// `offload_dir`'s index (written from the model's own tensors when the folder has none) or from
// `offload_index`. The root gets a hook that brings the inputs to the main device and the
// outputs back (io_same_device). Under prefetch<N> on a GPU, the CPU blocks' tensors move to
// page-locked memory first (in place: no second copy), which the device stage copies from with
// the DMA engine alone (hooks/device_stage.hpp).
//
// Differences from Accelerate:
// - A tied weight stored once (the checkpoint or the folder holds one name of the group) is read
//   under that name for every offloaded name of the group.
// - Tied weights are not re-tied after the hooks are attached: the hooks re-point only their own
//   module's slots (hooks/align_devices_hook.hpp), so partners keep their placement; one copy per
//   device is shared through the tied-params map while both ends are materialised.
// - A model on meta with a map that keeps it in one place is a ValueError naming the first meta
//   tensor (Accelerate calls model.to and fails later, inside torch).
// - Moving a dispatched model with Module::to warns, and is refused while weights are on meta
//   (Accelerate warns in both cases).
// - A "meta" placement names a block another process holds (a model split across processes,
//   dist/split_model.hpp): it gets no hook and stays on meta, where its forward computes shapes
//   only. Accelerate has no such placement.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/hooks/attach.hpp"
#include "accel/hooks/weights_map.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/set_tensor.hpp"
#include "accel/nn/tied.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/policy/offload.hpp"

namespace accel::dispatch {

/// How dispatch_model, disk_offload and load_checkpoint_and_dispatch move offloaded weights
/// unless told otherwise: two blocks read ahead while one computes. sync_offload is Accelerate's.
using default_offload = policy::prefetch<2>;

/// Keyword arguments of dispatch_model, with Accelerate's names and defaults.
struct DispatchOptions {
  /// Where offloaded blocks run and the inputs go; nullopt: the first GPU of the map, else the CPU.
  std::optional<Device> main_device{};
  /// The offloaded CPU weights; nullopt: the CPU tensors the model holds.
  std::optional<io::StateDict> state_dict{};
  /// The offload folder of the disk blocks (its index.json, or written there when absent).
  std::optional<std::string> offload_dir{};
  /// An offload index to read disk weights through instead of `offload_dir/index.json`.
  std::optional<io::OffloadIndex> offload_index{};
  /// Offload the buffers of offloaded blocks too.
  bool offload_buffers = false;
  /// Map keys of the arguments and outputs that are not moved between devices.
  std::vector<std::string> skip_keys{};
  /// Classes whose modules load their whole subtree in one hook.
  std::vector<std::string> preload_module_classes{};
  /// Attach hooks even when the map has a single placement.
  bool force_hooks = false;
  /// Hears the bytes written to `offload_dir` when the disk blocks are written there (not in
  /// Accelerate, which shows nothing while it writes).
  io::OffloadProgress offload_progress{};
};

namespace detail {

/// The tensors of `model` under the given module names (Accelerate's extract_submodules_state_dict).
inline io::StateDict submodules_state_dict(const nn::Module& model, const std::vector<std::string>& modules) {
  io::StateDict out;
  for (const auto& [name, t] : model.state_dict()) {
    for (const auto& m : modules) {
      if (plan::DeviceMap::covers(m, name)) {
        out.insert_or_assign(name, t);
        break;
      }
    }
  }
  return out;
}

/// Puts the CPU tensors of `model` under the given module names (all when null) in page-locked
/// memory, in their own cells, so the device stage copies them without staging and no second
/// copy stays behind.
inline void pin_cpu_tensors(nn::Module& model, const std::vector<std::string>* modules = nullptr) {
  for (const auto& entry : model.state_dict_cells()) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda.
    const std::string& name = entry.first;
    const auto& cell = entry.second;
    if (modules && std::none_of(modules->begin(), modules->end(), [&](const std::string& m) { return plan::DeviceMap::covers(m, name); })) {
      continue;
    }
    if (cell->data.defined() && cell->data.is_cpu() && !cell->data.is_pinned()) cell->data = cell->data.pin_memory();
  }
}

inline std::string first_meta_tensor(const nn::Module& model) {
  for (const auto& [name, t] : model.state_dict()) {
    if (t.defined() && t.is_meta()) return name;
  }
  return {};
}

/// What dispatch_model does before it attaches hooks, the same under every policy: the model
/// moved whole (nullopt: nothing to attach) or the per-block options of its hooks. `prefetching`:
/// the hooks read ahead (pin CPU blocks for a GPU, one hook per no-split block).
inline std::optional<hooks::BlockAttachOptions> plan_dispatch(nn::Module& model, const DeviceMap& device_map,
                                                              const DispatchOptions& o, bool prefetching) {
  check_device_map(model, device_map);
  std::set<std::string> kinds;
  std::optional<Device> first_gpu;
  bool remote = false;  // "meta" entries: blocks another process holds (dist/split_model.hpp)
  for (const auto& [name, p] : device_map) {
    if (p.kind() == Placement::Kind::meta) {
      remote = true;
      continue;
    }
    kinds.insert(p.str());
    if (p.is_gpu() && !first_gpu) first_gpu = p.device();
  }

  if (kinds.size() <= 1 && !o.force_hooks && !remote) {
    if (device_map.empty()) return std::nullopt;
    const Placement only = device_map.begin()->second;
    if (only.is_disk()) {
      throw ValueError("You are trying to offload the whole model to the disk. Please use the `disk_offload` function instead.");
    }
    if (const std::string meta = first_meta_tensor(model); !meta.empty()) {
      throw ValueError("dispatch_model: '" + meta + "' is on the meta device and the device map keeps the whole model on " +
                       only.str() + "; load the weights first (load_checkpoint_in_model)");
    }
    model.to(only.device());
    return std::nullopt;
  }

  // Accelerate: without main_device, a map of cpu and disk only runs on the CPU; with one, every
  // block runs there, the cpu blocks streamed to it as the disk ones are.
  const Device main = o.main_device.value_or(first_gpu.value_or(Device::cpu()));
  if (main.is_meta()) {
    throw ValueError("dispatch_model: main_device must be a device that computes (cpu or a GPU), got " + main.str());
  }
  std::vector<std::string> cpu_modules, disk_modules;
  for (const auto& [name, p] : device_map) {
    if (p.is_cpu()) cpu_modules.push_back(name);
    if (p.is_disk()) disk_modules.push_back(name);
  }
  std::optional<io::StateDict> state_dict = o.state_dict;
  if (!main.is_cpu() && !state_dict && !cpu_modules.empty()) {
    if (prefetching && main.is_cuda()) pin_cpu_tensors(model, &cpu_modules);
    state_dict = submodules_state_dict(model, cpu_modules);
  }
  if (!disk_modules.empty() && !o.offload_dir && !o.offload_index) {
    std::string names;
    for (const auto& n : disk_modules) names += (names.empty() ? "" : ", ") + n;
    throw ValueError("We need an `offload_dir` to dispatch this model according to this `device_map`, the following "
                     "submodules need to be offloaded: " + names);
  }
  if (!disk_modules.empty() && !o.offload_index &&
      !std::filesystem::is_regular_file(std::filesystem::path(*o.offload_dir) / io::offload_index_name)) {
    io::offload_state_dict(*o.offload_dir, submodules_state_dict(model, disk_modules), o.offload_progress);
  }

  hooks::BlockAttachOptions b;
  for (const auto& [name, p] : device_map) {
    if (p.kind() == Placement::Kind::meta) continue;  // no hook: it computes shapes only, on meta
    const bool offloaded = p.is_disk() || (p.is_cpu() && !main.is_cpu());
    b.execution_device.insert_or_assign(name, p.is_gpu() ? p.device() : main);
    b.offload.insert_or_assign(name, offloaded);
  }
  b.execution_device.insert_or_assign("", main);  // the root's hook aligns the inputs
  const std::optional<std::string> save_folder = disk_modules.empty() ? std::nullopt : o.offload_dir;
  if (state_dict || save_folder || o.offload_index) {
    auto loader = std::make_shared<const io::OffloadedWeightsLoader>(
        state_dict, save_folder, o.offload_index, o.offload_index ? std::optional<Device>(main) : std::nullopt);
    // A tied weight is stored once: each name of a group the loader lacks reads a partner's entry.
    std::map<std::string, std::string> aliases;
    for (const auto& group : nn::find_tied_parameters(model)) {
      const auto stored = std::find_if(group.begin(), group.end(), [&](const std::string& n) { return loader->contains(n); });
      if (stored == group.end()) continue;
      for (const auto& n : group) {
        if (!loader->contains(n)) aliases.emplace(n, *stored);
      }
    }
    b.weights_map = hooks::WeightsMap(loader).with_aliases(std::move(aliases));
  }
  b.offload_buffers = o.offload_buffers;
  b.skip_keys = o.skip_keys;
  b.preload_module_classes = o.preload_module_classes;
  // Read-ahead works block by block: the model's no-split classes are its blocks.
  if (prefetching && b.preload_module_classes.empty()) {
    b.preload_module_classes = model.no_split_modules();
  }
  b.tied_params_map = std::make_shared<nn::TiedParamsMap>();
  return b;
}
}  // namespace detail

/// Dispatches `model` over `device_map` (see the header comment). ValueError when the map does
/// not place every tensor (check_device_map), when disk blocks have no offload_dir nor index,
/// or when the whole model is placed on disk (use disk_offload). Only the hooks' policy depends
/// on Offload; the plan is detail::plan_dispatch's.
template <policy::Offload Offload = default_offload>
nn::Module& dispatch_model(nn::Module& model, const DeviceMap& device_map, const DispatchOptions& o = {}) {
  if (auto b = detail::plan_dispatch(model, device_map, o, policy::prefetches_v<Offload>)) {
    hooks::attach_align_device_hook_on_blocks<Offload>(model, *b);
  }
  return model;
}

}  // namespace accel::dispatch

// Accelerate's big_modeling entry points beside dispatch_model: whole-model CPU and disk offload,
// the model-by-model pipeline hook, and loading + dispatching in one call.
//
//   cpu_offload(model, {.execution_device = cuda0})             weights on the CPU, brought in per module call
//   disk_offload(model, "offload", {.execution_device = cpu})   weights in an offload folder, read per call
//   auto [m, hook] = cpu_offload_with_hook(model, cuda0, prev)   a whole model moved in when called
//   load_checkpoint_and_dispatch(model, "ckpt/", {.device_map = "auto", .max_memory = mm, .offload_folder = "off"})
//
// Each takes the offload policy as its template argument (policy/offload.hpp): sync_offload is
// Accelerate's behaviour, and disk_offload and load_checkpoint_and_dispatch default to
// prefetch<2> (default_offload), which reads the next blocks ahead; cpu_offload serves weights
// from memory and defaults to sync_offload (under prefetch<N> on a GPU it pins them in place and
// copies the next N blocks ahead on a copy stream). Under prefetch<N> both offload functions
// hook block by block (the model's no-split classes) unless preload_module_classes says.
//
// Differences from Accelerate:
// - The execution device defaults to the device of the model's first parameter that is not on
//   meta (Accelerate takes the first parameter's device, meta included), else the CPU.
// - load_checkpoint_and_dispatch's `max_memory`, when unset, is what get_max_memory() probes
//   (plan/max_memory.hpp) and may name "disk" (Accelerate refuses that key); an explicit device
//   map is checked against the model before anything is read.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/dispatch/dispatch_model.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/hooks/align_devices_hook.hpp"
#include "accel/hooks/attach.hpp"
#include "accel/hooks/cpu_offload_hook.hpp"
#include "accel/hooks/model_hook.hpp"
#include "accel/io/offload.hpp"
#include "accel/nn/module.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/policy/offload.hpp"

namespace accel::dispatch {

/// Keyword arguments of cpu_offload and disk_offload.
struct OffloadOptions {
  /// Where the model runs; nullopt: the device of its first non-meta parameter, else the CPU.
  std::optional<Device> execution_device{};
  bool offload_buffers = false;
  /// cpu_offload only: the weights to serve; nullopt: the model's own, moved to the CPU.
  std::optional<io::StateDict> state_dict{};
  std::vector<std::string> preload_module_classes{};
  /// disk_offload only: hears the bytes written to the offload folder (not in Accelerate).
  io::OffloadProgress offload_progress{};
};

namespace detail {
inline Device first_parameter_device(const nn::Module& model) {
  for (const auto& [name, t] : model.named_parameters()) {
    if (t.defined() && !t.is_meta()) return t.device();
  }
  return Device::cpu();
}
}  // namespace detail

/// Accelerate's cpu_offload: every module holding tensors gets a hook that loads its weights
/// from the CPU state dict onto the execution device for its call; the root's hook returns the
/// outputs to the inputs' device.
template <policy::Offload Offload = policy::sync_offload>
nn::Module& cpu_offload(nn::Module& model, OffloadOptions o = {}) {
  const Device exec = o.execution_device.value_or(detail::first_parameter_device(model));
  io::StateDict sd;
  if (o.state_dict) {
    sd = std::move(*o.state_dict);
  } else {
    // The device stage of prefetch<N> copies from page-locked memory without staging.
    if (policy::prefetches_v<Offload> && exec.is_cuda()) dispatch::detail::pin_cpu_tensors(model);
    for (const auto& [name, t] : model.state_dict()) {
      if (t.defined() && !t.is_meta()) sd.insert_or_assign(name, t.to(Device::cpu()));
    }
  }
  if (policy::prefetches_v<Offload> && o.preload_module_classes.empty()) {
    o.preload_module_classes = model.no_split_modules();  // copied ahead block by block
  }
  hooks::add_hook_to_module(model, std::make_shared<hooks::AlignDevicesHook<Offload>>(hooks::AlignDevicesOptions{.io_same_device = true}),
                            /*append=*/true);
  hooks::attach_align_device_hook<Offload>(model, {.execution_device = exec, .offload = true,
                                                   .weights_map = hooks::WeightsMap(std::move(sd)),
                                                   .offload_buffers = o.offload_buffers,
                                                   .preload_module_classes = o.preload_module_classes});
  return model;
}

/// Accelerate's disk_offload: the model's tensors are written to `offload_dir` (unless it already
/// holds an index.json), and every module reads its weights from there for each call.
template <policy::Offload Offload = default_offload>
nn::Module& disk_offload(nn::Module& model, const std::string& offload_dir, OffloadOptions o = {}) {
  if (!std::filesystem::is_regular_file(std::filesystem::path(offload_dir) / io::offload_index_name)) {
    io::StateDict sd;
    for (const auto& [name, t] : model.state_dict()) {
      if (t.defined() && t.is_meta()) {
        throw ValueError("disk_offload: '" + name + "' is on the meta device and '" + offload_dir +
                         "' holds no index.json to read it from");
      }
      sd.insert_or_assign(name, t);
    }
    io::offload_state_dict(offload_dir, sd, o.offload_progress);
  }
  const Device exec = o.execution_device.value_or(detail::first_parameter_device(model));
  auto loader = std::make_shared<const io::OffloadedWeightsLoader>(std::nullopt, offload_dir);
  if (policy::prefetches_v<Offload> && o.preload_module_classes.empty()) {
    o.preload_module_classes = model.no_split_modules();  // read ahead block by block
  }
  hooks::add_hook_to_module(model, std::make_shared<hooks::AlignDevicesHook<Offload>>(hooks::AlignDevicesOptions{.io_same_device = true}),
                            /*append=*/true);
  hooks::attach_align_device_hook<Offload>(model, {.execution_device = exec, .offload = true,
                                                   .weights_map = hooks::WeightsMap(loader),
                                                   .offload_buffers = o.offload_buffers,
                                                   .preload_module_classes = o.preload_module_classes});
  return model;
}

/// Accelerate's cpu_offload_with_hook: the model moves to the CPU now and to `execution_device`
/// when called, after offloading the model of `prev_module_hook`. Returns the model and the
/// handle that offloads it (offload()) or removes the hook (remove()).
inline std::pair<nn::Module&, std::shared_ptr<hooks::UserCpuOffloadHook>> cpu_offload_with_hook(
    nn::Module& model, std::optional<Device> execution_device = std::nullopt,
    std::shared_ptr<hooks::UserCpuOffloadHook> prev_module_hook = nullptr) {
  auto hook = std::make_shared<hooks::CpuOffload>(execution_device, std::move(prev_module_hook));
  hooks::add_hook_to_module(model, hook, /*append=*/true);
  return {model, std::make_shared<hooks::UserCpuOffloadHook>(model, hook)};
}

/// The device_map argument of load_checkpoint_and_dispatch: one of Accelerate's strategies
/// ("auto", "balanced", "balanced_low_0", "sequential") or an explicit map.
using DeviceMapArg = std::variant<std::string, DeviceMap>;

/// Keyword arguments of load_checkpoint_and_dispatch, with Accelerate's names and defaults.
struct LoadAndDispatchOptions {
  /// A strategy or an explicit map; nullopt: load in place, attach nothing.
  std::optional<DeviceMapArg> device_map{};
  /// Budgets per device for a strategy; nullopt: get_max_memory()'s probe of the machine.
  std::optional<MaxMemory> max_memory{};
  std::vector<std::string> no_split_module_classes{};
  std::optional<std::string> offload_folder{};
  bool offload_buffers = false;
  std::optional<DType> dtype{};
  /// nullopt: true when the map holds "disk" (CPU weights parked on disk while loading).
  std::optional<bool> offload_state_dict{};
  std::vector<std::string> skip_keys{};
  std::vector<std::string> preload_module_classes{};
  bool force_hooks = false;
  bool strict = false;
  /// Runtime reserves per device for a strategy (KV cache, activations, the prefetch ring).
  MaxMemory reserve{};
  /// Exact tensor names a strategy sizes in another dtype than `dtype` (Accelerate's
  /// special_dtypes: weights kept in float32, a quantizer's get_special_dtypes_update).
  std::map<std::string, DType, std::less<>> special_dtypes{};
  bool show_progress = true;
  /// CPU weights in memory of their own rather than views of the mapped checkpoint
  /// (LoadCheckpointOptions::disable_mmap).
  bool disable_mmap = false;
  std::ostream* warnings = nullptr;
};

/// True for the strategies a string device_map may name: "auto", "balanced", "balanced_low_0",
/// "sequential".
inline bool is_device_map_strategy(std::string_view s) {
  return s == "auto" || s == "balanced" || s == "balanced_low_0" || s == "sequential";
}

/// The device map a strategy gives `model` under `max_memory` (Accelerate's first half of
/// load_checkpoint_and_dispatch); ValueError for an unknown strategy.
inline DeviceMap resolve_device_map(const nn::Module& model, const std::string& strategy, const MaxMemory& max_memory,
                                    const LoadAndDispatchOptions& o) {
  if (!is_device_map_strategy(strategy)) {
    throw ValueError("If passing a string for `device_map`, please choose 'auto', 'balanced', 'balanced_low_0' or "
                     "'sequential' (got '" + strategy + "').");
  }
  plan::SizeOptions sizes;
  sizes.dtype = o.dtype;
  sizes.special_dtypes = o.special_dtypes;
  MaxMemory mm = max_memory;
  if (strategy != "sequential") {
    mm = plan::get_balanced_memory(model, mm, o.no_split_module_classes, sizes, strategy == "balanced_low_0");
  }
  plan::InferOptions io;
  io.no_split_module_classes = o.no_split_module_classes;
  io.sizes = sizes;
  io.offload_buffers = o.offload_buffers;
  io.reserve = o.reserve;
  io.warnings = o.warnings;
  return plan::infer_auto_device_map(model, mm, io);
}

/// Accelerate's load_checkpoint_and_dispatch: plans (for a strategy), loads the checkpoint with
/// each weight sent to its placement, then dispatches. Returns what loading did; the plan used is
/// `device_map_out` when given.
template <policy::Offload Offload = default_offload>
LoadResult load_checkpoint_and_dispatch(nn::Module& model, const std::string& checkpoint,
                                        const LoadAndDispatchOptions& o = {}, DeviceMap* device_map_out = nullptr) {
  std::optional<DeviceMap> dm;
  if (o.device_map) {
    if (const auto* s = std::get_if<std::string>(&*o.device_map)) {
      dm = resolve_device_map(model, *s, o.max_memory ? *o.max_memory : plan::get_max_memory(), o);
    } else {
      dm = std::get<DeviceMap>(*o.device_map);
      check_device_map(model, *dm);
    }
  }
  bool has_disk = false;
  if (dm) {
    for (const auto& [k, p] : *dm) has_disk |= p.is_disk();
  }
  LoadCheckpointOptions lo;
  lo.device_map = dm;
  lo.offload_folder = o.offload_folder;
  lo.dtype = o.dtype;
  lo.offload_state_dict = o.offload_state_dict.value_or(has_disk);
  lo.offload_buffers = o.offload_buffers;
  lo.strict = o.strict;
  lo.show_progress = o.show_progress;
  lo.disable_mmap = o.disable_mmap;
  lo.warnings = o.warnings;
  LoadResult r = load_checkpoint_in_model(model, checkpoint, lo);
  if (dm) {
    dispatch_model<Offload>(model, *dm, {.offload_dir = o.offload_folder, .offload_buffers = o.offload_buffers,
                                         .skip_keys = o.skip_keys, .preload_module_classes = o.preload_module_classes,
                                         .force_hooks = o.force_hooks});
    if (device_map_out) *device_map_out = *dm;
  }
  return r;
}

}  // namespace accel::dispatch

namespace accel {
using dispatch::cpu_offload, dispatch::cpu_offload_with_hook, dispatch::disk_offload, dispatch::dispatch_model,
    dispatch::DispatchOptions, dispatch::load_checkpoint_and_dispatch, dispatch::LoadAndDispatchOptions,
    dispatch::OffloadOptions;
}  // namespace accel

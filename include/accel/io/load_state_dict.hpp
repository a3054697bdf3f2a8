// load_state_dict(checkpoint_file, device_map): Accelerate's loader for one checkpoint file.
//
//   StateDict sd = load_state_dict("model.safetensors");                        // cpu, zero-copy
//   StateDict sd = load_state_dict("model.safetensors", {{"encoder", 0}, {"head", Placement::cpu()}});
//   StateDict sd = load_state_dict("pytorch_model.bin");                        // torch.save zip
//
// safetensors tensors go straight to their device: each weight takes the placement of the longest
// device-map key that is its name or a dotted prefix of it ("" matches everything); weights with
// no key, or placed on "disk", load on the CPU (as mapped views). Accelerate attaches a weight to
// every matching key and lets the last device win; the longest match is what it means.
// A safetensors "format" metadata other than "pt" is refused as Accelerate refuses it.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/torch_bin.hpp"

namespace accel::io {

/// Device map from module names to placements (Accelerate's `device_map` dict).
using DeviceMapping = std::map<std::string, Placement>;

/// The placement a device map gives `name` (longest matching module prefix), or nullopt.
inline std::optional<Placement> placement_for(const DeviceMapping& device_map, std::string_view name) {
  std::optional<Placement> best;
  std::size_t best_len = 0;
  for (const auto& [module, p] : device_map) {
    const bool match = module.empty() || name == module ||
                       (name.size() > module.size() && name.starts_with(module) && name[module.size()] == '.');
    if (match && (!best || module.size() >= best_len)) {
      best = p;
      best_len = module.size();
    }
  }
  return best;
}

/// Loads every tensor of a `.safetensors` or torch `.bin` file. With a device map, safetensors
/// weights are sent to their placement's device; .bin checkpoints always load on the CPU (as
/// torch.load(map_location="cpu") does in Accelerate).
inline StateDict load_state_dict(const std::string& checkpoint_file,
                                 const std::optional<DeviceMapping>& device_map = std::nullopt) {
  if (!checkpoint_file.ends_with(".safetensors")) return load_torch_bin(checkpoint_file);
  const auto f = SafetensorsFile::open(checkpoint_file);
  if (auto it = f.metadata().find("format"); it != f.metadata().end() && it->second != "pt") {
    if (it->second == "tf" || it->second == "flax") {
      throw ValueError("The checkpoint passed was saved with " + it->second + ", we need a the pt format.");
    }
    throw FormatError("The safetensors archive passed at " + checkpoint_file +
                      " does not contain the valid metadata (format '" + it->second + "').");
  }
  StateDict out;
  for (const auto& name : f.keys()) {
    Device dev = Device::cpu();
    if (device_map) {
      if (auto p = placement_for(*device_map, name); p && !p->is_disk()) dev = p->device();
      if (dev.is_meta()) dev = Device::cpu();
    }
    out.insert_or_assign(name, f.tensor(name, dev));
  }
  return out;
}

}  // namespace accel::io

// load_state_dict(checkpoint_file, device_map): Accelerate's loader for one checkpoint file.
//
//   StateDict sd = load_state_dict("model.safetensors");               // cpu, zero-copy
//   DeviceMap dm;  dm.set("encoder", 0);  dm.set("head", Placement::cpu());
//   StateDict sd = load_state_dict("model.safetensors", dm);
//   StateDict sd = load_state_dict("pytorch_model.bin");               // torch.save zip
//
// safetensors tensors go straight to their device: each weight takes the placement of the longest
// device-map key that is its name or a dotted prefix of it (DeviceMap::lookup; "" matches
// everything); weights with no key, or placed on "disk" or "meta", load on the CPU (as mapped
// views). Accelerate attaches a weight to every matching key and lets the last device win; the
// longest match is what it means.
// A safetensors "format" metadata other than "pt" is refused as Accelerate refuses it.
#pragma once

#include <optional>
#include <string>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/plan/device_map.hpp"

namespace accel::io {

/// Refuses a safetensors file whose "format" metadata is not "pt", with Accelerate's messages.
inline void check_safetensors_format(const SafetensorsFile& f) {
  const auto it = f.metadata().find("format");
  if (it == f.metadata().end() || it->second == "pt") return;
  if (it->second == "tf" || it->second == "flax") {
    throw ValueError("The checkpoint passed was saved with " + it->second + ", we need a the pt format.");
  }
  throw FormatError("The safetensors archive passed at " + f.path() + " does not contain the valid metadata (format '" +
                    it->second + "').");
}

/// Loads every tensor of a `.safetensors` or torch `.bin` file. With a device map, safetensors
/// weights are sent to their placement's device; .bin checkpoints always load on the CPU (as
/// torch.load(map_location="cpu") does in Accelerate).
inline StateDict load_state_dict(const std::string& checkpoint_file,
                                 const std::optional<plan::DeviceMap>& device_map = std::nullopt) {
  if (!checkpoint_file.ends_with(".safetensors")) return load_torch_bin(checkpoint_file);
  const auto f = SafetensorsFile::open(checkpoint_file);
  check_safetensors_format(f);
  StateDict out;
  for (const auto& name : f.keys()) {
    Device dev = Device::cpu();
    if (device_map) {
      if (auto p = device_map->lookup(name); p && !p->is_disk()) dev = p->device();
      if (dev.is_meta()) dev = Device::cpu();
    }
    out.insert_or_assign(name, f.tensor(name, dev));
  }
  return out;
}

}  // namespace accel::io

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
// longest match is what it means. The map is any PlacementLookup (DeviceMap from the plan layer,
// or a type of the caller's with `lookup(name) -> optional<Placement>`), so io needs no planner.
// A safetensors "format" metadata other than "pt" is refused as Accelerate refuses it.
#pragma once

#include <concepts>
#include <optional>
#include <string>
#include <string_view>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/torch_bin.hpp"

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

/// What a device map is to the loaders: the placement of a tensor name, or nullopt when no key
/// covers it. DeviceMap (plan layer) models it; so does any user type with that lookup.
template <class M>
concept PlacementLookup = requires(const M& m, std::string_view name) {
  { m.lookup(name) } -> std::convertible_to<std::optional<Placement>>;
};

namespace detail {
template <class Where>
StateDict load_state_dict_placed(const std::string& checkpoint_file, Where&& device_for) {
  const CheckpointFormat format = detect_checkpoint_format(checkpoint_file);
  require_readable({format, checkpoint_file});
  if (format == CheckpointFormat::torch_bin) return load_torch_bin(checkpoint_file);
  if (format != CheckpointFormat::safetensors) {
    throw FormatError("load_state_dict reads one safetensors or torch .bin file; '" + checkpoint_file + "' is " +
                      std::string(checkpoint_format_info(format).description) + " (load_checkpoint_in_model reads it)");
  }
  const auto f = SafetensorsFile::open(checkpoint_file);
  check_safetensors_format(f);
  StateDict out;
  for (const auto& name : f.keys()) out.insert_or_assign(name, f.tensor(name, device_for(name)));
  return out;
}
}  // namespace detail

/// Loads every tensor of a safetensors or torch .bin file on the CPU (safetensors: zero-copy
/// views of the mapped file; .bin as torch.load(map_location="cpu") does in Accelerate). The
/// format is what the file's bytes show (io/checkpoint_format.hpp), not its name.
inline StateDict load_state_dict(const std::string& checkpoint_file) {
  return detail::load_state_dict_placed(checkpoint_file, [](const std::string&) { return Device::cpu(); });
}

/// As above, with safetensors weights sent to their device-map placement's device.
template <PlacementLookup Map>
StateDict load_state_dict(const std::string& checkpoint_file, const Map& device_map) {
  return detail::load_state_dict_placed(checkpoint_file, [&](const std::string& name) {
    const std::optional<Placement> p = device_map.lookup(name);
    if (!p || p->is_disk() || p->device().is_meta()) return Device::cpu();
    return p->device();
  });
}
/// An empty optional loads on the CPU, as Accelerate's device_map=None.
template <PlacementLookup Map>
StateDict load_state_dict(const std::string& checkpoint_file, const std::optional<Map>& device_map) {
  return device_map ? load_state_dict(checkpoint_file, *device_map) : load_state_dict(checkpoint_file);
}

}  // namespace accel::io

// save(state_dict, path, safe_serialization): accelerate.utils.save for a state dict — one
// object, one file.
//
//   accel::save(model_state, "out/model.safetensors", /*safe_serialization=*/true);
//   accel::save(model_state, "out/pytorch_model.bin");          // torch.save's zip format
//
// Differences from Accelerate:
// - Saving is not gated on the main process (save_on_each_node): the io layer knows nothing of
//   processes, so a distributed caller saves from the process it chooses.
// - With safe_serialization Accelerate drops every later name whose tensor shares a storage with
//   an earlier one, which loses data when two names are different views of one storage (a fused
//   projection split into slices). Here only names holding the very same view (tied weights) are
//   dropped; other views are written as copies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/torch_bin_write.hpp"

namespace accel::io {

/// Accelerate's clean_state_dict_for_safetensors: `state` without the later names of each group
/// of names holding the same view (safetensors cannot store one tensor twice). The dropped names
/// go to `removed` when given.
inline NamedTensors clean_state_dict_for_safetensors(const StateDict& state, std::vector<std::string>* removed = nullptr) {
  NamedTensors kept;
  kept.reserve(state.size());
  std::unordered_map<const void*, std::vector<std::size_t>> kept_of_storage;  // only same-storage names can match
  for (const auto& entry : state) {
    // Named references, not structured bindings: clang 14 cannot capture those in a lambda.
    const auto& name = entry.first;
    const auto& t = entry.second;
    const void* storage = t.storage() ? static_cast<const void*>(t.storage().get()) : nullptr;
    auto& same_storage = kept_of_storage[storage];
    const bool duplicate = storage && std::any_of(same_storage.begin(), same_storage.end(),
                                                  [&](std::size_t i) { return kept[i].second.is_same(t); });
    if (duplicate) {
      if (removed) removed->push_back(name);
      continue;
    }
    same_storage.push_back(kept.size());
    kept.emplace_back(name, t);
  }
  return kept;
}

/// Writes `state` to `path`, atomically: with `safe_serialization`, a safetensors file with
/// metadata {"format": "pt"} and tied names written once (the later names are returned, as
/// Accelerate warns "Removed shared tensor ..."); otherwise torch.save's zip format, tied names
/// sharing one storage. The default is Accelerate's.
inline std::vector<std::string> save(const StateDict& state, const std::string& path, bool safe_serialization = false) {
  std::vector<std::string> removed;
  if (safe_serialization) {
    save_file(clean_state_dict_for_safetensors(state, &removed), path, {{"format", "pt"}});
  } else {
    save_torch_bin(state, path);
  }
  return removed;
}

}  // namespace accel::io

namespace accel {
using io::save;
}  // namespace accel

// save(state, state_dict, path, save_on_each_node = false, safe_serialization = false):
// Accelerate's utils.save, which writes from one process so that the processes of a run do not
// all write the same file:
//
//   dist::save(state, model_state, "out/model.safetensors", false, /*safe_serialization=*/true);
//
// The main process writes (or, with save_on_each_node, each node's local main process, for
// folders that are not shared between hosts); the others return at once with nothing written.
// The file is io::save's (io/save.hpp): safetensors or torch.save's zip format, written
// atomically. Nothing waits: call wait_for_everyone before another process reads the file.
//
// Differences from Accelerate: the object is a state dict (io::StateDict), which is what
// Accelerate's callers save; its removed tied names are returned on the writing process.
#pragma once

#include <string>
#include <vector>

#include "accel/dist/partial_state.hpp"
#include "accel/io/save.hpp"
#include "accel/io/state_dict.hpp"

namespace accel::dist {

/// Writes `state_dict` to `path` on the main process (each node's local main process with
/// save_on_each_node) and returns the names io::save left out; elsewhere writes nothing.
template <class D>
std::vector<std::string> save(const PartialState<D>& state, const io::StateDict& state_dict, const std::string& path,
                              bool save_on_each_node = false, bool safe_serialization = false) {
  const bool writer = save_on_each_node ? state.is_local_main_process() : state.is_main_process();
  if (!writer) return {};
  return io::save(state_dict, path, safe_serialization);
}

}  // namespace accel::dist

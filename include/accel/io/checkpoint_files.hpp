// resolve_checkpoint_files(checkpoint): the files a checkpoint path stands for, as Accelerate's
// load_checkpoint_in_model finds them.
//
//   resolve_checkpoint_files("model.safetensors")            -> {"model.safetensors"}
//   resolve_checkpoint_files("ckpt/model.safetensors.index.json") -> its shards, sorted, with the folder
//   resolve_checkpoint_files("ckpt/")  -> pytorch_model.bin, else model.safetensors, else the one *.index.json
#pragma once

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/io/file_names.hpp"
#include "accel/io/sharded_index.hpp"

namespace accel::io {

/// The checkpoint files `checkpoint` names (file, index, or folder; see the header comment), with
/// Accelerate's ValueErrors when a folder holds no checkpoint or several indexes. Shards of an
/// index come sorted by name; FormatError when the index names a shard that does not exist.
inline std::vector<std::string> resolve_checkpoint_files(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  std::optional<std::string> index_file;
  if (fs::is_regular_file(checkpoint)) {
    if (!checkpoint.ends_with(".json")) return {checkpoint};
    index_file = checkpoint;
  } else if (fs::is_directory(checkpoint)) {
    const fs::path dir(checkpoint);
    if (fs::is_regular_file(dir / WEIGHTS_NAME)) return {(dir / WEIGHTS_NAME).string()};
    if (fs::is_regular_file(dir / SAFE_WEIGHTS_NAME)) return {(dir / SAFE_WEIGHTS_NAME).string()};
    std::vector<std::string> indexes;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().ends_with(".index.json")) indexes.push_back(e.path().string());
    }
    if (indexes.empty()) {
      throw ValueError(checkpoint + " is not a folder containing a `.index.json` file or a " +
                       std::string(WEIGHTS_NAME) + " or a " + std::string(SAFE_WEIGHTS_NAME) + " file");
    }
    if (indexes.size() > 1) {
      std::sort(indexes.begin(), indexes.end());
      std::string names;
      for (const auto& i : indexes) names += (names.empty() ? "" : ", ") + fs::path(i).filename().string();
      throw ValueError(checkpoint + " containing more than one `.index.json` file, delete the irrelevant ones (" + names +
                       ").");
    }
    index_file = indexes.front();
  } else {
    throw ValueError(
        "`checkpoint` should be the path to a file containing a whole state dict, or the index of a sharded "
        "checkpoint, or a folder containing a sharded checkpoint or the whole state dict, but got " +
        checkpoint + ".");
  }
  const ShardedIndex ix = read_sharded_index(*index_file);
  std::vector<std::string> shards = ix.shard_files;
  std::sort(shards.begin(), shards.end());
  const fs::path folder = fs::path(*index_file).parent_path();
  for (auto& s : shards) s = (folder / s).string();
  return shards;
}

}  // namespace accel::io

namespace accel {
using io::resolve_checkpoint_files;
}  // namespace accel

// resolve_checkpoint_files(checkpoint): the files a checkpoint path stands for, the list
// load_checkpoint_in_model reads.
//
//   resolve_checkpoint_files("model.safetensors")                  -> {"model.safetensors"}
//   resolve_checkpoint_files("ckpt/model.safetensors.index.json")  -> its shards, sorted, with the folder
//   resolve_checkpoint_files("ckpt/")  -> what resolve_checkpoint_folder finds (io/checkpoint_format.hpp:
//                                         model.safetensors, its index, pytorch_model.bin, its index,
//                                         one other *.index.json), expanded the same way
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/sharded_index.hpp"

namespace accel::io {

/// The checkpoint files `checkpoint` names (file, index, or folder; see the header comment).
/// Accelerate's ValueErrors when the path does not exist, when a folder holds no checkpoint or
/// several indexes, and for an offload folder (not a checkpoint); FormatError for a file that is
/// no checkpoint, a format accel does not read (legacy pickles), or an index naming a shard
/// that does not exist. Shards of an index come sorted by name.
inline std::vector<std::string> resolve_checkpoint_files(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(checkpoint, ec)) {
    throw ValueError(
        "`checkpoint` should be the path to a file containing a whole state dict, or the index of a sharded "
        "checkpoint, or a folder containing a sharded checkpoint or the whole state dict, but got " +
        checkpoint + ".");
  }
  const ResolvedCheckpoint c = resolve_checkpoint(checkpoint);
  require_readable(c);
  switch (c.format) {
    case CheckpointFormat::safetensors:
    case CheckpointFormat::torch_bin:
    case CheckpointFormat::gguf:
      return {c.path.string()};
    case CheckpointFormat::sharded_index: {
      const ShardedIndex ix = read_sharded_index(c.path.string());
      std::vector<std::string> shards;
      for (const auto& s : ix.shard_files) shards.push_back(sharded_index_shard_path(c.path.string(), s).string());
      std::sort(shards.begin(), shards.end());
      return shards;
    }
    case CheckpointFormat::offload_folder:
      throw ValueError(checkpoint + " is " + std::string(checkpoint_format_info(c.format).description) +
                       ", not a checkpoint: load_offloaded_weights reads offloaded weights back");
    case CheckpointFormat::torch_legacy:
    case CheckpointFormat::model_folder:
      break;
  }
  throw FormatError("'" + c.path.string() + "' is " + std::string(checkpoint_format_info(c.format).description) +
                    ", which load_checkpoint_in_model does not read");
}

}  // namespace accel::io

namespace accel {
using io::resolve_checkpoint_files;
}  // namespace accel

// Bounds every checkpoint header and index reader keeps, whatever the file claims.
//
//   checkpoint_limits::max_name_bytes        longest tensor name (any JSON key) in a header or index
//   checkpoint_limits::max_entries           most tensors (members of any one object or array)
//   checkpoint_limits::*_depth               JSON nesting each format can need
//   checkpoint_json_limits(depth) -> JsonLimits   the three, for parse_json_bounded
//
// The bytes a reader takes are capped already (a 100 MB safetensors header, a 256 MiB index
// file); these bounds state per-entry and per-document limits in the format's own terms, so a
// hostile file fails with a message that says which bound it broke, before the tree behind it
// is built. They are generous for real checkpoints: the largest public models have around 10^5
// tensors (DeepSeek-V3: ~91k) with names under 200 bytes.
#pragma once

#include <cstddef>

#include "accel/core/json_read.hpp"
#include "accel/core/limits.hpp"

namespace accel::io {

/// Limits on safetensors headers, sharded index.json and offload index.json files.
struct checkpoint_limits {
  static constexpr std::size_t max_name_bytes = limits::max_name_bytes;  ///< the library-wide bound
  static constexpr std::size_t max_entries = limits::max_tensor_count;   ///< 100x the largest model
  /// header -> tensor entry -> "shape" / "data_offsets": exactly what the format has.
  static constexpr int safetensors_depth = 3;
  /// index -> "metadata" -> free-form values; metadata is the writer's, so room is left for it.
  static constexpr int sharded_index_depth = 16;
  /// index -> entry -> "shape", with room for fields later Accelerate versions may add.
  static constexpr int offload_index_depth = 8;
};

/// The JsonLimits of a checkpoint file nested at most `depth` deep.
constexpr JsonLimits checkpoint_json_limits(int depth) {
  return JsonLimits{depth, checkpoint_limits::max_name_bytes, checkpoint_limits::max_entries};
}

}  // namespace accel::io

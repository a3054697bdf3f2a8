// shard_checkpoint: how a state dict splits into checkpoint shards (the plan only; writing the
// files belongs to the io layer).
//
//   auto plan = shard_checkpoint(shard_tensors_of(model), "5GB", "model.safetensors");
//   plan.shards   [{"model-00001-of-00003.safetensors", {names...}}, ...]
//   plan.index    nullopt for a single shard, else {total_size, weight_map}
//   shard_checkpoint(state_dict, "10GB")   the same over an io::StateDict, as Accelerate spells it
//
// Keys are taken in order; a new shard starts when the next tensor would overflow the current
// one, even an empty one (so a first tensor bigger than the limit leaves an empty first shard).
// Names sharing a storage join the shard of the first and count once in total_size.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/shape.hpp"
#include "accel/io/file_names.hpp"
#include "accel/io/sharding.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/nn/module.hpp"

namespace accel::plan {

/// One state-dict entry: its name, dtype, shape and the identity of its storage.
struct ShardTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  const void* storage = nullptr;  ///< equal for names sharing bytes (tied weights)
};

struct ShardIndex {
  ByteSize total_size;
  std::vector<std::pair<std::string, std::string>> weight_map;  ///< tensor -> shard file
};

struct ShardPlan {
  std::vector<std::pair<std::string, std::vector<std::string>>> shards;  ///< file -> keys in order
  std::optional<ShardIndex> index;
};

namespace detail {

inline ShardPlan shard_plan_of(io::ShardPlan planned) {
  ShardPlan plan;
  for (std::size_t i = 0; i < planned.shards.size(); ++i) {
    plan.shards.emplace_back(std::move(planned.filenames[i]), std::move(planned.shards[i]));
  }
  if (planned.is_sharded()) plan.index = ShardIndex{planned.total_size, std::move(planned.weight_map)};
  return plan;
}

}  // namespace detail

/// The state_dict entries of `model` (every name; tied names share a storage identity).
inline std::vector<ShardTensor> shard_tensors_of(const nn::Module& model) {
  std::vector<ShardTensor> out;
  for (const auto& [name, cell] : model.state_dict_cells()) {
    const Tensor& t = cell->data;
    const void* id = t.storage() ? static_cast<const void*>(t.storage().get()) : static_cast<const void*>(cell.get());
    out.push_back({name, t.dtype(), t.shape(), id});
  }
  return out;
}

/// Splits `tensors` into shards of at most `max_shard_size` bytes (see the header comment); the
/// planning itself is the io layer's, which also writes the files.
inline ShardPlan shard_checkpoint(const std::vector<ShardTensor>& tensors, std::int64_t max_shard_size,
                                  const std::string& weights_name = "pytorch_model.bin") {
  std::vector<io::ShardItem> items;
  items.reserve(tensors.size());
  for (const auto& t : tensors) items.push_back({t.name, t.dtype, t.shape.numel(), t.storage});
  return detail::shard_plan_of(io::plan_shards(items, max_shard_size, weights_name));
}

/// As above with a size string ("10GB", "500MiB").
inline ShardPlan shard_checkpoint(const std::vector<ShardTensor>& tensors, std::string_view max_shard_size = "10GB",
                                  const std::string& weights_name = "pytorch_model.bin") {
  return shard_checkpoint(tensors, convert_file_size_to_int(max_shard_size), weights_name);
}

/// Accelerate's shard_checkpoint(state_dict, max_shard_size, weights_name): the same plan over a
/// state dict, names sharing a storage counted once (Accelerate's id_tensor_storage).
inline ShardPlan shard_checkpoint(const io::StateDict& state_dict, std::int64_t max_shard_size,
                                  const std::string& weights_name = std::string(io::WEIGHTS_NAME)) {
  return detail::shard_plan_of(io::plan_shards(state_dict, max_shard_size, weights_name));
}

/// As above with a size string ("10GB", "500MiB").
inline ShardPlan shard_checkpoint(const io::StateDict& state_dict, std::string_view max_shard_size = "10GB",
                                  const std::string& weights_name = std::string(io::WEIGHTS_NAME)) {
  return shard_checkpoint(state_dict, convert_file_size_to_int(max_shard_size), weights_name);
}

}  // namespace accel::plan

namespace accel {
using plan::shard_checkpoint;
}  // namespace accel

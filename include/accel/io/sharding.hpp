// Writing sharded checkpoints with Accelerate's shard_checkpoint semantics.
//
//   ShardPlan p = io::plan_shards(state_dict, max_shard_size, "model.safetensors");
//   io::save_sharded(state_dict, folder, "10GB", /*safe_serialization=*/true);
//
// Planning iterates the tensors in order and opens a new shard when the next tensor would push the
// current one past max_shard_size — even when the current shard is empty, so a first tensor larger
// than the limit leaves an empty first shard, exactly as Accelerate does. Names that share a
// storage (tied weights) join the shard of their first occurrence and count once in total_size.
// Sizes follow Accelerate's dtype_byte_size: a bool element counts 1/8 byte. The plan layer's
// shard_checkpoint(model, ...) is this planner over a module's state dict.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/file_names.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/torch_bin_write.hpp"

namespace accel::io {

/// The outcome of planning: shard file names, their tensors, and the index contents.
struct ShardPlan {
  std::vector<std::string> filenames;                 ///< one per shard
  std::vector<std::vector<std::string>> shards;       ///< tensor names per shard, in order
  std::vector<std::pair<std::string, std::string>> weight_map;  ///< tensor -> file, shard order
  ByteSize total_size;
  bool total_size_is_float = false;  ///< a bool tensor made Python's sum a float ("49.0")
  bool is_sharded() const noexcept { return shards.size() > 1; }
};

/// One tensor to plan: its name, dtype, element count and a storage identity (nullptr: a
/// distinct storage).
struct ShardItem {
  std::string name;
  DType dtype = DType::f32;
  std::int64_t numel = 0;
  const void* storage = nullptr;
};

/// weights_name with "-0000i-of-0000n" before ".bin" / ".safetensors" (Python str.replace: every
/// occurrence).
inline std::string shard_file_name(const std::string& weights_name, std::size_t i, std::size_t n) {
  char tag[32];
  std::snprintf(tag, sizeof tag, "-%05zu-of-%05zu", i + 1, n);
  auto replace_all = [](std::string s, const std::string& from, const std::string& to) {
    for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
    return s;
  };
  const std::string bin(checkpoint_format_info(CheckpointFormat::torch_bin).suffix);
  const std::string safetensors(checkpoint_format_info(CheckpointFormat::safetensors).suffix);
  std::string s = replace_all(weights_name, bin, std::string(tag) + bin);
  return replace_all(s, safetensors, std::string(tag) + safetensors);
}

/// Plans shards over `items` (see the header comment). One shard keeps `weights_name` as is.
/// Sizes are exact in eighths of a byte, so the comparisons are Accelerate's float ones.
inline ShardPlan plan_shards(const std::vector<ShardItem>& items, std::int64_t max_shard_size,
                             const std::string& weights_name = std::string(WEIGHTS_NAME)) {
  const ByteSize limit(convert_file_size_to_int(max_shard_size));
  ShardPlan plan;
  plan.shards.emplace_back();
  ByteSize last_block;
  std::map<const void*, std::size_t> storage_block;
  for (const auto& it : items) {
    if (it.storage) {
      if (auto s = storage_block.find(it.storage); s != storage_block.end()) {
        plan.shards[s->second].push_back(it.name);
        continue;
      }
    }
    const ByteSize size = dtype_byte_size(it.dtype) * it.numel;
    if (last_block + size > limit) {
      plan.shards.emplace_back();
      last_block = ByteSize{};
    }
    plan.shards.back().push_back(it.name);
    last_block += size;
    plan.total_size += size;
    plan.total_size_is_float |= it.dtype == DType::boolean;
    if (it.storage) storage_block.emplace(it.storage, plan.shards.size() - 1);
  }
  const std::size_t n = plan.shards.size();
  for (std::size_t i = 0; i < n; ++i) {
    plan.filenames.push_back(n == 1 ? weights_name : shard_file_name(weights_name, i, n));
    for (const auto& name : plan.shards[i]) plan.weight_map.emplace_back(name, plan.filenames.back());
  }
  return plan;
}

/// As above with Accelerate's size strings ("10GB", "500MiB", "4Gb").
inline ShardPlan plan_shards(const std::vector<ShardItem>& items, std::string_view max_shard_size,
                             const std::string& weights_name = std::string(WEIGHTS_NAME)) {
  return plan_shards(items, convert_file_size_to_int(max_shard_size), weights_name);
}

/// Plans a state dict: sizes from shape and dtype, ties from shared storages.
inline ShardPlan plan_shards(const StateDict& state, std::int64_t max_shard_size,
                             const std::string& weights_name = std::string(WEIGHTS_NAME)) {
  std::vector<ShardItem> items;
  for (const auto& [name, t] : state) {
    items.push_back({name, t.dtype(), t.numel(), t.storage() ? static_cast<const void*>(t.storage().get()) : nullptr});
  }
  return plan_shards(items, max_shard_size, weights_name);
}

/// Saves `state` into `folder` as Accelerator.save_model does: "model.safetensors" (or
/// "pytorch_model.bin") when it fits one shard, else numbered shards plus
/// model.safetensors.index.json (pytorch_model.bin.index.json). Tied names are all written
/// (safetensors cannot share bytes; the copies are re-tied when a model loads them), the .bin
/// format keeps them sharing one storage.
///
/// Every shard is written and synced under a temporary name before any is renamed into place,
/// then the index is written, and only then are the numbered shards of an earlier save that the
/// new index does not name removed (and, when the new save is one file, the earlier index that
/// names them). A save that fails while writing leaves the earlier index and its shards as they
/// were; only a rename failing between two shard renames can leave a mix, and only of shards
/// whose names both saves use. Accelerate removes stale shards first, and its check never
/// matches safetensors shard names; this one matches both kinds.
inline ShardPlan save_sharded(const StateDict& state, const std::string& folder, std::int64_t max_shard_size,
                              bool safe_serialization = true) {
  namespace fs = std::filesystem;
  if (fs::exists(folder) && !fs::is_directory(folder)) throw ValueError("save_sharded: '" + folder + "' is a file, not a folder");
  fs::create_directories(folder);
  const std::string weights_name(safe_serialization ? SAFE_WEIGHTS_NAME : WEIGHTS_NAME);
  ShardPlan plan = plan_shards(state, max_shard_size, weights_name);

  std::vector<std::unique_ptr<AtomicFile>> staged;
  staged.reserve(plan.shards.size());
  for (std::size_t i = 0; i < plan.shards.size(); ++i) {
    const std::string path = (fs::path(folder) / plan.filenames[i]).string();
    if (safe_serialization) {
      NamedTensors tensors;
      for (const auto& name : plan.shards[i]) tensors.emplace_back(name, state.at(name));
      staged.push_back(detail::stage_safetensors(tensors, path, {{"format", "pt"}}));
    } else {
      StateDict shard;
      for (const auto& name : plan.shards[i]) shard.insert_or_assign(name, state.at(name));
      staged.push_back(detail::stage_torch_bin(shard, path, "archive"));
    }
  }
  for (auto& f : staged) f->commit();

  const fs::path index = fs::path(folder) / (safe_serialization ? SAFE_WEIGHTS_INDEX_NAME : WEIGHTS_INDEX_NAME);
  if (plan.is_sharded()) {
    write_sharded_index(index.string(), plan.total_size.bytes(), plan.weight_map, plan.total_size_is_float);
  } else {
    fs::remove(index);
  }

  const std::set<std::string> keep(plan.filenames.begin(), plan.filenames.end());
  const std::string stem(safe_serialization ? SAFE_MODEL_NAME : MODEL_NAME);
  const std::string suffix(
      checkpoint_format_info(safe_serialization ? CheckpointFormat::safetensors : CheckpointFormat::torch_bin).suffix);
  static const std::regex numbered("-\\d{5}-of-\\d{5}");
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string f = e.path().filename().string();
    if (!e.is_regular_file() || keep.count(f) || !f.starts_with(stem) || !f.ends_with(suffix)) continue;
    const std::string middle = f.substr(stem.size(), f.size() - stem.size() - suffix.size());
    if (std::regex_match(middle, numbered)) fs::remove(e.path());
  }
  return plan;
}

/// As above, with the limit spelled as Accelerate accepts it ("10GB", "500MiB", "4Gb").
inline ShardPlan save_sharded(const StateDict& state, const std::string& folder, const std::string& max_shard_size = "10GB",
                              bool safe_serialization = true) {
  return save_sharded(state, folder, convert_file_size_to_int(max_shard_size), safe_serialization);
}

}  // namespace accel::io

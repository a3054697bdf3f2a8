// Sharded checkpoints: the index.json of transformers / Accelerate and a lazy view over shards.
//
//   ShardedIndex ix = parse_sharded_index(json_text, "model.safetensors.index.json");  // pure
//   ShardedIndex ix = read_sharded_index(path);        // also checks every shard file exists
//   write_sharded_index(path, total_size, weight_map); // json.dumps(indent=2, sort_keys=True) + "\n"
//   ShardedCheckpoint ck = ShardedCheckpoint::open(path); ck.tensor("w");
//
// Index format: {"metadata": {"total_size": N, ...}, "weight_map": {tensor: shard file}}, read in
// linear time under io/checkpoint_limits.hpp's bounds. Shard
// names are files inside the index's folder: relative, no NUL byte, never leading out of the
// folder (io/confined_path.hpp); a shard is read as what its bytes show (io/checkpoint_format.hpp),
// safetensors or a torch .bin.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/checkpoint_limits.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/torch_bin.hpp"

namespace accel::io {

/// A parsed, validated sharded-checkpoint index.
struct ShardedIndex {
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();  ///< "metadata" as found
  std::vector<std::pair<std::string, std::string>> weight_map;  ///< tensor -> shard, file order
  std::vector<std::string> shard_files;  ///< distinct shards, in order of first use
  std::map<std::string, std::size_t, std::less<>> index;  ///< tensor -> position in weight_map

  /// Shard file of `name`, or nullptr.
  const std::string* shard_of(std::string_view name) const {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &weight_map[it->second].second;
  }
};

/// Parses and validates index JSON; `source` names it in errors. Does not touch the disk.
inline ShardedIndex parse_sharded_index(std::string_view text, const std::string& source) {
  const std::string where = "checkpoint index '" + source + "'";
  if (!is_valid_utf8(text)) throw FormatError(where + ": not valid UTF-8");
  // As with Python's dict, a repeated name keeps its first place and takes its last shard.
  auto j = parse_json_bounded<nlohmann::ordered_json>(text, where, checkpoint_json_limits(checkpoint_limits::sharded_index_depth),
                                                      JsonDuplicates::keep_last);
  if (!j.is_object()) throw FormatError(where + ": not a JSON object");
  ShardedIndex ix;
  if (auto m = j.find("metadata"); m != j.end() && !m->is_null()) {
    if (!m->is_object()) throw FormatError(where + ": \"metadata\" is not an object");
    if (auto ts = m->find("total_size"); ts != m->end() && !ts->is_number()) {
      throw FormatError(where + ": \"total_size\" is not a number");
    }
    ix.metadata = *m;
  }
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) throw FormatError(where + ": missing \"weight_map\" object");
  ix.weight_map.reserve(wm->size());
  std::set<std::string, std::less<>> shards;
  for (auto& [name, shard] : wm->get_ref<nlohmann::ordered_json::object_t&>()) {
    if (!shard.is_string()) throw FormatError(where + ": shard of tensor '" + name + "' is not a string");
    std::string& s = shard.get_ref<std::string&>();
    // A shard name is checked once, where it first appears: the message names that tensor.
    if (!shards.contains(s)) {
      (void)confined_entry(s, where + ", shard of tensor '" + printable_entry(name) + "'");
      shards.insert(s);
      ix.shard_files.push_back(s);
    }
    ix.index.emplace(name, ix.weight_map.size());
    ix.weight_map.emplace_back(name, std::move(s));
  }
  return ix;
}

/// The file of shard `shard` of the index at `index_path`: beside the index, confined to its
/// folder (FormatError naming the index otherwise).
inline std::filesystem::path sharded_index_shard_path(const std::string& index_path, std::string_view shard) {
  return confined_path(std::filesystem::path(index_path).parent_path(), shard, "checkpoint index '" + index_path + "'");
}

/// Reads `path` and checks that every shard it names is a regular file beside it (FormatError
/// naming the index, the shard and the first tensor the index places in it).
inline ShardedIndex read_sharded_index(const std::string& path) {
  ShardedIndex ix = parse_sharded_index(read_small_file(path), path);
  for (const auto& s : ix.shard_files) {
    const std::filesystem::path full = sharded_index_shard_path(path, s);
    std::error_code ec;
    if (std::filesystem::is_regular_file(full, ec)) continue;
    std::size_t held = 0;
    const std::string* first = nullptr;
    for (const auto& [name, shard] : ix.weight_map) {
      if (shard != s) continue;
      if (!first) first = &name;
      ++held;
    }
    const std::string others = held > 1 ? " and " + std::to_string(held - 1) + " other tensor" + (held > 2 ? "s" : "") : "";
    const bool exists = std::filesystem::exists(full, ec);
    throw FormatError("checkpoint index '" + path + "': shard '" + s + "' of tensor '" + *first + "'" + others +
                      (exists ? " is not a regular file" : " does not exist") + " (looked for '" + full.string() + "')");
  }
  return ix;
}

/// Index JSON as Accelerate's save_model writes it: json.dumps(indent=2, sort_keys=True) + "\n".
/// `total_size` is written as an integer unless it has a fractional part (1/8-byte bools).
inline std::string sharded_index_json(double total_size, const std::vector<std::pair<std::string, std::string>>& weight_map,
                                      bool total_size_is_float = false) {
  nlohmann::json j;  // std::map keys: sorted like sort_keys=True
  if (total_size_is_float) {
    j["metadata"]["total_size"] = total_size;
  } else {
    j["metadata"]["total_size"] = static_cast<std::uint64_t>(total_size);
  }
  j["weight_map"] = nlohmann::json::object();
  for (const auto& [k, v] : weight_map) j["weight_map"][k] = v;
  return j.dump(2, ' ', true) + "\n";
}

/// Writes an index file atomically.
inline void write_sharded_index(const std::string& path, double total_size,
                                const std::vector<std::pair<std::string, std::string>>& weight_map,
                                bool total_size_is_float = false) {
  write_file_atomic(path, sharded_index_json(total_size, weight_map, total_size_is_float));
}

/// A sharded checkpoint opened through its index: shards (safetensors or torch .bin) are opened
/// on first use and kept open. Thread-safe.
class ShardedCheckpoint {
 public:
  /// Reads the index (read_sharded_index's checks); shards are opened on first use.
  static ShardedCheckpoint open(const std::string& index_path) {
    ShardedCheckpoint c;
    c.state_ = std::make_shared<State>();
    c.state_->index_path = index_path;
    c.state_->index = read_sharded_index(index_path);
    return c;
  }

  const ShardedIndex& index() const noexcept { return state_->index; }
  const nlohmann::ordered_json& metadata() const noexcept { return state_->index.metadata; }
  /// Tensor names in index order.
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const auto& [name, shard] : state_->index.weight_map) k.push_back(name);
    return k;
  }
  bool contains(std::string_view name) const { return state_->index.shard_of(name) != nullptr; }
  /// The tensor `name` (zero-copy on the CPU when the shard allows); FormatError if the shard
  /// does not hold the tensor the index promises.
  Tensor tensor(std::string_view name) const {
    const std::string& shard = shard_name(name);
    auto& s = *state_;
    std::unique_lock lock(s.mutex);
    auto it = s.open.find(shard);
    if (it == s.open.end()) {
      const std::filesystem::path full = sharded_index_shard_path(s.index_path, shard);
      Shard opened;
      switch (const CheckpointFormat f = detect_checkpoint_format(full)) {
        case CheckpointFormat::safetensors: opened = SafetensorsFile::open(full.string()); break;
        case CheckpointFormat::torch_bin: opened = load_torch_bin(full.string()); break;
        default:
          require_readable({f, full});
          throw FormatError("checkpoint index '" + s.index_path + "': shard '" + shard + "' is " +
                            std::string(checkpoint_format_info(f).description) + ", not safetensors or a torch .bin");
      }
      it = s.open.emplace(shard, std::move(opened)).first;
    }
    const Shard& sh = it->second;
    lock.unlock();
    const std::string missing = "checkpoint index '" + s.index_path + "' maps '" + std::string(name) + "' to shard '" +
                                shard + "', which does not contain it";
    if (const auto* st = std::get_if<SafetensorsFile>(&sh)) {
      if (!st->contains(name)) throw FormatError(missing);
      return st->tensor(name);
    }
    const auto& sd = std::get<StateDict>(sh);
    if (!sd.contains(name)) throw FormatError(missing);
    return sd.at(name);
  }
  /// The tensor on `device` in `dtype` (default: as stored).
  Tensor tensor(std::string_view name, Device device, std::optional<DType> dtype = std::nullopt) const {
    Tensor t = tensor(name);
    return t.to(device, dtype.value_or(t.dtype()));
  }

 private:
  using Shard = std::variant<SafetensorsFile, StateDict>;
  struct State {
    std::string index_path;
    ShardedIndex index;
    std::mutex mutex;
    std::map<std::string, Shard, std::less<>> open;  // node-based: references stay valid
  };
  const std::string& shard_name(std::string_view name) const {
    const std::string* s = state_->index.shard_of(name);
    if (!s) throw KeyError("checkpoint index '" + state_->index_path + "' has no tensor named '" + std::string(name) + "'");
    return *s;
  }
  std::shared_ptr<State> state_;
};

}  // namespace accel::io

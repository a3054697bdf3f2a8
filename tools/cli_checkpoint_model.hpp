// Meta models built from checkpoints alone, so `accel estimate-memory` and `accel plan` can size a
// model that comes without a config.json.
//
//   meta_model_from_tensors(entries, source, float_dtype)   dotted names -> nested modules
//   checkpoint_tensor_entries(path)                          names, dtypes, shapes of a checkpoint
//   register_checkpoint_loaders()                            safetensors, torch .bin and sharded indexes
//
// Every dotted name becomes a chain of modules whose leaf is a parameter (meta: no bytes). Only the
// safetensors header, the index or the torch pickle is read, never tensor data. A checkpoint does
// not record the model's module order: torch .bin files keep their pickle order (the model's),
// the rest is ordered by name with numbered parts compared as numbers (layers.2 before layers.10).
// A module whose children are all numbered (a ModuleList) gets the class "ModuleList" and its
// children the class "<path>.N" (e.g. "model.layers.N"); those block classes become the model's
// no_split_modules, the way transformers keeps decoder layers whole. Tensors of a .bin that are
// the same view of one storage become one tied parameter, so they are counted once.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/limits.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/nn/module.hpp"
#include "cli_common.hpp"

namespace accel::cli {

/// What the planner needs of one checkpoint tensor. `tied_to` names an earlier entry this one
/// shares its bytes with (empty when none).
struct CheckpointTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::string tied_to;
};

namespace detail {

inline std::vector<std::string_view> split_dotted(std::string_view name) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

inline bool is_number(std::string_view s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// layers.2.w before layers.10.w: numbered parts compare as numbers, the rest as text.
inline bool natural_less(const std::string& a, const std::string& b) {
  const auto pa = split_dotted(a), pb = split_dotted(b);
  for (std::size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    if (pa[i] == pb[i]) continue;
    if (is_number(pa[i]) && is_number(pb[i])) return std::stoll(std::string(pa[i])) < std::stoll(std::string(pb[i]));
    return pa[i] < pb[i];
  }
  return pa.size() < pb.size();
}

inline void sort_by_name(std::vector<CheckpointTensor>& entries) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const CheckpointTensor& a, const CheckpointTensor& b) { return natural_less(a.name, b.name); });
}

inline std::vector<CheckpointTensor> safetensors_entries(const std::string& path) {
  const auto f = io::SafetensorsFile::open(path);
  std::vector<CheckpointTensor> out;
  for (const auto& t : f.header().tensors) out.push_back({t.name, t.dtype, t.shape, {}});
  return out;
}

inline std::vector<CheckpointTensor> torch_bin_entries(const std::string& path) {
  const io::StateDict sd = io::load_torch_bin(path);
  std::vector<CheckpointTensor> out;
  // Views are grouped by storage first, so finding a tie costs a lookup, not a scan of every
  // earlier tensor (a .bin may hold 100k tensors).
  std::map<const void*, std::vector<std::size_t>> by_storage;
  std::vector<const Tensor*> seen;
  for (const auto& [name, t] : sd) {
    CheckpointTensor e{name, t.dtype(), t.shape(), {}};
    auto& same_storage = by_storage[t.numel() > 0 ? static_cast<const void*>(t.storage().get()) : nullptr];
    for (const std::size_t i : same_storage) {
      const Tensor& o = *seen[i];
      if (t.numel() > 0 && o.storage_offset() == t.storage_offset() && o.shape() == t.shape() &&
          o.strides() == t.strides() && o.dtype() == t.dtype()) {
        e.tied_to = out[i].tied_to.empty() ? out[i].name : out[i].tied_to;
        break;
      }
    }
    if (t.numel() > 0) same_storage.push_back(out.size());
    seen.push_back(&t);
    out.push_back(std::move(e));
  }
  return out;
}

/// The entries of one checkpoint file, read as its bytes show; FormatError for other formats.
inline std::vector<CheckpointTensor> file_entries(const std::string& path, io::CheckpointFormat format) {
  if (format == io::CheckpointFormat::safetensors) return safetensors_entries(path);
  if (format == io::CheckpointFormat::torch_bin) return torch_bin_entries(path);
  io::require_readable({format, path});
  throw FormatError("'" + path + "' is " + std::string(io::checkpoint_format_info(format).description) +
                    ", not a safetensors or torch .bin file");
}

inline std::vector<CheckpointTensor> sharded_entries(const std::string& index_path) {
  const io::ShardedIndex ix = io::read_sharded_index(index_path);
  std::map<std::string, CheckpointTensor> found;
  for (const auto& shard : ix.shard_files) {
    const std::string full = io::sharded_index_shard_path(index_path, shard).string();
    auto entries = file_entries(full, io::detect_checkpoint_format(full));
    for (auto& e : entries) {
      const std::string* owner = ix.shard_of(e.name);
      if (owner && *owner == shard) found.emplace(e.name, std::move(e));
    }
  }
  std::vector<CheckpointTensor> out;
  for (const auto& [name, shard] : ix.weight_map) {
    auto it = found.find(name);
    if (it == found.end()) {
      throw FormatError("checkpoint index '" + index_path + "' maps '" + name + "' to shard '" + shard +
                        "', which does not contain it");
    }
    // Ties across shards cannot be seen; within one shard they survive only if the partner is kept.
    if (!it->second.tied_to.empty() && !found.count(it->second.tied_to)) it->second.tied_to.clear();
    out.push_back(std::move(it->second));
  }
  return out;
}

}  // namespace detail

/// The meta model holding `entries` (see the header comment); `source` names the checkpoint in
/// errors. Floating-point tensors are created in `float_dtype` when given (estimate-memory sizes
/// from float32, as Accelerate does); integer and bool tensors keep their dtype.
inline std::shared_ptr<nn::Module> meta_model_from_tensors(const std::vector<CheckpointTensor>& entries,
                                                           const std::string& source,
                                                           std::optional<DType> float_dtype = std::nullopt) {
  auto root = std::make_shared<nn::Module>("Checkpoint");
  std::map<std::string, std::shared_ptr<nn::Module>> modules{{"", root}};
  std::map<std::string, nn::ParameterPtr> cells;
  for (const auto& e : entries) {
    const std::string where = "checkpoint '" + source + "', tensor '" + e.name + "'";
    if (e.name.size() > limits::max_name_bytes) {
      throw FormatError("checkpoint '" + source + "': a tensor name of " + std::to_string(e.name.size()) +
                        " bytes (at most " + std::to_string(limits::max_name_bytes) + ")");
    }
    const auto parts = detail::split_dotted(e.name);
    if (std::any_of(parts.begin(), parts.end(), [](std::string_view p) { return p.empty(); })) {
      throw FormatError(where + ": a dotted name needs a non-empty name between its dots");
    }
    if (parts.size() > limits::max_module_depth) {
      throw FormatError(where + ": " + std::to_string(parts.size()) + " dotted levels (at most " +
                        std::to_string(limits::max_module_depth) + ")");
    }
    std::string path;
    nn::Module* m = root.get();
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string part(parts[i]);
      const std::string child_path = path.empty() ? part : path + "." + part;
      if (m->has_parameter(part)) {
        throw FormatError(where + ": '" + child_path + "' is both a tensor and a module");
      }
      auto it = modules.find(child_path);
      if (it == modules.end()) {
        auto child = std::make_shared<nn::Module>("Module");
        m->register_module(part, child);
        it = modules.emplace(child_path, child).first;
      }
      m = it->second.get();
      path = child_path;
    }
    const std::string leaf(parts.back());
    if (modules.count(path.empty() ? leaf : path + "." + leaf)) {
      throw FormatError(where + ": '" + e.name + "' is both a tensor and a module");
    }
    if (m->has_parameter(leaf)) throw FormatError(where + ": listed twice");
    // Tied names share one cell, whichever of them comes first in `entries`.
    const std::string& group = e.tied_to.empty() ? e.name : e.tied_to;
    if (auto it = cells.find(group); it != cells.end()) {
      m->register_parameter(leaf, it->second);
      continue;
    }
    const DType d = float_dtype && is_floating_point(e.dtype) ? *float_dtype : e.dtype;
    m->register_parameter(leaf, Tensor::empty(e.shape, d, Device::meta()), is_floating_point(d));
    cells.emplace(group, m->parameter_cell(leaf));
  }

  std::vector<std::string> blocks;
  for (const auto& [path, m] : modules) {
    const auto& children = m->child_slots();
    const bool numbered = !children.empty() && m->parameter_slots().empty() &&
                          std::all_of(children.begin(), children.end(), [](const auto& c) { return detail::is_number(c.name); });
    if (!numbered || m == root) continue;
    m->set_class_name("ModuleList");
    const std::string block = path + ".N";
    for (const auto& c : children) c.module->set_class_name(block);
    blocks.push_back(block);
  }
  root->set_no_split_modules(blocks);
  return root;
}

/// Names, dtypes and shapes of a safetensors file, a torch .bin file or a sharded index of
/// either (told apart by their bytes), read from headers only, in the order the header comment
/// describes.
inline std::vector<CheckpointTensor> checkpoint_tensor_entries(const std::string& path) {
  const io::CheckpointFormat format = io::detect_checkpoint_format(path);
  if (format == io::CheckpointFormat::torch_bin) return detail::torch_bin_entries(path);
  auto entries = format == io::CheckpointFormat::sharded_index ? detail::sharded_entries(path) : detail::file_entries(path, format);
  detail::sort_by_name(entries);
  return entries;
}

/// Makes load_cli_model accept checkpoints: safetensors, torch .bin and their sharded indexes.
inline void register_checkpoint_loaders() {
  const ModelLoader loader = [](const std::filesystem::path& path, std::optional<DType> float_dtype) {
    return meta_model_from_tensors(checkpoint_tensor_entries(path.string()), path.string(), float_dtype);
  };
  for (const auto format : {io::CheckpointFormat::safetensors, io::CheckpointFormat::sharded_index, io::CheckpointFormat::torch_bin}) {
    model_loaders()[format] = loader;
  }
}

}  // namespace accel::cli

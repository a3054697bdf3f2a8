// inspect_checkpoint(path): every tensor of a checkpoint with dtype, shape, byte size and the
// SHA-256 of its raw little-endian bytes (C order), plus the checkpoint's metadata.
//
//   InspectResult r = inspect_checkpoint("model.safetensors");
//   std::cout << format_inspect_table(r);        or   inspect_to_json(r).dump(2)
//
// Accepts what resolve_checkpoint accepts (io/checkpoint_format.hpp): a safetensors file, a
// sharded index (*.index.json), a torch .bin, a checkpoint folder (searched in that header's
// order) or an Accelerate offload folder (index.json + .dat files); formats are told by their
// bytes, not their names. Hashes read the mapped bytes; only strided .bin views are copied (to
// make them contiguous) before hashing.
#pragma once

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sha256.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/torch_bin.hpp"

namespace accel::io {

/// One row of an inspection.
struct TensorSummary {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t nbytes = 0;
  std::string sha256;
};

/// What inspect_checkpoint found.
struct InspectResult {
  /// safetensors, sharded_index, torch_bin or offload_folder (a folder reports what it holds).
  CheckpointFormat kind = CheckpointFormat::safetensors;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::vector<TensorSummary> tensors;
};

namespace detail {

inline TensorSummary summarize(const std::string& name, const Tensor& t) {
  const Tensor c = t.is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  return {name, t.dtype(), t.shape(), c.nbytes(), sha256_hex(c.data_ptr(), c.nbytes())};
}

}  // namespace detail

/// Inspects `path` (see the header comment); FormatError / IOError on unreadable input, naming
/// the file; ValueError naming a folder that holds no checkpoint.
inline InspectResult inspect_checkpoint(const std::string& path) {
  const ResolvedCheckpoint c = resolve_checkpoint(path);
  require_readable(c);
  const std::string file = c.path.string();
  InspectResult r;
  r.kind = c.format;
  switch (c.format) {
    case CheckpointFormat::safetensors: {
      const auto f = SafetensorsFile::open(file);
      for (const auto& [k, v] : f.metadata()) r.metadata[k] = v;
      for (const auto& name : f.keys()) r.tensors.push_back(detail::summarize(name, f.tensor(name)));
      return r;
    }
    case CheckpointFormat::sharded_index: {
      const auto ck = ShardedCheckpoint::open(file);
      r.metadata = ck.metadata();
      for (const auto& name : ck.keys()) r.tensors.push_back(detail::summarize(name, ck.tensor(name)));
      return r;
    }
    case CheckpointFormat::torch_bin: {
      for (const auto& [name, t] : load_torch_bin(file)) r.tensors.push_back(detail::summarize(name, t));
      return r;
    }
    case CheckpointFormat::offload_folder: {
      for (const auto& [name, t] : load_offloaded_weights(file)) r.tensors.push_back(detail::summarize(name, t));
      return r;
    }
    case CheckpointFormat::torch_legacy:
    case CheckpointFormat::gguf:
    case CheckpointFormat::model_folder:
      break;
  }
  throw FormatError("'" + file + "' is " + std::string(checkpoint_format_info(c.format).description) +
                    ", which inspect_checkpoint does not read");
}

/// {"metadata": {...}, "tensors": [{"name", "dtype", "shape", "nbytes", "sha256"}]}.
inline nlohmann::ordered_json inspect_to_json(const InspectResult& r) {
  nlohmann::ordered_json j;
  j["metadata"] = r.metadata;
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : r.tensors) {
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", std::string(dtype_name(t.dtype))},
                            {"shape", t.shape.vec()},
                            {"nbytes", t.nbytes},
                            {"sha256", t.sha256}});
  }
  return j;
}

/// A fixed-width text table: metadata lines, then one row per tensor and a total.
inline std::string format_inspect_table(const InspectResult& r) {
  std::ostringstream os;
  os << "format: " << checkpoint_format_name(r.kind) << "\n";
  // Names and metadata come from the file: escaped, so a crafted name cannot drive the terminal.
  for (const auto& [k, v] : r.metadata.items()) {
    os << "metadata " << printable_entry(k) << ": "
       << printable_entry(v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
       << "\n";
  }
  std::vector<std::string> names;
  names.reserve(r.tensors.size());
  std::size_t w = 4;
  for (const auto& t : r.tensors) w = std::max(w, names.emplace_back(printable_entry(t.name)).size());
  os << std::left << std::setw(static_cast<int>(w)) << "name" << "  " << std::setw(14) << "dtype" << std::setw(22) << "shape"
     << std::right << std::setw(14) << "bytes" << "  sha256\n";
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < r.tensors.size(); ++i) {
    const auto& t = r.tensors[i];
    os << std::left << std::setw(static_cast<int>(w)) << names[i] << "  " << std::setw(14) << dtype_name(t.dtype) << std::setw(22) << t.shape.str()
       << std::right << std::setw(14) << t.nbytes << "  " << t.sha256 << "\n";
    total += t.nbytes;
  }
  os << r.tensors.size() << " tensors, " << total << " bytes\n";
  return os.str();
}

}  // namespace accel::io

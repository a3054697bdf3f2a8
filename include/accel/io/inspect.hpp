// inspect_checkpoint(path[, options]): every tensor of a checkpoint with dtype, shape, byte size
// and the SHA-256 of its bytes, plus the checkpoint's metadata.
//
//   InspectResult r = inspect_checkpoint("model.safetensors");
//   std::cout << format_inspect_table(r);        or   inspect_to_json(r).dump(2)
//
// Accepts what resolve_checkpoint accepts (io/checkpoint_format.hpp): a safetensors file, a
// sharded index (*.index.json), a torch .bin, a checkpoint folder (searched in that header's
// order) or an Accelerate offload folder (index.json + .dat files); formats are told by their
// bytes, not their names.
//
// What is hashed (io/tensor_sha256.hpp): a tensor's raw little-endian elements in C order, read
// from the mapped file; for a contiguous tensor exactly its stored bytes, for a strided torch view
// (transpose, slice) what .contiguous() would hold, streamed without copying the tensor. A view
// that shows stored elements more than once is never expanded: stride-0 dimensions
// (torch.zeros(1).expand(10**9)) are hashed once ("broadcast_once"), and other overlapping views
// hash the storage bytes they reach ("storage_span"). Such rows say so (sha256_of, sha256_nbytes),
// and nbytes stays numel x itemsize. The work is thus bounded by the file's size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/progress.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/tensor_sha256.hpp"
#include "accel/io/torch_bin.hpp"

namespace accel::io {

/// One row of an inspection.
struct TensorSummary {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t nbytes = 0;  ///< numel x itemsize
  std::string sha256;
  HashedBytes sha256_of = HashedBytes::elements;  ///< what the hash covers (header comment)
  std::uint64_t sha256_nbytes = 0;                ///< bytes hashed; nbytes unless sha256_of says otherwise
};

/// How inspect_checkpoint reports its progress.
struct InspectOptions {
  /// Where a progress bar is drawn while hashing (nothing when null).
  std::ostream* progress = nullptr;
  /// Checkpoints with fewer bytes to hash finish too soon to need a bar.
  std::uint64_t progress_min_bytes = std::uint64_t{256} << 20;
};

/// What inspect_checkpoint found.
struct InspectResult {
  /// safetensors, sharded_index, torch_bin or offload_folder (a folder reports what it holds).
  CheckpointFormat kind = CheckpointFormat::safetensors;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::vector<TensorSummary> tensors;
};

namespace detail {

/// Hashes every (name, tensor) after planning all of them, so the bar knows the total up front.
inline void summarize_all(InspectResult& r, const std::vector<std::pair<std::string, Tensor>>& named,
                          const std::string& file, const InspectOptions& options) {
  std::vector<Tensor> hosts;
  std::vector<TensorHashPlan> plans;
  std::uint64_t total = 0;
  for (const auto& [name, t] : named) {
    Tensor h = t.is_cpu() ? t : t.to(Device::cpu());
    if (!h.is_contiguous() && dtype_info(h.dtype()).block_size != 1) h = h.contiguous();
    plans.push_back(plan_tensor_sha256(h));
    total += plans.back().nbytes;
    hosts.push_back(std::move(h));
  }
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  const bool show = options.progress && total >= options.progress_min_bytes;
  ProgressBar bar("Hashing " + std::filesystem::path(file).filename().string(),
                  static_cast<std::size_t>((total + mib - 1) / mib), show ? options.progress : nullptr, " MiB");
  std::uint64_t hashed = 0;
  const auto on_bytes = [&](std::uint64_t n) {
    hashed += n;
    if (bar.active() && hashed / mib > bar.done()) bar.update(static_cast<std::size_t>(hashed / mib - bar.done()));
  };
  for (std::size_t i = 0; i < named.size(); ++i) {
    const Tensor& t = named[i].second;
    r.tensors.push_back({named[i].first, t.dtype(), t.shape(), t.nbytes(), tensor_sha256(hosts[i], plans[i], on_bytes),
                         plans[i].what, plans[i].nbytes});
  }
  if (bar.active()) bar.update(bar.total() - bar.done());
}

}  // namespace detail

/// Inspects `path` (see the header comment); FormatError / IOError on unreadable input, naming
/// the file; ValueError naming a folder that holds no checkpoint.
inline InspectResult inspect_checkpoint(const std::string& path, const InspectOptions& options = {}) {
  const ResolvedCheckpoint c = resolve_checkpoint(path);
  require_readable(c);
  const std::string file = c.path.string();
  InspectResult r;
  r.kind = c.format;
  std::vector<std::pair<std::string, Tensor>> named;
  switch (c.format) {
    case CheckpointFormat::safetensors: {
      const auto f = SafetensorsFile::open(file);
      for (const auto& [k, v] : f.metadata()) r.metadata[k] = v;
      for (const auto& name : f.keys()) named.emplace_back(name, f.tensor(name));
      break;
    }
    case CheckpointFormat::sharded_index: {
      const auto ck = ShardedCheckpoint::open(file);
      r.metadata = ck.metadata();
      for (const auto& name : ck.keys()) named.emplace_back(name, ck.tensor(name));
      break;
    }
    case CheckpointFormat::torch_bin: {
      for (auto& [name, t] : load_torch_bin(file)) named.emplace_back(name, std::move(t));
      break;
    }
    case CheckpointFormat::offload_folder: {
      for (auto& [name, t] : load_offloaded_weights(file)) named.emplace_back(name, std::move(t));
      break;
    }
    case CheckpointFormat::torch_legacy:
    case CheckpointFormat::gguf:
    case CheckpointFormat::model_folder:
      throw FormatError("'" + file + "' is " + std::string(checkpoint_format_info(c.format).description) +
                        ", which inspect_checkpoint does not read");
  }
  detail::summarize_all(r, named, file, options);
  return r;
}

/// {"metadata": {...}, "tensors": [{"name", "dtype", "shape", "nbytes", "sha256"}]}; a row whose
/// hash covers less than its elements (header comment) adds "sha256_of" and "sha256_nbytes".
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
    if (t.sha256_of != HashedBytes::elements) {
      j["tensors"].back()["sha256_of"] = std::string(hashed_bytes_name(t.sha256_of));
      j["tensors"].back()["sha256_nbytes"] = t.sha256_nbytes;
    }
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
       << std::right << std::setw(14) << t.nbytes << "  " << t.sha256;
    if (t.sha256_of != HashedBytes::elements) os << "  (" << hashed_bytes_name(t.sha256_of) << ", " << t.sha256_nbytes << " bytes hashed)";
    os << "\n";
    total += t.nbytes;
  }
  os << r.tensors.size() << " tensors, " << total << " bytes\n";
  return os.str();
}

}  // namespace accel::io

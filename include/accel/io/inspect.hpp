// inspect_checkpoint(path): every tensor of a checkpoint with dtype, shape, byte size and the
// SHA-256 of its raw little-endian bytes (C order), plus the checkpoint's metadata.
//
//   InspectResult r = inspect_checkpoint("model.safetensors");
//   std::cout << format_inspect_table(r);        or   inspect_to_json(r).dump(2)
//
// Accepts a .safetensors file, a sharded index (*.index.json), a checkpoint folder (index,
// model.safetensors or pytorch_model.bin inside), a torch .bin/.pt file, or an Accelerate offload
// folder (index.json + .dat files). Hashes read the mapped bytes; only strided .bin views are
// copied (to make them contiguous) before hashing.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sha256.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/torch_bin.hpp"

namespace accel::io {

/// One row of an inspection.
struct TensorSummary {
  std::string name;
  std::string dtype;  ///< torch name: "bfloat16"
  Shape shape;
  std::uint64_t nbytes = 0;
  std::string sha256;
};

/// What inspect_checkpoint found.
struct InspectResult {
  std::string kind;  ///< "safetensors", "sharded", "torch_bin" or "offload"
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::vector<TensorSummary> tensors;
};

namespace detail {

inline TensorSummary summarize(const std::string& name, const Tensor& t) {
  const Tensor c = t.is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  return {name, std::string(dtype_name(t.dtype())), t.shape(), c.nbytes(), sha256_hex(c.data_ptr(), c.nbytes())};
}

inline bool is_zip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  return f.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

}  // namespace detail

/// Inspects `path` (see the header comment); FormatError / IOError on unreadable input.
inline InspectResult inspect_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  InspectResult r;
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    for (const char* candidate : {safe_weights_index_name, weights_index_name, "model.safetensors", "pytorch_model.bin"}) {
      if (fs::is_regular_file(dir / candidate)) return inspect_checkpoint((dir / candidate).string());
    }
    if (fs::is_regular_file(dir / "index.json")) {
      r.kind = "offload";
      const StateDict sd = load_offloaded_weights(path);
      for (const auto& [name, t] : sd) r.tensors.push_back(detail::summarize(name, t));
      return r;
    }
    throw FormatError("'" + path + "' holds no checkpoint (no index, model.safetensors, pytorch_model.bin or offload index.json)");
  }
  if (path.ends_with(".index.json")) {
    r.kind = "sharded";
    const auto ck = ShardedCheckpoint::open(path);
    r.metadata = ck.metadata();
    for (const auto& name : ck.keys()) r.tensors.push_back(detail::summarize(name, ck.tensor(name)));
    return r;
  }
  if (path.ends_with(".safetensors") || !detail::is_zip(path)) {
    r.kind = "safetensors";
    const auto f = SafetensorsFile::open(path);
    for (const auto& [k, v] : f.metadata()) r.metadata[k] = v;
    for (const auto& name : f.keys()) r.tensors.push_back(detail::summarize(name, f.tensor(name)));
    return r;
  }
  r.kind = "torch_bin";
  const StateDict sd = load_torch_bin(path);
  for (const auto& [name, t] : sd) r.tensors.push_back(detail::summarize(name, t));
  return r;
}

/// {"metadata": {...}, "tensors": [{"name", "dtype", "shape", "nbytes", "sha256"}]}.
inline nlohmann::ordered_json inspect_to_json(const InspectResult& r) {
  nlohmann::ordered_json j;
  j["metadata"] = r.metadata;
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : r.tensors) {
    j["tensors"].push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape.vec()}, {"nbytes", t.nbytes}, {"sha256", t.sha256}});
  }
  return j;
}

/// A fixed-width text table: metadata lines, then one row per tensor and a total.
inline std::string format_inspect_table(const InspectResult& r) {
  std::ostringstream os;
  os << "format: " << r.kind << "\n";
  for (const auto& [k, v] : r.metadata.items()) os << "metadata " << k << ": " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
  std::size_t w = 4;
  for (const auto& t : r.tensors) w = std::max(w, t.name.size());
  os << std::left << std::setw(static_cast<int>(w)) << "name" << "  " << std::setw(14) << "dtype" << std::setw(22) << "shape"
     << std::right << std::setw(14) << "bytes" << "  sha256\n";
  std::uint64_t total = 0;
  for (const auto& t : r.tensors) {
    os << std::left << std::setw(static_cast<int>(w)) << t.name << "  " << std::setw(14) << t.dtype << std::setw(22) << t.shape.str()
       << std::right << std::setw(14) << t.nbytes << "  " << t.sha256 << "\n";
    total += t.nbytes;
  }
  os << r.tensors.size() << " tensors, " << total << " bytes\n";
  return os.str();
}

}  // namespace accel::io

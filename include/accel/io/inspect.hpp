// inspect_checkpoint(path[, options]): every tensor of a checkpoint with dtype, shape, byte size
// and the SHA-256 of its bytes, plus the checkpoint's metadata.
//
//   InspectResult r = inspect_checkpoint("model.safetensors");
//   std::cout << format_inspect_table(r);        or   inspect_to_json(r).dump(2)
//
// Accepts what resolve_checkpoint accepts (io/checkpoint_format.hpp): a safetensors file, a
// sharded index (*.index.json), a torch .bin, a checkpoint folder (searched in that header's
// order), an Accelerate offload folder (index.json + .dat files) or a GGUF file; formats are told
// by their bytes, not their names.
//
// A GGUF file reports its header (version, alignment, data offset), every metadata value with its
// GGUF type ({"type": "UINT32", "value": 32}; arrays add "elem_type"; floats JSON cannot hold are
// "nan", "inf", "-inf"), and per tensor the GGUF type name as dtype ("Q4_K"), the shape in GGUF
// order (ne[0] first), its offset in the data section and the hash of its stored bytes.
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
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <optional>
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
#include "accel/io/gguf.hpp"
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
  std::string type;                     ///< the file's own type name where it has one ("Q4_K"); else dtype's
  std::optional<std::uint64_t> offset;  ///< GGUF: the offset in the data section
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
  /// Format-level fields beyond the metadata (GGUF: version, alignment, data_offset); may be empty.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<TensorSummary> tensors;
};

/// A GGUF value as JSON, without its type: numbers, bools, strings, nested lists; non-finite
/// floats as "nan", "inf", "-inf".
inline nlohmann::ordered_json gguf_value_json(const GgufValue& v) {
  if (const auto* u = std::get_if<std::uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&v.data)) return *i;
  if (const auto* d = std::get_if<double>(&v.data)) {
    if (std::isnan(*d)) return "nan";
    if (std::isinf(*d)) return *d > 0 ? "inf" : "-inf";
    return *d;
  }
  if (const auto* b = v.as_bool()) return *b;
  if (const auto* s = v.as_string()) return *s;
  auto out = nlohmann::ordered_json::array();
  for (const auto& item : v.as_array()->items) out.push_back(gguf_value_json(item));
  return out;
}

/// A GGUF value with its type: {"type": "ARRAY", "elem_type": "STRING", "value": [...]}.
inline nlohmann::ordered_json gguf_typed_value_json(const GgufValue& v) {
  nlohmann::ordered_json j;
  j["type"] = std::string(gguf_value_type_name(v.type));
  if (const auto* a = v.as_array()) j["elem_type"] = std::string(gguf_value_type_name(a->elem_type));
  j["value"] = gguf_value_json(v);
  return j;
}

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
                         plans[i].what, plans[i].nbytes, {}, std::nullopt});
  }
  if (bar.active()) bar.update(bar.total() - bar.done());
}

/// A GGUF file: typed metadata, and each tensor's stored bytes hashed (a u8 view of the mapping).
inline InspectResult inspect_gguf(const std::string& file, const InspectOptions& options) {
  const auto f = GgufFile::open(file);
  InspectResult r;
  r.kind = CheckpointFormat::gguf;
  r.header["version"] = f.header().version;
  r.header["alignment"] = f.header().alignment;
  r.header["data_offset"] = f.header().data_offset;
  for (const auto& [k, v] : f.header().metadata) r.metadata[k] = gguf_typed_value_json(v);
  std::vector<std::pair<std::string, Tensor>> named;
  for (const auto& t : f.tensors()) {
    named.emplace_back(t.name, Tensor::from_storage(f.mapped_file()->region(t.file_offset, t.nbytes), DType::u8,
                                                    Shape{static_cast<std::int64_t>(t.nbytes)}));
  }
  summarize_all(r, named, file, options);
  for (std::size_t i = 0; i < r.tensors.size(); ++i) {
    const auto& t = f.tensors()[i];
    auto& row = r.tensors[i];
    row.type = std::string(ggml_type_name(t.type));
    row.dtype = ggml_type_info(t.type).plain.value_or(DType::u8);
    row.shape = Shape();
    for (const auto e : t.ne) row.shape.push_back(static_cast<std::int64_t>(e));
    row.offset = t.offset;
  }
  return r;
}

}  // namespace detail

/// Inspects `path` (see the header comment); FormatError / IOError on unreadable input, naming
/// the file; ValueError naming a folder that holds no checkpoint.
inline InspectResult inspect_checkpoint(const std::string& path, const InspectOptions& options = {}) {
  const ResolvedCheckpoint c = resolve_checkpoint(path);
  const std::string file = c.path.string();
  if (c.format == CheckpointFormat::gguf) return detail::inspect_gguf(file, options);
  require_readable(c);
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
/// hash covers less than its elements (header comment) adds "sha256_of" and "sha256_nbytes". A
/// GGUF file adds "gguf": {"version", "alignment", "data_offset"} first and "offset" per tensor.
inline nlohmann::ordered_json inspect_to_json(const InspectResult& r) {
  nlohmann::ordered_json j;
  if (!r.header.empty()) j["gguf"] = r.header;
  j["metadata"] = r.metadata;
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : r.tensors) {
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", t.type.empty() ? std::string(dtype_name(t.dtype)) : t.type},
                            {"shape", t.shape.vec()},
                            {"nbytes", t.nbytes},
                            {"sha256", t.sha256}});
    if (t.offset) j["tensors"].back()["offset"] = *t.offset;
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
  for (const auto& [k, v] : r.header.items()) os << k << ": " << v.dump() << "\n";
  const auto text = [](const nlohmann::ordered_json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  // Names and metadata come from the file: escaped, so a crafted name cannot drive the terminal.
  for (const auto& [k, v] : r.metadata.items()) {
    os << "metadata " << printable_entry(k);
    if (r.kind != CheckpointFormat::gguf) {
      os << ": " << printable_entry(text(v)) << "\n";
      continue;
    }
    // GGUF: the value's type, and long arrays (a tokenizer's vocabulary) cut to their first items.
    const auto& value = v["value"];
    os << " (" << v["type"].get<std::string>();
    if (v.contains("elem_type")) os << " of " << v["elem_type"].get<std::string>();
    os << "): ";
    if (!value.is_array()) {
      constexpr std::size_t longest = 200;
      const std::string shown_text = text(value);
      os << printable_entry(std::string_view(shown_text).substr(0, longest));
      if (shown_text.size() > longest) os << "... (" << shown_text.size() << " bytes)";
      os << "\n";
      continue;
    }
    constexpr std::size_t shown = 8;
    os << "[";
    for (std::size_t i = 0; i < value.size() && i < shown; ++i) os << (i ? ", " : "") << printable_entry(value[i].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (value.size() > shown) os << ", ... " << value.size() << " items";
    os << "]\n";
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
    const std::string type = t.type.empty() ? std::string(dtype_name(t.dtype)) : t.type;
    os << std::left << std::setw(static_cast<int>(w)) << names[i] << "  " << std::setw(14) << type << std::setw(22) << t.shape.str()
       << std::right << std::setw(14) << t.nbytes << "  " << t.sha256;
    if (t.sha256_of != HashedBytes::elements) os << "  (" << hashed_bytes_name(t.sha256_of) << ", " << t.sha256_nbytes << " bytes hashed)";
    if (t.offset) os << "  offset " << *t.offset;
    os << "\n";
    total += t.nbytes;
  }
  os << r.tensors.size() << " tensors, " << total << " bytes\n";
  return os.str();
}

}  // namespace accel::io

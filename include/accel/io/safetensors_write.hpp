// safetensors writer, byte-compatible with the reference writer.
//
//   save_file(tensors, path, metadata)     tensors: StateDict, std::map or a vector of pairs
//   safetensors_header_json(tensors, md)   the header the writer would emit (no padding)
//
// Tensors are laid out sorted by (dtype alignment descending, name ascending); the compact JSON
// header lists "__metadata__" first (when given), then the tensors in data order, and is padded
// with spaces to a multiple of 8 bytes. Any tensor (strided, on a GPU) is accepted: it is copied
// to host memory contiguously, one tensor at a time. The file appears atomically.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/state_dict.hpp"

namespace accel::io {

/// A named tensor list, the writer's input form.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

namespace detail {

/// JSON string literal with the reference escaping (raw UTF-8, lowercase \u00XX controls).
inline std::string json_quote(const std::string& s, const char* what) {
  try {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::exception&) {
    throw ValueError(std::string(what) + " '" + s + "' is not valid UTF-8");
  }
}

struct PlannedTensor {
  const std::string* name;
  const Tensor* tensor;
  std::uint64_t begin, end;
};

inline std::vector<PlannedTensor> plan_safetensors_layout(const NamedTensors& tensors, const std::string& path) {
  std::vector<PlannedTensor> plan;
  std::map<std::string_view, int> seen;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw ValueError("save_file('" + path + "'): tensor '" + name + "' is undefined");
    if (t.is_meta()) {
      throw ValueError("save_file('" + path + "'): tensor '" + name + "' is on the meta device and has no data");
    }
    if (!seen.emplace(name, 0).second) throw ValueError("save_file('" + path + "'): duplicate tensor name '" + name + "'");
    plan.push_back({&name, &t, 0, 0});
  }
  std::sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    const int ra = safetensors_dtype_rank(a.tensor->dtype()), rb = safetensors_dtype_rank(b.tensor->dtype());
    if (ra != rb) return ra > rb;
    return *a.name < *b.name;
  });
  std::uint64_t off = 0;
  for (auto& p : plan) {
    p.begin = off;
    off += p.tensor->nbytes();
    p.end = off;
  }
  return plan;
}

inline std::string header_json(const std::vector<PlannedTensor>& plan,
                               const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) h += ",";
      first = false;
      h += json_quote(k, "metadata key") + ":" + json_quote(v, "metadata value");
    }
    h += "}";
    first = false;
  }
  for (const auto& p : plan) {
    if (!first) h += ",";
    first = false;
    h += json_quote(*p.name, "tensor name") + ":{\"dtype\":\"" + std::string(safetensors_name(p.tensor->dtype())) +
         "\",\"shape\":[";
    for (std::size_t i = 0; i < p.tensor->dim(); ++i) {
      if (i) h += ",";
      h += std::to_string(p.tensor->shape()[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(p.begin) + "," + std::to_string(p.end) + "]}";
  }
  h += "}";
  return h;
}

}  // namespace detail

/// The compact header JSON the writer emits for `tensors` (before padding to 8 bytes).
inline std::string safetensors_header_json(const NamedTensors& tensors,
                                           const std::map<std::string, std::string>& metadata = {}) {
  return detail::header_json(detail::plan_safetensors_layout(tensors, "<memory>"), metadata);
}

namespace detail {

/// The whole file written under its temporary name and synced, not yet renamed into place, so a
/// caller can stage several files and publish them together.
inline std::unique_ptr<AtomicFile> stage_safetensors(const NamedTensors& tensors, const std::string& path,
                                                     const std::map<std::string, std::string>& metadata) {
  const auto plan = plan_safetensors_layout(tensors, path);
  std::string header = header_json(plan, metadata);
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string prefix;
  store_le<std::uint64_t>(prefix, header.size());
  auto out = std::make_unique<AtomicFile>(path);
  out->write(prefix);
  out->write(header);
  for (const auto& p : plan) {
    const Tensor& t = *p.tensor;
    if (t.numel() == 0) continue;
    const Tensor host = (t.is_cpu() && t.is_contiguous()) ? t : t.to(Device::cpu()).contiguous();
    out->write(host.data_ptr(), host.nbytes());
  }
  out->sync();
  return out;
}

}  // namespace detail

/// Writes `tensors` to `path` in the safetensors format, atomically (temp file, fsync, rename).
/// `metadata` becomes "__metadata__" (omitted when empty). ValueError on duplicate names or meta
/// tensors; IOError when the disk refuses.
inline void save_file(const NamedTensors& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {}) {
  detail::stage_safetensors(tensors, path, metadata)->commit();
}

inline void save_file(const StateDict& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {}) {
  save_file(tensors.items(), path, metadata);
}

inline void save_file(const std::map<std::string, Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {}) {
  save_file(NamedTensors(tensors.begin(), tensors.end()), path, metadata);
}

}  // namespace accel::io

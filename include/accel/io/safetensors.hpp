// safetensors reader: a fully validated header and zero-copy tensors over a memory map.
//
//   parse_safetensors_header(bytes, source) -> SafetensorsHeader     (pure; what the fuzzer drives)
//   auto f = SafetensorsFile::open("model.safetensors");
//   f.keys()  f.metadata()  f.info(name)  f.tensor(name)  f.tensor(name, device, dtype)
//
// File layout: u64 little-endian header length N, N bytes of UTF-8 JSON, then the data section.
// Validation follows the reference implementation: N <= 100 MB and within the file; a JSON object
// whose "__metadata__" is a string -> string map and whose other entries are
// {"dtype", "shape", "data_offsets"} with a known dtype; sorted by offset the tensors are
// contiguous, non-overlapping, sized dtype x shape, and cover the data section exactly.
// Every violation throws FormatError naming the file and the tensor.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/regular_file.hpp"

namespace accel::io {

/// Largest header the reader accepts, as the reference implementation (100 MB).
inline constexpr std::uint64_t safetensors_max_header_size = 100'000'000;

/// One tensor entry of a safetensors header. Offsets are relative to the data section.
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;  ///< first byte, relative to the data section
  std::uint64_t end = 0;    ///< one past the last byte
  std::uint64_t nbytes() const noexcept { return end - begin; }
};

/// The parsed, validated header of a safetensors file.
struct SafetensorsHeader {
  std::uint64_t header_size = 0;  ///< N, the JSON length (padding included)
  std::uint64_t data_start = 0;   ///< 8 + N: file offset of the data section
  std::vector<SafetensorsTensorInfo> tensors;  ///< sorted by offset (the reference's key order)
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;  ///< "__metadata__" was present (possibly empty)
  std::map<std::string, std::size_t, std::less<>> index;  ///< name -> position in `tensors`

  /// The entry of `name`, or nullptr.
  const SafetensorsTensorInfo* find(std::string_view name) const {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &tensors[it->second];
  }
};

namespace detail {

/// safetensors' dtype ordering (its enum order, ascending alignment); the writer sorts by it.
inline int safetensors_dtype_rank(DType d) {
  switch (d) {
    case DType::boolean: return 0;
    case DType::u8: return 1;
    case DType::i8: return 2;
    case DType::f8_e5m2: return 3;
    case DType::f8_e4m3fn: return 4;
    case DType::i16: return 5;
    case DType::f16: return 6;
    case DType::bf16: return 7;
    case DType::i32: return 8;
    case DType::f32: return 9;
    case DType::f64: return 10;
    case DType::i64: return 11;
  }
  return -1;
}

/// Exact safetensors dtype name -> DType (no torch aliases: the format has one spelling).
inline std::optional<DType> safetensors_dtype(std::string_view s) {
  for (const auto& info : dtype_table) {
    if (info.safetensors_name == s) return info.dtype;
  }
  return std::nullopt;
}

/// numel x itemsize with overflow checks; nullopt when the shape is too large for a Tensor or
/// the byte count overflows 64 bits.
inline std::optional<std::uint64_t> checked_byte_size(const std::vector<std::uint64_t>& dims, DType d) {
  // Tensor computes strides and element counts in int64 over the extents with zeros counted as
  // 1, so that product must fit even when a zero extent makes the tensor empty.
  std::uint64_t n = 1, strided = 1;
  for (std::uint64_t e : dims) {
    const std::uint64_t f = std::max<std::uint64_t>(e, 1);
    if (strided > static_cast<std::uint64_t>(INT64_MAX) / f) return std::nullopt;
    strided *= f;
    n *= e;
  }
  const std::uint64_t item = itemsize(d);
  if (n > UINT64_MAX / item) return std::nullopt;
  return n * item;
}

/// Parses JSON, rejecting duplicate top-level keys and nesting deeper than `max_depth`.
inline nlohmann::json parse_json_strict(std::string_view text, const std::string& where, int max_depth) {
  std::set<std::string> top_keys;
  std::string duplicate;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if ((ev == E::object_start || ev == E::array_start) && depth > max_depth) {
      throw FormatError(where + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
    }
    if (ev == E::key && depth == 1 && parsed.is_string()) {
      if (!top_keys.insert(parsed.get<std::string>()).second) {
        throw FormatError(where + ": duplicate key '" + parsed.get<std::string>() + "'");
      }
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(where + ": invalid JSON (" + e.what() + ")");
  }
}

/// A JSON array of non-negative integers, else nullopt.
inline std::optional<std::vector<std::uint64_t>> json_uint_array(const nlohmann::json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<std::uint64_t> out;
  out.reserve(j.size());
  for (const auto& e : j) {
    if (!e.is_number_unsigned()) return std::nullopt;
    out.push_back(e.get<std::uint64_t>());
  }
  return out;
}

}  // namespace detail

/// Parses and validates the header of a whole safetensors file held in `file`; `source` names
/// the file in error messages. Never reads outside `file`.
inline SafetensorsHeader parse_safetensors_header(ByteSpan file, const std::string& source) {
  const std::string where = "safetensors file '" + source + "'";
  if (file.size() < 8) {
    throw FormatError(where + ": " + std::to_string(file.size()) +
                      " bytes is too small for the 8-byte header length");
  }
  SafetensorsHeader h;
  h.header_size = load_le<std::uint64_t>(file.data());
  if (h.header_size > safetensors_max_header_size) {
    throw FormatError(where + ": header length " + std::to_string(h.header_size) +
                      " exceeds the 100000000-byte limit");
  }
  if (h.header_size > file.size() - 8) {
    throw FormatError(where + ": header length " + std::to_string(h.header_size) + " runs past the end of the " +
                      std::to_string(file.size()) + "-byte file");
  }
  h.data_start = 8 + h.header_size;
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), h.header_size);
  if (!is_valid_utf8(text)) throw FormatError(where + ": header is not valid UTF-8");
  const nlohmann::json j = detail::parse_json_strict(text, where, 2);
  if (!j.is_object()) throw FormatError(where + ": header is not a JSON object");

  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw FormatError(where + ": \"__metadata__\" is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          throw FormatError(where + ": metadata value of '" + mk + "' is not a string");
        }
        h.metadata.emplace(mk, mv.get<std::string>());
      }
      h.has_metadata = true;
      continue;
    }
    const std::string tw = where + ", tensor '" + key + "'";
    if (!value.is_object()) throw FormatError(tw + ": entry is not an object");
    auto dt = value.find("dtype");
    auto sh = value.find("shape");
    auto off = value.find("data_offsets");
    if (dt == value.end() || sh == value.end() || off == value.end()) {
      throw FormatError(tw + ": entry needs \"dtype\", \"shape\" and \"data_offsets\"");
    }
    if (!dt->is_string()) throw FormatError(tw + ": \"dtype\" is not a string");
    const auto dtype = detail::safetensors_dtype(dt->get_ref<const std::string&>());
    if (!dtype) {
      throw FormatError(tw + ": unknown dtype '" + dt->get<std::string>() +
                        "' (expected F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL)");
    }
    const auto dims = detail::json_uint_array(*sh);
    if (!dims) throw FormatError(tw + ": \"shape\" is not an array of non-negative integers");
    if (dims->size() > max_dims) {
      throw FormatError(tw + ": " + std::to_string(dims->size()) + " dimensions; at most " +
                        std::to_string(max_dims) + " are supported");
    }
    const auto offs = detail::json_uint_array(*off);
    if (!offs || offs->size() != 2) {
      throw FormatError(tw + ": \"data_offsets\" is not a pair of non-negative integers");
    }
    SafetensorsTensorInfo info;
    info.name = key;
    info.dtype = *dtype;
    for (std::uint64_t e : *dims) {
      if (e > static_cast<std::uint64_t>(INT64_MAX)) throw FormatError(tw + ": extent " + std::to_string(e) + " is too large");
      info.shape.push_back(static_cast<std::int64_t>(e));
    }
    info.begin = (*offs)[0];
    info.end = (*offs)[1];
    if (info.end < info.begin) {
      throw FormatError(tw + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                        "] end before they begin");
    }
    const auto bytes = detail::checked_byte_size(*dims, info.dtype);
    if (!bytes) throw FormatError(tw + ": shape " + info.shape.str() + " overflows 64-bit sizes");
    if (*bytes != info.nbytes()) {
      throw FormatError(tw + ": " + std::string(safetensors_name(info.dtype)) + " shape " + info.shape.str() +
                        " needs " + std::to_string(*bytes) + " bytes but data_offsets span " +
                        std::to_string(info.nbytes()));
    }
    h.tensors.push_back(std::move(info));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  std::uint64_t cursor = 0;
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& t = h.tensors[i];
    if (t.begin != cursor) {
      throw FormatError(where + ", tensor '" + t.name + "': data_offsets begin at " + std::to_string(t.begin) +
                        " but the previous tensor ends at " + std::to_string(cursor) +
                        " (tensors must be contiguous and non-overlapping)");
    }
    cursor = t.end;
    h.index.emplace(t.name, i);
  }
  const std::uint64_t data_size = file.size() - h.data_start;
  if (cursor != data_size) {
    throw FormatError(where + ": tensors cover " + std::to_string(cursor) + " bytes but the data section holds " +
                      std::to_string(data_size) + " (the data must be covered exactly)");
  }
  return h;
}

/// A safetensors file mapped into memory. Cheap to copy (shares the mapping).
class SafetensorsFile {
 public:
  /// Maps and validates `path`; IOError if unreadable or not a regular file, FormatError if malformed.
  static SafetensorsFile open(const std::string& path) {
    SafetensorsFile f;
    f.file_ = map_regular_file(path);
    f.header_ = std::make_shared<const SafetensorsHeader>(
        parse_safetensors_header(ByteSpan(f.file_->data(), f.file_->size()), path));
    return f;
  }

  const std::string& path() const noexcept { return file_->path(); }
  /// Tensor names sorted by data offset, as the reference implementation lists them.
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    k.reserve(header_->tensors.size());
    for (const auto& t : header_->tensors) k.push_back(t.name);
    return k;
  }
  std::size_t size() const noexcept { return header_->tensors.size(); }
  bool contains(std::string_view name) const { return header_->find(name) != nullptr; }
  /// The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const noexcept { return header_->metadata; }
  const SafetensorsHeader& header() const noexcept { return *header_; }
  const std::shared_ptr<MappedFile>& mapped_file() const noexcept { return file_; }

  /// dtype, shape and offsets of `name`; KeyError naming the file when absent.
  const SafetensorsTensorInfo& info(std::string_view name) const {
    if (const auto* t = header_->find(name)) return *t;
    throw KeyError("safetensors file '" + path() + "' has no tensor named '" + std::string(name) + "'");
  }

  /// A read-only cpu tensor viewing the mapped bytes: nothing is allocated. Bytes that are not
  /// aligned for the dtype (possible only in files not written by the reference writer) are copied.
  Tensor tensor(std::string_view name) const {
    const auto& t = info(name);
    const std::uint64_t off = header_->data_start + t.begin;
    if (off % itemsize(t.dtype) != 0) {
      Tensor out = Tensor::empty(t.shape, t.dtype, Device::cpu());
      if (t.nbytes()) std::memcpy(out.data_ptr(), file_->data() + off, t.nbytes());
      return out;
    }
    return Tensor::from_storage(file_->region(off, t.nbytes()), t.dtype, t.shape);
  }

  /// The tensor on `device` in `dtype` (default: the file's): one read, one conversion.
  Tensor tensor(std::string_view name, Device device, std::optional<DType> dtype = std::nullopt) const {
    Tensor t = tensor(name);
    const DType target = dtype.value_or(t.dtype());
    if (device.is_cpu() && target == t.dtype()) return t;
    return t.to(device, target);
  }

 private:
  std::shared_ptr<MappedFile> file_;
  std::shared_ptr<const SafetensorsHeader> header_;
};

}  // namespace accel::io

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
// Every violation throws FormatError naming the file and the tensor. The JSON is read in linear
// time under io/checkpoint_limits.hpp's bounds; a key repeated anywhere in it is rejected.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/checked.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_limits.hpp"
#include "accel/core/regular_file.hpp"

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

/// Bytes a `d` tensor of `shape` stored in a file occupies; FormatError naming `what` when that
/// count overflows. A Tensor also derives strides from the extents with zeros counted as 1, so
/// that product must fit even when a zero extent leaves nothing to store. A shape the file states
/// is the file's error, hence FormatError rather than the OverflowError of core/checked.hpp.
inline std::uint64_t file_tensor_nbytes(const Shape& shape, DType d, const std::string& what) {
  try {
    Shape at_least_one = shape;
    for (auto& e : at_least_one) e = std::max<std::int64_t>(e, 1);
    (void)checked_numel(at_least_one, what);
    return static_cast<std::uint64_t>(checked_nbytes(shape, static_cast<std::int64_t>(itemsize(d)), what));
  } catch (const OverflowError& e) {
    throw FormatError(e.what());
  }
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
  const auto j = parse_json_bounded<nlohmann::json>(text, where, checkpoint_json_limits(checkpoint_limits::safetensors_depth),
                                                    JsonDuplicates::reject);
  if (!j.is_object()) throw FormatError(where + ": header is not a JSON object");

  // std::map keeps the entries sorted by name: `collected` is in name order.
  const auto& entries = j.get_ref<const nlohmann::json::object_t&>();
  std::vector<SafetensorsTensorInfo> collected;
  collected.reserve(entries.size());
  for (const auto& [key, value] : entries) {
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
    const auto is_uint = [](const nlohmann::json& e) { return e.is_number_unsigned(); };
    if (!sh->is_array() || !std::all_of(sh->begin(), sh->end(), is_uint)) {
      throw FormatError(tw + ": \"shape\" is not an array of non-negative integers");
    }
    if (sh->size() > max_dims) {
      throw FormatError(tw + ": " + std::to_string(sh->size()) + " dimensions; at most " +
                        std::to_string(max_dims) + " are supported");
    }
    if (!off->is_array() || off->size() != 2 || !std::all_of(off->begin(), off->end(), is_uint)) {
      throw FormatError(tw + ": \"data_offsets\" is not a pair of non-negative integers");
    }
    SafetensorsTensorInfo info;
    info.name = key;
    info.dtype = *dtype;
    for (const auto& x : *sh) {
      const auto e = x.get<std::uint64_t>();
      if (e > static_cast<std::uint64_t>(INT64_MAX)) throw FormatError(tw + ": extent " + std::to_string(e) + " is too large");
      info.shape.push_back(static_cast<std::int64_t>(e));
    }
    info.begin = (*off)[0].get<std::uint64_t>();
    info.end = (*off)[1].get<std::uint64_t>();
    if (info.end < info.begin) {
      throw FormatError(tw + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                        "] end before they begin");
    }
    const std::uint64_t bytes = detail::file_tensor_nbytes(info.shape, info.dtype, tw);
    if (bytes != info.nbytes()) {
      throw FormatError(tw + ": " + std::string(safetensors_name(info.dtype)) + " shape " + info.shape.str() +
                        " needs " + std::to_string(bytes) + " bytes but data_offsets span " +
                        std::to_string(info.nbytes()));
    }
    collected.push_back(std::move(info));
  }

  // Ordered by (begin, end, name). `collected` is in name order, so its positions break ties as
  // the names would, the sort compares integers only, and the name index fills in name order,
  // every insert landing at the end of the map (linear, not n log n string comparisons).
  std::vector<std::size_t> order(collected.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = collected[a];
    const auto& y = collected[b];
    if (x.begin != y.begin) return x.begin < y.begin;
    if (x.end != y.end) return x.end < y.end;
    return a < b;
  });
  std::vector<std::size_t> position(collected.size());
  h.tensors.reserve(collected.size());
  for (std::size_t k = 0; k < order.size(); ++k) {
    position[order[k]] = k;
    h.tensors.push_back(std::move(collected[order[k]]));
  }
  for (std::size_t i = 0; i < position.size(); ++i) {
    h.index.emplace_hint(h.index.end(), h.tensors[position[i]].name, position[i]);
  }
  std::uint64_t cursor = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != cursor) {
      throw FormatError(where + ", tensor '" + t.name + "': data_offsets begin at " + std::to_string(t.begin) +
                        " but the previous tensor ends at " + std::to_string(cursor) +
                        " (tensors must be contiguous and non-overlapping)");
    }
    cursor = t.end;
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

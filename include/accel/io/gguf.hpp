// GGUF reader: a fully validated header and zero-copy tensors over a memory map.
//
//   parse_gguf(bytes, source) -> GgufHeader      (pure; what the fuzzer drives)
//   auto f = GgufFile::open("model.gguf");
//   f.header().metadata        every key / value in file order, with its GGUF value type
//   f.find(key)  f.get_uint(key)  f.get_float(key)  f.get_string(key)  f.get_array(key)
//   f.info(name)               ggml type, ne (GGUF order), offset, bytes
//   f.bytes(name)              the tensor's bytes, viewed in the mapping
//   f.tensor(name)             plain types: a zero-copy Tensor in torch order (ne reversed)
//
// Layout (little-endian): "GGUF", u32 version (2 or 3), u64 tensor count, u64 key count; each
// key: string key, u32 value type, value (arrays: u32 element type, u64 count, elements); each
// tensor: string name, u32 n_dims, n_dims x u64 ne, u32 ggml type, u64 offset; padding to the
// alignment ("general.alignment", a UINT32 power of two, default 32); the data section.
// Strings are u64 length + bytes. Every count is checked against the bytes left before anything
// is allocated, so a hostile count fails in bounded time and memory. Rejected with FormatError
// naming the file (and the key or tensor): a wrong magic, versions other than 2 and 3 (a
// big-endian file reads as a huge version and is named as such), value types past FLOAT64,
// repeated keys or tensor names, more than 4 dimensions, extents whose product overflows, unknown
// or removed ggml types, rows that are not whole blocks, offsets that are not multiples of the
// alignment, tensors that reach past the end of the file, and what the spec says a file must not
// hold: keys that are empty, not ASCII, longer than 65535 bytes or not lower_snake_case segments
// separated by '.', and tensor names longer than 64 bytes (the errors give the byte offset).
// Accepted although ggml refuses them: nested arrays (the format allows them; depth at most 8),
// tensor names of exactly 64 bytes, the empty tensor name, several tensors over the same bytes,
// n_dims = 0 (one element).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/regular_file.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/ggml_types.hpp"

namespace accel::io {

/// GGUF's metadata value types, valued by their ids in the file.
enum class GgufValueType : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

/// GGUF's name of a value type: "UINT32", "STRING", "ARRAY".
constexpr std::string_view gguf_value_type_name(GgufValueType t) {
  constexpr std::string_view names[] = {"UINT8", "INT8",  "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                        "BOOL",  "STRING", "ARRAY", "UINT64", "INT64",  "FLOAT64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i < std::size(names) ? names[i] : std::string_view("?");
}

struct GgufValue;

/// An array value: its element type and elements (each a GgufValue of that type).
struct GgufArray {
  GgufValueType elem_type = GgufValueType::uint8;
  std::vector<GgufValue> items;
};

/// One metadata value with the type the file gave it. Unsigned types hold a uint64_t, signed
/// ones an int64_t, FLOAT32 / FLOAT64 a double (a float32 converts exactly), BOOL a bool.
struct GgufValue {
  GgufValueType type = GgufValueType::uint8;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, GgufArray> data;

  bool is_integer() const noexcept { return data.index() <= 1; }
  bool is_float() const noexcept { return data.index() == 2; }
  /// An integer value as uint64; nullopt when it is not an integer or is negative.
  std::optional<std::uint64_t> as_uint() const noexcept {
    if (const auto* u = std::get_if<std::uint64_t>(&data)) return *u;
    if (const auto* s = std::get_if<std::int64_t>(&data); s && *s >= 0) return static_cast<std::uint64_t>(*s);
    return std::nullopt;
  }
  /// A numeric value (integer or float) as double; nullopt otherwise.
  std::optional<double> as_double() const noexcept {
    if (const auto* d = std::get_if<double>(&data)) return *d;
    if (const auto* u = std::get_if<std::uint64_t>(&data)) return static_cast<double>(*u);
    if (const auto* s = std::get_if<std::int64_t>(&data)) return static_cast<double>(*s);
    return std::nullopt;
  }
  const std::string* as_string() const noexcept { return std::get_if<std::string>(&data); }
  const GgufArray* as_array() const noexcept { return std::get_if<GgufArray>(&data); }
  const bool* as_bool() const noexcept { return std::get_if<bool>(&data); }
};

/// Metadata value makers (for GgufWriter::add and the metadata builders).
inline GgufValue gguf_string(std::string s) { return {GgufValueType::string, std::move(s)}; }
inline GgufValue gguf_u32(std::uint32_t v) { return {GgufValueType::uint32, std::uint64_t{v}}; }
inline GgufValue gguf_i32(std::int32_t v) { return {GgufValueType::int32, std::int64_t{v}}; }
inline GgufValue gguf_f32(float v) { return {GgufValueType::float32, static_cast<double>(v)}; }
inline GgufValue gguf_bool(bool v) { return {GgufValueType::boolean, v}; }
/// An array of `elem` values; every item must have type `elem`.
inline GgufValue gguf_array(GgufValueType elem, std::vector<GgufValue> items) {
  return {GgufValueType::array, GgufArray{elem, std::move(items)}};
}

/// One tensor info. `ne` is in GGUF order (ne[0] is the contiguous dimension).
struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::f32;
  std::vector<std::uint64_t> ne;
  std::uint64_t offset = 0;       ///< as stored: relative to the data section
  std::uint64_t file_offset = 0;  ///< data section + offset
  std::uint64_t numel = 0;
  std::uint64_t nbytes = 0;

  /// The extents in torch order (ne reversed): a [n_embd, n_vocab] GGUF matrix is [n_vocab, n_embd].
  Shape shape() const {
    Shape s;
    for (auto it = ne.rbegin(); it != ne.rend(); ++it) s.push_back(static_cast<std::int64_t>(*it));
    return s;
  }
};

/// The parsed, validated header of a GGUF file.
struct GgufHeader {
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::uint64_t data_offset = 0;  ///< file offset of the data section
  std::vector<std::pair<std::string, GgufValue>> metadata;  ///< in file order
  std::vector<GgufTensorInfo> tensors;                      ///< in file order
  std::map<std::string, std::size_t, std::less<>> key_index;
  std::map<std::string, std::size_t, std::less<>> tensor_index;

  const GgufValue* find(std::string_view key) const {
    auto it = key_index.find(key);
    return it == key_index.end() ? nullptr : &metadata[it->second].second;
  }
  const GgufTensorInfo* find_tensor(std::string_view name) const {
    auto it = tensor_index.find(name);
    return it == tensor_index.end() ? nullptr : &tensors[it->second];
  }
};

inline constexpr std::uint32_t gguf_max_dims = 4;          ///< ggml's GGML_MAX_DIMS
inline constexpr std::size_t gguf_max_tensor_name = 64;     ///< the spec: a tensor name "must be at most 64 bytes"
inline constexpr std::size_t gguf_max_key = 65535;          ///< the spec: a key "must be at most 2^16-1 bytes"
inline constexpr std::uint64_t gguf_default_alignment = 32;  ///< without "general.alignment"
inline constexpr int gguf_max_array_depth = 8;

namespace detail {

/// Reads the header fields in order, never past `end`; every failure names the file.
class GgufCursor {
 public:
  GgufCursor(ByteSpan bytes, const std::string& where) : bytes_(bytes), where_(where) {}

  std::size_t pos() const noexcept { return pos_; }
  std::size_t left() const noexcept { return bytes_.size() - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(where_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }

  template <class T>
  T read(std::string_view field) {
    if (left() < sizeof(T)) {
      fail("the file ends inside " + std::string(field) + " (" + std::to_string(left()) + " of " +
           std::to_string(sizeof(T)) + " bytes left)");
    }
    const T v = load_le<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view field) {
    const auto n = read<std::uint64_t>(field);
    if (n > left()) {
      fail(std::string(field) + " claims " + std::to_string(n) + " bytes but " + std::to_string(left()) +
           " remain in the file");
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }

  /// Fails unless `count` items of at least `min_bytes` each can still fit in the file.
  void require_room(std::uint64_t count, std::uint64_t min_bytes, std::string_view what) const {
    if (min_bytes != 0 && count > left() / min_bytes) {
      fail(std::string(what) + " is " + std::to_string(count) + " but the " + std::to_string(left()) +
           " bytes left cannot hold that many");
    }
  }

 private:
  ByteSpan bytes_;
  const std::string& where_;
  std::size_t pos_ = 0;
};

/// Fewest bytes a value of type `t` takes in the file (its count check before allocating).
constexpr std::uint64_t gguf_min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::boolean: return 1;
    case GgufValueType::uint16:
    case GgufValueType::int16: return 2;
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::float32: return 4;
    case GgufValueType::string:
    case GgufValueType::uint64:
    case GgufValueType::int64:
    case GgufValueType::float64: return 8;
    case GgufValueType::array: return 12;
  }
  return 1;
}

inline GgufValueType read_gguf_value_type(GgufCursor& c, const std::string& what) {
  const auto id = c.read<std::uint32_t>(what);
  if (id > static_cast<std::uint32_t>(GgufValueType::float64)) {
    c.fail(what + " is " + std::to_string(id) + "; GGUF value types are 0 (UINT8) to 12 (FLOAT64)");
  }
  return static_cast<GgufValueType>(id);
}

inline GgufValue read_gguf_value(GgufCursor& c, GgufValueType t, const std::string& what, int depth) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufValueType::uint8: v.data = std::uint64_t{c.read<std::uint8_t>(what)}; break;
    case GgufValueType::uint16: v.data = std::uint64_t{c.read<std::uint16_t>(what)}; break;
    case GgufValueType::uint32: v.data = std::uint64_t{c.read<std::uint32_t>(what)}; break;
    case GgufValueType::uint64: v.data = c.read<std::uint64_t>(what); break;
    case GgufValueType::int8: v.data = std::int64_t{static_cast<std::int8_t>(c.read<std::uint8_t>(what))}; break;
    case GgufValueType::int16: v.data = std::int64_t{static_cast<std::int16_t>(c.read<std::uint16_t>(what))}; break;
    case GgufValueType::int32: v.data = std::int64_t{static_cast<std::int32_t>(c.read<std::uint32_t>(what))}; break;
    case GgufValueType::int64: v.data = static_cast<std::int64_t>(c.read<std::uint64_t>(what)); break;
    case GgufValueType::float32: {
      const auto bits = c.read<std::uint32_t>(what);
      float f;
      std::memcpy(&f, &bits, 4);
      v.data = static_cast<double>(f);
      break;
    }
    case GgufValueType::float64: {
      const auto bits = c.read<std::uint64_t>(what);
      double d;
      std::memcpy(&d, &bits, 8);
      v.data = d;
      break;
    }
    case GgufValueType::boolean: {
      const auto b = c.read<std::uint8_t>(what);
      if (b > 1) c.fail(what + ": BOOL byte " + std::to_string(b) + " is neither 0 nor 1");
      v.data = b == 1;
      break;
    }
    case GgufValueType::string: v.data = c.read_string(what); break;
    case GgufValueType::array: {
      if (depth >= gguf_max_array_depth) {
        c.fail(what + ": arrays nested deeper than " + std::to_string(gguf_max_array_depth));
      }
      GgufArray a;
      a.elem_type = read_gguf_value_type(c, what + " element type");
      const auto n = c.read<std::uint64_t>(what + " length");
      c.require_room(n, gguf_min_value_bytes(a.elem_type), what + " length");
      a.items.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i) {
        a.items.push_back(read_gguf_value(c, a.elem_type, what, depth + 1));
      }
      v.data = std::move(a);
      break;
    }
  }
  return v;
}

/// Why `key` breaks the spec's rules for keys, or nullptr: "a valid ASCII string", "a hierarchical
/// key, where each segment is lower_snake_case and separated by a .", "at most 2^16-1 bytes".
inline const char* gguf_key_problem(std::string_view key) noexcept {
  if (key.empty()) return "is empty";
  if (key.size() > gguf_max_key) return "is longer than 65535 bytes";
  for (const char ch : key) {
    if (static_cast<unsigned char>(ch) > 0x7F) return "holds a byte that is not ASCII";
  }
  if (key.front() == '.' || key.back() == '.' || key.find("..") != std::string_view::npos) {
    return "has an empty segment (keys are segments separated by '.')";
  }
  for (const char ch : key) {
    if (ch != '.' && ch != '_' && !(ch >= 'a' && ch <= 'z') && !(ch >= '0' && ch <= '9')) {
      return "has a segment that is not lower_snake_case (a-z, 0-9, _)";
    }
  }
  return nullptr;
}

/// `s` for an error message: bytes outside printable ASCII as \xNN, at most 80 of them shown.
inline std::string printable(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 80; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7F && ch != '\\') {
      out.push_back(static_cast<char>(ch));
    } else {
      out += "\\x";
      out.push_back(hex[ch >> 4]);
      out.push_back(hex[ch & 0x0F]);
    }
  }
  if (s.size() > 80) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}
}  // namespace detail

/// Parses and validates the header of a whole GGUF file held in `file`; `source` names the file
/// in error messages. Never reads outside `file`; tensor ranges are checked against its size.
inline GgufHeader parse_gguf(ByteSpan file, const std::string& source) {
  const std::string where = "GGUF file '" + source + "'";
  detail::GgufCursor c(file, where);
  if (file.size() < 4 || std::memcmp(file.data(), "GGUF", 4) != 0) {
    throw FormatError(where + ": does not start with the magic \"GGUF\"");
  }
  (void)c.read<std::uint32_t>("the magic");
  GgufHeader h;
  h.version = c.read<std::uint32_t>("the version");
  if (h.version != 2 && h.version != 3) {
    std::string why = "version " + std::to_string(h.version) + " is not supported (versions 2 and 3 are)";
    if (h.version > 0xFFFF && (h.version & 0xFFFF) == 0) why += "; the file looks big-endian, which is not read";
    c.fail(why);
  }
  const auto n_tensors = c.read<std::uint64_t>("the tensor count");
  const auto n_kv = c.read<std::uint64_t>("the key count");
  // A key takes at least 8 (length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 4 + 8.
  c.require_room(n_kv, 13, "the key count");
  c.require_room(n_tensors, 24, "the tensor count");

  h.metadata.reserve(static_cast<std::size_t>(n_kv));
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::uint64_t key_at = c.pos();
    std::string key = c.read_string("key " + std::to_string(i));
    const std::string what = "key '" + detail::printable(key) + "'";
    if (const char* why = detail::gguf_key_problem(key)) {
      throw FormatError(where + ": key " + std::to_string(i) + " ('" + detail::printable(key) + "', at byte " +
                        std::to_string(key_at) + ") " + why + "; the GGUF spec requires lower_snake_case ASCII segments separated by '.'");
    }
    const auto type = detail::read_gguf_value_type(c, what + " value type");
    GgufValue v = detail::read_gguf_value(c, type, what, 0);
    if (!h.key_index.emplace(key, h.metadata.size()).second) c.fail(what + " appears twice");
    h.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (const auto* a = h.find("general.alignment")) {
    const auto align = a->as_uint();
    if (a->type != GgufValueType::uint32 || !align) {
      throw FormatError(where + ": \"general.alignment\" is " + std::string(gguf_value_type_name(a->type)) +
                        "; it must be UINT32");
    }
    if (*align == 0 || (*align & (*align - 1)) != 0) {
      throw FormatError(where + ": \"general.alignment\" is " + std::to_string(*align) +
                        "; it must be a power of two");
    }
    h.alignment = *align;
  }

  h.tensors.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    const std::uint64_t name_at = c.pos();
    t.name = c.read_string("the name of tensor " + std::to_string(i));
    const std::string what = "tensor '" + detail::printable(t.name) + "'";
    if (t.name.size() > gguf_max_tensor_name) {
      throw FormatError(where + ": the name of tensor " + std::to_string(i) + " ('" + detail::printable(t.name) +
                        "', at byte " + std::to_string(name_at) + ") is " + std::to_string(t.name.size()) +
                        " bytes; the GGUF spec allows at most 64");
    }
    const auto n_dims = c.read<std::uint32_t>(what + " n_dims");
    if (n_dims > gguf_max_dims) {
      c.fail(what + " has " + std::to_string(n_dims) + " dimensions; at most " + std::to_string(gguf_max_dims));
    }
    t.numel = 1;
    // A Tensor derives strides from the extents with zeros counted as 1, so that product must fit
    // too: [0, 2^62, 2^62] holds nothing but would overflow every stride.
    std::uint64_t strides = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto e = c.read<std::uint64_t>(what + " extent");
      const std::uint64_t at_least_one = std::max<std::uint64_t>(e, 1);
      if (e > static_cast<std::uint64_t>(INT64_MAX) || strides > static_cast<std::uint64_t>(INT64_MAX) / at_least_one) {
        c.fail(what + ": the extents' product overflows");
      }
      t.ne.push_back(e);
      t.numel *= e;
      strides *= at_least_one;
    }
    const auto type_id = c.read<std::uint32_t>(what + " type");
    const auto* info = find_ggml_type(type_id);
    if (!info) c.fail(what + " has ggml type " + std::to_string(type_id) + ", which is unknown or removed");
    t.type = info->type;
    t.offset = c.read<std::uint64_t>(what + " offset");
    const std::uint64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (ne0 % info->block_size != 0) {
      c.fail(what + " is " + std::string(info->name) + " with rows of " + std::to_string(ne0) +
             " elements, not a multiple of its block size " + std::to_string(info->block_size));
    }
    const std::uint64_t rows = ne0 == 0 ? 0 : t.numel / ne0;
    const std::uint64_t row_bytes = ne0 / info->block_size * info->type_size;
    if (row_bytes != 0 && rows > static_cast<std::uint64_t>(INT64_MAX) / row_bytes) {
      c.fail(what + ": its byte size overflows");
    }
    t.nbytes = rows * row_bytes;
    if (t.offset % h.alignment != 0) {
      c.fail(what + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(h.alignment));
    }
    if (!h.tensor_index.emplace(t.name, h.tensors.size()).second) c.fail(what + " appears twice");
    h.tensors.push_back(std::move(t));
  }

  const std::uint64_t end_of_infos = c.pos();
  h.data_offset = (end_of_infos + h.alignment - 1) / h.alignment * h.alignment;
  for (auto& t : h.tensors) {
    const std::uint64_t size = file.size();
    if (h.data_offset > size || t.offset > size - h.data_offset || t.nbytes > size - h.data_offset - t.offset) {
      throw FormatError(where + ", tensor '" + t.name + "': its " + std::to_string(t.nbytes) + " bytes at offset " +
                        std::to_string(t.offset) + " of the data section (file byte " +
                        std::to_string(h.data_offset) + ") reach past the end of the " + std::to_string(size) +
                        "-byte file");
    }
    t.file_offset = h.data_offset + t.offset;
  }
  return h;
}

/// A GGUF file mapped into memory. Cheap to copy (shares the mapping).
class GgufFile {
 public:
  /// Maps and validates `path`; IOError if unreadable or not a regular file, FormatError if malformed.
  static GgufFile open(const std::string& path) {
    GgufFile f;
    f.file_ = map_regular_file(path);
    f.header_ = std::make_shared<const GgufHeader>(parse_gguf(ByteSpan(f.file_->data(), f.file_->size()), path));
    return f;
  }

  const std::string& path() const noexcept { return file_->path(); }
  const GgufHeader& header() const noexcept { return *header_; }
  const std::shared_ptr<MappedFile>& mapped_file() const noexcept { return file_; }

  /// The value of `key`, or nullptr.
  const GgufValue* find(std::string_view key) const { return header_->find(key); }
  /// The value of `key`; KeyError naming the file when absent.
  const GgufValue& get(std::string_view key) const {
    if (const auto* v = find(key)) return *v;
    throw KeyError("GGUF file '" + path() + "' has no metadata key '" + std::string(key) + "'");
  }
  /// A non-negative integer value; FormatError when `key` holds something else.
  std::uint64_t get_uint(std::string_view key) const {
    if (auto u = get(key).as_uint()) return *u;
    throw type_error(key, "a non-negative integer");
  }
  /// A numeric value as double.
  double get_float(std::string_view key) const {
    if (auto d = get(key).as_double()) return *d;
    throw type_error(key, "a number");
  }
  const std::string& get_string(std::string_view key) const {
    if (const auto* s = get(key).as_string()) return *s;
    throw type_error(key, "a STRING");
  }
  const GgufArray& get_array(std::string_view key) const {
    if (const auto* a = get(key).as_array()) return *a;
    throw type_error(key, "an ARRAY");
  }

  const std::vector<GgufTensorInfo>& tensors() const noexcept { return header_->tensors; }
  bool contains(std::string_view name) const { return header_->find_tensor(name) != nullptr; }
  /// The info of tensor `name`; KeyError naming the file when absent.
  const GgufTensorInfo& info(std::string_view name) const {
    if (const auto* t = header_->find_tensor(name)) return *t;
    throw KeyError("GGUF file '" + path() + "' has no tensor named '" + std::string(name) + "'");
  }
  /// The tensor's bytes in the mapping (validated to lie inside the file).
  ByteSpan bytes(const GgufTensorInfo& t) const {
    return ByteSpan(file_->data() + t.file_offset, static_cast<std::size_t>(t.nbytes));
  }
  ByteSpan bytes(std::string_view name) const { return bytes(info(name)); }

  /// A read-only cpu tensor over the mapped bytes of a plain-typed tensor (F32, F16, BF16, I8..I64,
  /// F64), in torch order; copied only when the bytes are not aligned for the dtype. Block types
  /// are DTypeError here: dequantize them (io/ggml_dequantize.hpp) or read their bytes.
  Tensor tensor(std::string_view name) const {
    const auto& t = info(name);
    const auto& row = ggml_type_info(t.type);
    if (!row.plain) {
      throw DTypeError("GGUF file '" + path() + "', tensor '" + t.name + "' is " + std::string(row.name) +
                       ", a block type with no element dtype; dequantize it");
    }
    const Shape shape = t.shape();
    if (t.file_offset % itemsize(*row.plain) != 0) {
      Tensor out = Tensor::empty(shape, *row.plain, Device::cpu());
      if (t.nbytes) std::memcpy(out.data_ptr(), file_->data() + t.file_offset, t.nbytes);
      return out;
    }
    return Tensor::from_storage(file_->region(t.file_offset, t.nbytes), *row.plain, shape);
  }

 private:
  FormatError type_error(std::string_view key, std::string_view expected) const {
    return FormatError("GGUF file '" + path() + "': metadata key '" + std::string(key) + "' is " +
                       std::string(gguf_value_type_name(get(key).type)) + "; expected " + std::string(expected));
  }

  std::shared_ptr<MappedFile> file_;
  std::shared_ptr<const GgufHeader> header_;
};

}  // namespace accel::io

// The binary form objects travel in between processes (gather_object, broadcast_object_list, the
// debug-mode shape exchange): typed, bounded, and never code.
//
//   std::vector<std::byte> bytes = serialize(obj);
//   T copy = deserialize<T>(bytes);            FormatError when the bytes do not hold a T
//   serializer<T>                              customization point: static write(ByteWriter&, const T&)
//                                              and static T read(ByteReader&)
//
// Format, version 1 (every integer little-endian, fixed width):
//   message    = "ACOB" | u32 version (1) | u64 type id | value
//   type id    = 64-bit FNV-1a of the C++ type's name: every process runs the same program, so a
//                different id means the processes passed different types (a DistributedError names it)
//   bool       = u8 (0 or 1)
//   integer    = its own width (int8 ... uint64, char types); an enum as its underlying integer
//   float      = IEEE-754 bits of its width (float, double, and the tensor element types f16, bf16,
//                f8 as their storage bits)
//   string     = u64 byte count | bytes
//   sequence   = u64 count | elements          (vector, deque, list; vector<bool> as bools)
//   map        = u64 count | (key, value)...   (map, unordered_map, in their iteration order)
//   array, pair, tuple, aggregate (Boost.PFR) = their elements in order, no count
//   optional   = u8 engaged | value if engaged
//   variant    = u32 alternative index | value
//   Tensor     = u8 state (0 undefined, 1 meta, 2 with data) | string dtype (safetensors' name:
//                "F32", "BF16", "BOOL", ...) | u32 ndim | i64 extents... | with data: u64 byte
//                count | the elements, contiguous, row-major
// A tensor is written from any device and read back on the CPU.
//
// Reading checks every count against the bytes that remain before allocating, so damaged or
// hostile bytes give a FormatError, never a huge allocation or a read past the end.
//
// Differences from Accelerate: torch pickles the objects, which can carry any Python object and
// runs code when read. Here an object is a C++ value of a type both sides name; a type the format
// does not know is a compile-time error until serializer<T> is specialized for it.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <boost/pfr.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nested/traits.hpp"

namespace accel::dist {

static_assert(std::endian::native == std::endian::little,
              "accel::dist::serialize writes native integers as little-endian: big-endian hosts are not supported");

/// The format version written after the magic.
inline constexpr std::uint32_t serialization_version = 1;

/// Appends encoded values to a byte buffer.
class ByteWriter {
 public:
  /// Appends `n` raw bytes.
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  /// Appends a trivially copyable value's bytes.
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void raw(const T& v) {
    bytes(&v, sizeof(T));
  }
  void u8(std::uint8_t v) { raw(v); }
  void u32(std::uint32_t v) { raw(v); }
  void u64(std::uint64_t v) { raw(v); }
  /// A u64 length, then the bytes.
  void string(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  std::vector<std::byte>& buffer() noexcept { return out_; }

 private:
  std::vector<std::byte> out_;
};

/// Reads encoded values from a byte span; every read checks what remains (FormatError).
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}
  std::size_t remaining() const noexcept { return in_.size() - pos_; }
  /// The next `n` bytes, consumed.
  std::span<const std::byte> take(std::size_t n, const char* what) {
    if (n > remaining()) {
      throw FormatError("deserialize: " + std::string(what) + " needs " + std::to_string(n) + " bytes, " +
                        std::to_string(remaining()) + " remain");
    }
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  T raw(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what).data(), sizeof(T));
    return v;
  }
  std::uint8_t u8(const char* what) { return raw<std::uint8_t>(what); }
  std::uint32_t u32(const char* what) { return raw<std::uint32_t>(what); }
  std::uint64_t u64(const char* what) { return raw<std::uint64_t>(what); }
  /// A count of elements of at least `min_element_bytes` each, checked against what remains.
  std::size_t count(std::size_t min_element_bytes, const char* what) {
    const std::uint64_t n = u64(what);
    if (min_element_bytes > 0 && n > remaining() / min_element_bytes) {
      throw FormatError("deserialize: " + std::string(what) + " claims " + std::to_string(n) +
                        " elements but only " + std::to_string(remaining()) + " bytes remain");
    }
    if (min_element_bytes == 0 && n > remaining() + 4096) {
      throw FormatError("deserialize: " + std::string(what) + " claims " + std::to_string(n) + " empty elements");
    }
    return static_cast<std::size_t>(n);
  }
  std::string string(const char* what) {
    const std::size_t n = count(1, what);
    const auto s = take(n, what);
    return std::string(reinterpret_cast<const char*>(s.data()), n);
  }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

/// Specialize with `static void write(ByteWriter&, const T&)` and `static T read(ByteReader&)` for a
/// type the format does not know (and to replace how a known one is written).
template <class T>
struct serializer;

namespace detail {

template <class T>
inline constexpr bool always_false_v = false;

template <class T>
concept HasSerializer = requires(ByteWriter& w, ByteReader& r, const T& x) {
  serializer<T>::write(w, x);
  { serializer<T>::read(r) } -> std::same_as<T>;
};

template <class T>
concept SetLike = nested::detail::is_specialization<T, std::set>::value;

/// Smallest number of bytes one encoded T takes (to bound counts before allocating).
template <class T>
constexpr std::size_t min_encoded_bytes() {
  if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> || Element<T>) {
    return sizeof(T);
  } else if constexpr (nested::TupleLikeNested<T> && !nested::detail::is_std_array<T>::value) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + min_encoded_bytes<std::remove_cv_t<std::tuple_element_t<I, T>>>());
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (nested::detail::is_std_array<T>::value) {
    return std::tuple_size_v<T> * min_encoded_bytes<typename T::value_type>();
  } else {
    return 1;  // every other kind writes at least a tag or a count
  }
}

template <class T>
void write_value(ByteWriter& w, const T& x);
template <class T>
T read_value(ByteReader& r);

inline void write_tensor(ByteWriter& w, const Tensor& t) {
  if (!t.defined()) {
    w.u8(0);
    return;
  }
  w.u8(t.is_meta() ? 1 : 2);
  w.string(safetensors_name(t.dtype()));
  w.u32(static_cast<std::uint32_t>(t.dim()));
  for (const std::int64_t e : t.shape()) w.raw(e);
  if (t.is_meta()) return;
  const Tensor host = t.is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  w.u64(host.nbytes());
  w.bytes(host.data_ptr(), host.nbytes());
}

inline Tensor read_tensor(ByteReader& r) {
  const std::uint8_t state = r.u8("tensor state");
  if (state == 0) return Tensor();
  if (state > 2) throw FormatError("deserialize: tensor state " + std::to_string(state) + " is not 0, 1 or 2");
  const std::string name = r.string("tensor dtype");
  const auto dtype = try_dtype_from_string(name);
  if (!dtype) throw FormatError("deserialize: '" + name + "' is not a dtype");
  const std::uint32_t ndim = r.u32("tensor rank");
  if (ndim > max_dims) {
    throw FormatError("deserialize: a tensor of " + std::to_string(ndim) + " dimensions (at most " +
                      std::to_string(max_dims) + ")");
  }
  Shape shape;
  for (std::uint32_t i = 0; i < ndim; ++i) {
    const auto e = r.raw<std::int64_t>("tensor extent");
    if (e < 0) throw FormatError("deserialize: negative tensor extent " + std::to_string(e));
    shape.push_back(e);
  }
  if (state == 1) return Tensor::empty(shape, *dtype, Device::meta());
  const std::uint64_t nbytes = r.u64("tensor byte count");
  if (nbytes > r.remaining()) {
    throw FormatError("deserialize: a tensor of " + std::to_string(nbytes) + " bytes but only " +
                      std::to_string(r.remaining()) + " remain");
  }
  // Checked before allocating: the extents could multiply past what the bytes hold.
  std::uint64_t numel = 1;
  for (const std::int64_t e : shape) {
    if (e != 0 && numel > nbytes / static_cast<std::uint64_t>(e) + 1) {
      throw FormatError("deserialize: tensor extents " + shape.str() + " exceed the " + std::to_string(nbytes) +
                        " bytes sent");
    }
    numel *= static_cast<std::uint64_t>(e);
  }
  if (storage_nbytes(*dtype, numel) != nbytes) {
    throw FormatError("deserialize: a " + name + " tensor of shape " + shape.str() + " takes " +
                      std::to_string(storage_nbytes(*dtype, numel)) + " bytes, not " + std::to_string(nbytes));
  }
  Tensor t = Tensor::empty(shape, *dtype);
  const auto src = r.take(nbytes, "tensor data");
  if (nbytes) std::memcpy(t.data_ptr(), src.data(), nbytes);
  return t;
}

template <class T>
void write_value(ByteWriter& w, const T& x) {
  if constexpr (HasSerializer<T>) {
    serializer<T>::write(w, x);
  } else if constexpr (std::is_same_v<T, bool>) {
    w.u8(x ? 1 : 0);
  } else if constexpr (std::is_arithmetic_v<T> || Element<T>) {
    w.raw(x);
  } else if constexpr (std::is_enum_v<T>) {
    w.raw(static_cast<std::underlying_type_t<T>>(x));
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view>) {
    w.string(x);
  } else if constexpr (std::is_same_v<T, Tensor>) {
    write_tensor(w, x);
  } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
    w.u64(x.size());
    for (const bool b : x) w.u8(b ? 1 : 0);
  } else if constexpr (nested::SequenceNested<T> || SetLike<T>) {
    w.u64(x.size());
    for (const auto& e : x) write_value(w, e);
  } else if constexpr (nested::MapNested<T>) {
    w.u64(x.size());
    for (const auto& [k, v] : x) {
      write_value(w, k);
      write_value(w, v);
    }
  } else if constexpr (nested::TupleLikeNested<T>) {
    std::apply([&](const auto&... e) { (write_value(w, e), ...); }, x);
  } else if constexpr (nested::OptionalNested<T>) {
    w.u8(x.has_value() ? 1 : 0);
    if (x) write_value(w, *x);
  } else if constexpr (nested::VariantNested<T>) {
    if (x.valueless_by_exception()) throw ValueError("serialize: a variant is valueless");
    w.u32(static_cast<std::uint32_t>(x.index()));
    std::visit([&](const auto& e) { write_value(w, e); }, x);
  } else if constexpr (nested::AggregateNested<T>) {
    boost::pfr::for_each_field(x, [&](const auto& f) { write_value(w, f); });
  } else if constexpr (std::is_empty_v<T> && std::is_default_constructible_v<T>) {
    // An empty type carries nothing.
  } else {
    static_assert(always_false_v<T>,
                  "accel::dist::serialize: this type has no binary form; supported: bool, integers, enums, "
                  "floats, std::string, Tensor, vector / deque / list / set, map / unordered_map, array, pair, "
                  "tuple, optional, variant, aggregates; specialize accel::dist::serializer<T> for others");
  }
}

template <class T, std::size_t... I>
T read_tuple_like(ByteReader& r, std::index_sequence<I...>) {
  // Braced initialization evaluates the reads in order.
  if constexpr (nested::detail::is_std_array<T>::value) {
    return T{{read_value<typename T::value_type>((static_cast<void>(I), r))...}};
  } else {
    return T{read_value<std::remove_cv_t<std::tuple_element_t<I, T>>>(r)...};
  }
}

template <class V, std::size_t... I>
V read_variant(ByteReader& r, std::size_t index, std::index_sequence<I...>) {
  return boost::mp11::mp_with_index<sizeof...(I)>(index, [&](auto J) -> V {
    return V(std::in_place_index<J>, read_value<std::variant_alternative_t<J, V>>(r));
  });
}

template <class T>
T read_value(ByteReader& r) {
  if constexpr (HasSerializer<T>) {
    return serializer<T>::read(r);
  } else if constexpr (std::is_same_v<T, bool>) {
    const std::uint8_t b = r.u8("bool");
    if (b > 1) throw FormatError("deserialize: a bool holds " + std::to_string(b));
    return b == 1;
  } else if constexpr (std::is_arithmetic_v<T> || Element<T>) {
    return r.raw<T>("number");
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(r.raw<std::underlying_type_t<T>>("enum"));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return r.string("string");
  } else if constexpr (std::is_same_v<T, Tensor>) {
    return read_tensor(r);
  } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
    const std::size_t n = r.count(1, "vector<bool>");
    std::vector<bool> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(read_value<bool>(r));
    return out;
  } else if constexpr (nested::SequenceNested<T>) {
    using E = typename T::value_type;
    const std::size_t n = r.count(min_encoded_bytes<E>(), "sequence");
    T out;
    if constexpr (nested::detail::is_specialization<T, std::vector>::value) out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(read_value<E>(r));
    return out;
  } else if constexpr (SetLike<T>) {
    using E = typename T::value_type;
    const std::size_t n = r.count(min_encoded_bytes<E>(), "set");
    T out;
    for (std::size_t i = 0; i < n; ++i) out.insert(out.end(), read_value<E>(r));
    return out;
  } else if constexpr (nested::MapNested<T>) {
    using K = typename T::key_type;
    using V = typename T::mapped_type;
    const std::size_t n = r.count(min_encoded_bytes<K>() + min_encoded_bytes<V>(), "map");
    T out;
    for (std::size_t i = 0; i < n; ++i) {
      K k = read_value<K>(r);
      V v = read_value<V>(r);
      out.insert_or_assign(std::move(k), std::move(v));
    }
    return out;
  } else if constexpr (nested::TupleLikeNested<T>) {
    return read_tuple_like<T>(r, std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (nested::OptionalNested<T>) {
    const std::uint8_t engaged = r.u8("optional");
    if (engaged > 1) throw FormatError("deserialize: an optional's flag holds " + std::to_string(engaged));
    if (!engaged) return T{};
    return T(read_value<typename T::value_type>(r));
  } else if constexpr (nested::VariantNested<T>) {
    const std::uint32_t index = r.u32("variant index");
    if (index >= std::variant_size_v<T>) {
      throw FormatError("deserialize: variant alternative " + std::to_string(index) + " of " +
                        std::to_string(std::variant_size_v<T>));
    }
    return read_variant<T>(r, index, std::make_index_sequence<std::variant_size_v<T>>{});
  } else if constexpr (nested::AggregateNested<T>) {
    static_assert(std::is_default_constructible_v<T>, "accel::dist::deserialize: an aggregate must be default-constructible");
    T out{};
    boost::pfr::for_each_field(out, [&](auto& f) { f = read_value<std::remove_cvref_t<decltype(f)>>(r); });
    return out;
  } else if constexpr (std::is_empty_v<T> && std::is_default_constructible_v<T>) {
    return T{};
  } else {
    static_assert(always_false_v<T>, "accel::dist::deserialize: this type has no binary form (see serialize)");
  }
}

/// 64-bit FNV-1a.
constexpr std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

inline constexpr char serialization_magic[4] = {'A', 'C', 'O', 'B'};

}  // namespace detail

/// The type id written into a message of T.
template <class T>
constexpr std::uint64_t serialization_type_id() {
  return detail::fnv1a(nested::type_name<std::remove_cvref_t<T>>());
}

/// `obj` in the binary form described at the top of this header.
template <class T>
std::vector<std::byte> serialize(const T& obj) {
  ByteWriter w;
  w.bytes(detail::serialization_magic, 4);
  w.u32(serialization_version);
  w.u64(serialization_type_id<T>());
  detail::write_value(w, obj);
  return std::move(w.buffer());
}

/// The T that `bytes` holds. FormatError for bytes that are not a message of version 1 or that end
/// early or hold bytes past the value; DistributedError when they hold another type.
template <class T>
T deserialize(std::span<const std::byte> bytes) {
  ByteReader r(bytes);
  const auto magic = r.take(4, "magic");
  if (std::memcmp(magic.data(), detail::serialization_magic, 4) != 0) {
    throw FormatError("deserialize: the bytes do not start with the magic 'ACOB'");
  }
  const std::uint32_t version = r.u32("version");
  if (version != serialization_version) {
    throw FormatError("deserialize: format version " + std::to_string(version) + ", expected " +
                      std::to_string(serialization_version));
  }
  if (r.u64("type id") != serialization_type_id<T>()) {
    throw DistributedError("deserialize: the bytes hold another type than '" +
                           std::string(nested::type_name<T>()) +
                           "'; every process must pass the same type to an object collective");
  }
  T out = detail::read_value<T>(r);
  if (r.remaining() != 0) {
    throw FormatError("deserialize: " + std::to_string(r.remaining()) + " bytes follow the value");
  }
  return out;
}

}  // namespace accel::dist

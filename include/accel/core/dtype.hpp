// DType: the runtime element type of a tensor, its compile-time twin `dtype_of<T>`, and names.
//
//   DType                      runtime enum (a checkpoint decides it)
//   dtype_of<T>                DType of a C++ element type
//   cpp_type_t<D>              C++ element type of a DType
//   all_dtypes                 mp_list of every element type, for compile-time dispatch
//   visit_dtype_constant(d, f) f(std::integral_constant<DType, D>{}) for the runtime d
//   visit_dtype(d, f)          f(std::type_identity<T>{}) for the runtime d (built on the above)
//   dtype_from_string(s)       torch ("float16", "torch.bfloat16", "half") or safetensors ("BF16")
//
// Packed quantized weights are not DTypes: every element kernel is instantiated over this list,
// so a quantized layer holds its packed bytes in a u8 / i8 tensor and knows its block type itself
// (docs/design.md, "Packed weights and quantizers"); `storage_nbytes` is the one place that turns
// an element count into bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"

namespace accel {

/// Element type of a tensor.
enum class DType : std::uint8_t {
  f64,
  f32,
  f16,
  bf16,
  f8_e4m3fn,
  f8_e5m2,
  i64,
  i32,
  i16,
  i8,
  u8,
  boolean,
};

inline constexpr std::size_t dtype_count = 12;

/// Everything the library knows about one dtype, in one row (ggml's type-traits habit).
struct DTypeInfo {
  DType dtype;
  std::string_view name;             ///< torch's name without "torch.": "bfloat16"
  std::string_view safetensors_name;  ///< "BF16"
  std::size_t itemsize;              ///< bytes of one block
  std::size_t block_size;            ///< elements per block (1 for every plain type)
  bool is_floating;
  bool is_signed;
};

inline constexpr std::array<DTypeInfo, dtype_count> dtype_table{{
    {DType::f64, "float64", "F64", 8, 1, true, true},
    {DType::f32, "float32", "F32", 4, 1, true, true},
    {DType::f16, "float16", "F16", 2, 1, true, true},
    {DType::bf16, "bfloat16", "BF16", 2, 1, true, true},
    {DType::f8_e4m3fn, "float8_e4m3fn", "F8_E4M3", 1, 1, true, true},
    {DType::f8_e5m2, "float8_e5m2", "F8_E5M2", 1, 1, true, true},
    {DType::i64, "int64", "I64", 8, 1, false, true},
    {DType::i32, "int32", "I32", 4, 1, false, true},
    {DType::i16, "int16", "I16", 2, 1, false, true},
    {DType::i8, "int8", "I8", 1, 1, false, true},
    {DType::u8, "uint8", "U8", 1, 1, false, false},
    {DType::boolean, "bool", "BOOL", 1, 1, false, false},
}};

/// The table row of `d`.
constexpr const DTypeInfo& dtype_info(DType d) {
  const auto i = static_cast<std::size_t>(d);
  if (i >= dtype_count) throw DTypeError("invalid DType value " + std::to_string(i));
  return dtype_table[i];
}

/// Bytes per element of a plain dtype (per block for packed ones).
constexpr std::size_t itemsize(DType d) { return dtype_info(d).itemsize; }
constexpr bool is_floating_point(DType d) { return dtype_info(d).is_floating; }
/// torch's name: "float16", "bfloat16", "bool".
constexpr std::string_view dtype_name(DType d) { return dtype_info(d).name; }
constexpr std::string_view safetensors_name(DType d) { return dtype_info(d).safetensors_name; }
/// "torch.float16": how Accelerate prints a dtype.
inline std::string torch_dtype_string(DType d) { return "torch." + std::string(dtype_name(d)); }

/// Bytes that `numel` elements of `d` occupy; throws if `numel` is not a whole number of blocks.
constexpr std::size_t storage_nbytes(DType d, std::size_t numel) {
  const auto& info = dtype_info(d);
  if (numel % info.block_size != 0) {
    throw ShapeError(std::string(info.name) + ": " + std::to_string(numel) +
                     " elements is not a multiple of the block size " +
                     std::to_string(info.block_size));
  }
  return numel / info.block_size * info.itemsize;
}

/// Parses torch names (with or without "torch."), their aliases ("half", "float", "long", ...)
/// and safetensors names ("F16", "BF16", "F8_E4M3"). Returns nullopt when unknown.
inline std::optional<DType> try_dtype_from_string(std::string_view s) {
  if (s.starts_with("torch.")) s.remove_prefix(6);
  for (const auto& info : dtype_table) {
    if (s == info.name || s == info.safetensors_name) return info.dtype;
  }
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias aliases[] = {
      {"double", DType::f64}, {"float", DType::f32},  {"half", DType::f16},
      {"long", DType::i64},   {"int", DType::i32},    {"short", DType::i16},
      {"fp32", DType::f32},   {"fp16", DType::f16},   {"bf16", DType::bf16},
      {"fp8", DType::f8_e4m3fn}, {"float8_e4m3", DType::f8_e4m3fn},
  };
  for (const auto& a : aliases) {
    if (s == a.name) return a.dtype;
  }
  return std::nullopt;
}

/// As `try_dtype_from_string`, throwing DTypeError that lists the accepted names.
inline DType dtype_from_string(std::string_view s) {
  if (auto d = try_dtype_from_string(s)) return *d;
  std::string valid;
  for (const auto& info : dtype_table) {
    valid += (valid.empty() ? "" : ", ") + std::string(info.name) + "/" +
             std::string(info.safetensors_name);
  }
  throw DTypeError("unknown dtype '" + std::string(s) + "'; expected one of: " + valid);
}

inline std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

// ---- compile-time twin -----------------------------------------------------------------------

/// Every element type, in DType order: the list compile-time dispatch iterates.
using all_dtypes = boost::mp11::mp_list<double, float, half, bfloat16, float8_e4m3fn, float8_e5m2,
                                        std::int64_t, std::int32_t, std::int16_t, std::int8_t,
                                        std::uint8_t, bool>;
static_assert(boost::mp11::mp_size<all_dtypes>::value == dtype_count);

/// True for C++ types that are tensor elements.
template <class T>
concept Element = boost::mp11::mp_contains<all_dtypes, std::remove_cv_t<T>>::value;

/// DType of element type T.
template <Element T>
inline constexpr DType dtype_of =
    static_cast<DType>(boost::mp11::mp_find<all_dtypes, std::remove_cv_t<T>>::value);

/// Element type of DType D.
template <DType D>
using cpp_type_t = boost::mp11::mp_at_c<all_dtypes, static_cast<std::size_t>(D)>;

/// Calls f(std::integral_constant<DType, D>{}) with D the runtime `d`: the one dtype dispatcher,
/// for code that needs the dtype as a template argument (a CUDA kernel instantiated per dtype,
/// restricted with `if constexpr` to the dtypes it handles).
template <class F>
decltype(auto) visit_dtype_constant(DType d, F&& f) {
  const auto i = static_cast<std::size_t>(d);
  if (i >= dtype_count) throw DTypeError("invalid DType value " + std::to_string(i));
  return boost::mp11::mp_with_index<dtype_count>(i, [&](auto I) -> decltype(auto) {
    return f(std::integral_constant<DType, static_cast<DType>(decltype(I)::value)>{});
  });
}

/// Calls f(std::type_identity<T>{}) with T the element type of `d`.
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  return visit_dtype_constant(d, [&](auto D) -> decltype(auto) {
    return f(std::type_identity<cpp_type_t<decltype(D)::value>>{});
  });
}

static_assert(dtype_of<bfloat16> == DType::bf16);
static_assert(std::is_same_v<cpp_type_t<DType::i16>, std::int16_t>);

}  // namespace accel

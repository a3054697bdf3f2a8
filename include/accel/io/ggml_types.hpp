// ggml's tensor types as GGUF files number them: one trait table, the way core/dtype.hpp has one.
//
//   GgmlType                       enumerator per type, valued by ggml's id (Q4_K = 12)
//   ggml_type_table                id, name, elements per block, bytes per block, plain DType
//   find_ggml_type(id)             the row of a file's type id, or nullptr (unknown or removed id)
//   ggml_type_info(t)              the row of an enumerator
//   ggml_type_from_string("Q4_K")  by name (GGUF's spelling, case-insensitive), or nullopt
//   ggml_row_nbytes(t, ne0)        bytes of one row of ne0 elements (ShapeError if not whole blocks)
//
// Packed block types are not DTypes: a tensor of them is held as bytes beside its GgmlType, so no
// element kernel is instantiated for a block type (docs/design.md, "Packed weights"). Plain types
// (F32, F16, BF16, I8..I64, F64) name the DType their bytes are.
#pragma once

#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"

namespace accel::io {

/// ggml's type ids. Ids 4, 5 (Q4_2, Q4_3), 31-33 and 36-38 (repacked layouts) were removed from
/// the format and are not enumerators.
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
};

/// One row of the table.
struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;       ///< GGUF's spelling: "Q4_K", "BF16"
  std::size_t block_size;      ///< elements per block (1 for plain types)
  std::size_t type_size;       ///< bytes per block
  std::optional<DType> plain;  ///< the DType of a plain type's bytes; nullopt for block types
  bool dequantizable;          ///< io/ggml_dequantize.hpp converts it to float
};

inline constexpr std::size_t ggml_qk_k = 256;  ///< elements per super-block of the K and IQ types

inline constexpr std::array<GgmlTypeInfo, 31> ggml_type_table{{
    {GgmlType::f32, "F32", 1, 4, DType::f32, true},
    {GgmlType::f16, "F16", 1, 2, DType::f16, true},
    {GgmlType::q4_0, "Q4_0", 32, 18, std::nullopt, true},
    {GgmlType::q4_1, "Q4_1", 32, 20, std::nullopt, true},
    {GgmlType::q5_0, "Q5_0", 32, 22, std::nullopt, true},
    {GgmlType::q5_1, "Q5_1", 32, 24, std::nullopt, true},
    {GgmlType::q8_0, "Q8_0", 32, 34, std::nullopt, true},
    {GgmlType::q8_1, "Q8_1", 32, 36, std::nullopt, true},
    {GgmlType::q2_k, "Q2_K", ggml_qk_k, 84, std::nullopt, true},
    {GgmlType::q3_k, "Q3_K", ggml_qk_k, 110, std::nullopt, true},
    {GgmlType::q4_k, "Q4_K", ggml_qk_k, 144, std::nullopt, true},
    {GgmlType::q5_k, "Q5_K", ggml_qk_k, 176, std::nullopt, true},
    {GgmlType::q6_k, "Q6_K", ggml_qk_k, 210, std::nullopt, true},
    {GgmlType::q8_k, "Q8_K", ggml_qk_k, 292, std::nullopt, true},
    // The lattice IQ types decode through ggml's code-point grids (io/ggml_iq_grids.hpp), on the
    // host only: no CUDA kernel decodes them.
    {GgmlType::iq2_xxs, "IQ2_XXS", ggml_qk_k, 66, std::nullopt, true},
    {GgmlType::iq2_xs, "IQ2_XS", ggml_qk_k, 74, std::nullopt, true},
    {GgmlType::iq3_xxs, "IQ3_XXS", ggml_qk_k, 98, std::nullopt, true},
    {GgmlType::iq1_s, "IQ1_S", ggml_qk_k, 50, std::nullopt, true},
    {GgmlType::iq4_nl, "IQ4_NL", 32, 18, std::nullopt, true},
    {GgmlType::iq3_s, "IQ3_S", ggml_qk_k, 110, std::nullopt, true},
    {GgmlType::iq2_s, "IQ2_S", ggml_qk_k, 82, std::nullopt, true},
    {GgmlType::iq4_xs, "IQ4_XS", ggml_qk_k, 136, std::nullopt, true},
    {GgmlType::i8, "I8", 1, 1, DType::i8, true},
    {GgmlType::i16, "I16", 1, 2, DType::i16, true},
    {GgmlType::i32, "I32", 1, 4, DType::i32, true},
    {GgmlType::i64, "I64", 1, 8, DType::i64, true},
    {GgmlType::f64, "F64", 1, 8, DType::f64, true},
    {GgmlType::iq1_m, "IQ1_M", ggml_qk_k, 56, std::nullopt, true},
    {GgmlType::bf16, "BF16", 1, 2, DType::bf16, true},
    {GgmlType::tq1_0, "TQ1_0", ggml_qk_k, 54, std::nullopt, true},
    {GgmlType::tq2_0, "TQ2_0", ggml_qk_k, 66, std::nullopt, true},
}};

/// The row of type id `id` as a file stores it; nullptr for ids that are unknown or removed.
constexpr const GgmlTypeInfo* find_ggml_type(std::uint32_t id) noexcept {
  for (const auto& row : ggml_type_table) {
    if (static_cast<std::uint32_t>(row.type) == id) return &row;
  }
  return nullptr;
}

/// The row of `t`. (A loop over references, not find_ggml_type: comparing pointers with null is
/// not a constant expression under UBSan's instrumentation, and the block checks are static.)
constexpr const GgmlTypeInfo& ggml_type_info(GgmlType t) {
  for (const auto& row : ggml_type_table) {
    if (row.type == t) return row;
  }
  throw DTypeError("invalid GgmlType value " + std::to_string(static_cast<std::uint32_t>(t)));
}

/// GGUF's name of `t`: "Q4_K".
constexpr std::string_view ggml_type_name(GgmlType t) { return ggml_type_info(t).name; }

/// The type named `s` ("Q4_K", "q4_k"), or nullopt.
inline std::optional<GgmlType> ggml_type_from_string(std::string_view s) {
  for (const auto& row : ggml_type_table) {
    if (row.name.size() != s.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < s.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(s[i])) == static_cast<unsigned char>(row.name[i]);
    }
    if (same) return row.type;
  }
  return std::nullopt;
}

/// The GGUF type that stores a DType's bytes as they are, or nullopt (f8, u8, bool have none).
constexpr std::optional<GgmlType> ggml_type_of(DType d) noexcept {
  for (const auto& row : ggml_type_table) {
    if (row.plain == d) return row.type;
  }
  return std::nullopt;
}

/// Bytes of one row of `ne0` elements of `t`; ShapeError when `ne0` is not a whole number of blocks.
constexpr std::size_t ggml_row_nbytes(GgmlType t, std::uint64_t ne0) {
  const auto& row = ggml_type_info(t);
  if (ne0 % row.block_size != 0) {
    throw ShapeError(std::string(row.name) + ": a row of " + std::to_string(ne0) +
                     " elements is not a multiple of the block size " + std::to_string(row.block_size));
  }
  return static_cast<std::size_t>(ne0 / row.block_size) * row.type_size;
}

}  // namespace accel::io

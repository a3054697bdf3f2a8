// The weight-only affine schemes of Quanto and TorchAO: one trait table (the arithmetic is in
// quant/layers/affine_linear.hpp; this header is light enough for the config readers and their fuzz target).
//
//   AffineScheme                 the schemes, one enumerator a row
//   affine_scheme_info(s)        its row: kind, bits, scale divisor, code range, default group
//   affine_value(kind, bits, row, c, scale, min)
//                                the float code c of a row stands for (CPU and CUDA kernels alike)
//
// | scheme                          | codes                 | one scale per         | value                  |
// |---------------------------------|-----------------------|-----------------------|------------------------|
// | quanto int8                     | int8                  | output channel        | q s, s = amax / 127    |
// | quanto int4 / int2              | 4 / 2 bits, packed    | group (default 128)   | q s + min, s = (max - min) / (2^b - 1) |
// | quanto float8                   | float8_e4m3fn         | output channel        | q s, s = amax / 448    |
// | torchao int8_weight_only        | int8                  | output channel        | q s, s = amax / 127.5  |
// | torchao int4_weight_only        | 4 bits, packed        | group (32..256, 128)  | (q - 8) s + zero = q s + min |
// | torchao int8_dynamic_activation_int8_weight | int8      | output channel        | as int8_weight_only; x as int8 per row, s = amax / 127 |
// | torchao float8_weight_only      | float8_e4m3fn         | output channel        | q s, s = amax / 448    |
#pragma once

#include <cstdint>
#include <string_view>

#include "accel/core/float_types.hpp"
#include "accel/core/host_device.hpp"

namespace accel::quant {

enum class AffineScheme {
  quanto_int8,
  quanto_int4,
  quanto_int2,
  quanto_float8,
  torchao_int8_weight_only,
  torchao_int4_weight_only,
  torchao_int8_dynamic_activation_int8_weight,
  torchao_float8_weight_only,
};

/// How codes map to values.
enum class AffineKind {
  symmetric,  ///< q s, q signed
  zero_point, ///< q s + min, q unsigned
  float8,     ///< float8_e4m3fn(w / s) s
};

/// A row of the scheme table (see the header comment).
struct AffineSchemeInfo {
  AffineScheme scheme;
  std::string_view name;     ///< "quanto int4"
  AffineKind kind;
  int bits;                  ///< bits per code
  float divisor;             ///< symmetric / float8: s = amax / divisor
  int qmin, qmax;            ///< the code range
  std::int64_t group;        ///< default group size; 0: one scale per output channel
  bool dynamic_activation;   ///< x quantized to int8 per row at every call
};

inline constexpr AffineSchemeInfo affine_scheme_table[] = {
    {AffineScheme::quanto_int8, "quanto int8", AffineKind::symmetric, 8, 127.0f, -128, 127, 0, false},
    {AffineScheme::quanto_int4, "quanto int4", AffineKind::zero_point, 4, 0.0f, 0, 15, 128, false},
    {AffineScheme::quanto_int2, "quanto int2", AffineKind::zero_point, 2, 0.0f, 0, 3, 128, false},
    {AffineScheme::quanto_float8, "quanto float8", AffineKind::float8, 8, 448.0f, 0, 0, 0, false},
    {AffineScheme::torchao_int8_weight_only, "torchao int8_weight_only", AffineKind::symmetric, 8, 127.5f, -128, 127, 0,
     false},
    {AffineScheme::torchao_int4_weight_only, "torchao int4_weight_only", AffineKind::zero_point, 4, 0.0f, 0, 15, 128,
     false},
    {AffineScheme::torchao_int8_dynamic_activation_int8_weight, "torchao int8_dynamic_activation_int8_weight",
     AffineKind::symmetric, 8, 127.5f, -128, 127, 0, true},
    {AffineScheme::torchao_float8_weight_only, "torchao float8_weight_only", AffineKind::float8, 8, 448.0f, 0, 0, 0,
     false},
};

constexpr const AffineSchemeInfo& affine_scheme_info(AffineScheme s) {
  for (const auto& row : affine_scheme_table) {
    if (row.scheme == s) return row;
  }
  return affine_scheme_table[0];  // unreachable: every enumerator has a row
}

/// The value column c of a row of codes stands for, given its group's scale (and min): int8 or
/// float8_e4m3fn bytes, or `bits`-wide codes packed low bits first. Host and CUDA code share it.
ACCEL_HOST_DEVICE inline float affine_value(AffineKind kind, int bits, const std::uint8_t* row, std::int64_t c,
                                            float scale, float min) noexcept {
  if (kind == AffineKind::float8) return static_cast<float>(float8_e4m3fn::from_bits(row[c])) * scale;
  if (bits == 8) return static_cast<float>(static_cast<std::int8_t>(row[c])) * scale;
  const int per_byte = 8 / bits;
  const int code = (row[c / per_byte] >> (bits * static_cast<int>(c % per_byte))) & ((1 << bits) - 1);
  return static_cast<float>(code) * scale + min;
}

}  // namespace accel::quant

// Precision policies: fp32, fp16, bf16, fp8<e4m3> / fp8<e5m2>.
//
// A precision names the dtype weights are held in, the dtype matmuls compute in, and whether
// module outputs are converted back to fp32 (Accelerate's convert_outputs_to_fp32). The default
// of a policy bundle is fp32. `mixed_precision` spells it as Accelerate's config does.
#pragma once

#include <string_view>
#include <type_traits>

#include "accel/core/dtype.hpp"

namespace accel::policy {

/// Base of every precision tag; `is_precision_v` detects it.
struct precision_tag {};

struct fp32 : precision_tag {
  static constexpr DType storage_dtype = DType::f32;
  static constexpr DType compute_dtype = DType::f32;
  static constexpr bool convert_outputs_to_fp32 = false;
  static constexpr std::string_view mixed_precision = "no";
};
struct fp16 : precision_tag {
  static constexpr DType storage_dtype = DType::f16;
  static constexpr DType compute_dtype = DType::f16;
  static constexpr bool convert_outputs_to_fp32 = true;
  static constexpr std::string_view mixed_precision = "fp16";
};
struct bf16 : precision_tag {
  static constexpr DType storage_dtype = DType::bf16;
  static constexpr DType compute_dtype = DType::bf16;
  static constexpr bool convert_outputs_to_fp32 = true;
  static constexpr std::string_view mixed_precision = "bf16";
};

/// FP8 formats for fp8<F>.
struct e4m3 {
  static constexpr DType dtype = DType::f8_e4m3fn;
};
struct e5m2 {
  static constexpr DType dtype = DType::f8_e5m2;
};

template <class F>
inline constexpr bool is_fp8_format_v = std::is_same_v<F, e4m3> || std::is_same_v<F, e5m2>;

/// FP8 weights (e4m3 by default, as Transformer Engine's HYBRID recipe stores forward
/// tensors); matmuls accumulate in bf16 on hardware without FP8 units.
template <class Format = e4m3>
struct fp8 : precision_tag {
  static_assert(is_fp8_format_v<Format>,
                "accel::policy::fp8<F>: F must be a float8 format; valid choices: e4m3, e5m2");
  static constexpr DType storage_dtype = Format::dtype;
  static constexpr DType compute_dtype = DType::bf16;
  static constexpr bool convert_outputs_to_fp32 = true;
  static constexpr std::string_view mixed_precision = "fp8";
};

template <class T>
inline constexpr bool is_precision_v = std::is_base_of_v<precision_tag, T>;

/// A precision tag: fp32, fp16, bf16 or fp8<e4m3|e5m2>.
template <class T>
concept Precision = is_precision_v<T>;

}  // namespace accel::policy

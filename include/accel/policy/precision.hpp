// Precision policies: fp32, fp16, bf16, fp8<e4m3> / fp8<e5m2>, and precision_kind, the trait a
// policy bundle finds them by.
//
// A precision names the dtype weights are held in, the dtype matmuls compute in, and whether
// module outputs are converted back to fp32 (Accelerate's convert_outputs_to_fp32). Each tag
// carries the PrecisionType it stands for (Accelerate's mixed_precision, which its config spells
// "no", "fp16", "bf16" or "fp8"): the one enum of the setting, which utils' config files read.
// The default of a policy bundle is fp32.
//
// Two functions turn a run-time choice into a tag, in one place each: with_precision(setting, f)
// for a mixed-precision setting (a config file's "bf16"), with_storage_precision(dtype, f) for
// the dtype a model's weights are held in (a checkpoint's torch_dtype, `accel run --dtype`),
// which is how the model factories pick the instantiation compiled for that dtype.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/policy/kind.hpp"

namespace accel::policy {

/// Accelerate's `mixed_precision` setting (its PrecisionType), as a config file holds it; each
/// precision tag carries the value it stands for.
enum class PrecisionType : std::uint8_t {
  no,    ///< full precision: fp32
  fp8,   ///< fp8<F>: float8 weights, bf16 compute
  fp16,  ///< fp16
  bf16,  ///< bf16
};

/// Accelerate's string value of each PrecisionType, in enumerator order, as config files and
/// ACCELERATE_MIXED_PRECISION write it.
inline constexpr std::string_view precision_type_names[] = {"no", "fp8", "fp16", "bf16"};

/// Accelerate's spelling of `p`.
constexpr std::string_view to_string(PrecisionType p) {
  const auto i = static_cast<std::size_t>(p);
  return i < std::size(precision_type_names) ? precision_type_names[i] : std::string_view("?");
}

/// Base of every precision tag; `is_precision_v` detects it, so a tag needs no registration.
struct precision_tag {};

/// The members every precision tag carries, written once.
template <PrecisionType Id, DType Storage, DType Compute, bool ConvertOutputs>
struct basic_precision : precision_tag {
  /// The setting this tag stands for; switch on it rather than on `mixed_precision`.
  static constexpr PrecisionType id = Id;
  /// The dtype weights are created and held in.
  static constexpr DType storage_dtype = Storage;
  /// The dtype matmul, linear and attention compute in (the autocast dtype).
  static constexpr DType compute_dtype = Compute;
  /// Whether module outputs are cast back to fp32, so that code after the model sees fp32 as
  /// Accelerate's convert_outputs_to_fp32 guarantees.
  static constexpr bool convert_outputs_to_fp32 = ConvertOutputs;
  /// `id` as Accelerate spells it, for configs and logs.
  static constexpr std::string_view mixed_precision = to_string(Id);
};

/// Full precision: f32 weights and compute; outputs need no conversion.
struct fp32 : basic_precision<PrecisionType::no, DType::f32, DType::f32, false> {};
/// Half precision: f16 weights and compute, outputs back to fp32.
struct fp16 : basic_precision<PrecisionType::fp16, DType::f16, DType::f16, true> {};
/// bfloat16: bf16 weights and compute, outputs back to fp32.
struct bf16 : basic_precision<PrecisionType::bf16, DType::bf16, DType::bf16, true> {};

/// The float8 format of fp8<e4m3>: more mantissa, the format forward tensors are stored in.
struct e4m3 {
  /// The dtype fp8<e4m3> weights are held in.
  static constexpr DType dtype = DType::f8_e4m3fn;
};
/// The float8 format of fp8<e5m2>: more range, the format gradients usually take.
struct e5m2 {
  /// The dtype fp8<e5m2> weights are held in.
  static constexpr DType dtype = DType::f8_e5m2;
};

/// True for the float8 formats fp8<F> accepts.
template <class F>
inline constexpr bool is_fp8_format_v = std::is_same_v<F, e4m3> || std::is_same_v<F, e5m2>;

namespace detail {
// A bad format must reach fp8's own static_assert rather than fail inside its base first.
template <class F>
constexpr DType fp8_storage_dtype() {
  if constexpr (is_fp8_format_v<F>) {
    return F::dtype;
  } else {
    return DType::f8_e4m3fn;
  }
}
}  // namespace detail

/// FP8 weights (e4m3 by default, as Transformer Engine's HYBRID recipe stores forward tensors);
/// matmuls accumulate in bf16 on hardware without FP8 units.
template <class Format = e4m3>
struct fp8 : basic_precision<PrecisionType::fp8, detail::fp8_storage_dtype<Format>(), DType::bf16, true> {
  static_assert(is_fp8_format_v<Format>,
                "accel::policy::fp8<F>: F must be a float8 format; valid choices: e4m3, e5m2");
  /// The float8 format weights are held in.
  using format = Format;
};

/// True for precision tags.
template <class T>
inline constexpr bool is_precision_v = std::is_base_of_v<precision_tag, T>;

/// A precision tag: fp32, fp16, bf16 or fp8<e4m3|e5m2>.
template <class T>
concept Precision = is_precision_v<T>;

/// Calls f(tag) with the precision tag of a mixed-precision setting (fp8 means fp8<e4m3>), so that
/// a run-time config value selects compile-time code.
template <class F>
decltype(auto) with_precision(PrecisionType p, F&& f) {
  switch (p) {
    case PrecisionType::fp16: return std::forward<F>(f)(fp16{});
    case PrecisionType::bf16: return std::forward<F>(f)(bf16{});
    case PrecisionType::fp8: return std::forward<F>(f)(fp8<>{});
    case PrecisionType::no: break;
  }
  return std::forward<F>(f)(fp32{});
}

/// Calls f(tag) with the precision whose weights are held in `dtype`: fp32, fp16 or bf16. A model
/// built for a dtype chosen at run time is the instantiation compiled for that precision, so its
/// forward computes in the dtype its weights are held in (and outputs leave it as float32, as the
/// tag says). ValueError naming `what` for any other dtype.
template <class F>
decltype(auto) with_storage_precision(DType dtype, F&& f, std::string_view what = "model") {
  switch (dtype) {
    case DType::f32: return std::forward<F>(f)(fp32{});
    case DType::f16: return std::forward<F>(f)(fp16{});
    case DType::bf16: return std::forward<F>(f)(bf16{});
    default: break;
  }
  throw ValueError(std::string(what) + ": weights in " + std::string(dtype_name(dtype)) +
                   " have no compiled precision (float32, float16 or bfloat16)");
}

/// The precision kind of a policy bundle (see kind.hpp for what each member is for).
struct precision_kind {
  /// The kind's name, that of the bundle member it fills.
  static constexpr std::string_view name = "precision";
  /// Recognises precision tags among a bundle's tags.
  template <class T>
  using matches = std::bool_constant<is_precision_v<T>>;
  /// A bundle that names no precision computes in full precision.
  using default_tag = fp32;
  /// Gives a bundle `P::precision`.
  template <class Tag>
  struct member {
    /// The bundle's precision tag.
    using precision = Tag;
  };
  /// Compiles only when Ok; otherwise the error lists the precision tags.
  template <bool Ok>
  static constexpr void valid_choices() {
    static_assert(Ok, "accel::policies<...>: at most one precision tag per bundle; valid choices: fp32, fp16, "
                      "bf16, fp8<e4m3>, fp8<e5m2>");
  }
};

static_assert(PolicyKind<precision_kind>);

}  // namespace accel::policy

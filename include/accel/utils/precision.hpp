// PrecisionType <-> DType <-> the precision policy tags (policy/precision.hpp).
//
//   precision_dtype(PrecisionType)       no -> f32, fp16 -> f16, bf16 -> bf16, fp8 -> f8_e4m3fn
//   policy::bf16::id                     PrecisionType::bf16 (compile time; the enum is the policy
//                                        layer's, so a tag and a config value are one spelling)
//   with_precision(PrecisionType, f)     f(policy tag) chosen at run time from a config value (the
//                                        policy layer's, re-exported)
#pragma once

#include <utility>

#include "accel/core/dtype.hpp"
#include "accel/policy/precision.hpp"
#include "accel/utils/enums.hpp"

namespace accel::utils {

/// The dtype weights are held in under a mixed-precision setting ("no" keeps f32).
constexpr DType precision_dtype(PrecisionType p) {
  switch (p) {
    case PrecisionType::fp16: return DType::f16;
    case PrecisionType::bf16: return DType::bf16;
    case PrecisionType::fp8: return DType::f8_e4m3fn;
    case PrecisionType::no: break;
  }
  return DType::f32;
}

/// Calls f(tag) with the policy tag of a setting (policy/precision.hpp: the one place it is written).
using policy::with_precision;

static_assert(to_string(policy::fp16::id) == policy::fp16::mixed_precision);
static_assert(precision_dtype(policy::fp16::id) == policy::fp16::storage_dtype);
static_assert(precision_dtype(policy::fp8<>::id) == policy::fp8<>::storage_dtype);

}  // namespace accel::utils

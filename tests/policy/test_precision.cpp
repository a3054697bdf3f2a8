// Precision tags: the dtypes they stand for, their PrecisionType id and Accelerate's spelling.
#include <catch2/catch.hpp>

#include <type_traits>

#include "accel/policy/precision.hpp"

using namespace accel;
using namespace accel::policy;

TEST_CASE("precision tags carry their storage and compute dtypes", "[policy][precision]") {
  STATIC_REQUIRE(fp32::storage_dtype == DType::f32);
  STATIC_REQUIRE(fp32::compute_dtype == DType::f32);
  STATIC_REQUIRE(fp16::storage_dtype == DType::f16);
  STATIC_REQUIRE(fp16::compute_dtype == DType::f16);
  STATIC_REQUIRE(bf16::storage_dtype == DType::bf16);
  STATIC_REQUIRE(bf16::compute_dtype == DType::bf16);
  // fp8 stores in float8 but computes in bf16 on hardware without FP8 units.
  STATIC_REQUIRE(fp8<>::storage_dtype == DType::f8_e4m3fn);
  STATIC_REQUIRE(fp8<e5m2>::storage_dtype == DType::f8_e5m2);
  STATIC_REQUIRE(fp8<e5m2>::compute_dtype == DType::bf16);
  STATIC_REQUIRE(std::is_same_v<fp8<>::format, e4m3>);
}

TEST_CASE("every reduced precision converts outputs back to fp32", "[policy][precision]") {
  STATIC_REQUIRE_FALSE(fp32::convert_outputs_to_fp32);
  STATIC_REQUIRE(fp16::convert_outputs_to_fp32);
  STATIC_REQUIRE(bf16::convert_outputs_to_fp32);
  STATIC_REQUIRE(fp8<e4m3>::convert_outputs_to_fp32);
}

TEST_CASE("precision tags carry their PrecisionType, spelled as Accelerate's config does", "[policy][precision]") {
  STATIC_REQUIRE(fp32::id == PrecisionType::no);
  STATIC_REQUIRE(fp16::id == PrecisionType::fp16);
  STATIC_REQUIRE(bf16::id == PrecisionType::bf16);
  STATIC_REQUIRE(fp8<e5m2>::id == PrecisionType::fp8);
  REQUIRE(fp32::mixed_precision == "no");
  REQUIRE(fp16::mixed_precision == "fp16");
  REQUIRE(bf16::mixed_precision == "bf16");
  REQUIRE(fp8<e4m3>::mixed_precision == "fp8");
  REQUIRE(to_string(PrecisionType::bf16) == "bf16");
}

TEST_CASE("precision_kind recognises precision tags only", "[policy][precision]") {
  STATIC_REQUIRE(PolicyKind<precision_kind>);
  STATIC_REQUIRE(precision_kind::name == "precision");
  STATIC_REQUIRE(precision_kind::matches<fp8<e5m2>>::value);
  STATIC_REQUIRE_FALSE(precision_kind::matches<e4m3>::value);
  STATIC_REQUIRE_FALSE(precision_kind::matches<int>::value);
  STATIC_REQUIRE(std::is_same_v<precision_kind::default_tag, fp32>);
  STATIC_REQUIRE(std::is_same_v<precision_kind::member<bf16>::precision, bf16>);
  STATIC_REQUIRE(Precision<fp8<e4m3>>);
  STATIC_REQUIRE_FALSE(Precision<float>);
  STATIC_REQUIRE(is_fp8_format_v<e5m2>);
  STATIC_REQUIRE_FALSE(is_fp8_format_v<bf16>);
}

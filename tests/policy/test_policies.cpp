// Policy bundles: defaults, any order, and the traits each tag carries.
#include <catch2/catch.hpp>

#include <type_traits>

#include "accel/policy/policies.hpp"

using namespace accel;
using namespace accel::policy;

TEST_CASE("a bundle defaults every kind it does not name") {
  using P = default_policies;
  static_assert(std::is_same_v<P::precision, fp32>);
  static_assert(std::is_same_v<P::distributed, no_dist>);
  static_assert(std::is_same_v<P::offload, no_offload>);
  static_assert(PolicyBundle<P>);
  static_assert(!PolicyBundle<int>);
  SUCCEED();
}

TEST_CASE("tags are found in any order") {
  using A = policies<prefetch<2>, bf16, multi_gpu<>>;
  using B = policies<multi_gpu<nccl>, prefetch<2>, bf16>;
  static_assert(std::is_same_v<A::precision, B::precision>);
  static_assert(std::is_same_v<A::offload, prefetch<2>>);
  static_assert(std::is_same_v<B::distributed, multi_gpu<nccl>>);
  static_assert(A::offload::prefetch_depth == 2);
  SUCCEED();
}

TEST_CASE("precision tags carry dtypes and Accelerate's mixed_precision names") {
  STATIC_REQUIRE(fp16::storage_dtype == DType::f16);
  STATIC_REQUIRE(bf16::convert_outputs_to_fp32);
  STATIC_REQUIRE_FALSE(fp32::convert_outputs_to_fp32);
  STATIC_REQUIRE(fp8<>::storage_dtype == DType::f8_e4m3fn);
  STATIC_REQUIRE(fp8<e5m2>::storage_dtype == DType::f8_e5m2);
  REQUIRE(fp32::mixed_precision == "no");
  REQUIRE(fp8<e4m3>::mixed_precision == "fp8");
  STATIC_REQUIRE(Precision<fp8<e4m3>>);
  STATIC_REQUIRE_FALSE(Precision<no_dist>);
  STATIC_REQUIRE(Offload<sync_offload>);
  STATIC_REQUIRE(Distributed<multi_cpu<mpi>>);
  REQUIRE(multi_cpu<>::distributed_type == "MULTI_CPU");
  STATIC_REQUIRE(sync_offload::offloads && !no_offload::offloads);
}

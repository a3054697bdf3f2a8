// Distributed tags: the DistributedType and library they stand for, and Accelerate's spelling.
#include <catch2/catch.hpp>

#include <type_traits>

#include "accel/policy/distributed.hpp"

using namespace accel::policy;

TEST_CASE("distributed tags carry a DistributedType id spelled as Accelerate's config does",
          "[policy][distributed]") {
  STATIC_REQUIRE(no_dist::id == DistributedType::no);
  STATIC_REQUIRE(multi_cpu<>::id == DistributedType::multi_cpu);
  STATIC_REQUIRE(multi_gpu<>::id == DistributedType::multi_gpu);
  REQUIRE(no_dist::distributed_type == "NO");
  REQUIRE(multi_cpu<mpi>::distributed_type == "MULTI_CPU");
  REQUIRE(multi_gpu<nccl>::distributed_type == "MULTI_GPU");
  REQUIRE(to_string(DistributedType::megatron_lm) == "MEGATRON_LM");
  REQUIRE(std::size(distributed_type_names) == 14);
}

TEST_CASE("each communicating tag names its library, MPI for CPUs and NCCL for GPUs", "[policy][distributed]") {
  STATIC_REQUIRE(std::is_same_v<multi_cpu<>::backend, mpi>);
  STATIC_REQUIRE(std::is_same_v<multi_gpu<>::backend, nccl>);
  REQUIRE(mpi::name == "mpi");
  REQUIRE(nccl::name == "nccl");
}

TEST_CASE("distributed_kind recognises distributed tags only", "[policy][distributed]") {
  STATIC_REQUIRE(PolicyKind<distributed_kind>);
  STATIC_REQUIRE(distributed_kind::name == "distributed");
  STATIC_REQUIRE(distributed_kind::matches<multi_cpu<mpi>>::value);
  STATIC_REQUIRE_FALSE(distributed_kind::matches<mpi>::value);
  STATIC_REQUIRE(std::is_same_v<distributed_kind::default_tag, no_dist>);
  STATIC_REQUIRE(std::is_same_v<distributed_kind::member<no_dist>::distributed, no_dist>);
  STATIC_REQUIRE(Distributed<multi_gpu<nccl>>);
  STATIC_REQUIRE_FALSE(Distributed<nccl>);
}

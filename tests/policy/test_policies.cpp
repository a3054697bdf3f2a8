// Policy bundles: each kind found in any order, defaults for the kinds not named, and what
// counts as a bundle for Module & co.
#include <catch2/catch.hpp>

#include <type_traits>

#include "accel/policy/policies.hpp"

using namespace accel;
using namespace accel::policy;

namespace {
template <class P>
concept has_offload_member = requires { typename P::offload; };
}  // namespace

TEST_CASE("a bundle finds each tag whatever the order it is given in", "[policy][bundle]") {
  using A = policies<prefetch<2>, bf16, multi_gpu<>>;
  using B = policies<multi_gpu<nccl>, prefetch<2>, bf16>;
  using C = policies<bf16, multi_gpu<nccl>, prefetch<2>>;
  STATIC_REQUIRE(std::is_same_v<A::precision, bf16>);
  STATIC_REQUIRE(std::is_same_v<B::precision, bf16>);
  STATIC_REQUIRE(std::is_same_v<C::precision, bf16>);
  STATIC_REQUIRE(std::is_same_v<A::distributed, multi_gpu<nccl>>);
  STATIC_REQUIRE(std::is_same_v<B::distributed, multi_gpu<nccl>>);
  STATIC_REQUIRE(std::is_same_v<C::distributed, multi_gpu<nccl>>);
  STATIC_REQUIRE(std::is_same_v<A::offload, prefetch<2>>);
  STATIC_REQUIRE(std::is_same_v<B::offload, prefetch<2>>);
  STATIC_REQUIRE(std::is_same_v<C::offload, prefetch<2>>);
  STATIC_REQUIRE(A::offload::prefetch_depth == 2);
}

TEST_CASE("a bundle defaults every kind it does not name", "[policy][bundle]") {
  STATIC_REQUIRE(std::is_same_v<default_policies::precision, fp32>);
  STATIC_REQUIRE(std::is_same_v<default_policies::distributed, no_dist>);
  STATIC_REQUIRE(std::is_same_v<default_policies::offload, no_offload>);

  using OnlyOffload = policies<sync_offload>;
  STATIC_REQUIRE(std::is_same_v<OnlyOffload::precision, fp32>);
  STATIC_REQUIRE(std::is_same_v<OnlyOffload::distributed, no_dist>);
  STATIC_REQUIRE(std::is_same_v<OnlyOffload::offload, sync_offload>);

  // Each default is the kind's own, so a bundle and its kinds cannot disagree.
  STATIC_REQUIRE(std::is_same_v<default_policies::precision, precision_kind::default_tag>);
  STATIC_REQUIRE(std::is_same_v<default_policies::distributed, distributed_kind::default_tag>);
  STATIC_REQUIRE(std::is_same_v<default_policies::offload, offload_kind::default_tag>);
}

TEST_CASE("tag_of reaches each kind's tag without naming its member", "[policy][bundle]") {
  using P = policies<fp16, multi_cpu<>>;
  STATIC_REQUIRE(std::is_same_v<P::kinds, policy::kinds>);
  STATIC_REQUIRE(std::is_same_v<P::tag_of<precision_kind>, P::precision>);
  STATIC_REQUIRE(std::is_same_v<P::tag_of<distributed_kind>, multi_cpu<mpi>>);
  STATIC_REQUIRE(std::is_same_v<P::tag_of<offload_kind>, no_offload>);
}

TEST_CASE("PolicyBundle accepts policies<...> and nothing else", "[policy][bundle]") {
  STATIC_REQUIRE(PolicyBundle<default_policies>);
  STATIC_REQUIRE(PolicyBundle<policies<bf16, prefetch<1>>>);
  STATIC_REQUIRE(PolicyBundle<basic_policies<policy::kinds, bf16>>);
  STATIC_REQUIRE_FALSE(PolicyBundle<int>);
  STATIC_REQUIRE_FALSE(PolicyBundle<bf16>);
  // Module reads P::offload, so a bundle that lacks a kind of policies<...> is not one.
  STATIC_REQUIRE_FALSE(PolicyBundle<basic_policies<boost::mp11::mp_list<precision_kind>, bf16>>);
}

TEST_CASE("a bundle over fewer kinds has only their members", "[policy][bundle]") {
  using P = basic_policies<boost::mp11::mp_list<precision_kind>, fp16>;
  STATIC_REQUIRE(std::is_same_v<P::precision, fp16>);
  STATIC_REQUIRE_FALSE(has_offload_member<P>);
  STATIC_REQUIRE(has_offload_member<default_policies>);
}

TEST_CASE("a bundle tells a named kind from a defaulted one", "[policy][bundle]") {
  using P = policies<fp32, sync_offload>;
  STATIC_REQUIRE(P::names<precision_kind>);
  STATIC_REQUIRE(P::names<offload_kind>);
  STATIC_REQUIRE_FALSE(P::names<distributed_kind>);
  STATIC_REQUIRE_FALSE(default_policies::names<precision_kind>);
  STATIC_REQUIRE(P::search_of<precision_kind>::count == 1);
  STATIC_REQUIRE(std::is_same_v<P::search_of<distributed_kind>::type, no_dist>);
  // The per-kind searches the planner reads agree with search_of.
  STATIC_REQUIRE(std::is_same_v<P::precision_search, P::search_of<precision_kind>>);
  STATIC_REQUIRE(std::is_same_v<P::distributed_search, P::search_of<distributed_kind>>);
  STATIC_REQUIRE(std::is_same_v<P::offload_search, P::search_of<offload_kind>>);
  STATIC_REQUIRE(default_policies::precision_search::count == 0);
}

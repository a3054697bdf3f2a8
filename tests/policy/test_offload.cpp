// Offload tags: whether they move weights and the prefetch depth the planner reserves for.
#include <catch2/catch.hpp>

#include <type_traits>
#include <utility>

#include "accel/policy/offload.hpp"

using namespace accel::policy;

TEST_CASE("offload tags say whether weights move and whether they are read ahead", "[policy][offload]") {
  STATIC_REQUIRE_FALSE(no_offload::offloads);
  STATIC_REQUIRE_FALSE(prefetches_v<no_offload>);
  STATIC_REQUIRE_FALSE(prefetches_v<sync_offload>);
  STATIC_REQUIRE(prefetches_v<prefetch<3>>);
  STATIC_REQUIRE(sync_offload::offloads);
  STATIC_REQUIRE(prefetch<1>::offloads);
}

TEST_CASE("only prefetch<N> keeps blocks in flight, N of them", "[policy][offload]") {
  STATIC_REQUIRE(no_offload::prefetch_depth == 0);
  STATIC_REQUIRE(sync_offload::prefetch_depth == 0);
  STATIC_REQUIRE(prefetch<1>::prefetch_depth == 1);
  STATIC_REQUIRE(prefetch<4>::prefetch_depth == 4);
}

TEST_CASE("offload_kind recognises offload tags only", "[policy][offload]") {
  STATIC_REQUIRE(PolicyKind<offload_kind>);
  STATIC_REQUIRE(offload_kind::name == "offload");
  STATIC_REQUIRE(offload_kind::matches<prefetch<2>>::value);
  STATIC_REQUIRE_FALSE(offload_kind::matches<int>::value);
  STATIC_REQUIRE(std::is_same_v<offload_kind::default_tag, no_offload>);
  STATIC_REQUIRE(std::is_same_v<offload_kind::member<sync_offload>::offload, sync_offload>);
  STATIC_REQUIRE(Offload<sync_offload>);
  STATIC_REQUIRE_FALSE(Offload<int>);
}

TEST_CASE("with_offload_depth turns a run-time depth into its tag, in one place", "[policy][offload]") {
  for (std::size_t depth = 0; depth <= max_compiled_prefetch_depth; ++depth) {
    const auto got = with_offload_depth(depth, []<class Tag>(Tag) {
      if constexpr (prefetches_v<Tag>) return std::pair{std::is_same_v<Tag, prefetch<Tag::prefetch_depth>>, Tag::prefetch_depth};
      else return std::pair{std::is_same_v<Tag, sync_offload>, Tag::prefetch_depth};
    });
    CHECK(got.first);
    CHECK(got.second == depth);
  }
  CHECK_THROWS_AS(with_offload_depth(max_compiled_prefetch_depth + 1, [](auto) { return 0; }), accel::ValueError);
}

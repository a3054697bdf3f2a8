// The extension point: a kind declared here, outside the library, joins a bundle through
// basic_policies and behaves as the built-in kinds do.
#include <catch2/catch.hpp>

#include <string_view>
#include <type_traits>

#include <boost/mp11/list.hpp>

#include "accel/policy/policies.hpp"

using namespace accel;
using namespace accel::policy;

namespace {

// A toy quantization scheme kind: everything a kind is, in one place, as a header would hold it.
struct quant_tag {};
struct no_quant : quant_tag {};
template <int Bits>
struct int_weights : quant_tag {
  static constexpr int bits = Bits;
};

struct quant_kind {
  static constexpr std::string_view name = "quantization";
  template <class T>
  using matches = std::is_base_of<quant_tag, T>;
  using default_tag = no_quant;
  template <class Tag>
  struct member {
    using quantization = Tag;
  };
  template <bool Ok>
  static constexpr void valid_choices() {
    static_assert(Ok, "at most one quantization tag per bundle; valid choices: no_quant, int_weights<Bits>");
  }
};

using quant_kinds = boost::mp11::mp_push_back<policy::kinds, quant_kind>;

template <class... Ts>
using quant_policies = basic_policies<quant_kinds, Ts...>;

}  // namespace

TEST_CASE("a kind declared outside the library models PolicyKind", "[policy][kind]") {
  STATIC_REQUIRE(PolicyKind<quant_kind>);
  STATIC_REQUIRE_FALSE(PolicyKind<no_quant>);
  STATIC_REQUIRE_FALSE(PolicyKind<int>);
}

TEST_CASE("a new kind is found in any order and defaulted like the built-in ones", "[policy][kind]") {
  using A = quant_policies<int_weights<4>, bf16, prefetch<2>>;
  using B = quant_policies<prefetch<2>, bf16, int_weights<4>>;
  STATIC_REQUIRE(std::is_same_v<A::quantization, int_weights<4>>);
  STATIC_REQUIRE(std::is_same_v<B::quantization, int_weights<4>>);
  STATIC_REQUIRE(std::is_same_v<A::tag_of<quant_kind>, int_weights<4>>);
  STATIC_REQUIRE(A::quantization::bits == 4);
  STATIC_REQUIRE(std::is_same_v<quant_policies<>::quantization, no_quant>);
  STATIC_REQUIRE(std::is_same_v<quant_policies<fp16>::quantization, no_quant>);
}

TEST_CASE("adding a kind leaves the built-in members as they were", "[policy][kind]") {
  using P = quant_policies<int_weights<8>, multi_cpu<>>;
  STATIC_REQUIRE(std::is_same_v<P::precision, fp32>);
  STATIC_REQUIRE(std::is_same_v<P::distributed, multi_cpu<mpi>>);
  STATIC_REQUIRE(std::is_same_v<P::offload, no_offload>);
  // It still holds every kind Module reads, so Module & co. take it.
  STATIC_REQUIRE(PolicyBundle<P>);
}

TEST_CASE("a bundle may hold only kinds of its own", "[policy][kind]") {
  using P = basic_policies<boost::mp11::mp_list<quant_kind>, int_weights<2>>;
  STATIC_REQUIRE(std::is_same_v<P::quantization, int_weights<2>>);
  STATIC_REQUIRE_FALSE(PolicyBundle<P>);
}

// expect: a tag is of more than one policy kind
// A kind whose matcher also accepts another kind's tags makes those tags ambiguous.
#include <string_view>
#include <type_traits>

#include <boost/mp11/list.hpp>

#include "accel/policy/policies.hpp"

struct greedy_kind {
  static constexpr std::string_view name = "greedy";
  template <class T>
  using matches = std::bool_constant<accel::policy::is_precision_v<T>>;
  using default_tag = accel::policy::fp32;
  template <class Tag>
  struct member {
    using greedy = Tag;
  };
  template <bool Ok>
  static constexpr void valid_choices() {
    static_assert(Ok, "at most one greedy tag per bundle");
  }
};

using P = accel::basic_policies<boost::mp11::mp_push_back<accel::policy::kinds, greedy_kind>, accel::policy::bf16>;
P::precision* p = nullptr;

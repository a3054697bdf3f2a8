// policies<Ts...>: a bundle of at most one tag of each policy kind (precision, distributed,
// offload), in any order, each defaulted when absent (fp32, no_dist, no_offload).
//
//   using P = accel::policies<accel::policy::bf16, accel::policy::prefetch<2>>;
//   P::precision  -> bf16,  P::distributed -> no_dist,  P::offload -> prefetch<2>
//
// Finding, defaulting and checking know no kind by name: the bundle walks policy::kinds, and each
// kind (its own header, see kind.hpp) recognises its tags, names its default, adds its member and
// spells its errors. A
// repeated kind fails with that kind's valid choices; an unknown tag with every kind's.
// basic_policies<Kinds, Ts...> is the same bundle over another list of kinds, which is how code
// outside this header adds one.
#pragma once

#include <cstddef>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/bind.hpp>
#include <boost/mp11/list.hpp>
#include <boost/mp11/set.hpp>
#include <boost/mp11/utility.hpp>

#include "accel/policy/distributed.hpp"
#include "accel/policy/kind.hpp"
#include "accel/policy/offload.hpp"
#include "accel/policy/precision.hpp"

namespace accel {

namespace policy {

/// The kinds accel::policies<...> knows. A new kind is its own header plus one entry here.
using kinds = boost::mp11::mp_list<precision_kind, distributed_kind, offload_kind>;

namespace detail {

namespace mp = boost::mp11;

template <class K>
using is_kind = mp::mp_bool<PolicyKind<K>>;

// Everything else assumes well-formed kinds; checking them first keeps a bad list to one error.
template <class Kinds>
inline constexpr bool valid_kinds = mp::mp_all_of<Kinds, is_kind>::value && mp::mp_is_set<Kinds>::value;

template <class K, class... Ts>
using tags_of_kind = mp::mp_copy_if<mp::mp_list<Ts...>, K::template matches>;

template <class K, class... Ts>
using find_tag = mp::mp_eval_if_c<mp::mp_empty<tags_of_kind<K, Ts...>>::value, typename K::default_tag, mp::mp_front,
                                  tags_of_kind<K, Ts...>>;

template <class K, class... Ts>
struct search {
  using type = find_tag<K, Ts...>;
  static constexpr std::size_t count = mp::mp_size<tags_of_kind<K, Ts...>>::value;
};

template <class T>
struct matched_by {
  template <class K>
  using fn = mp::mp_bool<K::template matches<T>::value>;
};

template <class Kinds, class T>
inline constexpr std::size_t kinds_matching = mp::mp_count_if_q<Kinds, matched_by<T>>::value;

// A function per tag, so that the diagnostic names the offending tag.
template <class Kinds, class T>
constexpr void check_tag() {
  static_assert(kinds_matching<Kinds, T> != 0,
                "accel::policies<...>: unknown policy tag: it is of none of the bundle's kinds, whose valid choices "
                "follow");
  static_assert(kinds_matching<Kinds, T> <= 1,
                "accel::policies<...>: a tag is of more than one policy kind; each kind's `matches` must recognise "
                "its own tags only");
}

template <class KindList, class TagList>
struct check_kinds;

template <class... Ks, class... Ts>
struct check_kinds<mp::mp_list<Ks...>, mp::mp_list<Ts...>> {
  static constexpr bool all_known = (true && ... && (kinds_matching<mp::mp_list<Ks...>, Ts> != 0));
  // After an unknown tag every kind lists its choices, since any of them may be what was meant.
  static constexpr void run() {
    (Ks::template valid_choices<all_known && mp::mp_size<tags_of_kind<Ks, Ts...>>::value <= 1>(), ...);
  }
};

// Returns true so that it can sit in a static_assert whose own message would only repeat the
// kinds' messages.
template <class Kinds, class... Ts>
constexpr bool check_bundle() {
  if constexpr (valid_kinds<Kinds>) {
    (check_tag<Kinds, Ts>(), ...);
    check_kinds<mp::mp_rename<Kinds, mp::mp_list>, mp::mp_list<Ts...>>::run();
  }
  return true;
}

template <class K, class... Ts>
using member_of = typename K::template member<find_tag<K, Ts...>>;

template <class Kinds, class... Ts>
using members_of = mp::mp_apply<mp::mp_inherit, mp::mp_transform_q<mp::mp_bind_back<member_of, Ts...>, Kinds>>;

// Inheriting from a malformed kind's member would bury the one clear error under many.
template <class Kinds, class... Ts>
using bundle_base = mp::mp_eval_if_c<!valid_kinds<Kinds>, mp::mp_inherit<>, members_of, Kinds, Ts...>;

}  // namespace detail

}  // namespace policy

/// A policy bundle over the kinds of `Kinds` (an mp_list of policy::PolicyKind): for each kind,
/// the one tag of that kind among Ts (any order) or the kind's default, reachable as the member
/// the kind names (`::precision`) and as `tag_of<Kind>`. policies<Ts...> is this over
/// policy::kinds; code with a kind of its own passes a list that adds it
/// (`mp_push_back<policy::kinds, quant_kind>`).
template <class Kinds, class... Ts>
struct basic_policies : policy::detail::bundle_base<Kinds, Ts...> {
  static_assert(policy::detail::valid_kinds<Kinds>,
                "accel::basic_policies<Kinds, ...>: Kinds must list distinct types that model "
                "accel::policy::PolicyKind (see accel/policy/kind.hpp)");
  static_assert(policy::detail::check_bundle<Kinds, Ts...>());

  /// The kinds this bundle holds one tag of each.
  using kinds = Kinds;

  /// How the bundle found its tag of `Kind`: `type`, the tag, and `count`, 0 when it fell back to
  /// the kind's default.
  template <class Kind>
    requires boost::mp11::mp_contains<Kinds, Kind>::value
  using search_of = policy::detail::search<Kind, Ts...>;

  /// The bundle's tag of kind `Kind`, for code that is generic over kinds.
  template <class Kind>
    requires boost::mp11::mp_contains<Kinds, Kind>::value
  using tag_of = typename search_of<Kind>::type;

  /// Whether the bundle was given a tag of `Kind` rather than falling back to its default (the
  /// planner sizes weights in a precision only when one was asked for).
  template <class Kind>
    requires boost::mp11::mp_contains<Kinds, Kind>::value
  static constexpr bool names = search_of<Kind>::count != 0;

  /// search_of<policy::precision_kind>, under the name the planner reads.
  using precision_search = policy::detail::search<policy::precision_kind, Ts...>;
  /// search_of<policy::distributed_kind>, named as precision_search is.
  using distributed_search = policy::detail::search<policy::distributed_kind, Ts...>;
  /// search_of<policy::offload_kind>, named as precision_search is.
  using offload_search = policy::detail::search<policy::offload_kind, Ts...>;
};

/// The policy bundle that Module, hooks and DeviceMap take (see the header comment). A class of
/// its own rather than an alias, so that diagnostics read `policies<fp16, bf16>`.
template <class... Ts>
struct policies : basic_policies<policy::kinds, Ts...> {};

/// The bundle a user who names nothing gets.
using default_policies = policies<>;

/// The bundle of precision `Tag` alone; the default precision (fp32) is spelled policies<>, so that
/// one precision has one type (LlamaForCausalLM<> is the fp32 model, not a twin of it).
template <policy::Precision Tag>
using precision_policies =
    std::conditional_t<std::is_same_v<Tag, policy::precision_kind::default_tag>, default_policies, policies<Tag>>;

/// True for policy bundles that Module & co. can take: every policies<...>, and a basic_policies
/// whose kinds include all of policy::kinds, since those read `P::precision`, `P::offload`, ...
template <class T>
inline constexpr bool is_policy_bundle_v = false;
/// Every policies<...> is a bundle.
template <class... Ts>
inline constexpr bool is_policy_bundle_v<policies<Ts...>> = true;
/// A basic_policies is one when it holds every kind that policies<...> holds.
template <class Kinds, class... Ts>
inline constexpr bool is_policy_bundle_v<basic_policies<Kinds, Ts...>> =
    boost::mp11::mp_all_of_q<policy::kinds, boost::mp11::mp_bind_front<boost::mp11::mp_contains, Kinds>>::value;

/// A policy bundle (see is_policy_bundle_v).
template <class T>
concept PolicyBundle = is_policy_bundle_v<T>;

}  // namespace accel

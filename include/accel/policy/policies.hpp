// policies<Ts...>: a bundle of at most one precision, one distributed and one offload tag, in
// any order, each defaulted when absent (fp32, no_dist, no_offload).
//
//   using P = accel::policies<accel::policy::bf16, accel::policy::prefetch<2>>;
//   P::precision  -> bf16,  P::distributed -> no_dist,  P::offload -> prefetch<2>
//
// A repeated kind or an unknown tag fails to compile with a message listing the valid choices.
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include "accel/policy/distributed.hpp"
#include "accel/policy/offload.hpp"
#include "accel/policy/precision.hpp"

namespace accel {

namespace policy::detail {

template <template <class> class Is, class Default, class... Ts>
struct find_policy {
  using matches = boost::mp11::mp_copy_if<boost::mp11::mp_list<Ts...>, Is>;
  using type = boost::mp11::mp_eval_if_c<boost::mp11::mp_empty<matches>::value, Default,
                                         boost::mp11::mp_front, matches>;
  static constexpr std::size_t count = boost::mp11::mp_size<matches>::value;
};

template <class T>
using is_precision = std::bool_constant<is_precision_v<T>>;
template <class T>
using is_distributed = std::bool_constant<is_distributed_v<T>>;
template <class T>
using is_offload = std::bool_constant<is_offload_v<T>>;
template <class T>
using is_known_policy = std::bool_constant<is_precision_v<T> || is_distributed_v<T> || is_offload_v<T>>;

}  // namespace policy::detail

/// The policy bundle that Module, hooks and DeviceMap take (see the header comment).
template <class... Ts>
struct policies {
  static_assert((policy::detail::is_known_policy<Ts>::value && ...),
                "accel::policies<...>: unknown policy tag; valid choices: precision (fp32, fp16, bf16, "
                "fp8<e4m3>, fp8<e5m2>), distributed (no_dist, multi_cpu<mpi>, multi_gpu<nccl>), offload "
                "(no_offload, sync_offload, prefetch<N>)");

  using precision_search = policy::detail::find_policy<policy::detail::is_precision, policy::fp32, Ts...>;
  using distributed_search = policy::detail::find_policy<policy::detail::is_distributed, policy::no_dist, Ts...>;
  using offload_search = policy::detail::find_policy<policy::detail::is_offload, policy::no_offload, Ts...>;

  static_assert(precision_search::count <= 1,
                "accel::policies<...>: more than one precision given; choose one of: fp32, fp16, bf16, "
                "fp8<e4m3>, fp8<e5m2>");
  static_assert(distributed_search::count <= 1,
                "accel::policies<...>: more than one distributed policy given; choose one of: no_dist, "
                "multi_cpu<mpi>, multi_gpu<nccl>");
  static_assert(offload_search::count <= 1,
                "accel::policies<...>: more than one offload policy given; choose one of: no_offload, "
                "sync_offload, prefetch<N>");

  using precision = typename precision_search::type;
  using distributed = typename distributed_search::type;
  using offload = typename offload_search::type;
};

/// The bundle a user who names nothing gets.
using default_policies = policies<>;

/// True for instantiations of accel::policies.
template <class T>
inline constexpr bool is_policy_bundle_v = false;
template <class... Ts>
inline constexpr bool is_policy_bundle_v<policies<Ts...>> = true;

template <class T>
concept PolicyBundle = is_policy_bundle_v<T>;

}  // namespace accel

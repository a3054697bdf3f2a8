// recursively_apply(func, data..., [test], [error_on_other_type | reject_other_types], [skip_keys])
//   -> the same structure with func(leaf, parallel_leaf...) in place of every leaf that passes test
// for_each_leaf(func, data, [test]) -> bool: visits leaves in order; func may return true to stop
//
// Several data arguments are walked in parallel: they must have the same shape (sizes, map keys,
// engaged optionals, variant alternatives), else ShapeError / KeyError. The result type is
// computed at compile time and follows the first structure: vector<Tensor> -> vector<R>,
// map<K, Tensor> -> map<K, R>, tuple<A, B> -> tuple<RA, RB>, an aggregate -> the same aggregate
// when no field type changes, else a std::tuple of its fields. Leaves failing the test are
// copied from the first structure, or rejected: reject_other_types makes that a static_assert,
// error_on_other_type a ValueError naming the type. Everything is templates: no type erasure, and
// the only allocations are the rebuilt containers.
//
// Differences from Accelerate:
// - Accelerate walks lists, tuples and Mappings. Here sequences (vector, list, deque), tuple-likes
//   (tuple, pair, array) and maps are walked, and so are optionals, variants, aggregates (Boost.PFR)
//   and nested_traits types: a C++ batch is usually a struct, where Accelerate passes a dataclass
//   through as one leaf.
// - An empty std::optional is Python's None, but it holds no leaf: it stays empty, and
//   error_on_other_type does not reject it (Accelerate raises TypeError for a None leaf).
// - error_on_other_type raises ValueError, where Accelerate raises TypeError: accel's hierarchy
//   has no TypeError.
// - The leaf test is a type (decided at compile time, optionally refined at run time), not a
//   predicate function, and func's extra *args / **kwargs are what the callable captures. A map is
//   rebuilt as the same kind of map with the new value type, not through type(data)(dict).
// - Additions: parallel data arguments, skip_keys (Accelerate has it on send_to_device only) and
//   reject_other_types.
#pragma once

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/mp11/algorithm.hpp>

#include "accel/core/errors.hpp"
#include "accel/nested/traits.hpp"

namespace accel::nested {

/// Leaves failing the test throw ValueError naming their type (run time; `enabled` may be false).
struct error_on_other_type_t : apply_option {
  bool enabled = true;
  constexpr error_on_other_type_t operator()(bool on) const { return error_on_other_type_t{{}, on}; }
};
/// `error_on_other_type` or `error_on_other_type(flag)`.
inline constexpr error_on_other_type_t error_on_other_type{{}, true};

/// Leaf types that can never pass the test are a compile-time error (static_assert).
struct reject_other_types_t : apply_option {};
inline constexpr reject_other_types_t reject_other_types{};

template <class T>
concept ApplyOption = LeafTest<T> || std::is_base_of_v<apply_option, std::remove_cvref_t<T>>;

namespace detail {

// The walk is a chain of distinct specializations, one per level of the type: forcing them inline
// flattens it into the loops a hand-written copy would have.
#if defined(__GNUC__) || defined(__clang__)
#define ACCEL_NESTED_INLINE [[gnu::always_inline]] inline
#else
#define ACCEL_NESTED_INLINE inline
#endif

template <class T>
inline constexpr bool always_false_v = false;

/// Resolved options of one call.
template <class Test, bool Reject>
struct apply_ctx {
  using test_type = Test;
  static constexpr bool reject = Reject;
  Test test{};
  bool error_on_other = false;
  const skip_keys* skip = nullptr;
};

template <class Ctx, class F, class X0, class... Xs>
ACCEL_NESTED_INLINE auto apply_node(const Ctx& ctx, F& f, X0& x0, Xs&... xs);

template <class Ctx, class F, class... X>
using node_result_t =
    decltype(apply_node(std::declval<const Ctx&>(), std::declval<F&>(), std::declval<X&>()...));

/// Same constness as Like, applied to T.
template <class Like, class T>
using like_const_t = std::conditional_t<std::is_const_v<Like>, const T, T>;

template <class C, class R>
struct rebind_container;
template <class T, class A, class R>
struct rebind_container<std::vector<T, A>, R> {
  using type = std::vector<R>;
};
template <class T, class A, class R>
struct rebind_container<std::list<T, A>, R> {
  using type = std::list<R>;
};
template <class T, class A, class R>
struct rebind_container<std::deque<T, A>, R> {
  using type = std::deque<R>;
};
template <class K, class V, class C, class A, class R>
struct rebind_container<std::map<K, V, C, A>, R> {
  using type = std::map<K, R, C>;
};
template <class K, class V, class H, class E, class A, class R>
struct rebind_container<std::unordered_map<K, V, H, E, A>, R> {
  using type = std::unordered_map<K, R, H, E>;
};

[[noreturn]] inline void throw_size_mismatch(std::string_view kind, std::size_t a, std::size_t b) {
  throw ShapeError("recursively_apply: parallel structures differ in shape: a " + std::string(kind) +
                   " of " + std::to_string(a) + " elements against one of " + std::to_string(b));
}

template <class X0, class... Xs>
void check_sizes(std::string_view kind, const X0& x0, const Xs&... xs) {
  (void)kind;
  ((xs.size() == x0.size() ? void() : throw_size_mismatch(kind, x0.size(), xs.size())), ...);
}

template <class Map, class Key>
auto& find_parallel_value(Map& m, const Key& k) {
  auto it = m.find(k);
  if (it == m.end()) {
    if constexpr (detail::is_string_like_v<Key>) {
      throw KeyError("recursively_apply: key '" + std::string(std::string_view(k)) +
                     "' is missing from a parallel map");
    } else {
      throw KeyError("recursively_apply: a key is missing from a parallel map");
    }
  }
  return it->second;
}

template <class Ctx, class T, bool TypeKnownBad = true>
T other_leaf(const Ctx& ctx, const T& x) {
  if constexpr (Ctx::reject && TypeKnownBad) {
    static_assert(always_false_v<T>,
                  "recursively_apply: a leaf of this type fails the leaf test and reject_other_types "
                  "is set (the type is named in the instantiation notes below); widen the test or "
                  "drop reject_other_types to pass such leaves through");
  }
  if (ctx.error_on_other) {
    throw ValueError("recursively_apply: unsupported leaf of type '" + std::string(type_name<T>()) +
                     "': only leaves accepted by the test (" +
                     std::string(type_name<typename Ctx::test_type>()) + ") can be processed");
  }
  return x;
}

/// Element I of every parallel tuple-like / variant, transformed.
template <std::size_t I, class Ctx, class F, class X0, class... Xs>
ACCEL_NESTED_INLINE auto apply_element(const Ctx& ctx, F& f, X0& x0, Xs&... xs) {
  return apply_node(ctx, f, std::get<I>(x0), std::get<I>(xs)...);
}

template <std::size_t I, class Ctx, class F, class X0, class... Xs>
using element_result_t = decltype(apply_element<I>(std::declval<const Ctx&>(), std::declval<F&>(),
                                                   std::declval<X0&>(), std::declval<Xs&>()...));

template <class Ctx, class F, class X0, class... Xs, std::size_t... I>
ACCEL_NESTED_INLINE auto apply_tuple_like(const Ctx& ctx, F& f, X0& x0, std::index_sequence<I...>, Xs&... xs) {
  using T = std::remove_cv_t<X0>;
  if constexpr (is_std_array<T>::value) {
    using R = node_result_t<Ctx, F, like_const_t<X0, typename T::value_type>,
                            like_const_t<Xs, typename std::remove_cv_t<Xs>::value_type>...>;
    return std::array<R, sizeof...(I)>{{apply_element<I>(ctx, f, x0, xs...)...}};
  } else if constexpr (is_specialization<T, std::pair>::value) {
    return std::pair<element_result_t<0, Ctx, F, X0, Xs...>, element_result_t<1, Ctx, F, X0, Xs...>>{
        apply_element<0>(ctx, f, x0, xs...), apply_element<1>(ctx, f, x0, xs...)};
  } else {
    return std::tuple<element_result_t<I, Ctx, F, X0, Xs...>...>{apply_element<I>(ctx, f, x0, xs...)...};
  }
}

template <class Ctx, class F, class X0, class... Xs, std::size_t... I>
ACCEL_NESTED_INLINE auto apply_variant(const Ctx& ctx, F& f, X0& x0, std::index_sequence<I...>, Xs&... xs) {
  using Result = std::variant<element_result_t<I, Ctx, F, X0, Xs...>...>;
  if (x0.valueless_by_exception()) throw ValueError("recursively_apply: variant is valueless");
  const std::size_t idx = x0.index();
  ((xs.index() == idx ? void()
                      : throw ShapeError("recursively_apply: parallel variants hold different "
                                         "alternatives (" + std::to_string(idx) + " and " +
                                         std::to_string(xs.index()) + ")")),
   ...);
  return boost::mp11::mp_with_index<sizeof...(I)>(idx, [&](auto J) -> Result {
    return Result(std::in_place_index<J>, apply_element<J>(ctx, f, x0, xs...));
  });
}

template <class Ctx, class F, class X0, class... Xs>
ACCEL_NESTED_INLINE auto apply_map(const Ctx& ctx, F& f, X0& x0, Xs&... xs) {
  using T = std::remove_cv_t<X0>;
  using K = typename T::key_type;
  using V = typename T::mapped_type;
  using R = node_result_t<Ctx, F, like_const_t<X0, V>,
                          like_const_t<Xs, typename std::remove_cv_t<Xs>::mapped_type>...>;
  using Out = typename rebind_container<T, R>::type;
  check_sizes("map", x0, xs...);
  Out out;
  if constexpr (is_specialization<T, std::unordered_map>::value) out.reserve(x0.size());
  for (auto& [k, v] : x0) {
    if constexpr (is_string_like_v<K>) {
      if (ctx.skip && ctx.skip->contains(std::string_view(k))) {
        if constexpr (std::is_same_v<R, V>) {
          out.emplace_hint(out.end(), k, v);
          continue;
        } else {
          throw ValueError("recursively_apply: skip_keys entry '" + std::string(std::string_view(k)) +
                           "' holds a '" + std::string(type_name<V>()) +
                           "' that the function would turn into a '" + std::string(type_name<R>()) +
                           "'; skipping needs the type unchanged");
        }
      }
    }
    out.emplace_hint(out.end(), k, apply_node(ctx, f, v, find_parallel_value(xs, k)...));
  }
  return out;
}

/// Converts to the result of G(), so that emplace constructs the element from it directly.
template <class G>
struct in_place_result {
  G g;
  ACCEL_NESTED_INLINE operator decltype(std::declval<G&>()())() { return g(); }
};
template <class G>
in_place_result(G) -> in_place_result<G>;

template <class Ctx, class F, class X0, class... Xs>
ACCEL_NESTED_INLINE auto apply_sequence(const Ctx& ctx, F& f, X0& x0, Xs&... xs) {
  using T = std::remove_cv_t<X0>;
  using R = node_result_t<Ctx, F, like_const_t<X0, typename T::value_type>,
                          like_const_t<Xs, typename std::remove_cv_t<Xs>::value_type>...>;
  using Out = typename rebind_container<T, R>::type;
  check_sizes("sequence", x0, xs...);
  Out out;
  if constexpr (is_specialization<T, std::vector>::value) out.reserve(x0.size());
  std::tuple<decltype(xs.begin())...> its{xs.begin()...};
  for (auto& e : x0) {
    std::apply(
        [&](auto&... it) {
          if constexpr (is_specialization<R, std::tuple>::value || is_specialization<R, std::pair>::value) {
            // Built in place from the conversion's prvalue: a push_back of a finished tuple would
            // move each of its tensors once more. (Only tuples and pairs: their constructors
            // cannot mistake the wrapper for an element.)
            out.emplace_back(in_place_result{[&]() -> R { return apply_node(ctx, f, e, *it...); }});
          } else {
            out.push_back(apply_node(ctx, f, e, *it...));
          }
          ((void)++it, ...);
        },
        its);
  }
  return out;
}

template <class Ctx, class F, class X0, class... Xs, std::size_t... I>
ACCEL_NESTED_INLINE auto apply_aggregate(const Ctx& ctx, F& f, X0& x0, std::index_sequence<I...>, Xs&... xs) {
  using T = std::remove_cv_t<X0>;
  auto t0 = boost::pfr::structure_tie(x0);
  auto ts = std::make_tuple(boost::pfr::structure_tie(xs)...);
  auto fields = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
    return std::apply([&](auto&... t) { return apply_node(ctx, f, std::get<J>(t0), std::get<J>(t)...); }, ts);
  };
  using Results = std::tuple<decltype(fields(std::integral_constant<std::size_t, I>{}))...>;
  if constexpr (std::is_same_v<Results, std::tuple<boost::pfr::tuple_element_t<I, T>...>>) {
    return T{fields(std::integral_constant<std::size_t, I>{})...};
  } else {
    return Results{fields(std::integral_constant<std::size_t, I>{})...};
  }
}

template <class Ctx, class F, class X0, class... Xs>
ACCEL_NESTED_INLINE auto apply_node(const Ctx& ctx, F& f, X0& x0, Xs&... xs) {
  using T = std::remove_cv_t<X0>;
  using Test = typename Ctx::test_type;
  if constexpr (Test::template matches<T>) {
    using R = std::remove_cvref_t<decltype(f(x0, xs...))>;
    static_assert(!std::is_void_v<R>,
                  "recursively_apply: func returns void; use for_each_leaf to visit leaves");
    if constexpr (RuntimeLeafTest<Test, T>) {
      static_assert(std::is_same_v<R, T>,
                    "recursively_apply: with a run-time leaf test, func must return the leaf's own "
                    "type (rejected leaves pass through unchanged)");
      if (!ctx.test(x0)) return other_leaf<Ctx, T, false>(ctx, x0);
    }
    return R(f(x0, xs...));
  } else if constexpr (CustomNested<T>) {
    return nested_traits<T>::transform(std::as_const(x0), [&](auto&& proj) {
      return apply_node(ctx, f, std::invoke(proj, x0), std::invoke(proj, xs)...);
    });
  } else if constexpr (TupleLikeNested<T>) {
    return apply_tuple_like(ctx, f, x0, std::make_index_sequence<std::tuple_size_v<T>>{}, xs...);
  } else if constexpr (OptionalNested<T>) {
    using R = decltype(apply_node(ctx, f, *x0, *xs...));
    ((xs.has_value() == x0.has_value()
          ? void()
          : throw ShapeError("recursively_apply: parallel optionals differ: one is empty, one is not")),
     ...);
    if (!x0.has_value()) return std::optional<R>{};
    return std::optional<R>(std::in_place, apply_node(ctx, f, *x0, *xs...));
  } else if constexpr (VariantNested<T>) {
    return apply_variant(ctx, f, x0, std::make_index_sequence<std::variant_size_v<T>>{}, xs...);
  } else if constexpr (MapNested<T>) {
    return apply_map(ctx, f, x0, xs...);
  } else if constexpr (SequenceNested<T>) {
    return apply_sequence(ctx, f, x0, xs...);
  } else if constexpr (AggregateNested<T>) {
    return apply_aggregate(ctx, f, x0, std::make_index_sequence<boost::pfr::tuple_size_v<T>>{}, xs...);
  } else {
    return other_leaf(ctx, static_cast<const T&>(x0));
  }
}

// ---- option parsing -------------------------------------------------------------------------------

template <class... A>
constexpr std::size_t count_data_args() {
  constexpr bool is_opt[] = {ApplyOption<A>..., false};
  std::size_t n = sizeof...(A);
  while (n > 0 && is_opt[n - 1]) --n;
  for (std::size_t i = 0; i < n; ++i) {
    if (is_opt[i]) return static_cast<std::size_t>(-1);
  }
  return n;
}

template <class Opt, class... A>
constexpr bool has_option_v = (std::is_same_v<std::remove_cvref_t<A>, Opt> || ...);

template <class... A>
struct find_test {
  using type = tensor_leaf;
};
template <class A0, class... A>
struct find_test<A0, A...> {
  using type = std::conditional_t<LeafTest<A0>, std::remove_cvref_t<A0>, typename find_test<A...>::type>;
};

template <class Ctx, class Arg>
void set_option(Ctx& ctx, const Arg& a) {
  if constexpr (LeafTest<Arg>) {
    ctx.test = a;
  } else if constexpr (std::is_same_v<Arg, error_on_other_type_t>) {
    ctx.error_on_other = a.enabled;
  } else if constexpr (std::is_same_v<Arg, skip_keys>) {
    ctx.skip = &a;
  }
}

template <class F, class Tuple, std::size_t... D, std::size_t... O>
auto dispatch(F& f, Tuple&& args, std::index_sequence<D...>, std::index_sequence<O...>) {
  constexpr std::size_t nd = sizeof...(D);
  using Test = typename find_test<std::tuple_element_t<nd + O, std::remove_cvref_t<Tuple>>...>::type;
  constexpr bool reject =
      has_option_v<reject_other_types_t, std::tuple_element_t<nd + O, std::remove_cvref_t<Tuple>>...>;
  static_assert(!reject || (accepts_all_leaves_v<Test, std::remove_cvref_t<std::tuple_element_t<D, std::remove_cvref_t<Tuple>>>> && ...),
                "recursively_apply: reject_other_types is set and the data holds a leaf type that the leaf "
                "test does not accept (see accepts_all_leaves_v; the type is named in the notes below)");
  apply_ctx<Test, reject> ctx;
  (set_option(ctx, std::get<nd + O>(args)), ...);
  return apply_node(ctx, f, std::get<D>(args)...);
}

}  // namespace detail

/// Applies `func` to every leaf of `data` (and the parallel leaves of further data arguments) that
/// passes the leaf test; trailing options: a LeafTest, error_on_other_type / reject_other_types,
/// skip_keys. Returns the rebuilt structure; see the header comment for the shape rules.
template <class F, class... Args>
auto recursively_apply(F&& func, Args&&... args) {
  constexpr std::size_t nd = detail::count_data_args<Args...>();
  static_assert(nd != static_cast<std::size_t>(-1),
                "recursively_apply: options (leaf test, error_on_other_type, reject_other_types, "
                "skip_keys) must follow all data arguments");
  static_assert(nd >= 1, "recursively_apply: needs at least one data argument");
  auto refs = std::forward_as_tuple(args...);  // every datum is walked as an lvalue
  return detail::dispatch(func, refs, std::make_index_sequence<nd>{},
                          std::make_index_sequence<sizeof...(Args) - nd>{});
}

/// The type recursively_apply(F, Data...) returns with the default test.
template <class F, class... Data>
using apply_result_t = decltype(recursively_apply(std::declval<F>(), std::declval<Data&>()...));

}  // namespace accel::nested

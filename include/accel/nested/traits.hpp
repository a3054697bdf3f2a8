// Classification of nested data: which types are containers recursively_apply walks into,
// which are leaves, the leaf tests, and the customization point for user types.
//
//   nested_traits<T>          specialize for a user type: for_each(x, f) and transform(x, f)
//   tensor_leaf, leaf_of<Ts...>, leaf_where<Pred>     leaf tests (type-level, optionally run-time)
//   type_name<T>()            readable type name for error messages
//   skip_keys                 map keys whose entries walks leave alone
//   accepts_all_leaves_v<Test, T> / may_hold_leaves_v<Test, T>   what a walk of a T can meet
//
// Walk order is the containers' own order (maps: their iteration order), so two walks over the
// same structure visit leaves in the same order.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <boost/pfr.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/tensor.hpp"

namespace accel::nested {

/// Customization point: specialize for a user type that is a container of nested data.
///
/// A specialization provides two static functions; `proj` is any callable that returns a
/// reference to one child of a T (a pointer to member is the usual choice):
///
///   template <> struct accel::nested::nested_traits<Batch> {
///     // visits each child once, in a fixed order
///     template <class F> static void for_each(const Batch& b, F&& f) { f(b.ids); f(b.mask); }
///     // rebuilds: f(proj) returns the transformed child, for every parallel structure at once
///     template <class F> static auto transform(const Batch&, F&& f) {
///       return Batch{f(&Batch::ids), f(&Batch::mask)};
///     }
///   };
///
/// transform may return another type when the children's types change (Tensor -> float).
template <class T>
struct nested_traits {};

namespace detail {

struct noop_visitor {
  template <class U>
  void operator()(const U&) const noexcept {}
};

template <class T, template <class...> class Tmpl>
struct is_specialization : std::false_type {};
template <template <class...> class Tmpl, class... A>
struct is_specialization<Tmpl<A...>, Tmpl> : std::true_type {};

template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};

template <class T>
inline constexpr bool is_string_like_v =
    std::is_convertible_v<const T&, std::string_view> || is_specialization<T, std::basic_string>::value ||
    is_specialization<T, std::basic_string_view>::value;

}  // namespace detail

/// A user type with a nested_traits specialization.
template <class T>
concept CustomNested = requires(const T& x, detail::noop_visitor v) { nested_traits<T>::for_each(x, v); };

/// std::tuple, std::pair, std::array: fixed arity, one type per element.
template <class T>
concept TupleLikeNested = detail::is_specialization<T, std::tuple>::value ||
                          detail::is_specialization<T, std::pair>::value || detail::is_std_array<T>::value;

template <class T>
concept OptionalNested = detail::is_specialization<T, std::optional>::value;

template <class T>
concept VariantNested = detail::is_specialization<T, std::variant>::value;

/// std::map / std::unordered_map (any key type; skip_keys only match string-like keys).
template <class T>
concept MapNested = detail::is_specialization<T, std::map>::value ||
                    detail::is_specialization<T, std::unordered_map>::value;

/// std::vector (but not vector<bool>, whose elements are proxies), std::list, std::deque.
template <class T>
concept SequenceNested = (detail::is_specialization<T, std::vector>::value &&
                          !std::is_same_v<T, std::vector<bool>>) ||
                         detail::is_specialization<T, std::list>::value ||
                         detail::is_specialization<T, std::deque>::value;

/// Plain aggregates reflected by Boost.PFR (no bases, no references, not an array).
template <class T>
concept AggregateNested = std::is_aggregate_v<T> && std::is_class_v<T> && !std::is_array_v<T> &&
                          !Element<T> && !TupleLikeNested<T> && !std::is_empty_v<T>;

/// Readable name of T for messages ("std::vector<accel::Tensor>").
template <class T>
constexpr std::string_view type_name() {
  std::string_view p = __PRETTY_FUNCTION__;
#if defined(__clang__)
  const std::string_view key = "T = ";
  const auto b = p.find(key) + key.size();
  const auto e = p.rfind(']');
#else
  const std::string_view key = "T = ";
  const auto b = p.find(key) + key.size();
  auto e = p.find(';', b);
  if (e == std::string_view::npos) e = p.rfind(']');
#endif
  return p.substr(b, e - b);
}

/// Base of the trailing options of recursively_apply.
struct apply_option {};

/// Map entries whose (string-like) key is listed are copied through untouched (recursively_apply) or not
/// visited (for_each_leaf), at every level.
struct skip_keys : apply_option {
  std::vector<std::string> keys;
  skip_keys() = default;
  skip_keys(std::initializer_list<std::string> k) : keys(k) {}
  explicit skip_keys(std::vector<std::string> k) : keys(std::move(k)) {}
  bool contains(std::string_view k) const noexcept {
    for (const auto& s : keys) {
      if (s == k) return true;
    }
    return false;
  }
};


// ---- leaf tests ---------------------------------------------------------------------------------
//
// A leaf test is a type with `template <class T> static constexpr bool matches`, deriving from
// leaf_test. It may add `bool operator()(const T&) const` to refine at run time (convert_to_fp32
// takes only f16/bf16 tensors); a leaf rejected at run time passes through unchanged, so the
// function must then return the leaf's own type.

/// Base of every leaf test (how recursively_apply tells options from data).
struct leaf_test {};

/// Leaves are accel::Tensor (the default).
struct tensor_leaf : leaf_test {
  template <class T>
  static constexpr bool matches = std::is_same_v<std::remove_cvref_t<T>, Tensor>;
};

/// Leaves are exactly the listed types.
template <class... Ts>
struct leaf_of : leaf_test {
  template <class T>
  static constexpr bool matches = (std::is_same_v<std::remove_cvref_t<T>, Ts> || ...);
};

/// Leaves are the types for which Pred<T>::value holds.
template <template <class> class Pred>
struct leaf_where : leaf_test {
  template <class T>
  static constexpr bool matches = Pred<std::remove_cvref_t<T>>::value;
};

template <class P>
concept LeafTest = std::is_base_of_v<leaf_test, std::remove_cvref_t<P>>;

/// The test refines at run time for leaves of type T.
template <class P, class T>
concept RuntimeLeafTest = requires(const P& p, const T& x) {
  { p(x) } -> std::convertible_to<bool>;
};

/// True when every leaf type reachable in T (at the type level) passes Test: what
/// reject_other_types checks before walking. Children of CustomNested types are not visible
/// here and count as accepted.
template <class Test, class T>
constexpr bool accepts_all_leaves() {
  using U = std::remove_cv_t<T>;
  if constexpr (Test::template matches<U> || CustomNested<U>) {
    return true;
  } else if constexpr (TupleLikeNested<U>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (accepts_all_leaves<Test, std::tuple_element_t<I, U>>() && ...);
    }(std::make_index_sequence<std::tuple_size_v<U>>{});
  } else if constexpr (VariantNested<U>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (accepts_all_leaves<Test, std::variant_alternative_t<I, U>>() && ...);
    }(std::make_index_sequence<std::variant_size_v<U>>{});
  } else if constexpr (OptionalNested<U> || SequenceNested<U>) {
    return accepts_all_leaves<Test, typename U::value_type>();
  } else if constexpr (MapNested<U>) {
    return accepts_all_leaves<Test, typename U::mapped_type>();
  } else if constexpr (AggregateNested<U>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (accepts_all_leaves<Test, boost::pfr::tuple_element_t<I, U>>() && ...);
    }(std::make_index_sequence<boost::pfr::tuple_size_v<U>>{});
  } else {
    return false;
  }
}

template <class Test, class T>
inline constexpr bool accepts_all_leaves_v = accepts_all_leaves<Test, T>();

/// True when some leaf reachable in T (at the type level) may pass Test: whether a walk of a T can
/// meet one at all. CustomNested types count as holding one (their children are not visible here).
template <class Test, class T>
constexpr bool may_hold_leaves() {
  using U = std::remove_cv_t<T>;
  if constexpr (Test::template matches<U> || CustomNested<U>) {
    return true;
  } else if constexpr (TupleLikeNested<U>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (may_hold_leaves<Test, std::tuple_element_t<I, U>>() || ...);
    }(std::make_index_sequence<std::tuple_size_v<U>>{});
  } else if constexpr (VariantNested<U>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (may_hold_leaves<Test, std::variant_alternative_t<I, U>>() || ...);
    }(std::make_index_sequence<std::variant_size_v<U>>{});
  } else if constexpr (OptionalNested<U> || SequenceNested<U>) {
    return may_hold_leaves<Test, typename U::value_type>();
  } else if constexpr (MapNested<U>) {
    return may_hold_leaves<Test, typename U::mapped_type>();
  } else if constexpr (AggregateNested<U>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (may_hold_leaves<Test, boost::pfr::tuple_element_t<I, U>>() || ...);
    }(std::make_index_sequence<boost::pfr::tuple_size_v<U>>{});
  } else {
    return false;
  }
}

template <class Test, class T>
inline constexpr bool may_hold_leaves_v = may_hold_leaves<Test, T>();

}  // namespace accel::nested

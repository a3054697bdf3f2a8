// for_each_leaf(func, data, [test], [skip]) -> bool
//
// Visits, in walk order, every leaf of `data` that passes the leaf test (default: Tensor) and
// calls func(leaf). func returns void, or bool where true stops the walk; the result says whether
// it stopped. Map entries whose (string-like) key is in `skip` are not visited, at any level, as
// recursively_apply passes them through. Nothing is rebuilt or allocated: this is the walk
// find_device, find_batch_size and the module hooks use.
#pragma once

#include <functional>
#include <type_traits>
#include <utility>

#include "accel/nested/traits.hpp"

namespace accel::nested {

namespace detail {

template <class Test, class F, class X>
bool visit_node(const Test& test, F& f, X& x, const skip_keys* skip) {
  using T = std::remove_cv_t<X>;
  if constexpr (Test::template matches<T>) {
    if constexpr (RuntimeLeafTest<Test, T>) {
      if (!test(x)) return false;
    }
    if constexpr (std::is_void_v<decltype(f(x))>) {
      f(x);
      return false;
    } else {
      return static_cast<bool>(f(x));
    }
  } else if constexpr (CustomNested<T>) {
    bool stop = false;
    nested_traits<T>::for_each(x, [&](const auto& child) {
      if (!stop) stop = visit_node(test, f, child, skip);
    });
    return stop;
  } else if constexpr (TupleLikeNested<T>) {
    return std::apply([&](auto&... e) { return (visit_node(test, f, e, skip) || ...); }, x);
  } else if constexpr (OptionalNested<T>) {
    return x.has_value() && visit_node(test, f, *x, skip);
  } else if constexpr (VariantNested<T>) {
    if (x.valueless_by_exception()) return false;
    return std::visit([&](auto& e) { return visit_node(test, f, e, skip); }, x);
  } else if constexpr (MapNested<T>) {
    for (auto& kv : x) {
      if constexpr (is_string_like_v<typename T::key_type>) {
        if (skip && skip->contains(std::string_view(kv.first))) continue;
      }
      if (visit_node(test, f, kv.second, skip)) return true;
    }
    return false;
  } else if constexpr (SequenceNested<T>) {
    for (auto& e : x) {
      if (visit_node(test, f, e, skip)) return true;
    }
    return false;
  } else if constexpr (AggregateNested<T>) {
    auto fields = boost::pfr::structure_tie(x);
    return std::apply([&](auto&... e) { return (visit_node(test, f, e, skip) || ...); }, fields);
  } else {
    return false;
  }
}

}  // namespace detail

/// Calls func(leaf) on every leaf passing `test`, in walk order, leaving out map entries whose key
/// is in `skip` (when given); returns true if func stopped the walk.
template <class F, class Data, LeafTest Test = tensor_leaf>
bool for_each_leaf(F&& func, Data& data, const Test& test = {}, const skip_keys* skip = nullptr) {
  return detail::visit_node(test, func, data, skip);
}

/// Number of leaves passing `test`.
template <class Data, LeafTest Test = tensor_leaf>
std::size_t count_leaves(const Data& data, const Test& test = {}) {
  std::size_t n = 0;
  for_each_leaf([&](const auto&) { ++n; }, data, test);
  return n;
}

}  // namespace accel::nested

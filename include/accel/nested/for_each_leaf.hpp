// for_each_leaf(func, data, [test]) -> bool
//
// Visits, in walk order, every leaf of `data` that passes the leaf test (default: Tensor) and
// calls func(leaf). func returns void, or bool where true stops the walk; the result says whether
// it stopped. Nothing is rebuilt or allocated: this is the walk find_device and find_batch_size use.
#pragma once

#include <functional>
#include <type_traits>
#include <utility>

#include "accel/nested/traits.hpp"

namespace accel::nested {

namespace detail {

template <class Test, class F, class X>
bool visit_node(const Test& test, F& f, X& x) {
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
      if (!stop) stop = visit_node(test, f, child);
    });
    return stop;
  } else if constexpr (TupleLikeNested<T>) {
    return std::apply([&](auto&... e) { return (visit_node(test, f, e) || ...); }, x);
  } else if constexpr (OptionalNested<T>) {
    return x.has_value() && visit_node(test, f, *x);
  } else if constexpr (VariantNested<T>) {
    if (x.valueless_by_exception()) return false;
    return std::visit([&](auto& e) { return visit_node(test, f, e); }, x);
  } else if constexpr (MapNested<T>) {
    for (auto& kv : x) {
      if (visit_node(test, f, kv.second)) return true;
    }
    return false;
  } else if constexpr (SequenceNested<T>) {
    for (auto& e : x) {
      if (visit_node(test, f, e)) return true;
    }
    return false;
  } else if constexpr (AggregateNested<T>) {
    auto fields = boost::pfr::structure_tie(x);
    return std::apply([&](auto&... e) { return (visit_node(test, f, e) || ...); }, fields);
  } else {
    return false;
  }
}

}  // namespace detail

/// Calls func(leaf) on every leaf passing `test`, in walk order; returns true if func stopped it.
template <class F, class Data, LeafTest Test = tensor_leaf>
bool for_each_leaf(F&& func, Data& data, const Test& test = {}) {
  return detail::visit_node(test, func, data);
}

/// Number of leaves passing `test`.
template <class Data, LeafTest Test = tensor_leaf>
std::size_t count_leaves(const Data& data, const Test& test = {}) {
  std::size_t n = 0;
  for_each_leaf([&](const auto&) { ++n; }, data, test);
  return n;
}

}  // namespace accel::nested

// Debug mode's check before a collective (Accelerate's verify_operation): every process describes
// its argument, the descriptions are exchanged, and when they differ every process throws the
// same DistributedOperationException listing each process's shapes, instead of hanging in a
// collective whose sizes do not match.
//
//   describe_shapes(data)          "{'ids': int64[2, 7], 'mask': (bool[2, 7], None)}"
//   verify_operation(state, "accel::dist::gather", data, VerifyLevel::shapes)
//   DistributedOperationException  a DistributedError
//
// A description shows the structure as Python would print it (lists [..], tuples and aggregates
// (..), maps {key: ..} with their keys, None for an empty optional) and each tensor as
// dtype[extents]. VerifyLevel::shapes compares the whole description; VerifyLevel::ranks
// (pad_across_processes, whose extents may differ along the padded dimension) compares structure,
// dtypes and ranks only. The check runs only in debug mode and only when a process group is
// joined; it costs two small all-gathers.
//
// Differences from Accelerate: the message lists dtypes and map keys as well as shapes, and
// dtypes must match too (torch would promote or fail later); the device check Accelerate makes
// here is made by every collective, debug mode or not.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/pfr.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/dist/serialize.hpp"
#include "accel/nested/traits.hpp"

namespace accel::dist {

/// A collective's arguments disagree across processes (Accelerate's DistributedOperationException).
class DistributedOperationException : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

/// What verify_operation compares.
enum class VerifyLevel : std::uint8_t {
  shapes,  ///< structure, dtypes and every extent
  ranks,   ///< structure, dtypes and the number of dimensions
};

namespace detail {

template <class K>
void describe_key(std::string& out, const K& k) {
  if constexpr (nested::detail::is_string_like_v<K>) {
    out += '\'';
    out += std::string_view(k);
    out += '\'';
  } else if constexpr (std::is_integral_v<K>) {
    out += std::to_string(k);
  } else {
    out += '?';
  }
}

template <class T>
void describe(std::string& out, const T& x, bool extents) {
  if constexpr (std::is_same_v<T, Tensor>) {
    if (!x.defined()) {
      out += "undefined";
      return;
    }
    out += dtype_name(x.dtype());
    out += extents ? x.shape().str() : "[rank " + std::to_string(x.dim()) + "]";
  } else if constexpr (nested::CustomNested<T>) {
    out += '[';
    bool first = true;
    nested::nested_traits<T>::for_each(x, [&](const auto& child) {
      out += first ? "" : ", ";
      first = false;
      describe(out, child, extents);
    });
    out += ']';
  } else if constexpr (nested::TupleLikeNested<T>) {
    out += '(';
    std::apply(
        [&](const auto&... e) {
          bool first = true;
          ((out += first ? "" : ", ", first = false, describe(out, e, extents)), ...);
        },
        x);
    out += ')';
  } else if constexpr (nested::OptionalNested<T>) {
    if (x) {
      describe(out, *x, extents);
    } else {
      out += "None";
    }
  } else if constexpr (nested::VariantNested<T>) {
    if (!x.valueless_by_exception()) std::visit([&](const auto& e) { describe(out, e, extents); }, x);
  } else if constexpr (nested::MapNested<T>) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : x) {
      out += first ? "" : ", ";
      first = false;
      describe_key(out, k);
      out += ": ";
      describe(out, v, extents);
    }
    out += '}';
  } else if constexpr (nested::SequenceNested<T>) {
    out += '[';
    bool first = true;
    for (const auto& e : x) {
      out += first ? "" : ", ";
      first = false;
      describe(out, e, extents);
    }
    out += ']';
  } else if constexpr (nested::AggregateNested<T>) {
    out += '(';
    bool first = true;
    boost::pfr::for_each_field(x, [&](const auto& f) {
      out += first ? "" : ", ";
      first = false;
      describe(out, f, extents);
    });
    out += ')';
  } else {
    out += nested::type_name<T>();
  }
}

}  // namespace detail

/// `data`'s structure with each tensor as dtype[extents] (see the header comment).
template <class Data>
std::string describe_shapes(const Data& data) {
  std::string out;
  detail::describe(out, data, true);
  return out;
}

/// In debug mode, with a process group joined: DistributedOperationException on every process when
/// the processes' `data` differ at `level`, naming `operation` and listing each process's shapes.
template <class D, class Data>
void verify_operation(const PartialState<D>& state, std::string_view operation, const Data& data,
                      VerifyLevel level = VerifyLevel::shapes) {
  if (!state.debug() || !state.communicates()) return;
#if defined(ACCEL_WITH_MPI)
  std::pair<std::string, std::string> mine;  // what is compared, what is shown
  detail::describe(mine.first, data, level == VerifyLevel::shapes);
  mine.second = level == VerifyLevel::shapes ? mine.first : describe_shapes(data);
  const std::string op(operation);
  const auto all = state.mpi_group()->all_gather_bytes(serialize(mine), op.c_str());
  std::vector<std::pair<std::string, std::string>> each;
  each.reserve(all.size());
  for (const auto& bytes : all) each.push_back(deserialize<std::pair<std::string, std::string>>(bytes));
  bool same = true;
  for (const auto& e : each) same = same && e.first == each.front().first;
  if (same) return;
  std::string listing;
  for (std::size_t i = 0; i < each.size(); ++i) listing += "\n  - Process " + std::to_string(i) + ": " + each[i].second;
  throw DistributedOperationException(
      "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.\n\n"
      "Operation: `" + op + "`\nInput shapes:" + listing);
#endif
}

}  // namespace accel::dist

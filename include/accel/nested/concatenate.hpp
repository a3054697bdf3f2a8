// concatenate(std::vector<Data> data, dim = 0) -> Data
//
// Accelerate's concatenate: `data` holds batches of one structure; each tensor position of the
// result is ops::cat along `dim` of the tensors at that position in every batch. Positions are
// matched by walking every batch in parallel with the first (map entries by key), so unordered
// maps are safe. With several batches every leaf must be a tensor: an int or a string cannot be
// joined, and keeping one batch's value would drop the others', so such a leaf is a ValueError
// naming its key path and type before anything is joined. A single batch is returned rebuilt,
// its tensors copied and its other leaves kept, as Accelerate does.
//
// Differences from Accelerate:
// - Accelerate's TypeError for a non-tensor leaf is a ValueError here (accel's hierarchy has no
//   TypeError; recursively_apply's error_on_other_type makes the same choice), and its message adds
//   the leaf's key path. An empty `data` is a ValueError (Accelerate: IndexError).
// - Batches must have exactly the first one's structure: a later batch with more (or fewer) map
//   entries or elements is a ShapeError, one with other keys a KeyError. Accelerate follows the
//   first batch and silently drops what the others hold beyond it.
// - Tensors at one position that differ in dtype are a DTypeError (from ops::cat). torch.cat
//   promotes them to a common dtype; accel converts dtypes only when asked, never implicitly.
// - An empty std::optional (Python's None) in every batch stays empty: it holds no value that
//   could be lost. Accelerate raises TypeError for a None leaf when there are several batches.
// - Aggregates, variants and nested_traits types are walked into, and their tensors joined, as
//   lists, tuples and maps are. Accelerate walks only those three, so a dataclass batch is a
//   TypeError there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nested/recursively_apply.hpp"
#include "accel/ops/cat.hpp"

namespace accel::nested {

namespace detail {

struct empty_leaf {};

/// One step of a key path, written as Python would index the container: ['key'], [3].
template <class K>
std::string key_path_step(const K& k) {
  if constexpr (is_string_like_v<K>) {
    return "['" + std::string(std::string_view(k)) + "']";
  } else if constexpr (std::is_integral_v<K>) {
    return "[" + std::to_string(k) + "]";
  } else {
    return "[<key of type " + std::string(type_name<K>()) + ">]";
  }
}

/// The first leaf of `x` (in walk order) that is not a Tensor: sets `path` to where it sits and
/// `type` to its type, and returns true. `path` is left as given when there is none.
template <class X>
bool find_non_tensor_leaf(const X& x, std::string& path, std::string_view& type) {
  using T = std::remove_cv_t<X>;
  const std::size_t mark = path.size();
  auto child = [&](const auto& c, const std::string& step) {
    path += step;
    if (find_non_tensor_leaf(c, path, type)) return true;
    path.resize(mark);
    return false;
  };
  if constexpr (std::is_same_v<T, Tensor>) {
    return false;
  } else if constexpr (CustomNested<T>) {
    bool found = false;
    std::size_t i = 0;
    nested_traits<T>::for_each(x, [&](const auto& c) {
      if (!found) found = child(c, "[" + std::to_string(i) + "]");
      ++i;
    });
    return found;
  } else if constexpr (TupleLikeNested<T>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (child(std::get<I>(x), "[" + std::to_string(I) + "]") || ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (OptionalNested<T>) {
    return x.has_value() && find_non_tensor_leaf(*x, path, type);
  } else if constexpr (VariantNested<T>) {
    return !x.valueless_by_exception() && std::visit([&](const auto& e) { return find_non_tensor_leaf(e, path, type); }, x);
  } else if constexpr (MapNested<T>) {
    for (const auto& [k, v] : x) {
      if (child(v, key_path_step(k))) return true;
    }
    return false;
  } else if constexpr (SequenceNested<T>) {
    std::size_t i = 0;
    for (const auto& e : x) {
      if (child(e, "[" + std::to_string(i++) + "]")) return true;
    }
    return false;
  } else if constexpr (AggregateNested<T>) {
    // Boost.PFR reflects fields by position only, so a field is named by its index.
    auto fields = boost::pfr::structure_tie(x);
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (child(std::get<I>(fields), ".<field " + std::to_string(I) + ">") || ...);
    }(std::make_index_sequence<std::tuple_size_v<decltype(fields)>>{});
  } else {
    type = type_name<T>();
    return true;
  }
}

}  // namespace detail

/// Leaf-wise concatenation of same-structured batches along `dim`. ValueError when `data` is empty,
/// or when it holds several batches and one of their leaves is not a tensor.
template <class Data>
Data concatenate(const std::vector<Data>& data, std::int64_t dim = 0) {
  if (data.empty()) throw ValueError("concatenate: expected a non-empty list of structures");
  if (data.size() > 1) {
    std::string path;
    std::string_view type;
    if (detail::find_non_tensor_leaf(data[0], path, type)) {
      throw ValueError("concatenate: can only concatenate tensors but got '" + std::string(type) + "' at " +
                       (path.empty() ? std::string("the top level") : path) + " of " + std::to_string(data.size()) +
                       " batches; only a single batch may hold non-tensor leaves");
    }
  }
  std::vector<std::vector<Tensor>> columns;
  {
    std::size_t k = 0;
    (void)recursively_apply(
        [&](const Tensor& t) {
          columns.emplace_back().reserve(data.size());
          columns[k++].push_back(t);
          return detail::empty_leaf{};
        },
        data[0]);
  }
  for (std::size_t i = 1; i < data.size(); ++i) {
    std::size_t k = 0;
    (void)recursively_apply(
        [&](const Tensor&, const Tensor& t) {
          columns[k++].push_back(t);
          return detail::empty_leaf{};
        },
        data[0], data[i]);
  }
  std::size_t k = 0;
  auto out = recursively_apply([&](const Tensor&) { return ops::cat(columns[k++], dim); }, data[0]);
  static_assert(std::is_same_v<decltype(out), Data>,
                "concatenate: Data must be rebuilt as the same type (aggregates that change type are not supported)");
  return out;
}

}  // namespace accel::nested

namespace accel {
using nested::concatenate;
}  // namespace accel

// StateDict: tensors by dotted name, in insertion order (Python's dict of a checkpoint).
//
//   sd.insert_or_assign("w", t); sd.at("w"); sd.contains("w"); for (auto& [name, t] : sd) ...
//
// Replacing an existing name keeps its position, as Python's dict does.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"

namespace accel::io {

/// Ordered name -> Tensor map; lookups are O(log n), iteration follows insertion order.
class StateDict {
 public:
  using value_type = std::pair<std::string, Tensor>;

  StateDict() = default;
  StateDict(std::initializer_list<value_type> items) {
    for (const auto& [k, v] : items) insert_or_assign(k, v);
  }

  /// Adds `name` at the end, or replaces its tensor in place when present.
  void insert_or_assign(std::string name, Tensor t) {
    if (auto it = index_.find(name); it != index_.end()) {
      items_[it->second].second = std::move(t);
      return;
    }
    index_.emplace(name, items_.size());
    items_.emplace_back(std::move(name), std::move(t));
  }

  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }

  /// The tensor of `name`; KeyError naming it when absent.
  const Tensor& at(std::string_view name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw KeyError("state dict has no tensor named '" + std::string(name) + "'");
    return items_[it->second].second;
  }
  Tensor& at(std::string_view name) {
    return const_cast<Tensor&>(static_cast<const StateDict&>(*this).at(name));
  }

  std::size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }
  auto begin() const noexcept { return items_.begin(); }
  auto end() const noexcept { return items_.end(); }
  auto begin() noexcept { return items_.begin(); }
  auto end() noexcept { return items_.end(); }

  /// Names in insertion order.
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    k.reserve(items_.size());
    for (const auto& it : items_) k.push_back(it.first);
    return k;
  }
  const std::vector<value_type>& items() const noexcept { return items_; }

 private:
  std::vector<value_type> items_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace accel::io

// Tied parameters: slots sharing one Parameter cell.
//
//   find_tied_parameters(model) -> {{"lm_head.weight", "transformer.wte.weight"}, ...}
//   retie_parameters(model, groups)   re-shares the cell of the first materialised name of each group
//
// Like Accelerate, a module registered under two paths makes its parameters "tied" under both.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "accel/nn/module.hpp"

namespace accel::nn {

/// Groups of parameter names sharing one cell; each group sorted, groups ordered by the traversal
/// position of their first-met name.
inline std::vector<std::vector<std::string>> find_tied_parameters(const Module& model) {
  const auto all = model.named_parameter_cells("", true, /*remove_duplicate=*/false);
  const auto unique = model.named_parameter_cells("", true, /*remove_duplicate=*/true);
  std::unordered_map<const Parameter*, std::size_t> owner_of;  // cell -> index in `unique`
  for (std::size_t i = 0; i < unique.size(); ++i) owner_of.emplace(unique[i].second.get(), i);
  std::unordered_map<std::string_view, bool> is_unique_name;
  for (const auto& [n, c] : unique) is_unique_name[n] = true;
  std::map<std::size_t, std::vector<std::string>> groups;  // owner index -> other names
  for (const auto& [n, c] : all) {
    if (is_unique_name.count(n)) continue;
    auto& g = groups[owner_of.at(c.get())];
    if (std::find(g.begin(), g.end(), n) == g.end()) g.push_back(n);
  }
  std::vector<std::vector<std::string>> out;
  for (auto& [idx, others] : groups) {
    others.push_back(unique[idx].first);
    std::sort(others.begin(), others.end());
    out.push_back(std::move(others));
  }
  return out;
}

/// Makes every name of each group share the cell of the group's first name whose tensor is not
/// on meta (groups whose tensors are all on meta are left as they are).
inline void retie_parameters(Module& model, const std::vector<std::vector<std::string>>& tied_groups) {
  for (const auto& group : tied_groups) {
    ParameterPtr source;
    for (const auto& name : group) {
      const ParameterPtr& cell = model.parameter_cell(name);
      if (cell->data.defined() && !cell->data.is_meta()) {
        source = cell;
        break;
      }
    }
    if (!source) continue;
    for (const auto& name : group) model.parameter_cell(name) = source;
  }
}

}  // namespace accel::nn

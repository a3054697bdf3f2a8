// get_balanced_memory: budgets that spread a model evenly over the GPUs (device_map="balanced").
//
//   MaxMemory mm = get_balanced_memory(model, get_max_memory(budgets), {"LlamaDecoderLayer"}, {}, low_zero);
//   MaxMemory probed = get_balanced_memory(model, std::nullopt, {"LlamaDecoderLayer"});   // max_memory=None
//
// per_gpu = total // n_gpus (n_gpus - 1 with low_zero) + int(1.25 * max(B, mean)), B the size of
// the first module of each no-split class (largest of those), mean the mean size of the final
// modules. Every GPU but the last gets min(per_gpu, budget); low_zero gives the first GPU only
// what the others cannot hold. GPUs with a zero budget are ignored; cpu and disk pass
// through. Unlike Accelerate, GPU ids need not be 0..n-1 and a "disk" key is accepted. Each loop
// goes once over a list fixed before it starts (the size table, the GPUs), so none needs a bound.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/checked.hpp"
#include "accel/nn/module.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/model_index.hpp"

namespace accel::plan {

/// See the header comment.
inline MaxMemory get_balanced_memory(const nn::Module& model, const MaxMemory& max_memory,
                                     const std::vector<std::string>& no_split_module_classes = {},
                                     const SizeOptions& sizes = {}, bool low_zero = false) {
  MaxMemory mm = get_max_memory(max_memory);
  std::vector<int> gpus;  // sorted (get_max_memory sorted them), positive budgets only
  for (const auto& [k, v] : mm) {
    if (k.is_gpu() && v > ByteSize{}) gpus.push_back(k.index());
  }
  const auto n = static_cast<std::int64_t>(gpus.size());
  if (n == 0) return mm;
  if (n == 1) low_zero = false;

  const ModelIndex idx(model, sizes);
  const ByteSize total = idx.size(0);
  const std::int64_t parts = low_zero ? n - 1 : n;
  ByteSize per_gpu(total.bits() / (8 * parts));

  // B: the first module (in size-table order) of each no-split class.
  ByteSize block;
  const auto order = idx.entry_order();
  if (!no_split_module_classes.empty()) {
    std::vector<std::string> found;
    for (auto i : order) {
      if (i == 0 || !idx.is_module(i)) continue;
      const std::string cls(idx.class_name(i));
      if (std::find(no_split_module_classes.begin(), no_split_module_classes.end(), cls) ==
              no_split_module_classes.end() ||
          std::find(found.begin(), found.end(), cls) != found.end()) {
        continue;
      }
      found.push_back(cls);
      block = std::max(block, idx.size(i));
      if (found.size() == no_split_module_classes.size()) break;
    }
  }
  // Mean size of the final modules: modules in the size table none of whose children are.
  ByteSize leaf_sum;
  std::int64_t leaves = 0;
  for (auto i : order) {
    if (i == 0 || !idx.is_module(i)) continue;
    const auto kids = idx.module_children(i);
    if (std::none_of(kids.begin(), kids.end(), [&](auto c) { return idx.has_entry(c); })) {
      leaf_sum += idx.size(i);
      ++leaves;
    }
  }
  // Python float arithmetic, truncated by int(), as Accelerate does. Both terms are at most the
  // model's size, so only the 1.25 can carry the sum past what a size counts.
  const auto mean = static_cast<std::int64_t>(leaf_sum.bytes() / static_cast<double>(std::max<std::int64_t>(leaves, 1)));
  const double bigger = std::max(block.bytes(), static_cast<double>(mean));
  try {
    per_gpu += ByteSize(static_cast<std::int64_t>(1.25 * bigger));
  } catch (const OverflowError&) {
    throw OverflowError("get_balanced_memory: the per-GPU share of a " + total.str() +
                        "-byte model plus 1.25 x its largest block overflows the 2^60 bytes a size can count");
  }

  auto budget = [&](int gpu) -> ByteSize& {
    if (ByteSize* b = mm.find(Placement::gpu(gpu))) return *b;
    throw KeyError("get_balanced_memory: no GPU " + std::to_string(gpu));
  };
  auto has = [&](int gpu) { return mm.find(Placement::gpu(gpu)) != nullptr; };
  // Accelerate names the low GPU "0" and the others 1..n-1; when those ids are not all there,
  // the first GPU with a budget plays GPU 0 and the other GPUs with a budget play the rest.
  bool by_id = has(0);
  for (int i = 1; i < n && by_id; ++i) by_id = has(i);
  const int zero = by_id ? 0 : gpus.front();
  std::vector<int> others;
  if (by_id) {
    for (int i = 1; i < n; ++i) others.push_back(i);
  } else {
    for (int g : gpus) {
      if (g != zero) others.push_back(g);
    }
  }
  for (std::size_t i = 0; i + 1 < gpus.size(); ++i) {
    const int g = gpus[i];
    ByteSize& b = budget(g);
    if (!(low_zero && g == zero)) b = std::min(per_gpu, b);
  }
  if (low_zero) {
    ByteSize rest;
    for (int g : others) rest += budget(g);
    const ByteSize min_zero = total > rest ? total - rest : ByteSize{};
    ByteSize& z = budget(zero);
    z = std::min(min_zero, z);
  }
  return mm;
}

/// get_balanced_memory with max_memory=None: over get_max_memory()'s probe of the machine, as in
/// Accelerate.
inline MaxMemory get_balanced_memory(const nn::Module& model, std::nullopt_t = std::nullopt,
                                     const std::vector<std::string>& no_split_module_classes = {},
                                     const SizeOptions& sizes = {}, bool low_zero = false) {
  return get_balanced_memory(model, get_max_memory(), no_split_module_classes, sizes, low_zero);
}

}  // namespace accel::plan

namespace accel {
using plan::get_balanced_memory;
}  // namespace accel

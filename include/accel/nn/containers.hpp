// Containers: Sequential (children "0", "1", ... called in order), ModuleList, ModuleDict.
//
//   auto seq = std::make_shared<Sequential>();  seq->push_back(linear);  y = (*seq)(x);
//   auto layers = std::make_shared<ModuleList>(); layers->push_back(block);  layers->at(3)
//   auto heads = std::make_shared<ModuleDict>();  heads->insert("attn", attn);  heads->at("attn")
//
// Children are named as torch names them, so dotted paths ("layers.3.mlp") match checkpoints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/nn/module.hpp"

namespace accel::nn {

/// Children named "0", "1", ...; indexable; no forward of its own.
class ModuleList : public Module {
 public:
  explicit ModuleList(std::string class_name = "ModuleList") : Module(std::move(class_name)) {}
  /// Appends `m` as child str(size()). The same module may be appended twice.
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    return register_module(std::to_string(child_slots().size()), std::move(m));
  }
  std::size_t size() const noexcept { return child_slots().size(); }
  Module& at(std::size_t i) const {
    if (i >= size()) {
      throw KeyError(class_name() + ": index " + std::to_string(i) + " out of range for " + std::to_string(size()) +
                     " modules");
    }
    return *child_slots()[i].module;
  }
  Module& operator[](std::size_t i) const { return at(i); }
};

/// A ModuleList whose forward feeds each child's output to the next.
class Sequential : public ModuleList {
 public:
  Sequential() : ModuleList("Sequential") {}
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (const auto& c : child_slots()) y = (*c.module)(y);
    return y;
  }
};

/// Children under string keys, in insertion order.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  /// Registers (or replaces) `m` under `key`.
  template <class M>
  std::shared_ptr<M> insert(const std::string& key, std::shared_ptr<M> m) {
    return register_module(key, std::move(m));
  }
  bool contains(const std::string& key) const {
    for (const auto& c : child_slots()) {
      if (c.name == key) return true;
    }
    return false;
  }
  Module& at(const std::string& key) const {
    for (const auto& c : child_slots()) {
      if (c.name == key) return *c.module;
    }
    throw KeyError("ModuleDict has no key '" + key + "'");
  }
  std::size_t size() const noexcept { return child_slots().size(); }
  /// Keys in insertion order (a replaced key keeps its place, as in torch's ModuleDict).
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(child_slots().size());
    for (const auto& c : child_slots()) out.push_back(c.name);
    return out;
  }
};

}  // namespace accel::nn

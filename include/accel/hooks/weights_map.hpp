// WeightsMap: where an offloading hook finds the weights of its module (Accelerate's
// `weights_map`: a dict, an OffloadedWeightsLoader, or a PrefixedDataset over one).
//
//   WeightsMap(state_dict)                     owns an io::StateDict (tensors in memory)
//   WeightsMap(std::make_shared<io::OffloadedWeightsLoader>(...))   CPU tensors first, then the offload folder
//   map.prefixed("model.layers.3.")            the view one module's hook holds: at("mlp.up_proj.weight")
//   map.at(name) / map.contains(name) / map.locate(name) / map.prefix() / bool(map)
//   map.with_aliases({{"lm_head.weight", "model.embed_tokens.weight"}})   tied names the source lacks
//
// The map is type-erased (any class with `at(string_view) -> Tensor` and `contains(string_view)`
// fits) and shared: a prefixed view holds the same source, so one loader serves every hook of a
// dispatched model. A missing name is a KeyError naming the full name.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/state_dict.hpp"

namespace accel::hooks {

/// A class WeightsMap can hold: name -> Tensor lookups.
template <class M>
concept WeightsSource = requires(const M& m, std::string_view name) {
  { m.at(name) } -> std::convertible_to<Tensor>;
  { m.contains(name) } -> std::convertible_to<bool>;
};

/// A shared, read-only name -> weight map with an optional prefix (see the header comment).
class WeightsMap {
 public:
  /// No map: a hook without one keeps its module's own tensors as the offloaded copies.
  WeightsMap() = default;
  /// Shares `source` (an io::OffloadedWeightsLoader, a user map).
  template <WeightsSource M>
  explicit WeightsMap(std::shared_ptr<const M> source) : source_(std::make_shared<Holder<M>>(std::move(source))) {}
  template <WeightsSource M>
  explicit WeightsMap(std::shared_ptr<M> source) : WeightsMap(std::shared_ptr<const M>(std::move(source))) {}
  /// Owns `state_dict`.
  explicit WeightsMap(io::StateDict state_dict)
      : WeightsMap(std::make_shared<const io::StateDict>(std::move(state_dict))) {}

  /// The view of the names under `prefix` (appended to this view's own prefix).
  WeightsMap prefixed(const std::string& prefix) const {
    WeightsMap out = *this;
    out.prefix_ += prefix;
    return out;
  }
  /// The same map where each full name of `aliases` the source lacks is read under its target (a
  /// tied weight stored once, under its partner's name).
  WeightsMap with_aliases(std::map<std::string, std::string> aliases) const {
    WeightsMap out = *this;
    out.aliases_ = std::make_shared<const std::map<std::string, std::string>>(std::move(aliases));
    return out;
  }
  /// The weight `prefix() + name`; KeyError naming it when absent.
  Tensor at(std::string_view name) const {
    if (!source_) throw KeyError("weights map: no map is set (looking up '" + prefix_ + std::string(name) + "')");
    const std::string full = resolve(prefix_ + std::string(name));
    if (!source_->contains(full)) throw KeyError("weights map has no weight named '" + prefix_ + std::string(name) + "'");
    return source_->at(full);
  }
  bool contains(std::string_view name) const { return source_ && source_->contains(resolve(prefix_ + std::string(name))); }
  /// Where weight `name` lies on disk when the source is an io::OffloadedWeightsLoader and holds
  /// it there (a prefetcher reads it itself); nullopt otherwise.
  std::optional<io::WeightLocation> locate(std::string_view name) const {
    const auto* loader = source_as<io::OffloadedWeightsLoader>();
    if (!loader) return std::nullopt;
    return loader->locate(resolve(prefix_ + std::string(name)));
  }
  const std::string& prefix() const noexcept { return prefix_; }
  explicit operator bool() const noexcept { return static_cast<bool>(source_); }
  /// The source as an M (null when it is another class): what a prefetcher reads files through.
  template <class M>
  const M* source_as() const {
    auto* h = dynamic_cast<const Holder<M>*>(source_.get());
    return h ? h->map.get() : nullptr;
  }

 private:
  struct Source {
    virtual ~Source() = default;
    virtual Tensor at(const std::string& name) const = 0;
    virtual bool contains(const std::string& name) const = 0;
  };
  template <class M>
  struct Holder final : Source {
    explicit Holder(std::shared_ptr<const M> m) : map(std::move(m)) {
      if (!map) throw ValueError("WeightsMap: the source is null");
    }
    Tensor at(const std::string& name) const override { return map->at(name); }
    bool contains(const std::string& name) const override { return map->contains(name); }
    std::shared_ptr<const M> map;
  };

  std::string resolve(std::string full) const {
    if (aliases_ && !source_->contains(full)) {
      if (auto it = aliases_->find(full); it != aliases_->end()) return it->second;
    }
    return full;
  }

  std::shared_ptr<const Source> source_;
  std::string prefix_;
  std::shared_ptr<const std::map<std::string, std::string>> aliases_;
};

}  // namespace accel::hooks

// A preallocated key/value cache: one slot per decoder layer, each on that layer's device.
//
//   KVCache cache(layers, {batch, kv_heads, capacity, head_dim}, dtype, devices)
//   auto [k, v] = cache.layer(i).append(k_new, v_new, past)   writes at [past, past + T), returns views [0, past + T)
//   cache.length() / cache.advance(T) / cache.reset()
//
// The slots are allocated once (capacity = prompt + max_new_tokens, at most the model's context)
// so decoding never reallocates; a step that would pass the capacity is a ValueError naming it.
// The model advances the length once per forward, after every layer has appended.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"

namespace accel::models {

/// The shape of one layer's key (and value) slot.
struct KVSlotShape {
  std::int64_t batch = 1, kv_heads = 1, capacity = 0, head_dim = 0;
};

/// One decoder layer's keys and values, [batch, kv_heads, capacity, head_dim] each.
class LayerKVCache {
 public:
  LayerKVCache() = default;
  LayerKVCache(const KVSlotShape& s, DType dtype, Device device)
      : key_(Tensor::empty({s.batch, s.kv_heads, s.capacity, s.head_dim}, dtype, device)),
        value_(Tensor::empty({s.batch, s.kv_heads, s.capacity, s.head_dim}, dtype, device)) {}

  /// Writes k, v [B, Hkv, T, D] at positions [past, past + T) and returns the views of positions
  /// [0, past + T). Converts k / v to the cache's dtype and device if they differ.
  std::pair<Tensor, Tensor> append(const Tensor& k, const Tensor& v, std::int64_t past) {
    const std::int64_t t = k.size(2);
    if (k.dim() != 4 || v.shape() != k.shape() || k.size(0) != key_.size(0) || k.size(1) != key_.size(1) ||
        k.size(3) != key_.size(3)) {
      throw ShapeError("KVCache: keys " + k.shape().str() + " / values " + v.shape().str() +
                       " do not fit the cache slot " + key_.shape().str());
    }
    if (past < 0 || past + t > capacity()) {
      throw ValueError("KVCache: writing positions [" + std::to_string(past) + ", " + std::to_string(past + t) +
                       ") passes the cache capacity of " + std::to_string(capacity()) +
                       " tokens (make the cache for prompt + max_new_tokens)");
    }
    // A slot on meta belongs to a layer another process computes (a model split across
    // processes): its keys are shapes only. Real keys for a meta slot are a misplaced cache.
    if (key_.is_meta() && !k.is_meta()) {
      throw DeviceError("KVCache: keys on " + k.device().str() + " for a cache slot on meta (make the cache after "
                        "the model is placed: make_cache puts each slot on its layer's device)");
    }
    if (!key_.is_meta()) {
      key_.narrow(2, past, t).copy_(k);
      value_.narrow(2, past, t).copy_(v);
    }
    return {key_.narrow(2, 0, past + t), value_.narrow(2, 0, past + t)};
  }
  std::int64_t capacity() const { return key_.defined() ? key_.size(2) : 0; }
  const Tensor& key() const noexcept { return key_; }
  const Tensor& value() const noexcept { return value_; }

 private:
  Tensor key_, value_;
};

/// The caches of every layer of a model and the number of positions already written.
class KVCache {
 public:
  KVCache() = default;
  /// One slot of `shape` per entry of `devices` (the device of each decoder layer).
  KVCache(const KVSlotShape& shape, DType dtype, const std::vector<Device>& devices) {
    if (shape.capacity <= 0) throw ValueError("KVCache: capacity must be positive, got " + std::to_string(shape.capacity));
    layers_.reserve(devices.size());
    for (const Device& d : devices) layers_.emplace_back(shape, dtype, d);
  }
  std::size_t num_layers() const noexcept { return layers_.size(); }
  /// Layer `i`'s slot.
  LayerKVCache& layer(std::size_t i) {
    if (i >= layers_.size()) {
      throw KeyError("KVCache: layer " + std::to_string(i) + " out of range for " + std::to_string(layers_.size()));
    }
    return layers_[i];
  }
  /// Positions written so far (the `past` of the next forward).
  std::int64_t length() const noexcept { return length_; }
  /// Positions the slots hold.
  std::int64_t capacity() const { return layers_.empty() ? 0 : layers_.front().capacity(); }
  /// Marks `t` more positions written (the model calls it once per forward).
  void advance(std::int64_t t) { length_ += t; }
  /// Forgets every position (the slots stay allocated).
  void reset() noexcept { length_ = 0; }

 private:
  std::vector<LayerKVCache> layers_;
  std::int64_t length_ = 0;
};

}  // namespace accel::models

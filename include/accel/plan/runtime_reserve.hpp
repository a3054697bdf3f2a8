// Opt-in runtime reserve: bytes a device must keep free for what runs next to the weights (KV
// cache, activations, workspace). infer_auto_device_map subtracts InferOptions::reserve from each
// budget; without a reserve its maps equal Accelerate's.
//
//   ByteSize kv = estimate_kv_cache_bytes({.layers = 80, .kv_heads = 8, .head_dim = 128,
//                                          .max_seq = 8192, .batch = 1, .dtype = DType::bf16});
//   opts.reserve = spread_kv_cache_reserve(kv, {0, 1, 2, 3});
#pragma once

#include <cstdint>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/plan/max_memory.hpp"

namespace accel::plan {

/// The shape of a decoder's key/value cache.
struct KVCacheShape {
  std::int64_t layers = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_seq = 0;
  std::int64_t batch = 1;
  DType dtype = DType::f16;
};

/// Bytes of a full KV cache: 2 (keys and values) x layers x kv_heads x head_dim x max_seq x batch
/// x element size. ValueError on a negative dimension or an overflowing product.
inline ByteSize estimate_kv_cache_bytes(const KVCacheShape& s) {
  std::int64_t n = 2;
  for (std::int64_t d : {s.layers, s.kv_heads, s.head_dim, s.max_seq, s.batch}) {
    if (d < 0) throw ValueError("estimate_kv_cache_bytes: negative dimension " + std::to_string(d));
    if (d != 0 && n > INT64_MAX / 64 / d) throw ValueError("estimate_kv_cache_bytes: the cache size overflows");
    n *= d;
  }
  return dtype_byte_size(s.dtype) * n;
}

/// A reserve holding `total` spread evenly over `gpus` (the layers they hold share the cache),
/// plus `per_gpu_extra` (activations / workspace) on each.
inline MaxMemory spread_kv_cache_reserve(ByteSize total, const std::vector<int>& gpus, ByteSize per_gpu_extra = {}) {
  MaxMemory out;
  if (gpus.empty()) return out;
  const auto n = static_cast<std::int64_t>(gpus.size());
  for (int g : gpus) out.emplace_back(MemoryKey::gpu(g), ByteSize::from_bits((total.bits() + n - 1) / n) + per_gpu_extra);
  return out;
}

}  // namespace accel::plan

namespace accel {
using plan::estimate_kv_cache_bytes;
}  // namespace accel

// scaled_dot_product_attention(q, k, v, is_causal, scale)
//
// q [B, Hq, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] with Hq a multiple of Hkv (grouped-query
// attention: query head h reads kv head h / (Hq / Hkv)). The causal mask is aligned to the end,
// as with a KV cache: query t sees keys s <= S - T + t. A query that sees no key at all (only
// possible when T > S) gets a zero row rather than torch's NaN. Computed in f32: decode-sized
// queries (T < 32) one row per work item with vectorized dot products; prefill as blocked
// products (scores, masked softmax, probabilities x V) per kv head and query block, by the GEMV
// tiles of the CPU's tier (backend/cpu/gemv.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "accel/backend/cpu/gemv.hpp"
#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::ops {

namespace detail {

/// From this many queries on (prefill), attention runs as blocked products.
inline constexpr std::int64_t sdpa_gemm_min_queries = 32;
/// Queries per block: the score tile group x block x S stays in L2 for moderate S.
inline constexpr std::int64_t sdpa_query_block = 64;

struct SdpaArgs {
  const float *q, *k, *v;  // dense f32 [B, Hq, T, D], [B, Hkv, S, D], [B, Hkv, S, Dv]
  std::byte* out;          // dense [B, Hq, T, Dv] in `dtype`
  DType dtype;
  std::int64_t B, Hq, Hkv, T, S, D, Dv;
  float scale;
  bool causal;
  std::int64_t window;  // > 0: a query sees only the `window` newest keys it may see (itself included)
  const std::uint8_t* keep;  // null, or [B, S]: 0 masks key s of batch b out (padding)
};

/// Softmax over row[lo, vis) with the keys whose `keep` byte is 0 left out; a row that keeps no
/// key becomes zeros (no key to attend to) rather than NaN. Entries outside [lo, vis) are zeroed.
inline void masked_softmax_row(float* row, std::int64_t lo, std::int64_t vis, std::int64_t width,
                               const std::uint8_t* keep) {
  bool any = false;
  if (keep) {
    for (std::int64_t s = lo; s < vis; ++s) {
      if (keep[s]) any = true;
      else row[s] = -INFINITY;
    }
  } else {
    any = vis > lo;
  }
  if (any) backend::cpu::softmax_row(row + lo, row + lo, static_cast<std::size_t>(vis - lo));
  else std::fill(row + lo, row + std::max(lo, vis), 0.0f);
  std::fill(row, row + lo, 0.0f);
  std::fill(row + std::max(lo, vis), row + width, 0.0f);
}

/// Prefill attention: per (batch, kv head, query block), the scores of each of the group's query
/// heads against the keys, a masked softmax per row, and the group's probabilities against V at
/// once. The products run on the GEMV tiles (the keys, and V transposed, as weight rows), within
/// one work item each. They had been oneDNN matmuls, whose kernels are generated on a process's
/// first call of each shape: a 64-token prompt of the 483M LLaMA waited 30-35 ms for them (Zen 3,
/// F16 prefill 179 -> 199 t/s).
inline void sdpa_blocked_gemm(const SdpaArgs& a) {
  const std::int64_t group = a.Hq / a.Hkv;
  const std::int64_t nblk = (a.T + sdpa_query_block - 1) / sdpa_query_block;
  const std::size_t isz = itemsize(a.dtype);
  parallel_for(static_cast<std::size_t>(a.B * a.Hkv * nblk), 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t it = begin; it < end; ++it) {
      const auto iti = static_cast<std::int64_t>(it);
      const std::int64_t blk = iti % nblk, bk = iti / nblk, kvh = bk % a.Hkv, b = bk / a.Hkv;
      const std::int64_t t0 = blk * sdpa_query_block, tq = std::min(sdpa_query_block, a.T - t0);
      // Keys the last row of the block may see, rounded up to a multiple of 64 (then masked).
      std::int64_t s_hi = a.causal ? std::clamp<std::int64_t>(a.S - a.T + t0 + tq, 0, a.S) : a.S;
      s_hi = std::min(a.S, (s_hi + 63) / 64 * 64);
      const std::int64_t rows = group * tq;
      float* ctx = scratch_floats(static_cast<std::size_t>(rows * a.Dv), 1);
      if (s_hi == 0) {
        std::fill(ctx, ctx + rows * a.Dv, 0.0f);
      } else {
        float* scores = scratch_floats(static_cast<std::size_t>(rows * s_hi), 0);
        const float* keys = a.k + (b * a.Hkv + kvh) * a.S * a.D;
        for (std::int64_t g = 0; g < group; ++g) {
          backend::cpu::gemv_rows(a.q + ((b * a.Hq + kvh * group + g) * a.T + t0) * a.D, tq, a.D, keys, DType::f32,
                                  static_cast<std::size_t>(a.D) * sizeof(float), s_hi, nullptr, scores + g * tq * s_hi);
        }
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t t = t0 + r % tq;
          const std::int64_t vis = a.causal ? std::clamp<std::int64_t>(a.S - a.T + t + 1, 0, s_hi) : s_hi;
          const std::int64_t lo = a.window > 0 ? std::max<std::int64_t>(0, vis - a.window) : 0;
          float* row = scores + r * s_hi;
          backend::cpu::scale_row(row + lo, a.scale, static_cast<std::size_t>(vis - lo));
          masked_softmax_row(row, lo, vis, s_hi, a.keep ? a.keep + b * a.S : nullptr);
        }
        // V's first s_hi rows transposed: Dv rows of s_hi values, the weight rows of the product.
        float* vt = scratch_floats(static_cast<std::size_t>(a.Dv * s_hi), 2);
        const float* v = a.v + (b * a.Hkv + kvh) * a.S * a.Dv;
        for (std::int64_t s = 0; s < s_hi; ++s) {
          for (std::int64_t d = 0; d < a.Dv; ++d) vt[d * s_hi + s] = v[s * a.Dv + d];
        }
        backend::cpu::gemv_rows(scores, rows, s_hi, vt, DType::f32, static_cast<std::size_t>(s_hi) * sizeof(float), a.Dv,
                                nullptr, ctx);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t g = r / tq, t = t0 + r % tq;
        const std::int64_t orow = (b * a.Hq + kvh * group + g) * a.T + t;
        store_row(ctx + r * a.Dv, a.dtype, a.out + static_cast<std::size_t>(orow * a.Dv) * isz,
                  static_cast<std::size_t>(a.Dv));
      }
    }
  });
}

}  // namespace detail

namespace detail {
inline Tensor sdpa_impl(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                        std::optional<double> scale, std::int64_t window, const Tensor& key_mask) {
  constexpr const char* op = "scaled_dot_product_attention";
  detail::check_float(op, "query", q);
  detail::check_float(op, "key", k);
  detail::check_float(op, "value", v);
  detail::check_same_dtype(op, q, k);
  detail::check_same_dtype(op, q, v);
  auto shapes = [&] { return "query " + q.shape().str() + ", key " + k.shape().str() + ", value " + v.shape().str(); };
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    throw ShapeError(std::string(op) + ": expected 4-d [B, H, T, D] tensors, got " + shapes());
  }
  const std::int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const std::int64_t Hkv = k.size(1), S = k.size(2), Dv = v.size(3);
  if (k.size(0) != B || v.size(0) != B || v.size(1) != Hkv || v.size(2) != S || k.size(3) != D) {
    throw ShapeError(std::string(op) + ": mismatched shapes: " + shapes() +
                     " (expected key [B, Hkv, S, D] and value [B, Hkv, S, Dv])");
  }
  if (Hkv == 0 || Hq % Hkv != 0) {
    throw ShapeError(std::string(op) + ": query heads (" + std::to_string(Hq) +
                     ") must be a multiple of key/value heads (" + std::to_string(Hkv) + "): " + shapes());
  }
  const Shape out_shape{B, Hq, T, Dv};
  const Device dev = detail::placement_of(op, {&q, &k, &v});
  if (dev.is_meta()) return Tensor::empty(out_shape, q.dtype(), dev);
  if (window < 0) throw ValueError(std::string(op) + ": sliding_window must be >= 0, got " + std::to_string(window));
  if (key_mask.defined()) {
    if (key_mask.dim() != 2 || key_mask.size(0) != B || key_mask.size(1) != S) {
      throw ShapeError(std::string(op) + ": key_mask " + key_mask.shape().str() + " must be [B, S] = [" +
                       std::to_string(B) + ", " + std::to_string(S) + "] for " + shapes());
    }
    if (is_floating_point(key_mask.dtype())) {
      throw DTypeError(std::string(op) + ": key_mask must be bool or an integer tensor (nonzero: attend), got " +
                       detail::describe(key_mask));
    }
    if (key_mask.device() != dev && !dev.is_meta()) {
      throw DeviceError(std::string(op) + ": key_mask is on " + key_mask.device().str() + ", the inputs on " + dev.str());
    }
  }
  if (dev.is_cuda()) {
    if (key_mask.defined()) throw DeviceError(std::string(op) + ": a key_mask has no CUDA kernel yet");
    return detail::run_cuda(&DeviceOps::scaled_dot_product_attention, op, out_shape, q.dtype(), dev, q, k, v, is_causal,
                            scale.value_or(1.0 / std::sqrt(static_cast<double>(D))), window);
  }
  Tensor out = Tensor::empty(out_shape, q.dtype());
  if (out.numel() == 0) return out;
  const Tensor qf = detail::contiguous_f32(q), kf = detail::contiguous_f32(k), vf = detail::contiguous_f32(v);
  const float* qp = qf.data_ptr<float>();
  const float* kp = kf.data_ptr<float>();
  const float* vp = vf.data_ptr<float>();
  const auto sc = static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(D))));
  const std::int64_t group = Hq / Hkv;
  const DType dt = q.dtype();
  const Tensor keep_u8 = key_mask.defined() ? key_mask.to(DType::u8).contiguous() : Tensor{};
  const std::uint8_t* keep = keep_u8.defined() ? keep_u8.data_ptr<std::uint8_t>() : nullptr;
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  const std::size_t isz = out.element_size();
  if (T >= detail::sdpa_gemm_min_queries) {
    detail::sdpa_blocked_gemm({qp, kp, vp, dst, dt, B, Hq, Hkv, T, S, D, Dv, sc, is_causal, window, keep});
    return out;
  }
  const auto rows = static_cast<std::size_t>(B * Hq * T);
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 16) / static_cast<std::size_t>(std::max<std::int64_t>(S * (D + Dv), 1)));
  parallel_for(rows, grain, [&](std::size_t begin, std::size_t end) {
    float* scores = detail::scratch_floats(static_cast<std::size_t>(std::max<std::int64_t>(S, 1)), 0);
    float* acc = detail::scratch_floats(static_cast<std::size_t>(Dv), 1);
    for (std::size_t r = begin; r < end; ++r) {
      const auto ri = static_cast<std::int64_t>(r);
      const std::int64_t t = ri % T, bh = ri / T, h = bh % Hq, b = bh / Hq;
      const std::int64_t kvh = b * Hkv + h / group;
      const float* qrow = qp + ri * D;
      const float* kbase = kp + kvh * S * D;
      const float* vbase = vp + kvh * S * Dv;
      const std::int64_t visible = is_causal ? std::clamp<std::int64_t>(S - T + t + 1, 0, S) : S;
      const std::int64_t lo = window > 0 ? std::max<std::int64_t>(0, visible - window) : 0;
      const std::uint8_t* row_keep = keep ? keep + b * S + lo : nullptr;
      std::fill(acc, acc + Dv, 0.0f);
      bool any = visible > lo;
      if (row_keep) any = std::any_of(row_keep, row_keep + std::max<std::int64_t>(visible - lo, 0), [](std::uint8_t x) { return x != 0; });
      if (any) {
        const auto nv = static_cast<std::size_t>(visible - lo);
        const float* kseen = kbase + lo * D;
        const float* vseen = vbase + lo * Dv;
        for (std::size_t s = 0; s < nv; ++s) {
          scores[s] = row_keep && !row_keep[s]
                          ? -INFINITY
                          : backend::cpu::dot(qrow, kseen + static_cast<std::int64_t>(s) * D, static_cast<std::size_t>(D)) * sc;
        }
        backend::cpu::softmax_row(scores, scores, nv);
        for (std::size_t s = 0; s < nv; ++s) {
          backend::cpu::axpy(scores[s], vseen + static_cast<std::int64_t>(s) * Dv, acc, static_cast<std::size_t>(Dv));
        }
      }
      detail::store_row(acc, dt, dst + r * static_cast<std::size_t>(Dv) * isz, static_cast<std::size_t>(Dv));
    }
  });
  return out;
}
}  // namespace detail

/// Attention softmax(q k^T * scale [+ causal mask]) v over [B, H, T, D] tensors; see the header
/// comment for grouped heads and the end-aligned causal mask. Default scale: 1 / sqrt(D). Inside
/// an autocast scope, f32 / f16 / bf16 operands are first cast to the scope's dtype.
/// `sliding_window` > 0 (Mistral's): a query sees only the `sliding_window` newest of the keys
/// the causal mask lets it see, itself included. `key_mask` (bool or integer [B, S], CPU only)
/// leaves out the keys whose entry is 0, as a padding attention mask does; a query left with no
/// key gets a zero row.
inline Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                           bool is_causal = true, std::optional<double> scale = std::nullopt,
                                           std::int64_t sliding_window = 0, const Tensor& key_mask = {}) {
  if (core::is_autocast_enabled()) {
    return detail::sdpa_impl(detail::autocast_operand(q), detail::autocast_operand(k),
                             detail::autocast_operand(v), is_causal, scale, sliding_window, key_mask);
  }
  return detail::sdpa_impl(q, k, v, is_causal, scale, sliding_window, key_mask);
}

}  // namespace accel::ops

// Token and position embeddings.
//
//   embedding(ids, weight)                               weight rows gathered: [..., dim]
//   rotary_embedding(x, positions, theta, layout, rotary_dim)   RoPE on x [B, H, T, D]
//   rotary_embedding(x, positions, inv_freq, attention_scaling)  RoPE with given frequencies (rope_scaling)
//
// embedding copies rows in the weight's dtype (no conversion) and rejects any id outside
// [0, num_embeddings) with a ValueError naming it. rotary_embedding computes its angles in
// double and rotates in f32, returning x's dtype.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::ops {

/// Rotary layouts.
/// `half_split` rotates (x[i], x[i + d/2]) pairs (HF LLaMA and GPT-NeoX); `interleaved` rotates
/// (x[2i], x[2i+1]) pairs (Meta's original LLaMA checkpoints, GPT-J).
enum class RopeLayout : unsigned char { half_split, interleaved };

/// torch.nn.functional.embedding: ids (int64 or int32, any shape) select rows of weight
/// [num_embeddings, dim]; the result is [*ids.shape, dim] in weight's dtype.
inline Tensor embedding(const Tensor& ids, const Tensor& weight) {
  constexpr const char* op = "embedding";
  detail::check_defined(op, "ids", ids);
  detail::check_defined(op, "weight", weight);
  if (ids.dtype() != DType::i64 && ids.dtype() != DType::i32) {
    throw DTypeError("embedding: ids must be int64 or int32, got " + detail::describe(ids));
  }
  if (weight.dim() != 2) {
    throw ShapeError("embedding: weight must be [num_embeddings, dim], got " + weight.shape().str());
  }
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  const Device dev = detail::placement_of(op, {&ids, &weight});
  if (dev.is_meta()) return Tensor::empty(out_shape, weight.dtype(), dev);
  if (dev.is_cuda()) {
    Tensor out = Tensor::empty(out_shape, weight.dtype(), dev);
    // Called for rows of width 0 too: the ids are still checked.
    if (ids.numel() > 0) detail::cuda_op(&DeviceOps::embedding, op)(ids, weight, out);
    return out;
  }
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  const auto count = static_cast<std::size_t>(ids.numel());
  if (count == 0) return out;
  const Tensor idc = ids.to(DType::i64).contiguous();
  const std::int64_t* idp = idc.data_ptr<std::int64_t>();
  const std::int64_t rows = weight.size(0);
  for (std::size_t i = 0; i < count; ++i) {
    if (idp[i] < 0 || idp[i] >= rows) {
      throw ValueError("embedding: id " + std::to_string(idp[i]) + " at flat position " +
                       std::to_string(i) + " is out of range for a table of " + std::to_string(rows) +
                       " rows (weight " + weight.shape().str() + ")");
    }
  }
  const Tensor w = weight.contiguous();
  const std::size_t row_bytes = static_cast<std::size_t>(weight.size(1)) * weight.element_size();
  const auto* src = static_cast<const std::byte*>(w.data_ptr());
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 16) / std::max<std::size_t>(row_bytes, 1));
  parallel_for(count, grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      std::memcpy(dst + i * row_bytes, src + static_cast<std::size_t>(idp[i]) * row_bytes, row_bytes);
    }
  });
  return out;
}

namespace detail {
/// Checks x [B, H, T, D] and positions ([T] or [B, T], integer) for a rotary op.
inline void check_rotary_args(const char* op, const Tensor& x, const Tensor& positions, std::int64_t rd) {
  detail::check_float(op, "x", x);
  detail::check_defined(op, "positions", positions);
  if (positions.dtype() != DType::i64 && positions.dtype() != DType::i32) {
    throw DTypeError(std::string(op) + ": positions must be int64 or int32, got " + detail::describe(positions));
  }
  if (x.dim() != 4) throw ShapeError(std::string(op) + ": x must be [B, H, T, D], got " + x.shape().str());
  const std::int64_t B = x.size(0), T = x.size(2), D = x.size(3);
  if (!((positions.dim() == 1 && positions.size(0) == T) ||
        (positions.dim() == 2 && positions.size(0) == B && positions.size(1) == T))) {
    throw ShapeError(std::string(op) + ": positions " + positions.shape().str() + " do not match x " +
                     x.shape().str() + " (expected [" + std::to_string(T) + "] or [" + std::to_string(B) + ", " +
                     std::to_string(T) + "])");
  }
  if (rd > D || rd % 2 != 0 || rd < 0) {
    throw ValueError(std::string(op) + ": the rotary dim " + std::to_string(rd) +
                     " must be even and at most the head dim " + std::to_string(D));
  }
}
}  // namespace detail

/// Rotary position embedding with explicit frequencies (the rope_scaling variants of
/// transformers compute them): pair i of the first 2 * inv_freq.size() features turns by
/// position * inv_freq[i], and cos / sin are multiplied by `attention_scaling` (YaRN's factor;
/// 1 otherwise). Features past the rotary dim pass through.
inline Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const std::vector<double>& inv_freq,
                               double attention_scaling = 1.0, RopeLayout layout = RopeLayout::half_split) {
  constexpr const char* op = "rotary_embedding";
  const auto rd = static_cast<std::int64_t>(2 * inv_freq.size());
  detail::check_rotary_args(op, x, positions, rd);
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  const bool per_batch = positions.dim() == 2;
  const Device dev = detail::placement_of(op, {&x, &positions});
  if (dev.is_meta()) return Tensor::empty(x.shape(), x.dtype(), dev);
  if (dev.is_cuda()) {
    return detail::run_cuda(&DeviceOps::rotary_embedding, op, x.shape(), x.dtype(), dev, x, positions, inv_freq,
                            attention_scaling, layout == RopeLayout::interleaved);
  }
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  const Tensor pc = positions.to(DType::i64).contiguous();
  const std::int64_t* pos = pc.data_ptr<std::int64_t>();
  const std::int64_t half_rd = rd / 2;
  const DType dt = x.dtype();
  const std::size_t isz = x.element_size();
  const auto* src = static_cast<const std::byte*>(xc.data_ptr());
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  const auto n = static_cast<std::size_t>(D);
  // One (b, t) per work item: its angles are shared by every head.
  parallel_for(static_cast<std::size_t>(B * T), std::max<std::int64_t>(1, 256 / std::max<std::int64_t>(H, 1)),
               [&](std::size_t begin, std::size_t end) {
    float* cs = detail::scratch_floats(static_cast<std::size_t>(rd), 0);  // cos | sin
    float* buf = detail::scratch_floats(n, 1);
    float* res = detail::scratch_floats(n, 2);
    for (std::size_t it = begin; it < end; ++it) {
      const std::int64_t b = static_cast<std::int64_t>(it) / T, t = static_cast<std::int64_t>(it) % T;
      const auto p = static_cast<double>(pos[per_batch ? b * T + t : t]);
      for (std::int64_t i = 0; i < half_rd; ++i) {
        const double a = p * inv_freq[static_cast<std::size_t>(i)];
        cs[i] = static_cast<float>(std::cos(a) * attention_scaling);
        cs[half_rd + i] = static_cast<float>(std::sin(a) * attention_scaling);
      }
      for (std::int64_t h = 0; h < H; ++h) {
        const std::size_t off = static_cast<std::size_t>(((b * H + h) * T + t) * D) * isz;
        const float* in = detail::load_row(dt, src + off, buf, n);
        for (std::int64_t i = 0; i < half_rd; ++i) {
          const float c = cs[i], s = cs[half_rd + i];
          const std::int64_t i0 = layout == RopeLayout::half_split ? i : 2 * i;
          const std::int64_t i1 = layout == RopeLayout::half_split ? i + half_rd : 2 * i + 1;
          const float x0 = in[i0], x1 = in[i1];
          res[i0] = x0 * c - x1 * s;
          res[i1] = x1 * c + x0 * s;
        }
        for (std::int64_t i = rd; i < D; ++i) res[i] = in[i];
        detail::store_row(res, dt, dst + off, n);
      }
    }
  });
  return out;
}

/// Rotary position embedding on x [B, H, T, D] at `positions` (int64/int32, [T] or [B, T]).
/// Pair i of the first `rotary_dim` features (all of D when -1; must be even) turns by
/// position * theta^(-2i / rotary_dim); features past rotary_dim pass through (NeoX partial
/// rotary). `half_split` pairs (i, i + rotary_dim/2) as HF LLaMA; `interleaved` pairs (2i, 2i+1).
inline Tensor rotary_embedding(const Tensor& x, const Tensor& positions, double theta = 10000.0,
                               RopeLayout layout = RopeLayout::half_split, std::int64_t rotary_dim = -1) {
  constexpr const char* op = "rotary_embedding";
  const std::int64_t rd = rotary_dim < 0 && x.dim() == 4 ? x.size(3) : rotary_dim;
  detail::check_rotary_args(op, x, positions, rd);
  if (!(theta > 0.0)) throw ValueError("rotary_embedding: theta must be positive, got " + std::to_string(theta));
  std::vector<double> inv_freq(static_cast<std::size_t>(rd / 2));
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rd));
  }
  return rotary_embedding(x, positions, inv_freq, 1.0, layout);
}

}  // namespace accel::ops

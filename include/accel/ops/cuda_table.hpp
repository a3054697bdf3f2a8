// The CUDA implementations of the ops, reached through function pointers.
//
// Kernels compile only where nvcc compiles (DESIGN.md). The host-side ops in accel/ops/ call
// through this table for CUDA tensors; `accel/ops/cuda/ops.cuh`, included in a .cu
// translation unit, fills it at start-up. An empty slot raises DeviceError naming the op.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"

namespace accel::ops {

/// GELU variants, as torch names them.
enum class GeluApproximate : unsigned char { none, tanh };
/// Rotary layouts.
/// `half_split` rotates (x[i], x[i + d/2]) pairs (HF LLaMA and GPT-NeoX); `interleaved` rotates
/// (x[2i], x[2i+1]) pairs (Meta's original LLaMA checkpoints, GPT-J).
enum class RopeLayout : unsigned char { half_split, interleaved };

struct CudaOpsTable {
  Tensor (*matmul)(const Tensor& a, const Tensor& b) = nullptr;
  Tensor (*linear)(const Tensor& x, const Tensor& w, const Tensor& bias) = nullptr;
  Tensor (*add)(const Tensor& a, const Tensor& b) = nullptr;
  Tensor (*mul)(const Tensor& a, const Tensor& b) = nullptr;
  Tensor (*softmax)(const Tensor& x, std::int64_t dim) = nullptr;
  Tensor (*layer_norm)(const Tensor& x, const Tensor& w, const Tensor& b, double eps) = nullptr;
  Tensor (*rms_norm)(const Tensor& x, const Tensor& w, double eps) = nullptr;
  Tensor (*gelu)(const Tensor& x, GeluApproximate approximate) = nullptr;
  Tensor (*silu)(const Tensor& x) = nullptr;
  Tensor (*embedding)(const Tensor& ids, const Tensor& weight) = nullptr;
  /// Receives arguments the host op validated, and the frequencies it computed.
  Tensor (*rotary_embedding)(const Tensor& x, const Tensor& positions, const std::vector<double>& inv_freq,
                             double attention_scaling, RopeLayout layout) = nullptr;
  /// Receives arguments the host op validated.
  Tensor (*scaled_dot_product_attention)(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                         std::optional<double> scale, std::int64_t sliding_window) = nullptr;
  Tensor (*argmax)(const Tensor& x, std::int64_t dim) = nullptr;
  Tensor (*cat)(const std::vector<Tensor>& xs, std::int64_t dim) = nullptr;
};

inline CudaOpsTable& cuda_ops() {
  static CudaOpsTable table;
  return table;
}

/// The CUDA slot of an op, or DeviceError saying how to get it.
template <class Fn>
Fn require_cuda_op(Fn fn, const char* op) {
  if (!fn) {
    throw DeviceError(std::string(op) +
                      ": no CUDA kernel registered; compile one translation unit with nvcc that "
                      "includes accel/ops/cuda/ops.cuh");
  }
  return fn;
}

}  // namespace accel::ops

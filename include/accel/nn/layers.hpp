// The layers real transformers need, with torch's parameter names and shapes.
//
//   Linear(in, out, bias)          weight [out, in], bias [out]        y = x W^T + b
//   Conv1D(in, out)                weight [in, out], bias [out]        y = x W + b   (HF GPT-2)
//   Embedding(num, dim)            weight [num, dim]
//   LayerNorm(dim, eps, affine)    weight [dim] = 1, bias [dim] = 0
//   RMSNorm(dim, eps)              weight [dim] = 1
//
// Parameters are created by new_parameter_tensor, so under init_empty_weights they are meta
// tensors from the start (no cpu bytes). Weights start at zero, norm scales at one: load real
// weights before computing. forward() runs accel::ops on the module's current tensors.
#pragma once

#include <cstdint>
#include <string>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/module.hpp"
#include "accel/ops/ops.hpp"

namespace accel::nn {

namespace detail {
inline void check_positive(const char* layer, const char* what, std::int64_t v) {
  if (v < 0) throw ValueError(std::string(layer) + ": " + what + " must be >= 0, got " + std::to_string(v));
}
}  // namespace detail

/// torch.nn.Linear: weight [out_features, in_features], optional bias [out_features].
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true, DType dtype = DType::f32)
      : Module("Linear"), in_features_(in_features), out_features_(out_features) {
    detail::check_positive("Linear", "in_features", in_features);
    detail::check_positive("Linear", "out_features", out_features);
    register_parameter("weight", new_parameter_tensor({out_features, in_features}, dtype));
    if (bias) register_parameter("bias", new_parameter_tensor({out_features}, dtype));
  }
  std::int64_t in_features() const noexcept { return in_features_; }
  std::int64_t out_features() const noexcept { return out_features_; }
  const Tensor& weight() const { return parameter_slots()[0].cell->data; }
  /// The bias, or an undefined tensor when the layer has none.
  Tensor bias() const { return has_parameter("bias") ? get_parameter("bias") : Tensor{}; }

  Tensor forward(const Tensor& x) override { return ops::linear(x, weight(), bias()); }

 private:
  std::int64_t in_features_, out_features_;
};

/// Hugging Face GPT-2's Conv1D: a linear layer whose weight is stored [in, out] (y = x W + b).
class Conv1D : public Module {
 public:
  Conv1D(std::int64_t in_features, std::int64_t out_features, DType dtype = DType::f32) : Module("Conv1D") {
    detail::check_positive("Conv1D", "in_features", in_features);
    detail::check_positive("Conv1D", "out_features", out_features);
    register_parameter("weight", new_parameter_tensor({in_features, out_features}, dtype));
    register_parameter("bias", new_parameter_tensor({out_features}, dtype));
  }
  Tensor forward(const Tensor& x) override {
    // x W with W [in, out] is linear() with the transposed view (no copy).
    return ops::linear(x, get_parameter("weight").t(), get_parameter("bias"));
  }
};

/// torch.nn.Embedding: weight [num_embeddings, embedding_dim]; forward takes integer ids.
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype = DType::f32) : Module("Embedding") {
    detail::check_positive("Embedding", "num_embeddings", num_embeddings);
    detail::check_positive("Embedding", "embedding_dim", embedding_dim);
    register_parameter("weight", new_parameter_tensor({num_embeddings, embedding_dim}, dtype));
  }
  Tensor forward(const Tensor& ids) override { return ops::embedding(ids, get_parameter("weight")); }
};

/// torch.nn.LayerNorm over the last dimension.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5, bool elementwise_affine = true, DType dtype = DType::f32)
      : Module("LayerNorm"), eps_(eps) {
    detail::check_positive("LayerNorm", "dim", dim);
    if (elementwise_affine) {
      register_parameter("weight", new_parameter_tensor({dim}, dtype, 1.0));
      register_parameter("bias", new_parameter_tensor({dim}, dtype, 0.0));
    }
  }
  double eps() const noexcept { return eps_; }
  Tensor forward(const Tensor& x) override {
    if (!has_parameter("weight")) {
      throw ValueError("LayerNorm without elementwise_affine has no forward in accel (ops::layer_norm needs weights)");
    }
    return ops::layer_norm(x, get_parameter("weight"), get_parameter("bias"), eps_);
  }

 private:
  double eps_;
};

/// RMSNorm (LLaMA's): x / sqrt(mean(x^2) + eps) * weight, over the last dimension.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(std::int64_t dim, double eps = 1e-6, DType dtype = DType::f32) : Module("RMSNorm"), eps_(eps) {
    detail::check_positive("RMSNorm", "dim", dim);
    register_parameter("weight", new_parameter_tensor({dim}, dtype, 1.0));
  }
  double eps() const noexcept { return eps_; }
  Tensor forward(const Tensor& x) override { return ops::rms_norm(x, get_parameter("weight"), eps_); }

 private:
  double eps_;
};

}  // namespace accel::nn

// The layers real transformers need, with torch's parameter names and shapes, each computing
// under a policy bundle P (nn/basic_module.hpp); the plain names use the default bundle.
//
//   BasicLinear<P>(in, out, bias)          weight [out, in], bias [out]      y = x W^T + b      Linear
//   BasicConv1D<P>(in, out)                weight [in, out], bias [out]      y = x W + b (GPT-2) Conv1D
//   BasicEmbedding<P>(num, dim)            weight [num, dim]                 rows of ids         Embedding
//   BasicLayerNorm<P>(dim, eps, affine)    weight [dim] = 1, bias [dim] = 0                      LayerNorm
//   BasicRMSNorm<P>(dim, eps)              weight [dim] = 1                                      RMSNorm
//
// Parameters are created by new_parameter_tensor, so under init_empty_weights they are meta
// tensors from the start (no cpu bytes), in P's storage dtype unless a dtype is given. Weights
// start at zero, norm scales at one: load real weights before computing. Each layer keeps the
// slots its registration returned, so forward reads its weights without a lookup by name.
#pragma once

#include <cstdint>
#include <string>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/module.hpp"
#include "accel/ops/ops.hpp"

namespace accel::nn {

namespace detail {
inline void check_positive(const char* layer, const char* what, std::int64_t v) {
  if (v < 0) throw ValueError(std::string(layer) + ": " + what + " must be >= 0, got " + std::to_string(v));
}
/// The tensor of an optional slot (undefined when the layer has none).
inline Tensor slot_tensor(const ParameterPtr* slot) { return slot ? (*slot)->data : Tensor{}; }

/// y = x W^T + b. A float32 weight given lower-precision activations (a layer kept in float32,
/// keep_in_fp32_modules) takes them widened, as torch's type promotion would; whether the product
/// runs in float32 is the call's scope (the kept module opens none, Module::keeps_fp32).
inline Tensor linear_widening(const Tensor& x, const Tensor& w, const Tensor& b) {
  const bool widen = w.dtype() == DType::f32 && x.dtype() != DType::f32 && x.is_floating_point();
  return ops::linear(widen ? x.to(DType::f32) : x, w, b);
}
}  // namespace detail

/// torch.nn.Linear: weight [out_features, in_features], optional bias [out_features].
template <PolicyBundle P = default_policies>
class BasicLinear : public BasicModule<BasicLinear<P>, P> {
  using Base = BasicModule<BasicLinear<P>, P>;

 public:
  BasicLinear(std::int64_t in_features, std::int64_t out_features, bool bias = true, DType dtype = Base::storage_dtype)
      : Base("Linear"), in_features_(in_features), out_features_(out_features) {
    detail::check_positive("Linear", "in_features", in_features);
    detail::check_positive("Linear", "out_features", out_features);
    weight_ = &this->register_parameter("weight", new_parameter_tensor({out_features, in_features}, dtype));
    if (bias) bias_ = &this->register_parameter("bias", new_parameter_tensor({out_features}, dtype));
  }
  std::int64_t in_features() const noexcept { return in_features_; }
  std::int64_t out_features() const noexcept { return out_features_; }
  const Tensor& weight() const { return (*weight_)->data; }
  /// The bias, or an undefined tensor when the layer has none.
  Tensor bias() const { return detail::slot_tensor(bias_); }

  Tensor forward(const Tensor& x) override {
    return detail::linear_widening(x, (*weight_)->data, detail::slot_tensor(bias_));
  }

 private:
  std::int64_t in_features_, out_features_;
  ParameterPtr* weight_ = nullptr;
  ParameterPtr* bias_ = nullptr;
};

/// Hugging Face GPT-2's Conv1D: a linear layer whose weight is stored [in, out] (y = x W + b).
template <PolicyBundle P = default_policies>
class BasicConv1D : public BasicModule<BasicConv1D<P>, P> {
  using Base = BasicModule<BasicConv1D<P>, P>;

 public:
  BasicConv1D(std::int64_t in_features, std::int64_t out_features, DType dtype = Base::storage_dtype)
      : Base("Conv1D") {
    detail::check_positive("Conv1D", "in_features", in_features);
    detail::check_positive("Conv1D", "out_features", out_features);
    weight_ = &this->register_parameter("weight", new_parameter_tensor({in_features, out_features}, dtype));
    bias_ = &this->register_parameter("bias", new_parameter_tensor({out_features}, dtype));
  }
  const Tensor& weight() const { return (*weight_)->data; }
  const Tensor& bias() const { return (*bias_)->data; }
  // x W with W [in, out] is linear() with the transposed view (no copy).
  Tensor forward(const Tensor& x) override {
    return detail::linear_widening(x, (*weight_)->data.t(), (*bias_)->data);
  }

 private:
  ParameterPtr* weight_ = nullptr;
  ParameterPtr* bias_ = nullptr;
};

/// torch.nn.Embedding: weight [num_embeddings, embedding_dim]; forward takes integer ids.
template <PolicyBundle P = default_policies>
class BasicEmbedding : public BasicModule<BasicEmbedding<P>, P> {
  using Base = BasicModule<BasicEmbedding<P>, P>;

 public:
  BasicEmbedding(std::int64_t num_embeddings, std::int64_t embedding_dim, DType dtype = Base::storage_dtype)
      : Base("Embedding") {
    detail::check_positive("Embedding", "num_embeddings", num_embeddings);
    detail::check_positive("Embedding", "embedding_dim", embedding_dim);
    weight_ = &this->register_parameter("weight", new_parameter_tensor({num_embeddings, embedding_dim}, dtype));
  }
  const Tensor& weight() const { return (*weight_)->data; }
  Tensor forward(const Tensor& ids) override { return ops::embedding(ids, (*weight_)->data); }

 private:
  ParameterPtr* weight_ = nullptr;
};

/// torch.nn.LayerNorm over the last dimension.
template <PolicyBundle P = default_policies>
class BasicLayerNorm : public BasicModule<BasicLayerNorm<P>, P> {
  using Base = BasicModule<BasicLayerNorm<P>, P>;

 public:
  explicit BasicLayerNorm(std::int64_t dim, double eps = 1e-5, bool elementwise_affine = true,
                          DType dtype = Base::storage_dtype)
      : Base("LayerNorm"), eps_(eps) {
    detail::check_positive("LayerNorm", "dim", dim);
    if (elementwise_affine) {
      weight_ = &this->register_parameter("weight", new_parameter_tensor({dim}, dtype, 1.0));
      bias_ = &this->register_parameter("bias", new_parameter_tensor({dim}, dtype, 0.0));
    }
  }
  double eps() const noexcept { return eps_; }
  Tensor forward(const Tensor& x) override {
    if (!weight_) {
      throw ValueError("LayerNorm without elementwise_affine has no forward in accel (ops::layer_norm needs weights)");
    }
    return ops::layer_norm(x, (*weight_)->data, (*bias_)->data, eps_);
  }

 private:
  double eps_;
  ParameterPtr* weight_ = nullptr;
  ParameterPtr* bias_ = nullptr;
};

/// RMSNorm (LLaMA's): x / sqrt(mean(x^2) + eps) * weight, over the last dimension.
template <PolicyBundle P = default_policies>
class BasicRMSNorm : public BasicModule<BasicRMSNorm<P>, P> {
  using Base = BasicModule<BasicRMSNorm<P>, P>;

 public:
  explicit BasicRMSNorm(std::int64_t dim, double eps = 1e-6, DType dtype = Base::storage_dtype)
      : Base("RMSNorm"), eps_(eps) {
    detail::check_positive("RMSNorm", "dim", dim);
    weight_ = &this->register_parameter("weight", new_parameter_tensor({dim}, dtype, 1.0));
  }
  double eps() const noexcept { return eps_; }
  const Tensor& weight() const { return (*weight_)->data; }
  Tensor forward(const Tensor& x) override { return ops::rms_norm(x, (*weight_)->data, eps_); }

 private:
  double eps_;
  ParameterPtr* weight_ = nullptr;
};

using Linear = BasicLinear<>;
using Conv1D = BasicConv1D<>;
using Embedding = BasicEmbedding<>;
using LayerNorm = BasicLayerNorm<>;
using RMSNorm = BasicRMSNorm<>;

}  // namespace accel::nn

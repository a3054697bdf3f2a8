// The linear layer that computes on Quanto's and TorchAO's weight-only affine codes
// (formats/affine.hpp holds the arithmetic and the layout).
//
//   affine_linear(x, s, aw, bias)                  y = x W^T + b
//   BasicAffineLinear<P>(in, out, s, group, bias, bias_dtype)
//                                                  the layer: "weight" (codes), "weight_scale" and, for
//                                                  the zero-point schemes, "weight_min"
//
// Forward on the CPU (layers/cpu_linear.hpp's frame): up to 16 rows dequantize a tile of 8 weight
// rows at a time and take float32 dot products (the weight read once); more rows dequantize the
// whole weight and run ops::linear; the dynamic-activation scheme quantizes each row of x and
// multiplies int8 codes (kernels/int8_gemm.hpp, LLM.int8's kernels). On a GPU the layer goes through
// layers/device_linear.hpp (int8 per channel through the int8 kernels, the others through
// affine_value in a GEMV); there the dynamic-activation scheme multiplies float activations with
// the decoded weight (closer to the float model than TorchAO's int8 product).
// Differences from the libraries: scales are float32 (theirs are the model's dtype), and the codes
// are this layout, not Quanto's or TorchAO's tensor subclasses (Quanto's own serialized form is
// formats/quanto_format.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/init.hpp"
#include "accel/ops/matmul.hpp"
#include "accel/quant/formats/affine.hpp"
#include "accel/quant/kernels/int8_gemm.hpp"
#include "accel/quant/layers/cpu_linear.hpp"
#include "accel/quant/layers/device_linear.hpp"

namespace accel::quant {

/// y = x W^T (+ bias) on the codes (see the header comment); y has x's dtype.
inline Tensor affine_linear(const Tensor& x, AffineScheme s, const AffineWeight& w, const Tensor& bias = {}) {
  const auto& info = affine_scheme_info(s);
  const std::string op(info.name);
  if (x.is_meta()) return meta_quantized_linear(op + " linear", x, w.in, w.out);
  if (x.device().is_cuda() || w.codes.device().is_cuda()) {
    const DeviceQuantOps& q = device_quant_ops(op + " linear", w.codes.is_cuda() ? w.codes.device() : x.device());
    const Tensor codes = w.codes.contiguous(), scale = w.scale.contiguous();
    const Tensor mn = w.min.defined() ? w.min.contiguous() : Tensor();
    const int kind = static_cast<int>(info.kind);
    // int8 per output channel is LLM.int8's layout with a multiplier of 1: its kernels.
    const bool int8_rows = info.kind == AffineKind::symmetric && info.bits == 8;
    return device_quantized_linear(
        op + " linear", x, codes, w.in, w.out, bias,
        [&](const Tensor& xs, const Tensor& b, Tensor& y) {
          if (!int8_rows) {
            q.affine_gemv(xs, codes, scale, mn, kind, info.bits, w.group, b, y);
          } else if (detail::aligned16(codes)) {
            q.int8_gemv(xs, codes, scale, 1.0f, b, y);
          } else {
            return false;
          }
          return true;
        },
        [&](Tensor& wf) {
          if (int8_rows) {
            q.int8_dequantize(codes, scale, 1.0f, wf);
          } else {
            q.affine_dequantize(codes, scale, mn, kind, info.bits, w.group, wf);
          }
        });
  }
  if (!x.is_cpu() || !w.codes.is_cpu()) {
    throw DeviceError(op + " linear: the input is on " + x.device().str() + " and the weight on " + w.codes.device().str());
  }
  return cpu_quantized_linear(op + " linear", x, w.in, w.out, bias, [&](const CpuLinearArgs& a) {
    const std::size_t rows = a.rows, n = a.in, m = a.out;
    const float* xs = a.xs;
    float* ys = a.ys;
    if (!info.dynamic_activation && rows > 16) {
      const Tensor y = ops::linear(a.x, dequantize_affine(s, w), a.bias);
      std::copy_n(y.data_ptr<float>(), rows * m, ys);
      return true;
    }
    if (info.dynamic_activation) {
      // x per row: s = amax / 127, codes in [-127, 127] (TorchAO's reduced-range symmetric quant).
      std::vector<std::int8_t> xq(rows * n);
      std::vector<float> xs_scale(rows);
      for (std::size_t t = 0; t < rows; ++t) {
        float amax = 0;
        for (std::size_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(xs[t * n + k]));
        const float sx = amax / 127.0f;
        xs_scale[t] = sx;
        for (std::size_t k = 0; k < n; ++k) {
          xq[t * n + k] = static_cast<std::int8_t>(sx > 0 ? std::clamp(std::nearbyint(xs[t * n + k] / sx), -127.0f, 127.0f) : 0.0f);
        }
      }
      std::vector<std::int32_t> acc(rows * m);
      const auto* wq = static_cast<const std::int8_t*>(w.codes.data_ptr());
      simd::dispatch<int8_ladder>([&](auto arch) {
        parallel_for(m, 16, [&](std::size_t r0, std::size_t r1) {
          int8_linear_matmul(arch, xq.data(), rows, wq, n, m, r0, r1, acc.data());
        });
      });
      const auto* sw = static_cast<const float*>(w.scale.data_ptr());
      for (std::size_t t = 0; t < rows; ++t) {
        for (std::size_t r = 0; r < m; ++r) ys[t * m + r] = static_cast<float>(acc[t * m + r]) * xs_scale[t] * sw[r];
      }
      return false;
    }
    constexpr std::size_t tile = 8;
    parallel_for((m + tile - 1) / tile, 1, [&](std::size_t cb, std::size_t ce) {
      std::vector<float> wf(tile * n);
      for (std::size_t c = cb; c < ce; ++c) {
        const std::size_t r0 = c * tile, nr = std::min(tile, m - r0);
        for (std::size_t i = 0; i < nr; ++i) {
          detail::dequantize_affine_row(info, w, static_cast<std::int64_t>(r0 + i), wf.data() + i * n);
        }
        for (std::size_t t = 0; t < rows; ++t) {
          for (std::size_t i = 0; i < nr; ++i) ys[t * m + r0 + i] = backend::cpu::dot(wf.data() + i * n, xs + t * n, n);
        }
      }
    });
    return false;
  });
}

/// A linear layer over an affine-quantized weight (see the header comment).
template <PolicyBundle P = default_policies>
class BasicAffineLinear : public nn::BasicModule<BasicAffineLinear<P>, P> {
  using Base = nn::BasicModule<BasicAffineLinear<P>, P>;

 public:
  /// `group`: columns per scale for the grouped schemes (0: the scheme's default).
  BasicAffineLinear(std::int64_t in_features, std::int64_t out_features, AffineScheme scheme, std::int64_t group = 0,
                    bool bias = false, DType bias_dtype = DType::f32)
      : Base("AffineQuantizedLinear"), in_(in_features), out_(out_features), scheme_(scheme) {
    const auto& info = affine_scheme_info(scheme);
    if (in_features <= 0 || out_features <= 0) {
      throw ValueError(std::string(info.name) + " linear: in_features and out_features must be positive, got " +
                       std::to_string(in_features) + " and " + std::to_string(out_features));
    }
    group_ = group == 0 ? info.group : group;
    detail::check_affine_group(scheme, group_);
    if (info.group == 0) group_ = in_features;
    const std::int64_t groups = affine_groups(scheme, in_features, group_);
    weight_ = &this->register_parameter(
        "weight", nn::new_parameter_tensor(affine_code_shape(scheme, in_features, out_features), affine_code_dtype(scheme)),
        false);
    scale_ = &this->register_parameter("weight_scale", nn::new_parameter_tensor({out_features, groups}, DType::f32), false);
    if (info.kind == AffineKind::zero_point) {
      min_ = &this->register_parameter("weight_min", nn::new_parameter_tensor({out_features, groups}, DType::f32), false);
    }
    if (bias) bias_ = &this->register_parameter("bias", nn::new_parameter_tensor({out_features}, bias_dtype));
  }

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  AffineScheme scheme() const noexcept { return scheme_; }
  /// Columns per scale (in_features for the per-channel schemes).
  std::int64_t group_size() const noexcept { return group_; }
  Tensor bias() const { return bias_ ? (*bias_)->data : Tensor(); }

  /// The codes and scales as the layer holds them.
  AffineWeight quantized_weight() const {
    return {(*weight_)->data, (*scale_)->data, min_ ? (*min_)->data : Tensor(), in_, out_, group_};
  }
  /// Stores a quantized weight on `device` (the CPU, a GPU or meta); ShapeError when it is not this layer's.
  void set_quantized_weight(const AffineWeight& w, Device device) {
    const AffineWeight mine = quantized_weight();
    if (w.codes.shape() != mine.codes.shape() || w.codes.dtype() != mine.codes.dtype() ||
        w.scale.shape() != mine.scale.shape() || w.min.defined() != mine.min.defined()) {
      throw ShapeError(std::string(affine_scheme_info(scheme_).name) + " linear: quantized weight " +
                       w.codes.shape().str() + " does not fit a layer of " + std::to_string(in_) + " -> " +
                       std::to_string(out_));
    }
    auto put = [&](nn::ParameterPtr* cell, const Tensor& t) { (*cell)->data = device.is_meta() ? t.to_meta() : t.to(device); };
    put(weight_, w.codes);
    put(scale_, w.scale);
    if (min_) put(min_, w.min);
  }

  Tensor forward(const Tensor& x) override { return affine_linear(x, scheme_, quantized_weight(), bias()); }

  /// The float32 weight [out, in] the codes stand for.
  Tensor dequantized_weight() const {
    AffineWeight w = quantized_weight();
    w.codes = w.codes.to(Device::cpu()).contiguous();
    w.scale = w.scale.to(Device::cpu()).contiguous();
    if (w.min.defined()) w.min = w.min.to(Device::cpu()).contiguous();
    return dequantize_affine(scheme_, w);
  }

 private:
  std::int64_t in_, out_, group_ = 0;
  AffineScheme scheme_;
  nn::ParameterPtr* weight_ = nullptr;
  nn::ParameterPtr* scale_ = nullptr;
  nn::ParameterPtr* min_ = nullptr;
  nn::ParameterPtr* bias_ = nullptr;
};

using AffineLinear = BasicAffineLinear<>;

}  // namespace accel::quant

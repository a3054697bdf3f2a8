// Weight-only affine quantization: the schemes of Quanto and TorchAO as one trait table, and the
// linear layer that computes on their codes.
//
//   AffineScheme, affine_scheme_info(s)            the schemes (quant/affine_scheme.hpp)
//   AffineWeight quantize_affine(s, w, group)      codes, scale (and min) of a float32 [out, in] weight
//   dequantize_affine(s, aw)                       the float32 [out, in] the codes stand for
//   affine_linear(x, s, aw, bias)                  y = x W^T + b
//   BasicAffineLinear<P>(in, out, s, group, bias, bias_dtype)
//                                                  the layer: "weight" (codes), "weight_scale" and, for
//                                                  the zero-point schemes, "weight_min"
//
// The schemes are the rows of quant/affine_scheme.hpp's table.
// Codes round half to even (torch.round); packed codes sit low bits first (column 2i in the low
// nibble of byte i). Scales and mins are float32, [out, groups]; a last group shorter than the
// group size covers the rest of the row. A group whose values are all equal gets scale 0.
// Forward on the CPU: up to 16 rows dequantize a tile of 8 weight rows at a time and take float32
// dot products (the weight read once); more rows dequantize the whole weight and run ops::linear;
// the dynamic-activation scheme quantizes each row of x and multiplies int8 codes (VNNI where the
// CPU has it, quant/bnb_int8.hpp's int8_linear_matmul). On a GPU the layer goes through
// quant/device_linear.hpp (int8 per channel through the int8 kernels, the others through
// affine_value in a GEMV); there the dynamic-activation scheme multiplies float activations with
// the decoded weight (closer to the float model than TorchAO's int8 product).
// Differences from the libraries: scales are float32 (theirs are the model's dtype), and the codes
// are this layout, not Quanto's or TorchAO's tensor subclasses (the layers are not serializable).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/init.hpp"
#include "accel/ops/matmul.hpp"
#include "accel/quant/affine_scheme.hpp"
#include "accel/quant/bnb_int8.hpp"
#include "accel/quant/device_linear.hpp"

namespace accel::quant {

/// The dtype and shape of the codes of an `out` x `in` weight.
inline DType affine_code_dtype(AffineScheme s) {
  const auto& i = affine_scheme_info(s);
  return i.kind == AffineKind::float8 ? DType::f8_e4m3fn : i.bits == 8 ? DType::i8 : DType::u8;
}
inline Shape affine_code_shape(AffineScheme s, std::int64_t in, std::int64_t out) {
  const int bits = affine_scheme_info(s).bits;
  return Shape{out, bits == 8 ? in : (in * bits + 7) / 8};
}
/// Scales (and mins) per row: one per output channel, or one per group of `group` columns.
inline std::int64_t affine_groups(AffineScheme s, std::int64_t in, std::int64_t group) {
  return affine_scheme_info(s).group == 0 ? 1 : (in + group - 1) / group;
}

/// A quantized weight: codes [out, ...], scale [out, groups] and (zero-point schemes) min.
struct AffineWeight {
  Tensor codes, scale, min;
  std::int64_t in = 0, out = 0, group = 0;  ///< group: columns per scale (in for per-channel)
};

namespace detail {

inline void check_affine_group(AffineScheme s, std::int64_t group) {
  const auto& info = affine_scheme_info(s);
  if (info.group != 0 && group <= 0) {
    throw ValueError(std::string(info.name) + ": group size must be positive, got " + std::to_string(group));
  }
}

/// Codes of row `r` into floats: y[c] for c in [0, in).
inline void dequantize_affine_row(const AffineSchemeInfo& info, const AffineWeight& w, std::int64_t r, float* y) {
  const std::int64_t in = w.in, groups = w.scale.size(1);
  const float* sc = static_cast<const float*>(w.scale.data_ptr()) + r * groups;
  const float* mn = w.min.defined() ? static_cast<const float*>(w.min.data_ptr()) + r * groups : nullptr;
  const std::int64_t g = info.group == 0 ? in : w.group;
  const auto* q = static_cast<const std::uint8_t*>(w.codes.data_ptr()) + r * w.codes.size(1);
  for (std::int64_t c = 0; c < in; ++c) y[c] = affine_value(info.kind, info.bits, q, c, sc[c / g], mn ? mn[c / g] : 0.0f);
}

}  // namespace detail

/// Quantizes a float32 [out, in] weight (see the header comment); `group` is used by the grouped
/// schemes (0: the scheme's default). `compute`: the float dtype the arithmetic is rounded to after
/// each step (the weight, the range, the scale, the scaled value), as a library computing on
/// weights of that dtype rounds it: Quanto computes scales and codes in the weight's dtype. Scales
/// and mins are then values of `compute`, held in float32. ValueError for a non-positive group,
/// ShapeError for a weight that is not 2-d, DTypeError for a `compute` that is not float32,
/// float16 or bfloat16.
inline AffineWeight quantize_affine(AffineScheme s, const Tensor& weight, std::int64_t group = 0,
                                    DType compute = DType::f32) {
  const auto& info = affine_scheme_info(s);
  if (weight.dim() != 2) throw ShapeError(std::string(info.name) + ": expected a 2-d weight, got " + weight.shape().str());
  if (group == 0) group = info.group;
  detail::check_affine_group(s, group);
  if (compute != DType::f32 && compute != DType::f16 && compute != DType::bf16) {
    throw DTypeError(std::string(info.name) + ": arithmetic in " + std::string(dtype_name(compute)) +
                     "; expected float32, float16 or bfloat16");
  }
  const auto R = [compute](float v) {
    return compute == DType::bf16 ? static_cast<float>(bfloat16(v)) : compute == DType::f16 ? static_cast<float>(half(v)) : v;
  };
  const Tensor w = weight.to(Device::cpu(), compute).to(DType::f32).contiguous();
  AffineWeight aw;
  aw.out = w.size(0);
  aw.in = w.size(1);
  aw.group = info.group == 0 ? aw.in : group;
  const std::int64_t groups = affine_groups(s, aw.in, group), in = aw.in;
  aw.codes = Tensor::zeros(affine_code_shape(s, aw.in, aw.out), affine_code_dtype(s));
  aw.scale = Tensor::empty(Shape{aw.out, groups}, DType::f32, Device::cpu());
  if (info.kind == AffineKind::zero_point) aw.min = Tensor::empty(Shape{aw.out, groups}, DType::f32, Device::cpu());
  const float* x = static_cast<const float*>(w.data_ptr());
  parallel_for(static_cast<std::size_t>(aw.out), 4, [&](std::size_t b, std::size_t e) {
    for (std::int64_t r = static_cast<std::int64_t>(b); r < static_cast<std::int64_t>(e); ++r) {
      const float* xr = x + r * in;
      float* sc = static_cast<float*>(aw.scale.data_ptr()) + r * groups;
      for (std::int64_t gi = 0; gi < groups; ++gi) {
        const std::int64_t c0 = gi * aw.group, c1 = std::min(in, c0 + aw.group);
        if (info.kind == AffineKind::zero_point) {
          float lo = xr[c0], hi = xr[c0];
          for (std::int64_t c = c0; c < c1; ++c) lo = std::min(lo, xr[c]), hi = std::max(hi, xr[c]);
          const float scale = R(R(hi - lo) / static_cast<float>(info.qmax));
          sc[gi] = scale;
          static_cast<float*>(aw.min.data_ptr())[r * groups + gi] = lo;
          auto* q = static_cast<std::uint8_t*>(aw.codes.data_ptr()) + r * aw.codes.size(1);
          const int per_byte = 8 / info.bits;
          for (std::int64_t c = c0; c < c1; ++c) {
            const float v = scale > 0 ? std::nearbyint(R(R(xr[c] - lo) / scale)) : 0.0f;
            const int code = static_cast<int>(std::clamp(v, 0.0f, static_cast<float>(info.qmax)));
            q[c / per_byte] = static_cast<std::uint8_t>(q[c / per_byte] | (code << (info.bits * (c % per_byte))));
          }
          continue;
        }
        float amax = 0;
        for (std::int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xr[c]));
        const float scale = R(amax / info.divisor);
        sc[gi] = scale;
        if (info.kind == AffineKind::float8) {
          auto* q = static_cast<float8_e4m3fn*>(aw.codes.data_ptr()) + r * in;
          for (std::int64_t c = c0; c < c1; ++c) q[c] = float8_e4m3fn(scale > 0 ? std::clamp(R(xr[c] / scale), -448.0f, 448.0f) : 0.0f);
        } else {
          auto* q = static_cast<std::int8_t*>(aw.codes.data_ptr()) + r * in;
          for (std::int64_t c = c0; c < c1; ++c) {
            const float v = scale > 0 ? std::nearbyint(R(xr[c] / scale)) : 0.0f;
            q[c] = static_cast<std::int8_t>(std::clamp(v, static_cast<float>(info.qmin), static_cast<float>(info.qmax)));
          }
        }
      }
    }
  });
  return aw;
}

/// The float32 [out, in] weight the codes stand for.
inline Tensor dequantize_affine(AffineScheme s, const AffineWeight& w) {
  const auto& info = affine_scheme_info(s);
  Tensor y = Tensor::empty(Shape{w.out, w.in}, DType::f32, Device::cpu());
  auto* ys = static_cast<float*>(y.data_ptr());
  parallel_for(static_cast<std::size_t>(w.out), 16, [&](std::size_t b, std::size_t e) {
    for (std::size_t r = b; r < e; ++r) detail::dequantize_affine_row(info, w, static_cast<std::int64_t>(r), ys + r * w.in);
  });
  return y;
}

/// y = x W^T (+ bias) on the codes (see the header comment); y has x's dtype.
inline Tensor affine_linear(const Tensor& x, AffineScheme s, const AffineWeight& w, const Tensor& bias = {}) {
  const auto& info = affine_scheme_info(s);
  const std::string op(info.name);
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
  if (!is_floating_point(x.dtype())) throw DTypeError(op + " linear: the input is " + std::string(dtype_name(x.dtype())));
  if (x.dim() < 1 || x.size(-1) != w.in) {
    throw ShapeError(op + " linear: input " + x.shape().str() + " does not end in in_features " + std::to_string(w.in));
  }
  const Tensor xf = x.to(DType::f32).contiguous();
  const std::size_t rows = static_cast<std::size_t>(xf.numel() / w.in), n = static_cast<std::size_t>(w.in),
                    m = static_cast<std::size_t>(w.out);
  const Tensor b = bias.defined() ? bias.to(Device::cpu(), DType::f32).contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = w.out;
  if (!info.dynamic_activation && rows > 16) {
    const Tensor y = ops::linear(xf, dequantize_affine(s, w), b);
    return x.dtype() == DType::f32 ? y : y.to(x.dtype());
  }
  Tensor y = Tensor::empty(out_shape, DType::f32, Device::cpu());
  const auto* xs = static_cast<const float*>(xf.data_ptr());
  auto* ys = static_cast<float*>(y.data_ptr());
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
    simd::dispatch<bnb_int8_ladder>([&](auto arch) {
      parallel_for(m, 16, [&](std::size_t r0, std::size_t r1) {
        int8_linear_matmul(arch, xq.data(), rows, wq, n, m, r0, r1, acc.data());
      });
    });
    const auto* sw = static_cast<const float*>(w.scale.data_ptr());
    for (std::size_t t = 0; t < rows; ++t) {
      for (std::size_t r = 0; r < m; ++r) ys[t * m + r] = static_cast<float>(acc[t * m + r]) * xs_scale[t] * sw[r];
    }
  } else {
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
  }
  if (b.defined()) {
    const auto* bs = static_cast<const float*>(b.data_ptr());
    for (std::size_t t = 0; t < rows; ++t) {
      for (std::size_t r = 0; r < m; ++r) ys[t * m + r] += bs[r];
    }
  }
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
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

// Weight-only affine quantization, the arithmetic: the codes, scales and mins of Quanto's and
// TorchAO's schemes (the rows of formats/affine_scheme.hpp's table) and the floats they stand for.
//
//   affine_code_dtype(s) / affine_code_shape(s, in, out) / affine_groups(s, in, group)
//   AffineWeight quantize_affine(s, w, group)      codes, scale (and min) of a float32 [out, in] weight
//   dequantize_affine(s, aw)                       the float32 [out, in] the codes stand for
//
// Codes round half to even (torch.round); packed codes sit low bits first (column 2i in the low
// nibble of byte i). Scales and mins are float32, [out, groups]; a last group shorter than the
// group size covers the rest of the row. A group whose values are all equal gets scale 0.
// The layer computing on them is layers/affine_linear.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/quant/formats/affine_scheme.hpp"

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

}  // namespace accel::quant

// optimum-quanto's serialized form of a quantized linear layer: what Diffusers writes when it saves
// a Quanto model (QModuleMixin._save_to_state_dict: the weight's inner tensors under "weight.",
// then the activation scales), and reads back.
//
//   quanto_group_size(s, in)                     the group Quanto gives a layer of `in` inputs
//   quanto_tensors(layer, s, w, dtype)           the named tensors optimum-quanto saves for a layer
//   quanto_weight(layer, s, in, out, tensors)    the AffineWeight those tensors stand for
//   quanto_tensor_suffix(name)                   ".weight._scale", ... of a saved name, or empty
//
// | scheme       | "<layer>.weight._data"            | ".weight._scale" | ".weight._shift"   |
// |--------------|-----------------------------------|------------------|--------------------|
// | int8         | int8 [out, in]                    | [out, 1]         | -                  |
// | float8       | float8_e4m3fn [out, in]           | [out, 1]         | -                  |
// | int4 / int2  | ".weight._data._data": uint8 [ceil(r / k), g] | [r, 1] | [r, 1]: -min     |
//
// r = out * in / g groups of g columns, in row-major order (group j of output row o is row
// o * in / g + j); k = 8 / bits codes a byte. PackedTensor packs along the first dimension: group
// row i * ceil(r / k) + j sits in bits [bits * i, bits * (i + 1)) of byte row j. Scales and shifts
// are in the layer's float dtype; "<layer>.input_scale" and "<layer>.output_scale" are scalars of
// that dtype (ones: activations are not quantized). A code q stands for q * scale (int8, float8)
// or q * scale - shift (int4, int2). g is 128, else the largest of 96, 64, 32 that divides in, when
// in > 128; otherwise (or when none divides in) one group per output row (g = in).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/quant/formats/affine.hpp"

namespace accel::quant {

namespace detail {

inline bool is_quanto_scheme(AffineScheme s) {
  return s == AffineScheme::quanto_int8 || s == AffineScheme::quanto_int4 || s == AffineScheme::quanto_int2 ||
         s == AffineScheme::quanto_float8;
}

inline void require_quanto_scheme(AffineScheme s, const std::string& what) {
  if (!is_quanto_scheme(s)) {
    throw ValueError(what + ": " + std::string(affine_scheme_info(s).name) + " is not a Quanto scheme");
  }
}

}  // namespace detail

/// The group Quanto picks for a layer of `in` inputs (QModuleMixin): `in` (one group per output
/// row) for the 8-bit schemes; 128, 96, 64 or 32, the first dividing `in`, for int4 / int2 when
/// in > 128, else `in`.
inline std::int64_t quanto_group_size(AffineScheme s, std::int64_t in) {
  if (affine_scheme_info(s).bits == 8) return in;
  if (in > 128) {
    for (std::int64_t g = 128; g >= 32; g -= 32) {
      if (in % g == 0) return g;
    }
  }
  return in;
}

/// The part of a saved name after its layer (".weight._data", ".input_scale", ...), or empty when
/// the name is not one optimum-quanto writes for a quantized layer.
inline std::string_view quanto_tensor_suffix(std::string_view name) {
  for (std::string_view s : {".weight._data._data", ".weight._data", ".weight._scale", ".weight._shift", ".input_scale",
                             ".output_scale"}) {
    if (name.size() > s.size() && name.ends_with(s)) return name.substr(name.size() - s.size());
  }
  return {};
}

/// The tensors optimum-quanto saves for the layer at `layer` holding `w` (see the header comment),
/// scales, shifts and activation scales in `dtype`. ValueError for a scheme that is not Quanto's or
/// a grouping Quanto does not make.
inline std::vector<std::pair<std::string, Tensor>> quanto_tensors(const std::string& layer, AffineScheme s,
                                                                  const AffineWeight& w, DType dtype) {
  detail::require_quanto_scheme(s, "quanto_tensors('" + layer + "')");
  const auto& info = affine_scheme_info(s);
  const std::int64_t g = w.group == 0 ? w.in : w.group;
  if (info.bits != 8 && g != quanto_group_size(s, w.in)) {
    throw ValueError("quanto_tensors('" + layer + "'): groups of " + std::to_string(g) + " columns, Quanto groups " +
                     std::to_string(w.in) + " inputs by " + std::to_string(quanto_group_size(s, w.in)));
  }
  const std::int64_t rows = w.out * (w.in / g);
  std::vector<std::pair<std::string, Tensor>> out;
  const Tensor scale = w.scale.to(Device::cpu()).contiguous().reshape(Shape{rows, 1}).to(dtype);
  if (info.bits == 8) {
    out.emplace_back(layer + ".weight._data", w.codes.to(Device::cpu()).contiguous());
    out.emplace_back(layer + ".weight._scale", scale);
  } else {
    const int k = 8 / info.bits, mask = (1 << info.bits) - 1;
    const std::int64_t packed_rows = (rows + k - 1) / k;
    Tensor packed = Tensor::zeros(Shape{packed_rows, g}, DType::u8);
    const Tensor codes = w.codes.to(Device::cpu()).contiguous();
    const auto* src = static_cast<const std::uint8_t*>(codes.data_ptr());
    auto* dst = static_cast<std::uint8_t*>(packed.data_ptr());
    const std::int64_t row_bytes = codes.size(1);
    for (std::int64_t o = 0; o < w.out; ++o) {
      for (std::int64_t c = 0; c < w.in; ++c) {
        const int code = (src[o * row_bytes + c / k] >> (info.bits * (c % k))) & mask;
        const std::int64_t r = o * (w.in / g) + c / g;
        dst[(r % packed_rows) * g + c % g] |= static_cast<std::uint8_t>(code << (info.bits * (r / packed_rows)));
      }
    }
    out.emplace_back(layer + ".weight._data._data", std::move(packed));
    out.emplace_back(layer + ".weight._scale", scale);
    const Tensor mn = w.min.to(Device::cpu()).contiguous();
    Tensor shift = Tensor::empty(Shape{rows, 1}, DType::f32, Device::cpu());
    for (std::int64_t i = 0; i < rows; ++i) {
      static_cast<float*>(shift.data_ptr())[i] = -static_cast<const float*>(mn.data_ptr())[i];
    }
    out.emplace_back(layer + ".weight._shift", shift.to(dtype));
  }
  out.emplace_back(layer + ".input_scale", Tensor::ones(Shape{}, dtype));
  out.emplace_back(layer + ".output_scale", Tensor::ones(Shape{}, dtype));
  return out;
}

/// The weight of an `out` x `in` layer from the tensors optimum-quanto saved for it, keyed by
/// quanto_tensor_suffix (".weight._data", ...; the activation scales are not needed). FormatError
/// naming the tensor and what was expected for a missing tensor or a wrong dtype or shape.
inline AffineWeight quanto_weight(const std::string& layer, AffineScheme s, std::int64_t in, std::int64_t out,
                                  const std::map<std::string, Tensor, std::less<>>& tensors) {
  detail::require_quanto_scheme(s, "quanto_weight('" + layer + "')");
  const auto& info = affine_scheme_info(s);
  const std::int64_t g = quanto_group_size(s, in), rows = out * (in / g);
  const std::string scheme = "Quanto " + std::string(info.name).substr(std::string_view("quanto ").size());
  auto get = [&](const std::string& suffix, Shape shape, std::initializer_list<DType> dtypes) -> const Tensor& {
    const auto it = tensors.find(suffix);
    if (it == tensors.end()) throw FormatError(layer + suffix + ": missing (the " + scheme + " weight of '" + layer + "')");
    bool dtype_ok = false;
    for (DType d : dtypes) dtype_ok |= it->second.dtype() == d;
    if (!dtype_ok || it->second.shape() != shape) {
      std::string want;
      for (DType d : dtypes) want += (want.empty() ? "" : " or ") + std::string(dtype_name(d));
      throw FormatError(layer + suffix + ": is " + std::string(dtype_name(it->second.dtype())) + " " +
                        it->second.shape().str() + ", expected " + want + " " + shape.str() + " for a " + scheme +
                        " layer of " + std::to_string(in) + " -> " + std::to_string(out));
    }
    return it->second;
  };
  const std::initializer_list<DType> floats = {DType::f32, DType::f16, DType::bf16};
  AffineWeight w;
  w.in = in;
  w.out = out;
  w.group = g;
  w.scale = get(".weight._scale", Shape{rows, 1}, floats).to(Device::cpu(), DType::f32).contiguous().reshape(Shape{out, in / g});
  if (info.bits == 8) {
    w.codes = get(".weight._data", Shape{out, in}, {affine_code_dtype(s)}).to(Device::cpu()).contiguous().clone();
    return w;
  }
  const int k = 8 / info.bits, mask = (1 << info.bits) - 1;
  const std::int64_t packed_rows = (rows + k - 1) / k;
  const Tensor packed = get(".weight._data._data", Shape{packed_rows, g}, {DType::u8}).to(Device::cpu()).contiguous();
  const Tensor shift = get(".weight._shift", Shape{rows, 1}, floats).to(Device::cpu(), DType::f32).contiguous();
  w.codes = Tensor::zeros(affine_code_shape(s, in, out), DType::u8);
  const auto* src = static_cast<const std::uint8_t*>(packed.data_ptr());
  auto* dst = static_cast<std::uint8_t*>(w.codes.data_ptr());
  const std::int64_t row_bytes = w.codes.size(1);
  for (std::int64_t o = 0; o < out; ++o) {
    for (std::int64_t c = 0; c < in; ++c) {
      const std::int64_t r = o * (in / g) + c / g;
      const int code = (src[(r % packed_rows) * g + c % g] >> (info.bits * (r / packed_rows))) & mask;
      dst[o * row_bytes + c / k] |= static_cast<std::uint8_t>(code << (info.bits * (c % k)));
    }
  }
  w.min = Tensor::empty(Shape{out, in / g}, DType::f32, Device::cpu());
  for (std::int64_t i = 0; i < rows; ++i) {
    static_cast<float*>(w.min.data_ptr())[i] = -static_cast<const float*>(shift.data_ptr())[i];
  }
  return w;
}

}  // namespace accel::quant

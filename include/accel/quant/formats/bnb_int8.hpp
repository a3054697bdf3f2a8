// bitsandbytes' LLM.int8(): row-wise absmax int8 weights, and the arithmetic of the outlier-decomposed
// matmul (matmul_8bit, layers/bnb_products.hpp, computes it).
//
//   Int8Weight{CB, SCB}                              int8 [out, in] codes, float32 [out] row absmax
//   int8_vectorwise_quant(a, rows, cols, threshold)  row-wise codes, row stats, outlier columns
//   quantize_int8_weight(W) -> Int8Weight            Int8Params._quantize (W rounded to float16 first)
//   int8_vectorwise_dequant(w) -> Tensor             CB * SCB / 127, float32
//   int8_weight_to_tensors(w, prefix) / int8_weight_from_tensors(prefix, tensors)
//                                                    "<prefix>.weight", ".SCB", ".weight_format"
//
// The reference is bitsandbytes 0.50.2.dev0: functional.py int8_vectorwise_quant /
// int8_vectorwise_dequant, backends/default/ops.py (int8_vectorwise_quant, int8_mixed_scaled_mm,
// int8_mm_dequant), csrc/kernels.cu (kInt8VectorQuant, kdequant_mm_int32_fp16), nn/modules.py
// (Int8Params._quantize, Linear8bitLt._save_to_state_dict), autograd/_functions.py (MatMul8bitLt):
// - Weights: Int8Params casts the weight to float16 whatever the model's dtype (so a float32 or
//   bfloat16 checkpoint is rounded to float16 first); SCB = max |w| per row, exact in float16,
//   stored as float32; CB = round-half-even(w * (127 / SCB)) in float32.
// - Activations: cast to float16; with threshold > 0 an element with |a| >= threshold is an
//   outlier, its column an outlier column. Row stats take max |a| over the non-outliers; codes are
//   round-half-even(a * (127 / stat)); every outlier column's codes are zeroed.
// - C = CA CB^T in int32, then C * SCA * SCB * 6.200012e-05 (kdequant_mm_int32_fp16's constant,
//   1 / 127^2, fused with the bias in one FMA); the outlier columns add x[:, cols] times the
//   dequantized weight columns (CB * SCB * 7.874015718698502e-3, int8_vectorwise_dequant).
// - A row with no value to scale by (all zero, or all outliers) gets stat 0 and codes 0, as the
//   CUDA kernel's NaN-to-int conversion gives.
// Differences from bitsandbytes, each where its result is worse or hardware-bound:
// - The int8 product is dequantized and summed with the outliers in float32 and rounded to x's
//   dtype once; bnb rounds the int8 part to float16 first and adds the outliers in x's dtype.
// - 127 / stat is IEEE division (bnb's CPU path); its CUDA kernel uses __fdividef, which can differ
//   in the last bit and so move a code that lies within an ulp of a .5 boundary.
// - The default backend's int8_mm_dequant constant is 6.200124e-05 (off by 1.8e-5 relative); the
//   CUDA kernel's 6.200012e-05 is used here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/tensor.hpp"

namespace accel::quant {

/// kdequant_mm_int32_fp16's MM_DEQUANT_CONST: 1 / (127 * 127) as bnb spells it.
inline constexpr float int8_mm_dequant_const = 6.200012e-05f;
/// int8_vectorwise_dequant's 1 / 127.
inline constexpr float int8_dequant_const = 7.874015718698502e-3f;

/// Int8Params after quantization: CB int8 [out, in] and SCB float32 [out].
struct Int8Weight {
  Tensor CB;
  Tensor SCB;
  std::int64_t out_features() const { return CB.size(0); }
  std::int64_t in_features() const { return CB.size(1); }
};

/// int8_vectorwise_quant's three results.
struct Int8Rows {
  std::vector<std::int8_t> codes;          ///< rows x cols, row-major
  std::vector<float> stats;                ///< per row: max |a| over the non-outliers
  std::vector<std::int64_t> outlier_cols;  ///< ascending; empty without threshold or outliers
};

namespace detail {
/// torch.round then .to(int8): half to even; NaN (a zero stat) gives 0 as the CUDA kernel does.
inline std::int8_t round_to_int8(float v) noexcept {
  if (!(v == v)) return 0;
  return static_cast<std::int8_t>(std::nearbyint(v));
}
inline float to_f16_value(float v) noexcept { return static_cast<float>(half(v)); }
}  // namespace detail

/// Row-wise int8 codes of `a` (rows x cols floats that must already be float16 values, as bnb
/// requires float16 input). With threshold > 0, outliers (|a| >= threshold) are left out of the
/// stats and their whole columns get code 0.
inline Int8Rows int8_vectorwise_quant(const float* a, std::size_t rows, std::size_t cols, float threshold = 0.0f) {
  if (threshold < 0.0f || std::isnan(threshold)) throw ValueError("int8_vectorwise_quant: threshold must be non-negative");
  Int8Rows r;
  r.codes.resize(rows * cols);
  r.stats.resize(rows);
  std::vector<bool> outlier_col(cols, false);
  const bool sparse = threshold > 0.0f;
  for (std::size_t i = 0; i < rows; ++i) {
    const float* row = a + i * cols;
    float m = 0.0f;
    for (std::size_t j = 0; j < cols; ++j) {
      const float v = std::fabs(row[j]);
      if (sparse && v >= threshold) {
        outlier_col[j] = true;
      } else {
        m = std::fmax(m, v);
      }
    }
    r.stats[i] = m;
    const float scale = 127.0f / m;
    for (std::size_t j = 0; j < cols; ++j) {
      const bool outlier = sparse && std::fabs(row[j]) >= threshold;
      r.codes[i * cols + j] = outlier ? 0 : detail::round_to_int8(row[j] * scale);
    }
  }
  for (std::size_t j = 0; j < cols; ++j) {
    if (!outlier_col[j]) continue;
    r.outlier_cols.push_back(static_cast<std::int64_t>(j));
    for (std::size_t i = 0; i < rows; ++i) r.codes[i * cols + j] = 0;
  }
  return r;
}

/// Int8Params._quantize: `w` [out, in] (any float dtype, on the CPU) rounded to float16, then
/// int8_vectorwise_quant without threshold.
inline Int8Weight quantize_int8_weight(const Tensor& w) {
  if (w.dim() != 2) throw ShapeError("quantize_int8_weight: the weight is " + w.shape().str() + ", expected [out, in]");
  if (!is_floating_point(w.dtype())) throw DTypeError("quantize_int8_weight: the weight is " + std::string(dtype_name(w.dtype())));
  const Tensor h = w.to(Device::cpu(), DType::f16).to(DType::f32).contiguous();
  const auto rows = static_cast<std::size_t>(w.size(0)), cols = static_cast<std::size_t>(w.size(1));
  Int8Rows q = int8_vectorwise_quant(h.data_ptr<float>(), rows, cols, 0.0f);
  return {Tensor::from_vector(q.codes, w.shape()), Tensor::from_vector(q.stats, Shape{w.size(0)})};
}

/// int8_vectorwise_dequant: CB * SCB * (1 / 127) in float32, [out, in].
inline Tensor int8_vectorwise_dequant(const Int8Weight& w) {
  const Tensor cb = w.CB.to(Device::cpu()).contiguous();
  const Tensor scb = w.SCB.to(Device::cpu(), DType::f32).contiguous();
  Tensor out = Tensor::empty(cb.shape(), DType::f32);
  const auto rows = static_cast<std::size_t>(cb.size(0)), cols = static_cast<std::size_t>(cb.size(1));
  const auto* c = cb.data_ptr<std::int8_t>();
  const float* s = scb.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) o[i * cols + j] = static_cast<float>(c[i * cols + j]) * s[i] * int8_dequant_const;
  }
  return out;
}

// ---- serialized form ---------------------------------------------------------------------------

/// What Linear8bitLt._save_to_state_dict writes for module `prefix`: "<prefix>.weight" (CB),
/// "<prefix>.SCB" and "<prefix>.weight_format" (uint8 scalar 0: row-major, the only format bnb
/// still writes).
inline std::vector<std::pair<std::string, Tensor>> int8_weight_to_tensors(const Int8Weight& w, const std::string& prefix) {
  return {{prefix + ".weight", w.CB}, {prefix + ".SCB", w.SCB}, {prefix + ".weight_format", Tensor::zeros(Shape{}, DType::u8)}};
}

/// The inverse: CB int8 [out, in], SCB float32 [out], weight_format (optional) 0. FormatError names
/// the tensor that disagrees. Differences from bnb: its old swizzled formats (col32, col_turing,
/// col_ampere: weight_format 1..3) are refused by name instead of being converted.
inline Int8Weight int8_weight_from_tensors(const std::string& prefix, const std::map<std::string, Tensor>& tensors) {
  const std::string wn = prefix + ".weight", sn = prefix + ".SCB", fn = prefix + ".weight_format";
  const auto wi = tensors.find(wn);
  const auto si = tensors.find(sn);
  if (wi == tensors.end()) throw FormatError(wn + ": missing (the int8 weight)");
  if (si == tensors.end()) throw FormatError(sn + ": missing (the int8 weight's row absmax)");
  const Tensor& cb = wi->second;
  const Tensor& scb = si->second;
  if (cb.dtype() != DType::i8 || cb.dim() != 2) {
    throw FormatError(wn + ": is " + std::string(dtype_name(cb.dtype())) + " " + cb.shape().str() + ", expected int8 [out, in]");
  }
  if (scb.dtype() != DType::f32 || scb.numel() != cb.size(0)) {
    throw FormatError(sn + ": is " + std::string(dtype_name(scb.dtype())) + " " + scb.shape().str() + ", expected " +
                      std::to_string(cb.size(0)) + " float32 values");
  }
  if (const auto fi = tensors.find(fn); fi != tensors.end()) {
    const Tensor f = fi->second.to(Device::cpu(), DType::i64).contiguous();
    const std::int64_t v = f.numel() == 1 ? f.data_ptr<std::int64_t>()[0] : -1;
    if (v != 0) {
      throw FormatError(fn + ": format " + std::to_string(v) +
                        " is not supported; only 0 (row) is (col32, col_turing, col_ampere are bnb's old layouts)");
    }
  }
  return {cb, scb};
}

}  // namespace accel::quant

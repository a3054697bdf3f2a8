// bitsandbytes' two products on the CPU, over the frame every quantized layer shares
// (cpu_linear.hpp):
//
//   gemv_4bit(x, packed, state, bias) -> y          y = x W^T (+ b), the 4-bit W decoded on the fly
//   matmul_8bit(x, w, options, bias) -> y           MatMul8bitLt's forward (formats/bnb_int8.hpp
//                                                   states its arithmetic and where it departs)
//
// The weights' codings are formats/bnb_4bit.hpp and formats/bnb_int8.hpp; the kernels, one tier to
// a file, kernels/bnb_4bit_gemv.hpp and kernels/int8_gemm.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/core/tensor.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"
#include "accel/quant/kernels/activation_rows.hpp"
#include "accel/quant/kernels/bnb_4bit_gemv.hpp"
#include "accel/quant/kernels/int8_gemm.hpp"
#include "accel/quant/layers/cpu_linear.hpp"

namespace accel::quant {

/// y = x W^T (+ bias) for the 4-bit weight (packed, state) of shape [out, in]: bnb's gemv_4bit /
/// Linear4bit forward, decoding each block on the fly instead of materialising W. x is float32,
/// float16 or bfloat16 with last dimension in (any number of rows; the kernels are shaped for the
/// 1..16 of decoding); y has x's dtype.
/// Differences from bnb: weights are decoded to float32 and never rounded to the compute dtype, and
/// sums are float32 (bnb dequantizes to the compute dtype for more than one row).
inline Tensor gemv_4bit(const Tensor& x, const Tensor& packed, const BnbQuantState& state, const Tensor& bias = {}) {
  if (state.shape.size() != 2) throw ShapeError("gemv_4bit: the weight is " + state.shape.str() + ", expected [out, in]");
  const Tensor held = detail::packed_bytes(packed, state, "gemv_4bit");
  return cpu_quantized_linear("gemv_4bit", x, state.shape[1], state.shape[0], bias, [&](const CpuLinearArgs& a) {
    const auto* bytes = static_cast<const std::uint8_t*>(held.data_ptr());
    std::vector<float> absmax_scratch;
    const float* absmax = detail::absmax_floats(state, absmax_scratch);
    const float* lut = bnb_4bit_info(state.quant_type).decode.data();
    const auto bs = static_cast<std::size_t>(state.blocksize);
    simd::dispatch<bnb_4bit_ladder>([&](auto arch) {
      detail::for_weight_blocks(a.out, (a.in + 1) / 2, [&](std::size_t r0, std::size_t r1) {
        gemv_4bit_rows(arch, a.xs, a.rows, bytes, absmax, lut, bs, a.in, a.out, r0, r1, a.ys);
      });
    });
    return false;
  });
}

/// What matmul_8bit needs besides its operands (MatmulLtState's inference fields).
struct Matmul8bitOptions {
  /// Activation magnitude at or above which a column is computed in floating point (transformers:
  /// llm_int8_threshold); 0 turns the decomposition off.
  float threshold = 6.0f;
};

/// y = x W^T (+ bias) for an int8 weight: LLM.int8()'s forward (formats/bnb_int8.hpp's header
/// comment). x is float32 / float16 / bfloat16 with last dimension in_features; y has x's dtype.
inline Tensor matmul_8bit(const Tensor& x, const Int8Weight& w, const Matmul8bitOptions& options = {},
                          const Tensor& bias = {}) {
  if (w.CB.dim() != 2 || w.CB.dtype() != DType::i8) {
    throw ShapeError("matmul_8bit: CB is " + std::string(dtype_name(w.CB.dtype())) + " " + w.CB.shape().str() +
                     ", expected int8 [out, in]");
  }
  const std::int64_t out = w.out_features(), in = w.in_features();
  if (w.SCB.numel() != out) throw ShapeError("matmul_8bit: SCB " + w.SCB.shape().str() + " for " + std::to_string(out) + " rows");
  return cpu_quantized_linear("matmul_8bit", x, in, out, bias, [&](const CpuLinearArgs& a) {
    const std::size_t n = a.in, m = a.out, rows = a.rows;
    const float* xs = a.xs;
    std::vector<float> h(rows * n);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = detail::to_f16_value(xs[i]);
    const Int8Rows qa = int8_vectorwise_quant(h.data(), rows, n, options.threshold);
    const Tensor cb = w.CB.to(Device::cpu()).contiguous();
    const Tensor scb = w.SCB.to(Device::cpu(), DType::f32).contiguous();
    const auto* cbs = cb.data_ptr<std::int8_t>();
    const float* sb = scb.data_ptr<float>();
    // The bias joins the dequantization's FMA, as kdequant_mm_int32_fp16 adds it.
    std::vector<float> bvals(m, 0.0f);
    if (a.bias.defined()) std::copy_n(a.bias.data_ptr<float>(), m, bvals.data());
    std::vector<std::int32_t> c(rows * m);
    simd::dispatch<int8_ladder>([&](auto arch) {
      detail::for_weight_blocks(m, n, [&](std::size_t r0, std::size_t r1) {
        int8_linear_matmul(arch, qa.codes.data(), rows, cbs, n, m, r0, r1, c.data());
        for (std::size_t t = 0; t < rows; ++t) {
          for (std::size_t r = r0; r < r1; ++r) {
            float v = std::fma(static_cast<float>(c[t * m + r]) * qa.stats[t] * sb[r], int8_mm_dequant_const, bvals[r]);
            // The outlier columns in the input's precision, against the dequantized weight columns.
            for (const std::int64_t col : qa.outlier_cols) {
              const auto j = static_cast<std::size_t>(col);
              v += xs[t * n + j] * (static_cast<float>(cbs[r * n + j]) * sb[r] * int8_dequant_const);
            }
            a.ys[t * m + r] = v;
          }
        }
      });
    });
    return true;
  });
}

}  // namespace accel::quant

// Packed-weight products on a GPU: the quant slots of the device backend behind one routine that
// every quantized layer calls when its input is a CUDA tensor.
//
//   device_gemv_rows                                    activation rows the fused kernels take
//   device_quant_ops(op, device)                        the registered slots, or DeviceError
//   device_quantized_linear(op, x, weight, in, out, bias, gemv, dequantize) -> y
//
// Up to device_gemv_rows rows (decoding), the weight is decoded on the fly by the slot's GEMV in
// float32 (no copy of W); beyond that (prefill) the weight is decoded once into a transient
// [out, in] tensor of x's dtype on the GPU and multiplied by cuBLAS (ops::linear), as bitsandbytes
// does for more than one row. That transient is one float weight of the layer: a GPU budget for a
// quantized model keeps room for the largest one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "accel/core/autocast_state.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/ops/matmul.hpp"
#include "accel/quant/layers/cpu_linear.hpp"

namespace accel::quant {

/// Activation rows up to which a GPU product decodes the weight on the fly.
inline constexpr std::int64_t device_gemv_rows = 8;

/// The quant slots of `device`'s backend; DeviceError naming `op` when they are not compiled in.
inline const DeviceQuantOps& device_quant_ops(const std::string& op, Device device) {
  const DeviceQuantOps& q = device_backend(device).quant;
  if (!q.ggml_gemv) {
    throw DeviceError(op + ": no CUDA kernels for packed weights are registered; compile one translation unit "
                           "with nvcc that includes accel/quant/kernels/cuda/kernels.cuh");
  }
  return q;
}

namespace detail {
inline bool aligned16(const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }
}  // namespace detail

/// y = x W^T (+ bias) on x's GPU for a packed weight held in `weight` (see the header comment).
/// `gemv(xs, b, y)` runs the fused kernel on xs, x as contiguous 16-byte aligned [n, in] float32
/// or bfloat16, with b the bias on the GPU (or undefined), into y [n, out] of xs's dtype, and
/// returns false when it cannot (a layout it does not take); `dequantize(w)` fills the float
/// tensor w [out, in] (x's dtype) or throws. y has x's dtype.
template <class Gemv, class Dequantize>
Tensor device_quantized_linear(const std::string& op, const Tensor& x, const Tensor& weight, std::int64_t in,
                               std::int64_t out, const Tensor& bias, Gemv&& gemv, Dequantize&& dequantize) {
  if (!x.device().is_cuda() || weight.device() != x.device()) {
    throw DeviceError(op + ": the input is on " + x.device().str() + " and the weight on " + weight.device().str() +
                      "; both must be on one GPU");
  }
  check_linear_input(op, x, in);
  const std::int64_t rows = in ? x.numel() / in : 0;
  Shape ys = x.shape();
  ys[ys.size() - 1] = out;
  if (rows >= 1 && rows <= device_gemv_rows && out > 0) {
    // The kernels read float32 and bfloat16 activations; float16 ones are widened first.
    Tensor xs = (x.dtype() == DType::bf16 ? x : x.to(DType::f32)).contiguous();
    if (!detail::aligned16(xs)) xs = xs.clone();
    xs = xs.view(Shape{rows, in});
    const Tensor b = bias.defined() ? bias.to(x.device()).contiguous() : Tensor();
    Tensor y = Tensor::empty(Shape{rows, out}, xs.dtype(), x.device());
    if (gemv(static_cast<const Tensor&>(xs), b, y)) {
      y = y.view(ys);
      return y.dtype() == x.dtype() ? y : y.to(x.dtype());
    }
  }
  Tensor w = Tensor::empty(Shape{out, in}, x.dtype(), x.device());
  if (w.numel()) dequantize(w);
  core::AutocastGuard own_arithmetic(std::nullopt);  // in x's dtype, as the CPU frame keeps its own
  return ops::linear(x, w, bias.defined() ? bias.to(x.device(), x.dtype()) : Tensor());
}

}  // namespace accel::quant

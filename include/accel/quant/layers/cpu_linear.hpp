// The CPU frame of every quantized product: what a layer does around its kernels, written once.
//
//   cpu_quantized_linear(op, x, in, out, bias, body) -> y    y = x W^T (+ bias), W known to `body`
//   CpuLinearArgs                                           what `body` gets: x as float32 rows, y
//   check_linear_input(op, x, in)                           the input check every product makes
//   meta_quantized_linear(op, x, in, out) -> y              y's shape alone, for an input on meta
//
// The frame checks x (floating point, last dimension `in`), converts it to contiguous float32 on
// the CPU, makes y float32 [..., out], calls body(args), adds the bias unless the body did, and
// casts y back to x's dtype. The product computes in float32 whatever compute scope the model's
// policy opened: a quantized layer's arithmetic is its own, not the autocast dtype's. The body
// owns the arithmetic and how it splits the weight rows over
// the threads (activation_rows.hpp's for_weight_blocks, or parallel_for over tiles), since that
// split is what each kernel family is shaped for. Its GPU counterpart is device_linear.hpp's
// device_quantized_linear; a layer whose weight may sit on a GPU tries that first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "accel/core/autocast_state.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"

namespace accel::quant {

/// The operands the frame hands a product's body.
struct CpuLinearArgs {
  const Tensor& x;       ///< float32, contiguous, on the CPU: rows x in
  const float* xs;       ///< x's data
  std::size_t rows;      ///< activation rows (the product of x's leading dimensions)
  std::size_t in;        ///< in_features
  std::size_t out;       ///< out_features
  const Tensor& bias;    ///< float32 [out] on the CPU, or undefined
  float* ys;             ///< y: rows x out float32, for the body to write (uninitialised)
};

/// DTypeError unless x is floating point, ShapeError unless its last dimension is `in`; `op` names
/// the product.
inline void check_linear_input(std::string_view op, const Tensor& x, std::int64_t in) {
  if (!is_floating_point(x.dtype())) throw DTypeError(std::string(op) + ": the input is " + std::string(dtype_name(x.dtype())));
  if (x.dim() < 1 || x.size(-1) != in) {
    throw ShapeError(std::string(op) + ": input " + x.shape().str() + " does not end in in_features " + std::to_string(in));
  }
}

/// y on meta, x's dtype and shape with the last dimension `out`, after check_linear_input: what a
/// quantized layer answers for an input on meta, as a float layer's ops::linear does. A block runs
/// on meta where another process of a split model holds it (dist/split_model.hpp) or a model is
/// traced for its shapes; its weight may then be on meta too, or never have been quantized.
inline Tensor meta_quantized_linear(std::string_view op, const Tensor& x, std::int64_t in, std::int64_t out) {
  check_linear_input(op, x, in);
  Shape ys = x.shape();
  ys[ys.size() - 1] = out;
  return Tensor::empty(ys, x.dtype(), Device::meta());
}

/// y = x W^T (+ bias) on the CPU; `body(const CpuLinearArgs&) -> bool` writes y and says whether
/// it added the bias itself (a kernel that fuses it into its last rounding), else the frame adds it.
/// `op` names the product in errors: DTypeError for a non-floating input, ShapeError for one not
/// ending in `in` or a bias that is not `out` values.
template <class Body>
Tensor cpu_quantized_linear(std::string_view op, const Tensor& x, std::int64_t in, std::int64_t out, const Tensor& bias,
                            Body&& body) {
  check_linear_input(op, x, in);
  const Tensor b = bias.defined() ? bias.to(Device::cpu(), DType::f32).contiguous() : Tensor();
  if (b.defined() && b.numel() != out) {
    throw ShapeError(std::string(op) + ": bias " + bias.shape().str() + " does not match " + std::to_string(out) + " outputs");
  }
  core::AutocastGuard own_arithmetic(std::nullopt);  // a body's ops::linear stays float32
  const Tensor xf = x.to(Device::cpu(), DType::f32).contiguous();
  Shape ys = x.shape();
  ys[ys.size() - 1] = out;
  Tensor y = Tensor::empty(ys, DType::f32, Device::cpu());
  const CpuLinearArgs args{xf,
                           xf.data_ptr<float>(),
                           static_cast<std::size_t>(xf.numel() / std::max<std::int64_t>(in, 1)),
                           static_cast<std::size_t>(in),
                           static_cast<std::size_t>(out),
                           b,
                           y.data_ptr<float>()};
  if (!body(args) && b.defined()) {
    const float* bp = b.data_ptr<float>();
    for (std::size_t t = 0; t < args.rows; ++t) {
      for (std::size_t r = 0; r < args.out; ++r) args.ys[t * args.out + r] += bp[r];
    }
  }
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

}  // namespace accel::quant

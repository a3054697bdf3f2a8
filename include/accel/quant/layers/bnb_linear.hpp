// bitsandbytes' quantized linear layers, as transformers swaps them in: Linear4bit (FP4 / NF4) and
// Linear8bitLt (LLM.int8()), with the names and state-dict layout bitsandbytes gives them.
//
//   BasicLinear4bit<P>(in, out, bias, options)     "weight" u8 [(in * out + 1) / 2, 1] + BnbQuantState
//   BasicLinear8bitLt<P>(in, out, bias, options)   "weight" i8 [out, in] (CB), "SCB" f32 [out],
//                                                  "weight_format" u8 scalar (buffers, as bnb saves them);
//                                                  with has_fp16_weights "weight" float [out, in] alone
//   linear_4bit_weight_shape(in, out)              the packed shape
//
// Packed weights are bytes with a type tag (docs/design.md, "Packed weights and quantizers"): the
// planner, hooks and Tensor::to see a u8 / i8 tensor and size it as the bytes it is; the forward is
// the one place that reads codes. Linear4bit keeps its QuantState beside the weight (not as a
// registered tensor: bnb keeps it on the Params4bit, and transformers saves it as
// "<name>.weight.absmax", ... which no module attribute can be named), so the planner counts the
// packed bytes only, as Accelerate's INT4 target dtype does: the float32 absmax adds 1/8 of the
// packed bytes at blocksize 64 (1/32 double-quantized), a decoded copy for the forward the same.
//
// Forward, as bnb's Linear4bit / Linear8bitLt:
// - Linear4bit: x and the bias are cast to compute_dtype; 1..16 rows go through gemv_4bit (blocks
//   decoded on the fly, float32 sums), more rows dequantize the weight to compute_dtype and run
//   ops::linear (bnb: 1 row through its GEMV, more through dequantize + matmul); y is cast back to
//   x's dtype.
// - Linear8bitLt: matmul_8bit with llm_int8_threshold (outlier columns in float); a float weight
//   (has_fp16_weights) is quantized per call first, as MatMul8bitLt does for one.
// On a GPU (the weight moved there by a device map or a hook), both go through
// quant/layers/device_linear.hpp's kernels: up to 8 rows decode the weight on the fly in float32, more
// decode it once to x's dtype and multiply with cuBLAS. Differences from bnb on a GPU: Linear8bitLt
// computes every column in floating point against the decoded weight (no int8 activations, so no
// outlier split), which is closer to the float model than LLM.int8's int8 product; a float weight
// (has_fp16_weights) is multiplied as it is, not rounded to int8 first.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "accel/core/autocast_state.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/init.hpp"
#include "accel/ops/matmul.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"
#include "accel/quant/layers/bnb_products.hpp"
#include "accel/quant/layers/device_linear.hpp"

namespace accel::quant {

/// The packed weight of an `out` x `in` 4-bit layer: u8 [(in * out + 1) / 2, 1], as Params4bit.
inline Shape linear_4bit_weight_shape(std::int64_t in, std::int64_t out) { return Shape{(in * out + 1) / 2, 1}; }

/// What a Linear4bit is built with: bnb.nn.Linear4bit's keyword arguments and the dtype it rounds to.
struct Linear4bitOptions {
  /// The dtype x is cast to for the product (bnb_4bit_compute_dtype).
  DType compute_dtype = DType::f32;
  BnbQuantType quant_type = BnbQuantType::fp4;
  /// Double quantization of the absmax (bnb_4bit_use_double_quant).
  bool compress_statistics = false;
  /// Elements per absmax block; transformers always uses 64.
  std::int64_t blocksize = 64;
  /// The dtype the model holds the float weight in: a weight is rounded to it before quantizing
  /// and dequantizes to it (QuantState.dtype). Also the bias's dtype.
  DType weight_dtype = DType::f32;
  /// The layer replaces GPT-2's Conv1D: a float checkpoint weight arrives [in, out] and is
  /// transposed before quantizing, as transformers' bnb integration does.
  bool transposed_source = false;
  /// The dtype whose elements hold the packed bytes in a saved checkpoint (bnb_4bit_quant_storage:
  /// [(n + 1) / 2 / itemsize, 1] of it, as bnb's quantize_4bit returns them); in memory they stay
  /// u8, which every kernel reads.
  DType quant_storage = DType::u8;
};

namespace detail {
inline void check_cpu_weight(const std::string& layer, const Tensor& w) {
  if (!w.is_cpu()) {
    throw DeviceError(layer + ": bitsandbytes layers compute on the CPU or a GPU; the weight is on " + w.device().str());
  }
}
}  // namespace detail

/// bnb.nn.Linear4bit: y = x W^T + b with W packed to 4 bits (see the header comment).
template <PolicyBundle P = default_policies>
class BasicLinear4bit : public nn::BasicModule<BasicLinear4bit<P>, P> {
  using Base = nn::BasicModule<BasicLinear4bit<P>, P>;

 public:
  /// Rows up to which the forward decodes blocks on the fly instead of dequantizing the weight.
  static constexpr std::int64_t gemv_rows = 16;

  BasicLinear4bit(std::int64_t in_features, std::int64_t out_features, bool bias = false,
                  Linear4bitOptions options = {})
      : Base("Linear4bit"), in_(in_features), out_(out_features), o_(options) {
    if (in_features <= 0 || out_features <= 0) {
      throw ValueError("Linear4bit: in_features and out_features must be positive, got " + std::to_string(in_features) +
                       " and " + std::to_string(out_features));
    }
    if (!is_bnb_4bit_blocksize(o_.blocksize)) {
      throw ValueError("Linear4bit: blocksize " + std::to_string(o_.blocksize) + " is not one of 32, 64, ..., 4096");
    }
    weight_ = &this->register_parameter(
        "weight", nn::new_parameter_tensor(linear_4bit_weight_shape(in_, out_), DType::u8), false);
    if (bias) bias_ = &this->register_parameter("bias", nn::new_parameter_tensor({out_features}, o_.weight_dtype));
  }

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  const Linear4bitOptions& options() const noexcept { return o_; }
  const Tensor& weight() const { return (*weight_)->data; }
  Tensor bias() const { return bias_ ? (*bias_)->data : Tensor(); }
  /// The state of the packed weight; nullopt until it is quantized or loaded.
  const std::optional<BnbQuantState>& quant_state() const noexcept { return state_; }

  /// Quantizes float `w` ([out, in], or [in, out] when transposed_source) as Params4bit does and
  /// places the packed bytes on `device` (meta keeps the state and no bytes).
  void quantize(const Tensor& w, Device device = Device::cpu()) {
    const Tensor wt = o_.transposed_source && w.dim() == 2 ? w.t() : w;
    if (wt.shape() != Shape{out_, in_}) {
      throw ShapeError("Linear4bit: weight " + w.shape().str() + " for a layer of " + std::to_string(in_) +
                       " inputs and " + std::to_string(out_) + " outputs" +
                       (o_.transposed_source ? " (stored [in, out])" : ""));
    }
    Bnb4bitWeight q = quantize_4bit(wt.to(Device::cpu()), {.blocksize = o_.blocksize,
                                                           .quant_type = o_.quant_type,
                                                           .compress_statistics = o_.compress_statistics,
                                                           .dtype = o_.weight_dtype});
    set_quantized(std::move(q.packed), std::move(q.state), device);
  }

  /// Takes a packed weight and its state (a pre-quantized checkpoint's): the bytes are kept as u8
  /// [(n + 1) / 2, 1] whatever dtype stored them (bnb's quant_storage). ShapeError when the state
  /// is not this layer's [out, in] or the bytes do not match it.
  void set_quantized(const Tensor& packed, BnbQuantState state, Device device = Device::cpu()) {
    if (state.shape != Shape{out_, in_}) {
      throw ShapeError("Linear4bit: quant_state shape " + state.shape.str() + " is not the layer's [" +
                       std::to_string(out_) + ", " + std::to_string(in_) + "]");
    }
    const Shape want = linear_4bit_weight_shape(in_, out_);
    Tensor bytes;
    if (packed.is_meta()) {
      if (packed.nbytes() != static_cast<std::size_t>(want[0])) {
        throw ShapeError("Linear4bit: packed weight " + packed.shape().str() + " does not hold " +
                         std::to_string(want[0]) + " bytes");
      }
      bytes = Tensor::empty(want, DType::u8, Device::meta());
    } else if (packed.dtype() == DType::u8) {
      if (packed.numel() != want[0]) {
        throw ShapeError("Linear4bit: packed weight " + packed.shape().str() + " holds " +
                         std::to_string(packed.numel()) + " bytes; a " + state.shape.str() + " weight needs " +
                         std::to_string(want[0]));
      }
      bytes = packed.contiguous().view(want);
    } else {
      const Tensor held = detail::packed_bytes(packed, state, "Linear4bit");
      bytes = Tensor::empty(want, DType::u8, Device::cpu());
      if (held.nbytes()) std::memcpy(bytes.data_ptr(), held.data_ptr(), held.nbytes());
    }
    (*weight_)->data = device.is_meta() ? bytes.to_meta() : bytes.to(device);
    decoded_ = decoded_state(state);
    absmax_on_device_ = Tensor();
    state_ = std::move(state);
  }

  Tensor forward(const Tensor& x) override {
    if (x.is_meta()) return meta_quantized_linear("Linear4bit", x, in_, out_);
    const Tensor& w = weight();
    if (!state_) throw ValueError("Linear4bit: the weight has not been quantized or loaded yet");
    if (w.device().is_cuda() || x.device().is_cuda()) return forward_on_device(x);
    detail::check_cpu_weight("Linear4bit", w);
    check_linear_input("Linear4bit", x, in_);
    const Tensor xc = x.to(o_.compute_dtype);
    const Tensor b = bias_ ? (*bias_)->data.to(Device::cpu(), o_.compute_dtype) : Tensor();
    const std::int64_t rows = x.numel() / in_;
    core::AutocastGuard own_arithmetic(std::nullopt);  // bnb_4bit_compute_dtype, whatever the model's scope
    Tensor y = rows <= gemv_rows ? gemv_4bit(xc, w, *decoded_, b)
                                 : ops::linear(xc, dequantize_4bit(w, *decoded_).to(o_.compute_dtype), b);
    return y.dtype() == x.dtype() ? y : y.to(x.dtype());
  }

  /// The float weight [out, in] in the state's dtype: dequantize_4bit of the packed bytes.
  Tensor dequantized_weight() const {
    if (!state_) throw ValueError("Linear4bit: the weight has not been quantized or loaded yet");
    return dequantize_4bit(weight().to(Device::cpu()), *state_);
  }

 private:
  // The nested absmax decoded once: every forward would decode it again otherwise. The values are
  // absmax_f32()'s, so products are those of the saved state.
  static BnbQuantState decoded_state(const BnbQuantState& s) {
    BnbQuantState d = s;
    if (s.nested()) {
      const auto a = s.absmax_f32();
      d.absmax = Tensor::from_vector(a, Shape{static_cast<std::int64_t>(a.size())});
      d.offset.reset();
      d.state2.reset();
    }
    return d;
  }

  // The GPU product (quant/layers/device_linear.hpp); the decoded absmax follows the weight's GPU once.
  Tensor forward_on_device(const Tensor& x) {
    const Tensor w = weight().contiguous();
    const DeviceQuantOps& q = device_quant_ops("Linear4bit", w.device().is_cuda() ? w.device() : x.device());
    if (!absmax_on_device_.defined() || absmax_on_device_.device() != w.device()) {
      absmax_on_device_ = decoded_->absmax.to(w.device(), DType::f32).contiguous();
    }
    const Tensor& absmax = absmax_on_device_;
    const float* lut = bnb_4bit_info(decoded_->quant_type).decode.data();
    const std::int64_t bs = decoded_->blocksize;
    const Tensor y = device_quantized_linear(
        "Linear4bit", x.to(o_.compute_dtype), w, in_, out_, bias(),
        [&](const Tensor& xs, const Tensor& b, Tensor& ys) {
          if (in_ % 32 != 0 || !detail::aligned16(w)) return false;  // the kernel's 16-byte steps
          q.bnb4_gemv(xs, w, absmax, lut, bs, b, ys);
          return true;
        },
        [&](Tensor& wf) { q.bnb4_dequantize(w, absmax, lut, bs, wf); });
    return y.dtype() == x.dtype() ? y : y.to(x.dtype());
  }

  std::int64_t in_, out_;
  Linear4bitOptions o_;
  nn::ParameterPtr* weight_ = nullptr;
  nn::ParameterPtr* bias_ = nullptr;
  std::optional<BnbQuantState> state_, decoded_;
  Tensor absmax_on_device_;
};

using Linear4bit = BasicLinear4bit<>;

/// What a Linear8bitLt is built with: bnb.nn.Linear8bitLt's keyword arguments (inference only).
struct Linear8bitOptions {
  /// LLM.int8()'s outlier threshold (llm_int8_threshold); 0 turns the decomposition off.
  float threshold = 6.0f;
  /// The dtype the model holds the float weight in: rounded to it (then to float16, as
  /// Int8Params does) before quantizing, and what dequantize gives back. Also the bias's dtype.
  DType weight_dtype = DType::f32;
  /// The layer replaces GPT-2's Conv1D (a float checkpoint weight arrives [in, out]).
  bool transposed_source = false;
  /// bnb's has_fp16_weights (transformers' llm_int8_has_fp16_weight): "weight" holds the float
  /// weight [out, in] in weight_dtype and no SCB / weight_format buffers are registered (bnb saves
  /// neither then); each forward quantizes the weight as Int8Params does and runs the same int8
  /// product, so the outputs equal those of has_fp16_weights=false, for twice the memory and a
  /// weight a trainer may change between calls.
  bool has_fp16_weights = false;
};

/// bnb.nn.Linear8bitLt: y = x W^T + b through matmul_8bit, the weight held as int8 codes and SCB,
/// or as floats quantized per call (has_fp16_weights, or a float weight an offload hook brought in
/// for a layer whose offload folder holds it unquantized: load_checkpoint_in_model without
/// offload_8bit_bnb).
template <PolicyBundle P = default_policies>
class BasicLinear8bitLt : public nn::BasicModule<BasicLinear8bitLt<P>, P> {
  using Base = nn::BasicModule<BasicLinear8bitLt<P>, P>;

 public:
  BasicLinear8bitLt(std::int64_t in_features, std::int64_t out_features, bool bias = false,
                    Linear8bitOptions options = {})
      : Base("Linear8bitLt"), in_(in_features), out_(out_features), o_(options) {
    if (in_features <= 0 || out_features <= 0) {
      throw ValueError("Linear8bitLt: in_features and out_features must be positive, got " +
                       std::to_string(in_features) + " and " + std::to_string(out_features));
    }
    weight_ = &this->register_parameter(
        "weight",
        nn::new_parameter_tensor({out_features, in_features}, o_.has_fp16_weights ? o_.weight_dtype : DType::i8),
        false);
    if (bias) bias_ = &this->register_parameter("bias", nn::new_parameter_tensor({out_features}, o_.weight_dtype));
    if (o_.has_fp16_weights) return;
    // Created on meta: a checkpoint or a quantization fills it, and an unfilled one is reported.
    scb_ = &this->register_buffer("SCB", Tensor::empty({out_features}, DType::f32, Device::meta()));
    // Row-major, the only format bnb still writes; a loaded one must say so too.
    this->register_buffer("weight_format", Tensor::zeros(Shape{}, DType::u8));
  }

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  const Linear8bitOptions& options() const noexcept { return o_; }
  const Tensor& weight() const { return (*weight_)->data; }
  /// The row scales; undefined with has_fp16_weights (there are none to hold).
  const Tensor& SCB() const {
    static const Tensor none;
    return scb_ ? (*scb_)->data : none;
  }
  Tensor bias() const { return bias_ ? (*bias_)->data : Tensor(); }
  /// True while the weight cell holds floats (has_fp16_weights, or a float weight brought in by
  /// an offload hook): each forward quantizes it.
  bool holds_float_weight() const { return weight().is_floating_point(); }
  /// CB and SCB: the stored ones, or the float weight quantized now as Int8Params does.
  Int8Weight int8_weight() const {
    if (holds_float_weight()) return quantize_int8_weight(weight().to(Device::cpu()));
    return {weight(), SCB()};
  }

  /// Quantizes float `w` ([out, in], or [in, out] when transposed_source) as Int8Params does and
  /// places CB and SCB on `device`; with has_fp16_weights, places `w` itself in weight_dtype.
  void quantize(const Tensor& w, Device device = Device::cpu()) {
    const Tensor wt = o_.transposed_source && w.dim() == 2 ? w.t() : w;
    if (wt.shape() != Shape{out_, in_}) {
      throw ShapeError("Linear8bitLt: weight " + w.shape().str() + " for a layer of " + std::to_string(in_) +
                       " inputs and " + std::to_string(out_) + " outputs" +
                       (o_.transposed_source ? " (stored [in, out])" : ""));
    }
    if (o_.has_fp16_weights) {
      const Tensor f = wt.to(o_.weight_dtype).contiguous();
      (*weight_)->data = device.is_meta() ? f.to_meta() : f.to(device);
      return;
    }
    set_quantized(quantize_int8_weight(wt.to(Device::cpu(), o_.weight_dtype)), device);
  }

  /// Takes CB and SCB (a pre-quantized checkpoint's). ShapeError when they are not this layer's;
  /// ValueError for a layer with has_fp16_weights, which holds no codes.
  void set_quantized(const Int8Weight& w, Device device = Device::cpu()) {
    if (o_.has_fp16_weights) {
      throw ValueError("Linear8bitLt: the layer keeps a float weight (has_fp16_weights); int8 codes and SCB "
                       "cannot be stored in it");
    }
    if (w.CB.dtype() != DType::i8 || w.CB.shape() != Shape{out_, in_} || w.SCB.numel() != out_) {
      throw ShapeError("Linear8bitLt: CB " + std::string(dtype_name(w.CB.dtype())) + " " + w.CB.shape().str() +
                       " and SCB " + w.SCB.shape().str() + " do not fit a layer of " + std::to_string(in_) +
                       " inputs and " + std::to_string(out_) + " outputs");
    }
    auto place = [&](const Tensor& t) { return device.is_meta() ? t.to_meta() : t.to(device); };
    (*weight_)->data = place(w.CB);
    (*scb_)->data = place(w.SCB.to(DType::f32).reshape(Shape{out_}));
  }

  Tensor forward(const Tensor& x) override {
    if (x.is_meta()) return meta_quantized_linear("Linear8bitLt", x, in_, out_);
    if (weight().device().is_cuda() || x.device().is_cuda()) return forward_on_device(x);
    detail::check_cpu_weight("Linear8bitLt", weight());
    check_linear_input("Linear8bitLt", x, in_);
    return matmul_8bit(x, int8_weight(), {.threshold = o_.threshold}, bias());
  }

  /// The float weight [out, in] in weight_dtype: CB * SCB / 127, or the float weight it holds.
  Tensor dequantized_weight() const {
    if (holds_float_weight()) return weight().to(Device::cpu(), o_.weight_dtype);
    return int8_vectorwise_dequant({weight().to(Device::cpu()), SCB().to(Device::cpu())}).to(o_.weight_dtype);
  }

 private:
  // The GPU product (quant/layers/device_linear.hpp): W = CB * SCB / 127 decoded in float32, every
  // column in floating point (no outlier split is needed when nothing is rounded to int8).
  Tensor forward_on_device(const Tensor& x) {
    if (holds_float_weight()) {
      // The float weight multiplied as it is: the GPU product of the int8 form is a float one too.
      return device_quantized_linear(
          "Linear8bitLt", x, weight(), in_, out_, bias(), [](const Tensor&, const Tensor&, Tensor&) { return false; },
          [&](Tensor& wf) { wf = weight().to(x.dtype()).contiguous(); });
    }
    const Tensor cb = weight().contiguous();
    const DeviceQuantOps& q = device_quant_ops("Linear8bitLt", cb.device().is_cuda() ? cb.device() : x.device());
    const Tensor scb = SCB().to(cb.device(), DType::f32).contiguous();
    return device_quantized_linear(
        "Linear8bitLt", x, cb, in_, out_, bias(),
        [&](const Tensor& xs, const Tensor& b, Tensor& ys) {
          if (!detail::aligned16(cb)) return false;
          q.int8_gemv(xs, cb, scb, int8_dequant_const, b, ys);
          return true;
        },
        [&](Tensor& wf) { q.int8_dequantize(cb, scb, int8_dequant_const, wf); });
  }

  std::int64_t in_, out_;
  Linear8bitOptions o_;
  nn::ParameterPtr* weight_ = nullptr;
  nn::ParameterPtr* bias_ = nullptr;
  nn::ParameterPtr* scb_ = nullptr;
};

using Linear8bitLt = BasicLinear8bitLt<>;

}  // namespace accel::quant

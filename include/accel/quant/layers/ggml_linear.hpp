// A linear layer whose weight stays in ggml's blocks, and the matrix product it computes.
//
//   ggml_linear(x, packed, type, in, out, bias) -> y       y = x W^T + b, W as ggml blocks
//   BasicGgmlLinear<P>(in, out, type, bias, dtype)         the layer: "weight" u8 [out, row bytes]
//   gguf_linear_weight_shape(type, in, out)                 that packed shape
//
// The product quantizes each activation row once to the weight type's partner (quant/kernels/ggml_dot.hpp)
// and runs the integer kernels: a Q4_0 or Q8_0 weight the layer repacked when it was loaded
// (BasicGgmlLinear::repack_for_cpu, quant/kernels/ggml_repack.hpp) by rows-in-lanes kernels off that
// layout at any batch; for a batch of Q8_0 / Q4_0 rows in GGUF's layout sixteen weight rows at a
// time (quant/kernels/ggml_dot_x16.hpp, on AVX2 and AVX-512 VNNI; Q4_K / Q6_K too, from five
// rows), otherwise a weight row at a time
// (vec_dot_rows: its blocks decoded once for up to four activation rows); every other block type
// is dequantized a tile of rows at a time and multiplied in float32 by the GEMV kernels
// (backend/cpu/gemv.hpp). Output rows are split across the CPU threads, each weight row read once
// for all activation rows (a small batch costs one pass over the
// weights). x is float32, float16 or bfloat16; y has x's dtype. On a GPU (x and the weight on one
// CUDA device) the product goes through quant/layers/device_linear.hpp: the blocks decoded on the fly for
// up to 8 rows, decoded once and multiplied by cuBLAS beyond (DeviceError when the CUDA kernels are
// not compiled in).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/backend/cpu/gemv.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/simd_arch.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/nn/basic_module.hpp"
#include "accel/nn/init.hpp"
#include "accel/quant/kernels/ggml_dot.hpp"
#include "accel/quant/kernels/ggml_dot_x16.hpp"
#include "accel/quant/kernels/ggml_repack.hpp"
#include "accel/quant/layers/cpu_linear.hpp"
#include "accel/quant/layers/device_linear.hpp"

namespace accel::quant {

/// The packed weight of an `out` x `in` layer of `type`: u8 [out, bytes of a row of `in`].
inline Shape gguf_linear_weight_shape(GgmlType type, std::int64_t in, std::int64_t out) {
  return Shape{out, static_cast<std::int64_t>(io::ggml_row_nbytes(type, static_cast<std::uint64_t>(in)))};
}

/// y = x W^T (+ bias) for W of `type` packed as u8 [out, row bytes] (see the header comment).
/// `repacked`: the weight's repack_ggml copy (quant/kernels/ggml_repack.hpp), read instead of `packed` on
/// the CPU where this CPU's tier has kernels for it; the caller vouches that it holds the same
/// weight.
inline Tensor ggml_linear(const Tensor& x, const Tensor& packed, GgmlType type, std::int64_t in, std::int64_t out,
                          const Tensor& bias = {}, const Tensor& repacked = {}) {
  const std::string op = "GGUF linear (" + std::string(io::ggml_type_name(type)) + ")";
  const Shape want = gguf_linear_weight_shape(type, in, out);
  if (packed.dtype() != DType::u8 || packed.shape() != want) {
    throw ShapeError(op + ": weight is " + std::string(dtype_name(packed.dtype())) + " " + packed.shape().str() +
                     ", expected uint8 " + want.str());
  }
  if (x.is_meta()) return meta_quantized_linear(op, x, in, out);
  if (x.device().is_cuda() || packed.device().is_cuda()) {
    const DeviceQuantOps& q = device_quant_ops(op, packed.device().is_cuda() ? packed.device() : x.device());
    // The kernels read blocks in place: their fields are at most 4-byte aligned.
    Tensor w = packed.contiguous();
    if (reinterpret_cast<std::uintptr_t>(w.data_ptr()) % 4 != 0) w = w.clone();
    const auto code = static_cast<std::uint32_t>(type);
    return device_quantized_linear(
        op, x, w, in, out, bias, [&](const Tensor& xs, const Tensor& b, Tensor& y) { return q.ggml_gemv(xs, w, code, b, y); },
        [&](Tensor& wf) {
          if (!q.ggml_dequantize(w, code, wf)) throw DTypeError(op + ": this type has no CUDA kernel");
        });
  }
  if (!x.is_cpu() || !packed.is_cpu()) {
    throw DeviceError(op + ": the input is on " + x.device().str() + " and the weight on " + packed.device().str());
  }
  const Tensor w = packed.contiguous();
  const std::size_t row_bytes = static_cast<std::size_t>(want[1]);
  const auto* ws = static_cast<const std::byte*>(w.data_ptr());
  return cpu_quantized_linear(op, x, in, out, bias, [&](const CpuLinearArgs& a) {
    const std::size_t rows = a.rows, n = a.in, m = a.out;
    float* ys = a.ys;
    const float* xf = a.xs;
    if (has_quantized_dot(type)) {
      std::vector<ActivationRow> acts(rows);
      // A prompt's rows quantized on every thread: done by one, a 64-row Q4_K prompt waited on it
      // for a twentieth of its time.
      parallel_for(rows, 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t t = b; t < e; ++t) quantize_activation(type, xf + t * n, n, acts[t]);
      });
      std::vector<const ActivationRow*> xs(rows);
      for (std::size_t t = 0; t < rows; ++t) xs[t] = &acts[t];
      simd::dispatch<quant_ladder>([&](auto arch) {
        if (repacked.defined() && repacked.is_cpu() && has_repacked_kernels(arch, type)) {
          repacked_dot(arch, type, n, m, static_cast<const std::byte*>(repacked.data_ptr()), xs.data(), rows, ys);
          return;
        }
        if (rows >= dot_x16_min_activations(type) && has_dot_x16(arch, type)) {
          // Sixteen weight rows a step (quant/kernels/ggml_dot_x16.hpp); the last m % 16 rows one at a time.
          constexpr std::size_t g = dot_x16_rows;
          const std::size_t groups = m / g, steps = groups + (m % g != 0);
          parallel_for(steps, 1, [&](std::size_t b, std::size_t e) {
            std::vector<float> yr(rows * g);
            for (std::size_t s = b; s < e; ++s) {
              const std::size_t r0 = s * g, nr = s < groups ? g : m % g;
              if (s < groups) {
                vec_dot_x16(arch, type, n, ws + r0 * row_bytes, row_bytes, xs.data(), rows, yr.data());
              } else {
                for (std::size_t i = 0; i < nr; ++i) {
                  vec_dot_rows(arch, type, n, ws + (r0 + i) * row_bytes, xs.data(), rows, yr.data() + rows * i);
                }
              }
              for (std::size_t t = 0; t < rows; ++t) {
                for (std::size_t i = 0; i < nr; ++i) ys[t * m + r0 + i] = s < groups ? yr[t * g + i] : yr[rows * i + t];
              }
            }
          });
          return;
        }
        if (rows == 1) {
          // A decode step: one weight row after another, each thread sweeping a contiguous share of
          // the matrix (the one stream the prefetchers follow best; see dot_q8_q4_rows).
          parallel_for(m, 16, [&](std::size_t b, std::size_t e) {
            for (std::size_t r = b; r < e; ++r) ys[r] = vec_dot(arch, type, n, ws + r * row_bytes, acts[0]);
          });
          return;
        }
        parallel_for(m, 16, [&](std::size_t b, std::size_t e) {
          std::vector<float> yr(rows);
          for (std::size_t r = b; r < e; ++r) {
            vec_dot_rows(arch, type, n, ws + r * row_bytes, xs.data(), rows, yr.data());
            for (std::size_t t = 0; t < rows; ++t) ys[t * m + r] = yr[t];
          }
        });
      });
    } else {
      // A tile of rows decoded to float32 (in L1 / L2), multiplied by the CPU tier's GEMV kernel.
      constexpr std::size_t tile = 8;
      parallel_for((m + tile - 1) / tile, 1, [&](std::size_t b, std::size_t e) {
        std::vector<float> wf(tile * n), yt(rows * tile);
        for (std::size_t c = b; c < e; ++c) {
          const std::size_t r0 = c * tile, nr = std::min(tile, m - r0);
          io::dequantize_row(type, ws + r0 * row_bytes, wf.data(), nr * n);
          backend::cpu::gemv_rows(xf, static_cast<std::int64_t>(rows), static_cast<std::int64_t>(n), wf.data(), DType::f32,
                                    n * sizeof(float), static_cast<std::int64_t>(nr), nullptr, yt.data());
          for (std::size_t t = 0; t < rows; ++t) {
            for (std::size_t i = 0; i < nr; ++i) ys[t * m + r0 + i] = yt[t * nr + i];
          }
        }
      });
    }
    return false;
  });
}

/// Diffusers' GGUFLinear: a linear layer over a ggml-quantized weight (see the header comment).
template <PolicyBundle P = default_policies>
class BasicGgmlLinear : public nn::BasicModule<BasicGgmlLinear<P>, P> {
  using Base = nn::BasicModule<BasicGgmlLinear<P>, P>;

 public:
  /// `bias_dtype` is the float dtype of the bias (when there is one).
  BasicGgmlLinear(std::int64_t in_features, std::int64_t out_features, GgmlType type, bool bias = false,
                  DType bias_dtype = DType::f32)
      : Base("GGUFLinear"), in_(in_features), out_(out_features), type_(type) {
    weight_ = &this->register_parameter(
        "weight", nn::new_parameter_tensor(gguf_linear_weight_shape(type, in_features, out_features), DType::u8), false);
    if (bias) bias_ = &this->register_parameter("bias", nn::new_parameter_tensor({out_features}, bias_dtype));
  }
  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  GgmlType quant_type() const noexcept { return type_; }
  const Tensor& weight() const { return (*weight_)->data; }
  Tensor bias() const { return bias_ ? (*bias_)->data : Tensor(); }

  Tensor forward(const Tensor& x) override {
    if (repacked_.defined() && !weight().is_same(repacked_from_)) {
      // The weight was replaced (loaded again, moved, offloaded): the copy no longer stands for it.
      repacked_ = Tensor();
      repacked_from_ = Tensor();
    }
    return ggml_linear(x, weight(), type_, in_, out_, bias(), repacked_);
  }

  /// Rewrites the weight into this CPU's repacked layout (quant/kernels/ggml_repack.hpp), which the CPU
  /// product then reads instead, when the CPU's tier has kernels for this type and the weight is
  /// a read-only view of a mapped file on the CPU (a GGUF file read in place), whose pages are
  /// then handed back: the process holds the copy instead of the file's bytes, not both. Returns
  /// whether it repacked. Weights in writable memory stay as they are, so that writing into them
  /// keeps meaning what it says; a weight replaced later drops the copy.
  bool repack_for_cpu() {
    const Tensor& w = weight();
    if (!w.defined() || !w.is_cpu() || w.storage().kind() != MemoryKind::mapped || w.storage().writable() ||
        !w.is_contiguous() || !cpu_has_repacked_kernels(type_)) {
      return false;
    }
    repacked_ = repack_ggml(type_, w, in_, out_);
    repacked_from_ = w;
    release_mapped_pages(w);
    return true;
  }
  /// The repacked copy the CPU product reads (undefined when there is none).
  const Tensor& repacked_weight() const noexcept { return repacked_; }

  /// The float32 weight [out, in] the blocks stand for.
  Tensor dequantized_weight() const {
    const Tensor w = weight().to(Device::cpu()).contiguous();
    return io::dequantize_ggml(type_, io::ByteSpan(static_cast<const std::byte*>(w.data_ptr()), w.nbytes()),
                               Shape{out_, in_});
  }

 private:
  std::int64_t in_, out_;
  GgmlType type_;
  nn::ParameterPtr* weight_ = nullptr;
  nn::ParameterPtr* bias_ = nullptr;
  Tensor repacked_, repacked_from_;  // repack_for_cpu's copy, and the weight it was made from
};

using GgmlLinear = BasicGgmlLinear<>;

}  // namespace accel::quant

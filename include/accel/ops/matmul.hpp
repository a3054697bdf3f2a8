// Matrix products.
//
//   matmul(a, b)            [M,K]x[K,N], [B...,M,K]x[B...,K,N] (batch dims broadcast), [...,M,K]x[K,N]
//   linear(x, w, bias)      x[..., in] w[out, in]^T + bias[out]   (torch.nn.functional.linear)
//   matmul_u8s8(a, b)       u8 [M,K] x s8 [K,N] -> i32 [M,N]     (cpu only)
//
// f32 runs on oneDNN straight from the operands' strides (a transposed weight is not copied);
// f16 / bf16 operands are converted to f32 first and the result is converted back. linear with
// at most 4 rows (decoding) runs as a threaded GEMV that converts weight rows on the fly; with
// more rows a bf16 linear runs on oneDNN's bf16 matmul where this CPU has one (AVX-512), an f16
// one through the GEMV's tiles on AVX-512, and otherwise converts the weight to f32 a block of
// rows at a time for oneDNN's f32 GEMM.
// matmul_u8s8 takes oneDNN's integer GEMM only where it is exact (VNNI), else its own kernel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "accel/backend/cpu/dnnl_matmul.hpp"
#include "accel/backend/cpu/gemv.hpp"
#include "accel/backend/cpu/int8_gemm.hpp"
#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::ops {

namespace detail {

/// Up to this many input rows, linear runs as a GEMV over the weight rows instead of oneDNN.
inline constexpr std::int64_t small_m_rows = 4;

/// oneDNN layout of a 2-d view (rows x cols with the given strides), or nullopt when oneDNN
/// would need a slow path (neither stride unit, or overlapping rows).
inline std::optional<backend::cpu::MatrixLayout> matrix_layout(std::int64_t rows, std::int64_t cols,
                                                               std::int64_t rs, std::int64_t cs) {
  if (cols == 1) cs = 1;
  if (rows == 1) rs = cs == 1 ? cols : 1;
  if (cs == 1 && rs >= cols) return backend::cpu::MatrixLayout{0, rs, cs};
  if (rs == 1 && cs >= rows) return backend::cpu::MatrixLayout{0, rs, cs};
  return std::nullopt;
}

/// Layout of the last two dims of `t` after its batch dims [0, nb) collapse into one stride;
/// nullopt when they do not collapse (the caller then copies).
inline std::optional<backend::cpu::MatrixLayout> batched_layout(const Tensor& t, std::size_t nb) {
  const std::size_t r = nb, c = nb + 1;
  auto l = matrix_layout(t.shape()[r], t.shape()[c], t.strides()[r], t.strides()[c]);
  if (!l) return std::nullopt;
  // Batch dims of extent 1 say nothing; the rest must form one arithmetic progression.
  std::int64_t stride = -1, expected = -1;
  for (std::size_t i = nb; i-- > 0;) {
    if (t.shape()[i] == 1) continue;
    if (stride < 0) {
      stride = t.strides()[i];
      expected = stride * t.shape()[i];
      continue;
    }
    if (t.strides()[i] != expected) return std::nullopt;
    expected *= t.shape()[i];
  }
  l->batch_stride = stride < 0 ? 0 : stride;
  // A true broadcast (stride 0) is fine; a real stride must not make matrices overlap.
  return l;
}

inline Shape slice_shape(const Shape& s, std::size_t begin, std::size_t end) {
  Shape out;
  for (std::size_t i = begin; i < end; ++i) out.push_back(s[i]);
  return out;
}

/// Rows of `a` (f32, dense [M, K]) against the rows of weight [N, K] (unit column stride, f32 or
/// f64) with bias: the decode-time GEMV, each weight row read once (backend/cpu/gemv.hpp). Half-
/// precision weights take gemv_rows_half with their activations as they are (linear_impl).
inline void linear_small_m(const float* a, std::int64_t m, const Tensor& w, const float* bias, float* out) {
  if (w.dtype() == DType::f32) {
    backend::cpu::gemv_rows(a, m, w.size(1), w.data_ptr(), DType::f32, static_cast<std::size_t>(w.stride(0)) * 4,
                            w.size(0), bias, out);
    return;
  }
  const Tensor wf = w.to(DType::f32).contiguous();
  backend::cpu::gemv_rows(a, m, w.size(1), wf.data_ptr(), DType::f32, static_cast<std::size_t>(wf.stride(0)) * 4,
                          w.size(0), bias, out);
}

/// x2 (f32 [M, K], laid out as `la`) times a half-precision weight [N, K] with unit column stride,
/// plus bias, into out (f32 [M, N], dense): the weight goes to f32 a block of rows at a time, into
/// one buffer of 2 MiB or 128 rows, and each block through oneDNN's f32 GEMM into a dense [M, rows]
/// result that is copied into its columns of out. The whole weight is never widened (a 14336 x
/// 4096 bf16 one would take 235 MB of f32). Why dense and at least 128 rows: oneDNN 2.6's AVX-512
/// GEMM ran 16 x 14336 x 32 blocks of a transposed weight at 16 GFLOPS when writing into columns
/// of a wider result, 87-90 GFLOPS into a dense one from 128 rows on (Zen 4, 2 threads).
inline void linear_half_weight_blocks(const Tensor& x2, const backend::cpu::MatrixLayout& la, const Tensor& w,
                                      const float* bias, float* out) {
  const std::int64_t M = x2.size(0), K = w.size(1), N = w.size(0);
  const std::int64_t block = std::min(N, std::max<std::int64_t>(128, (std::int64_t{1} << 19) / K / 16 * 16));
  Tensor buffer = Tensor::empty(Shape{block, K}, DType::f32);
  Tensor result = Tensor::empty(Shape{M, block}, DType::f32);
  auto* wf = buffer.data_ptr<float>();
  auto* part = result.data_ptr<float>();
  const auto* wbytes = static_cast<const std::byte*>(w.data_ptr());
  const std::size_t row_bytes = static_cast<std::size_t>(w.stride(0)) * w.element_size();
  for (std::int64_t n0 = 0; n0 < N; n0 += block) {
    const std::int64_t nb = std::min(block, N - n0);
    parallel_for(static_cast<std::size_t>(nb), 8, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        convert_elements(w.dtype(), wbytes + (static_cast<std::size_t>(n0) + r) * row_bytes, DType::f32,
                         wf + r * static_cast<std::size_t>(K), static_cast<std::size_t>(K));
      }
    });
    backend::cpu::MatmulProblem p;
    p.m = M, p.k = K, p.n = nb;
    p.a = la;
    p.b = {0, 1, K};  // element (k, n) of the block's transpose is wf[n * K + k]
    p.has_bias = bias != nullptr;
    float* dst = nb == N ? out : part;
    backend::cpu::dnnl_matmul(p, x2.data_ptr(), wf, dst, bias ? bias + n0 : nullptr);
    if (dst == part) {
      for (std::int64_t i = 0; i < M; ++i) {
        std::memcpy(out + i * N + n0, part + i * nb, static_cast<std::size_t>(nb) * sizeof(float));
      }
    }
  }
}

/// Converts an f32 result into `dtype` (no copy for f32).
inline Tensor cast_result(const Tensor& out_f32, DType dtype) {
  return dtype == DType::f32 ? out_f32 : out_f32.to(dtype);
}

}  // namespace detail

namespace detail {
/// matmul, writing into `*out_arg` when given (checked against the result's shape, dtype and
/// device). An f32 contiguous cpu `out` receives oneDNN's output directly: no allocation.
inline Tensor matmul_into(const Tensor& a, const Tensor& b, const Tensor* out_arg) {
  const char* op = out_arg ? "matmul_out" : "matmul";
  detail::check_float(op, "a", a);
  detail::check_float(op, "b", b);
  detail::check_same_dtype(op, a, b);
  if (a.dim() < 2 || b.dim() < 2) {
    throw ShapeError(std::string("matmul: expected operands of at least 2 dimensions, got ") +
                     a.shape().str() + " and " + b.shape().str());
  }
  const std::int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (b.size(-2) != K) {
    throw ShapeError("matmul: shapes " + a.shape().str() + " and " + b.shape().str() +
                     " cannot be multiplied (" + std::to_string(K) + " columns vs " +
                     std::to_string(b.size(-2)) + " rows)");
  }
  Shape out_shape;
  Shape batch;
  if (b.dim() == 2) {
    out_shape = a.shape();
    out_shape[out_shape.size() - 1] = N;
  } else {
    batch = broadcast_shapes(op, detail::slice_shape(a.shape(), 0, a.dim() - 2),
                                     detail::slice_shape(b.shape(), 0, b.dim() - 2));
    out_shape = batch;
    out_shape.push_back(M);
    out_shape.push_back(N);
  }
  const Device dev = detail::placement_of(op, {&a, &b});
  if (out_arg) {
    if (out_arg->shape() != out_shape || out_arg->dtype() != a.dtype() || out_arg->device() != dev) {
      throw ShapeError(std::string(op) + ": out is " + out_arg->shape().str() + " " + std::string(dtype_name(out_arg->dtype())) +
                       " on " + out_arg->device().str() + ", the product of " + a.shape().str() + " and " +
                       b.shape().str() + " is " + out_shape.str() + " " + std::string(dtype_name(a.dtype())) + " on " + dev.str());
    }
  }
  // Results computed elsewhere than in `out` end up in it.
  auto deliver = [&](Tensor r) {
    if (!out_arg) return r;
    Tensor o = *out_arg;
    if (!(r.storage() == o.storage() && r.data_ptr() == o.data_ptr())) o.copy_(r);
    return o;
  };
  if (dev.is_meta()) return out_arg ? *out_arg : Tensor::empty(out_shape, a.dtype(), dev);
  // `batch` stays empty for a 2-d b: the CUDA slot then folds a's leading dims into M.
  if (dev.is_cuda()) return deliver(detail::run_cuda(&DeviceOps::matmul, op, out_shape, a.dtype(), dev, a, b, batch));
  if (out_shape.numel() == 0 || K == 0) return deliver(Tensor::zeros(out_shape, a.dtype()));

  using backend::cpu::MatmulProblem;
  Tensor af = a.dtype() == DType::f32 ? a : a.to(DType::f32);
  Tensor bf = b.dtype() == DType::f32 ? b : b.to(DType::f32);
  const bool direct = out_arg && out_arg->dtype() == DType::f32 && out_arg->is_contiguous();
  Tensor out = direct ? *out_arg : Tensor::empty(out_shape, DType::f32);
  MatmulProblem p;
  p.k = K;
  p.n = N;
  if (b.dim() == 2) {
    // Leading dims of `a` fold into M: one large GEMM instead of many small ones.
    Tensor a2 = af.dim() == 2 ? af : af.reshape(Shape{-1, K});
    auto la = detail::matrix_layout(a2.size(0), K, a2.stride(0), a2.stride(1));
    if (!la) {
      a2 = a2.contiguous();
      la = backend::cpu::MatrixLayout{0, K, 1};
    }
    auto lb = detail::matrix_layout(K, N, bf.stride(0), bf.stride(1));
    if (!lb) {
      bf = bf.contiguous();
      lb = backend::cpu::MatrixLayout{0, N, 1};
    }
    p.m = a2.size(0);
    p.a = *la;
    p.b = *lb;
    backend::cpu::dnnl_matmul(p, a2.data_ptr(), bf.data_ptr(), out.data_ptr());
    return deliver(detail::cast_result(out, a.dtype()));
  }
  const std::size_t nb = batch.size();
  Shape a_full = batch, b_full = batch;
  a_full.push_back(M), a_full.push_back(K);
  b_full.push_back(K), b_full.push_back(N);
  Tensor ae = af.expand(a_full), be = bf.expand(b_full);
  auto la = detail::batched_layout(ae, nb);
  if (!la) {
    ae = ae.contiguous();
    la = detail::batched_layout(ae, nb);
  }
  auto lb = detail::batched_layout(be, nb);
  if (!lb) {
    be = be.contiguous();
    lb = detail::batched_layout(be, nb);
  }
  p.batch = batch.numel();
  p.m = M;
  p.a = *la;
  p.b = *lb;
  backend::cpu::dnnl_matmul(p, ae.data_ptr(), be.data_ptr(), out.data_ptr());
  return deliver(detail::cast_result(out, a.dtype()));
}
}  // namespace detail

/// torch.matmul for 2-d and batched operands (at least 2-d each). Batch dims broadcast; a 2-d
/// `b` is shared by every row of `a`. The result has the operands' dtype (they must match).
/// Inside an autocast scope, f32 / f16 / bf16 operands are first cast to the scope's dtype.
inline Tensor matmul(const Tensor& a, const Tensor& b) {
  if (core::is_autocast_enabled()) {
    return detail::matmul_into(detail::autocast_operand(a), detail::autocast_operand(b), nullptr);
  }
  return detail::matmul_into(a, b, nullptr);
}

/// torch.matmul(a, b, out=out) in libtorch's spelling: the product is written into `out`, which
/// must already have the result's shape, dtype and device (ShapeError otherwise; unlike torch it
/// is never resized; like torch, autocast does not apply to it). Engines that reuse their buffers skip the allocation and the page faults
/// of a fresh result; an f32 contiguous cpu `out` is written by oneDNN directly.
inline Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  detail::matmul_into(a, b, &out);
  return out;
}

namespace detail {
inline Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  constexpr const char* op = "linear";
  detail::check_float(op, "input", x);
  detail::check_float(op, "weight", weight);
  detail::check_same_dtype(op, x, weight);
  if (bias.defined()) {
    detail::check_float(op, "bias", bias);
    detail::check_same_dtype(op, x, bias);
  }
  if (weight.dim() != 2 || x.dim() < 1 || x.size(-1) != weight.size(1)) {
    throw ShapeError("linear: input " + x.shape().str() + " and weight " + weight.shape().str() +
                     " do not match (expected weight [out_features, " +
                     (x.dim() ? std::to_string(x.size(-1)) : std::string("?")) + "])");
  }
  const std::int64_t K = weight.size(1), N = weight.size(0);
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != N)) {
    throw ShapeError("linear: bias " + bias.shape().str() + " does not match weight " +
                     weight.shape().str() + " (expected [" + std::to_string(N) + "])");
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = N;
  const Device dev = detail::placement_of(op, {&x, &weight, &bias});
  if (dev.is_meta()) return Tensor::empty(out_shape, x.dtype(), dev);
  if (dev.is_cuda()) return detail::run_cuda(&DeviceOps::linear, op, out_shape, x.dtype(), dev, x, weight, bias);
  if (out_shape.numel() == 0) return Tensor::zeros(out_shape, x.dtype());

  Tensor bias_f;
  if (bias.defined()) bias_f = detail::contiguous_f32(bias);
  // More rows than a GEMV takes, both bf16, on a CPU where oneDNN has a bf16 matmul (AVX-512)
  // but no bf16 pairs run here (AVX512-BF16, whose tiles take any row count: GemvKernels::
  // bf16_pairs): it reads the weight in place and x as it is, so neither is widened to f32 first.
  const std::int64_t rows = x.numel() / std::max<std::int64_t>(K, 1);
  using dt = dnnl::memory::data_type;
  const auto& tiles = backend::cpu::gemv_kernels();
  if (rows > detail::small_m_rows && x.dtype() == DType::bf16 && weight.dtype() == DType::bf16 &&
      weight.stride(1) == 1 && !tiles.bf16_pairs && backend::cpu::dnnl_has_matmul(dt::bf16, dt::bf16, dt::f32)) {
    const Tensor xb = x.dim() == 2 ? x.contiguous() : x.contiguous().reshape(Shape{-1, K});
    Tensor out = Tensor::empty(out_shape, DType::f32);
    backend::cpu::MatmulProblem p;
    p.m = xb.size(0), p.k = K, p.n = N;
    p.a = {0, K, 1};
    p.b = {0, 1, weight.stride(0)};
    p.a_type = p.b_type = dnnl::memory::data_type::bf16;
    p.has_bias = bias_f.defined();
    backend::cpu::dnnl_matmul(p, xb.data_ptr(), weight.data_ptr(), out.data_ptr(),
                              p.has_bias ? bias_f.data_ptr<float>() : nullptr);
    return detail::cast_result(out, x.dtype());
  }
  // Few rows: a bandwidth-bound GEMV over the weight rows beats a GEMM (and needs no f32 copy
  // of a half-precision weight); so do its tiles at any row count for half-precision weights on
  // AVX-512 and AVX2 (GemvKernels::half_tiles, half_tiles_exact). Activations of the weight's
  // half-precision dtype go to the kernels as they are (gemv_rows_half): widened here and narrowed
  // again by the kernels, they cost two conversions and an allocation per call.
  const bool half = weight.dtype() == DType::f16 || weight.dtype() == DType::bf16;
  const bool tiles_win = half && (tiles.half_tiles || tiles.half_tiles_exact);
  if (half && (rows <= detail::small_m_rows || tiles_win) && weight.stride(1) == 1 && K > 0) {
    const Tensor xd = x.contiguous();
    Tensor out = Tensor::empty(out_shape, DType::f32);
    backend::cpu::gemv_rows_half(xd.data_ptr(), rows, K, weight.data_ptr(), weight.dtype(),
                                 static_cast<std::size_t>(weight.stride(0)) * weight.element_size(), N,
                                 bias_f.defined() ? bias_f.data_ptr<float>() : nullptr, out.data_ptr<float>());
    return detail::cast_result(out, x.dtype());
  }
  Tensor xf = x.dtype() == DType::f32 ? x : x.to(DType::f32);
  Tensor x2 = xf.dim() == 2 ? xf : xf.reshape(Shape{-1, K});
  auto la = detail::matrix_layout(x2.size(0), K, x2.stride(0), x2.stride(1));
  if (!la) {
    x2 = x2.contiguous();
    la = backend::cpu::MatrixLayout{0, K, 1};
  }
  if (x2.size(0) <= detail::small_m_rows && weight.stride(1) == 1 && K > 0) {
    const Tensor xd = x2.contiguous();
    Tensor out = Tensor::empty(out_shape, DType::f32);
    detail::linear_small_m(xd.data_ptr<float>(), xd.size(0), weight,
                           bias_f.defined() ? bias_f.data_ptr<float>() : nullptr, out.data_ptr<float>());
    return detail::cast_result(out, x.dtype());
  }
  if ((weight.dtype() == DType::bf16 || weight.dtype() == DType::f16) && weight.stride(1) == 1 && K > 0) {
    Tensor out = Tensor::empty(out_shape, DType::f32);
    detail::linear_half_weight_blocks(x2, *la, weight, bias_f.defined() ? bias_f.data_ptr<float>() : nullptr,
                                      out.data_ptr<float>());
    return detail::cast_result(out, x.dtype());
  }
  Tensor wf = weight.dtype() == DType::f32 ? weight : weight.to(DType::f32);
  // B = W^T: element (k, n) of B is W[n, k].
  auto lb = detail::matrix_layout(K, N, wf.stride(1), wf.stride(0));
  if (!lb) {
    wf = wf.contiguous();
    lb = backend::cpu::MatrixLayout{0, 1, K};
  }
  Tensor out = Tensor::empty(out_shape, DType::f32);
  if (K == 0) {
    out.fill_(0.0);
    if (bias_f.defined()) out.copy_(bias_f);
    return detail::cast_result(out, x.dtype());
  }
  backend::cpu::MatmulProblem p;
  p.m = x2.size(0);
  p.k = K;
  p.n = N;
  p.a = *la;
  p.b = *lb;
  p.has_bias = bias_f.defined();
  backend::cpu::dnnl_matmul(p, x2.data_ptr(), wf.data_ptr(), out.data_ptr(),
                            p.has_bias ? bias_f.data_ptr<float>() : nullptr);
  return detail::cast_result(out, x.dtype());
}

}  // namespace detail

/// torch.nn.functional.linear: x[..., in] times weight[out, in] transposed, plus bias[out] when
/// defined. The weight is read in place through a transposed layout, never copied (f32). Inside
/// an autocast scope, f32 / f16 / bf16 operands are first cast to the scope's dtype.
inline Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}) {
  if (core::is_autocast_enabled()) {
    return detail::linear_impl(detail::autocast_operand(x), detail::autocast_operand(weight),
                               detail::autocast_operand(bias));
  }
  return detail::linear_impl(x, weight, bias);
}

/// Integer GEMM for int8 quantization: u8 [M,K] x s8 [K,N] accumulated exactly into i32 [M,N].
/// CPU only (a DeviceError elsewhere); meta inputs give a meta result.
inline Tensor matmul_u8s8(const Tensor& a_u8, const Tensor& b_s8) {
  constexpr const char* op = "matmul_u8s8";
  detail::check_defined(op, "a", a_u8);
  detail::check_defined(op, "b", b_s8);
  if (a_u8.dtype() != DType::u8 || b_s8.dtype() != DType::i8) {
    throw DTypeError("matmul_u8s8: expected uint8 x int8, got " + detail::describe(a_u8) + " x " +
                     detail::describe(b_s8));
  }
  if (a_u8.dim() != 2 || b_s8.dim() != 2 || a_u8.size(1) != b_s8.size(0)) {
    throw ShapeError("matmul_u8s8: expected [M,K] x [K,N], got " + a_u8.shape().str() + " x " +
                     b_s8.shape().str());
  }
  const Shape out_shape{a_u8.size(0), b_s8.size(1)};
  const Device dev = detail::placement_of(op, {&a_u8, &b_s8});
  if (dev.is_meta()) return Tensor::empty(out_shape, DType::i32, dev);
  if (!dev.is_cpu()) {
    throw DeviceError("matmul_u8s8: only implemented on cpu, got tensors on " + dev.str());
  }
  if (out_shape.numel() == 0 || a_u8.size(1) == 0) return Tensor::zeros(out_shape, DType::i32);
  const Tensor a = a_u8.contiguous(), b = b_s8.contiguous();
  Tensor out = Tensor::empty(out_shape, DType::i32);
  if (!backend::cpu::dnnl_u8s8_is_exact()) {
    backend::cpu::gemm_u8s8(out_shape[0], a.size(1), out_shape[1], a.data_ptr<std::uint8_t>(), b.data_ptr<std::int8_t>(),
                            out.data_ptr<std::int32_t>());
    return out;
  }
  backend::cpu::MatmulProblem p;
  p.m = out_shape[0];
  p.k = a.size(1);
  p.n = out_shape[1];
  p.a = {0, p.k, 1};
  p.b = {0, p.n, 1};
  p.a_type = dnnl::memory::data_type::u8;
  p.b_type = dnnl::memory::data_type::s8;
  p.c_type = dnnl::memory::data_type::s32;
  backend::cpu::dnnl_matmul(p, a.data_ptr(), b.data_ptr(), out.data_ptr());
  return out;
}

}  // namespace accel::ops

// Element-wise ops.
//
//   add(a, b), mul(a, b)          torch broadcasting; mixed float dtypes promote (f16+bf16 -> f32)
//   gelu(x, approximate)          exact (erf) or tanh form, as torch.nn.functional.gelu
//   silu(x)                       x * sigmoid(x)
//
// Inputs may be strided or broadcast views: dimensions are coalesced first, so the common cases
// (same-shape dense, a row vector broadcast over rows, a scalar) run as long vector loops over
// chunks split across the CPU threads. f16 / bf16 are computed in f32 per chunk.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "accel/backend/cpu/kernels.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/op_support.hpp"

namespace accel::ops {

/// GELU variants, as torch names them.
enum class GeluApproximate : unsigned char { none, tanh };

namespace detail {

/// Elements per work item: big enough to amortise the loop setup, small enough for L1 buffers.
inline constexpr std::size_t chunk_elems = 4096;

inline DType promote_float(DType a, DType b) { return a == b ? a : DType::f32; }

/// Dense output dims with the matching input strides, adjacent dims merged where every operand
/// allows it and extent-1 dims dropped; the last dim is the inner loop.
struct CoalescedDims {
  Shape shape, sa, sb;
};

inline CoalescedDims coalesce(const Shape& shape, const Shape& sa, const Shape& sb) {
  CoalescedDims c;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!c.shape.empty()) {
      const std::size_t j = c.shape.size() - 1;
      // dims (j, i) merge when each operand's stride of j equals its stride of i times extent i
      if (c.sa[j] == sa[i] * shape[i] && c.sb[j] == sb[i] * shape[i]) {
        c.shape[j] *= shape[i];
        c.sa[j] = sa[i];
        c.sb[j] = sb[i];
        continue;
      }
    }
    c.shape.push_back(shape[i]);
    c.sa.push_back(sa[i]);
    c.sb.push_back(sb[i]);
  }
  if (c.shape.empty()) {
    c.shape.push_back(1);
    c.sa.push_back(1);
    c.sb.push_back(1);
  }
  return c;
}

/// f32 view of `n` elements of `t` starting at element `off` with step `step`; returns the
/// pointer and the step to read it with (0 or 1).
inline const float* load_segment(const Tensor& t, std::int64_t off, std::int64_t step, std::size_t n,
                                 float* buf, std::ptrdiff_t& out_step) {
  const std::byte* base = element_ptr(t, off);
  if (step == 0) {
    out_step = 0;
    if (t.dtype() == DType::f32) return reinterpret_cast<const float*>(base);
    return load_row(t.dtype(), base, buf, 1);
  }
  out_step = 1;
  if (step == 1) return load_row(t.dtype(), base, buf, n);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = reinterpret_cast<const T*>(base);
    for (std::size_t j = 0; j < n; ++j) buf[j] = convert_value<float>(p[static_cast<std::int64_t>(j) * step]);
  });
  return buf;
}

template <class Op, class CudaSlot>
Tensor binary_op(const char* op, const Tensor& a, const Tensor& b, CudaSlot cuda_slot) {
  check_float(op, "a", a);
  check_float(op, "b", b);
  const Shape shape = broadcast_shapes(op, a.shape(), b.shape());
  const DType rdt = promote_float(a.dtype(), b.dtype());
  const Device dev = placement_of(op, {&a, &b});
  if (dev.is_meta()) return Tensor::empty(shape, rdt, dev);
  if (dev.is_cuda()) return run_cuda(cuda_slot, op, shape, rdt, dev, a.expand(shape), b.expand(shape));
  Tensor out = Tensor::empty(shape, rdt);
  if (shape.numel() == 0) return out;
  const Tensor ae = a.expand(shape), be = b.expand(shape);
  const CoalescedDims c = coalesce(shape, ae.strides(), be.strides());
  const std::size_t nd = c.shape.size();
  const std::int64_t inner = c.shape[nd - 1];
  const std::int64_t rows = shape.numel() / inner;
  const std::int64_t chunks_per_row = (inner + static_cast<std::int64_t>(chunk_elems) - 1) /
                                      static_cast<std::int64_t>(chunk_elems);
  const std::size_t items = static_cast<std::size_t>(rows * chunks_per_row);
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 15) / chunk_elems);
  std::byte* out_base = static_cast<std::byte*>(out.data_ptr());
  const std::size_t out_item = out.element_size();
  parallel_for(items, grain, [&](std::size_t begin, std::size_t end) {
    float* buf_a = scratch_floats(chunk_elems, 0);
    float* buf_b = scratch_floats(chunk_elems, 1);
    float* buf_o = scratch_floats(chunk_elems, 2);
    for (std::size_t it = begin; it < end; ++it) {
      const std::int64_t row = static_cast<std::int64_t>(it) / chunks_per_row;
      const std::int64_t c0 = (static_cast<std::int64_t>(it) % chunks_per_row) *
                              static_cast<std::int64_t>(chunk_elems);
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(chunk_elems, inner - c0));
      std::int64_t oa = 0, ob = 0, rem = row;
      for (std::size_t d = nd - 1; d-- > 0;) {
        const std::int64_t i = rem % c.shape[d];
        rem /= c.shape[d];
        oa += i * c.sa[d];
        ob += i * c.sb[d];
      }
      oa += c0 * c.sa[nd - 1];
      ob += c0 * c.sb[nd - 1];
      std::ptrdiff_t step_a = 1, step_b = 1;
      const float* pa = load_segment(ae, oa, c.sa[nd - 1], n, buf_a, step_a);
      const float* pb = load_segment(be, ob, c.sb[nd - 1], n, buf_b, step_b);
      void* dst = out_base + static_cast<std::size_t>(row * inner + c0) * out_item;
      float* o = out_row(rdt, dst, buf_o);
      backend::cpu::binary_row<Op>(pa, step_a, pb, step_b, o, n);
      if (rdt != DType::f32) store_row(o, rdt, dst, n);
    }
  });
  return out;
}

/// Applies a float-row kernel to every element of x (computed in f32, stored in x's dtype).
template <class Kernel>
Tensor unary_op(const Tensor& x, Kernel kernel) {
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const auto total = static_cast<std::size_t>(x.numel());
  const std::size_t items = (total + chunk_elems - 1) / chunk_elems;
  const auto* src = static_cast<const std::byte*>(xc.data_ptr());
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  const std::size_t isz = x.element_size();
  const DType dt = x.dtype();
  parallel_for(items, 4, [&](std::size_t begin, std::size_t end) {
    float* buf = scratch_floats(chunk_elems, 0);
    for (std::size_t it = begin; it < end; ++it) {
      const std::size_t off = it * chunk_elems;
      const std::size_t n = std::min(chunk_elems, total - off);
      const float* in = load_row(dt, src + off * isz, buf, n);
      float* o = out_row(dt, dst + off * isz, buf);
      kernel(in, o, n);
      if (dt != DType::f32) store_row(o, dt, dst + off * isz, n);
    }
  });
  return out;
}

}  // namespace detail

/// a + b with torch broadcasting; both float (f32 / f16 / bf16), the result in their common dtype.
inline Tensor add(const Tensor& a, const Tensor& b) {
  return detail::binary_op<backend::cpu::AddOp>("add", a, b, &DeviceOps::add);
}

/// a * b with torch broadcasting; both float (f32 / f16 / bf16), the result in their common dtype.
inline Tensor mul(const Tensor& a, const Tensor& b) {
  return detail::binary_op<backend::cpu::MulOp>("mul", a, b, &DeviceOps::mul);
}

/// GELU: exact erf form by default, torch's tanh approximation on request.
inline Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::none) {
  detail::check_float("gelu", "input", x);
  const Device dev = detail::placement_of("gelu", {&x});
  if (dev.is_meta()) return Tensor::empty(x.shape(), x.dtype(), dev);
  if (dev.is_cuda()) {
    return detail::run_cuda(&DeviceOps::gelu, "gelu", x.shape(), x.dtype(), dev, x, approximate == GeluApproximate::tanh);
  }
  if (approximate == GeluApproximate::tanh) return detail::unary_op(x, backend::cpu::gelu_tanh_row);
  return detail::unary_op(x, backend::cpu::gelu_erf_row);
}

/// SiLU (swish): x * sigmoid(x), the LLaMA MLP activation.
inline Tensor silu(const Tensor& x) {
  detail::check_float("silu", "input", x);
  const Device dev = detail::placement_of("silu", {&x});
  if (dev.is_meta()) return Tensor::empty(x.shape(), x.dtype(), dev);
  if (dev.is_cuda()) return detail::run_cuda(&DeviceOps::silu, "silu", x.shape(), x.dtype(), dev, x);
  return detail::unary_op(x, backend::cpu::silu_row);
}

}  // namespace accel::ops

// Shared plumbing of the ops: argument checks with op-named messages, where an op runs
// (meta / cpu / cuda), and f32 row staging for f16 / bf16 tensors.
//
//   check_defined(op, name, t)          ValueError for an undefined tensor
//   check_float(op, name, t)            DTypeError unless f32 / f16 / bf16
//   placement_of(op, {tensors...})      meta if any input is meta, else the one common device
//   run_cuda(&DeviceOps::x, op, ...)    a fresh result on the GPU, filled by the op's CUDA slot
//   load_row(t_dtype, src, buf, n)      f32 view of n elements (no copy for f32)
//   store_row(src, dtype, dst, n)       writes n f32 values as dtype
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "accel/core/autocast_state.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"

namespace accel::ops::detail {

inline std::string describe(const Tensor& t) {
  return t.shape().str() + " " + std::string(dtype_name(t.dtype())) + " on " + t.device().str();
}

inline void check_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) throw ValueError(std::string(op) + ": argument '" + name + "' is an undefined tensor");
}

inline bool is_compute_float(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

inline void check_float(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  if (!is_compute_float(t.dtype())) {
    throw DTypeError(std::string(op) + ": '" + name + "' has dtype " + std::string(dtype_name(t.dtype())) +
                     " (shape " + t.shape().str() + "); expected float32, float16 or bfloat16");
  }
}

inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    throw DTypeError(std::string(op) + ": dtypes differ: " + describe(a) + " vs " + describe(b));
  }
}

/// Where an op with these (defined) inputs runs: meta wins (so models trace on meta), otherwise
/// every input must be on one device.
inline Device placement_of(const char* op, std::initializer_list<const Tensor*> ts) {
  Device dev = Device::cpu();
  bool first = true;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->is_meta()) return Device::meta();
  }
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (first) {
      dev = t->device();
      first = false;
    } else if (t->device() != dev) {
      std::string all;
      for (const Tensor* u : ts) {
        if (u->defined()) all += (all.empty() ? "" : ", ") + describe(*u);
      }
      throw DeviceError(std::string(op) + ": inputs are on different devices (" + all + ")");
    }
  }
  return dev;
}

/// The CUDA slot of op `op`, or DeviceError saying how to get it.
template <class Fn>
Fn cuda_op(Fn DeviceOps::*slot, const char* op) {
  return require_slot(cuda_backend().ops.*slot, op);
}

/// A fresh `shape` / `dtype` result on GPU `dev`, computed by the op's CUDA slot from `args`
/// (validated by the caller, as the slot contract in core/device_backend.hpp asks); the slot is
/// not called for an empty result.
template <class Fn, class... Args>
Tensor run_cuda(Fn DeviceOps::*slot, const char* op, const Shape& shape, DType dtype, Device dev,
                const Args&... args) {
  Tensor out = Tensor::empty(shape, dtype, dev);
  if (out.numel() > 0) cuda_op(slot, op)(args..., out);
  return out;
}

/// A contiguous tensor with `t`'s values as f32 (no copy when it already is one).
inline Tensor contiguous_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t.contiguous();
  return t.to(t.device(), DType::f32);  // a fresh, contiguous copy
}

/// Per-thread f32 staging buffer of at least n floats; `slot` separates simultaneous uses.
inline float* scratch_floats(std::size_t n, int slot) {
  thread_local std::vector<float> bufs[4];
  auto& b = bufs[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

/// f32 view of n contiguous elements of dtype d at src, converting into buf when needed.
inline const float* load_row(DType d, const void* src, float* buf, std::size_t n) {
  switch (d) {
    case DType::f32: return static_cast<const float*>(src);
    case DType::f16: accel::detail::f16_to_f32(static_cast<const half*>(src), buf, n); return buf;
    case DType::bf16: accel::detail::bf16_to_f32(static_cast<const bfloat16*>(src), buf, n); return buf;
    default: convert_elements(d, src, DType::f32, buf, n); return buf;
  }
}

/// Writes n f32 values as dtype d (a no-op copy-free path when src already is dst).
inline void store_row(const float* src, DType d, void* dst, std::size_t n) {
  switch (d) {
    case DType::f32:
      if (static_cast<const void*>(src) != dst) std::copy(src, src + n, static_cast<float*>(dst));
      return;
    case DType::f16: accel::detail::f32_to_f16(src, static_cast<half*>(dst), n); return;
    case DType::bf16: accel::detail::f32_to_bf16(src, static_cast<bfloat16*>(dst), n); return;
    default: {
      visit_dtype(d, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = static_cast<T*>(dst);
        for (std::size_t i = 0; i < n; ++i) p[i] = convert_value<T>(src[i]);
      });
    }
  }
}

/// f32 destination for a row of dtype d: dst itself for f32, else a staging buffer.
inline float* out_row(DType d, void* dst, float* buf) {
  return d == DType::f32 ? static_cast<float*>(dst) : buf;
}

/// Byte address of element `index` of a contiguous-or-strided tensor's storage.
inline const std::byte* element_ptr(const Tensor& t, std::int64_t offset_elems) {
  return static_cast<const std::byte*>(t.data_ptr()) + offset_elems * static_cast<std::int64_t>(t.element_size());
}

/// The operand as an autocast-eligible op sees it: cast to the active autocast scope's dtype when
/// it is a floating tensor of another dtype (torch.autocast casts the same way, per call).
inline Tensor autocast_operand(const Tensor& t) {
  if (!t.defined()) return t;
  const DType target = core::autocast_target(t.dtype());
  return target == t.dtype() ? t : t.to(target);
}

}  // namespace accel::ops::detail

// Data-movement kernels of the CUDA backend (nvcc only): dtype conversion, fill, strided copy.
// Including this header in one .cu translation unit fills the kernel slots of the device backend
// (core/device_backend.hpp), so Tensor::to / copy_ / fill_ on a GPU stay on the GPU.
//
//   kernels::convert_on_device(...)   every pair of f64 / f32 / f16 / bf16 / f8 e4m3fn / e5m2,
//                                     with the host's rounding (the same code: core/float_types.hpp)
//   kernels::fill_on_device(...)      repeats a 1, 2, 4 or 8 byte pattern
//   cuda::contiguous(t)               a dense copy of a strided CUDA view, on the GPU
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "accel/backend/cuda/launch.cuh"
#include "accel/backend/cuda/runtime.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/tensor.hpp"

namespace accel::cuda::kernels {

/// True for the dtypes the conversion kernels handle (every floating dtype).
constexpr bool has_convert_kernel(DType d) { return is_floating_point(d); }

/// Element `i` of a floating array of dtype D as the exact f32 the host conversion produces
/// (f16 signalling NaNs quietened, as the host's F16C path does).
template <DType D>
__host__ __device__ inline float load_exact(const void* p, std::int64_t i) {
  const auto v = static_cast<const cpp_type_t<D>*>(p)[i];
  if constexpr (D == DType::f16) {
    return accel::detail::decode_f16_quiet(v.bits);
  } else {
    return static_cast<float>(v);
  }
}

/// dst[i] = src[i] converted from S to D (floating dtypes, S != D) with the host's rounding;
/// host code runs it too, so a test can hold it against the host's vectorized conversion.
template <DType S, DType D>
__host__ __device__ inline void convert_element(const void* src, void* dst, std::int64_t i) {
  using To = cpp_type_t<D>;
  if constexpr (S == DType::f64) {
    const double v = static_cast<const double*>(src)[i];
    if constexpr (D == DType::f32) {
      static_cast<float*>(dst)[i] = accel::detail::f64_to_f32(v);
    } else {
      static_cast<To*>(dst)[i] = To(accel::detail::narrow_double(v));  // D is a small float
    }
  } else {
    const float v = load_exact<S>(src, i);
    if constexpr (D == DType::f64) {
      static_cast<double*>(dst)[i] = accel::detail::f32_to_f64(v);
    } else if constexpr (D == DType::f32) {
      static_cast<float*>(dst)[i] = v;
    } else {
      static_cast<To*>(dst)[i] = To(v);
    }
  }
}

template <DType S, DType D>
__global__ void convert_kernel(const void* __restrict__ src, void* __restrict__ dst, std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) { convert_element<S, D>(src, dst, i); }
}

/// Converts `n` elements on GPU `d`, queued on its current stream. False for dtypes without a
/// kernel (integers, bool: the caller converts through the host).
inline bool convert_on_device(Device d, const void* src, DType src_dtype, void* dst, DType dst_dtype,
                              std::size_t n) {
  if (!has_convert_kernel(src_dtype) || !has_convert_kernel(dst_dtype)) return false;
  if (n == 0) return true;
  OpScope scope(d);
  if (src_dtype == dst_dtype) {
    check(cudaMemcpyAsync(dst, src, n * itemsize(src_dtype), cudaMemcpyDeviceToDevice, scope.stream()),
          "cudaMemcpyAsync");
    return true;
  }
  const auto count = static_cast<std::int64_t>(n);
  visit_dtype_constant(src_dtype, [&](auto s) {
    visit_dtype_constant(dst_dtype, [&](auto t) {
      constexpr DType S = decltype(s)::value, D = decltype(t)::value;
      if constexpr (has_convert_kernel(S) && has_convert_kernel(D) && S != D) {
        convert_kernel<S, D><<<grid_for(count), block_threads, 0, scope.stream()>>>(src, dst, count);
      }
    });
  });
  check_launch("convert_kernel");
  return true;
}

template <class Word>
__global__ void fill_kernel(Word* __restrict__ dst, Word value, std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) { dst[i] = value; }
}

/// Unsigned integer type of `Bytes` bytes: what the byte-moving kernels copy an element as.
template <std::size_t Bytes>
using word_t = std::conditional_t<
    Bytes == 1, std::uint8_t,
    std::conditional_t<Bytes == 2, std::uint16_t, std::conditional_t<Bytes == 4, std::uint32_t, std::uint64_t>>>;

/// Calls f(Word{}) with an unsigned integer type as wide as one element of `d`.
template <class F>
void visit_word(DType d, F&& f) {
  visit_dtype_constant(d, [&](auto t) { f(word_t<sizeof(cpp_type_t<decltype(t)::value>)>{}); });
}

/// Repeats `pattern` `count` times at `dst` on GPU `d`, queued on its current stream. False for
/// pattern sizes other than 1, 2, 4, 8 bytes or a destination not aligned to the pattern size.
inline bool fill_on_device(Device d, void* dst, const void* pattern, std::size_t pattern_bytes, std::size_t count) {
  const bool word = pattern_bytes == 1 || pattern_bytes == 2 || pattern_bytes == 4 || pattern_bytes == 8;
  if (!word || reinterpret_cast<std::uintptr_t>(dst) % pattern_bytes != 0) return false;
  if (count == 0) return true;
  OpScope scope(d);
  const auto n = static_cast<std::int64_t>(count);
  auto launch = [&](auto w) {
    using W = decltype(w);
    W value;
    std::memcpy(&value, pattern, sizeof value);
    fill_kernel<W><<<grid_for(n), block_threads, 0, scope.stream()>>>(static_cast<W*>(dst), value, n);
  };
  if (pattern_bytes == 1) launch(word_t<1>{});
  else if (pattern_bytes == 2) launch(word_t<2>{});
  else if (pattern_bytes == 4) launch(word_t<4>{});
  else launch(word_t<8>{});
  check_launch("fill_kernel");
  return true;
}

template <class Word>
__global__ void strided_copy_kernel(const Word* __restrict__ src, Word* __restrict__ dst, StridedIndex index,
                                    std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) { dst[i] = src[index.offset(i)]; }
}

}  // namespace accel::cuda::kernels

namespace accel::cuda {

/// `t` itself when it is contiguous, otherwise a dense copy made on its GPU (the core's generic
/// path would stage a strided device view through host memory).
inline Tensor contiguous(const Tensor& t) {
  if (!t.is_cuda() || t.is_contiguous()) return t.contiguous();
  kernels::OpScope scope(t.device());
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  const std::int64_t n = t.numel();
  if (n == 0) return out;
  const auto index = kernels::StridedIndex::of(t.shape(), t.strides());
  kernels::visit_word(t.dtype(), [&](auto w) {
    using W = decltype(w);
    kernels::strided_copy_kernel<W><<<kernels::grid_for(n), kernels::block_threads, 0, scope.stream()>>>(
        static_cast<const W*>(t.data_ptr()), static_cast<W*>(out.data_ptr()), index, n);
  });
  kernels::check_launch("strided_copy_kernel");
  return out;
}

namespace detail {
/// Start-up registration of the kernel slots of the device backend.
inline const bool kernels_registered = [] {
  DeviceBackend& b = cuda_backend();
  b.convert = &kernels::convert_on_device;
  b.fill_kernel = &kernels::fill_on_device;
  return true;
}();
}  // namespace detail

}  // namespace accel::cuda

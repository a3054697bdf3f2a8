// Data-movement kernels of the CUDA backend (nvcc only): dtype conversion, fill, strided copy.
// Including this header in one .cu translation unit registers the conversion and fill kernels
// with CudaBackend, so Tensor::to / copy_ / fill_ on a GPU stay on the GPU.
//
//   kernels::convert_on_device(...)   every pair of f64 / f32 / f16 / bf16 / f8 e4m3fn / e5m2,
//                                     bit-exact with the host conversion (core/float_types.hpp)
//   kernels::fill_on_device(...)      repeats a 1, 2, 4 or 8 byte pattern
//   cuda::contiguous(t)               a dense copy of a strided CUDA view, on the GPU
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "accel/backend/cuda/float_codec.cuh"
#include "accel/backend/cuda/launch.cuh"
#include "accel/backend/cuda/runtime.hpp"
#include "accel/core/tensor.hpp"

namespace accel::cuda::kernels {

/// True for the dtypes the conversion kernels handle.
constexpr bool has_convert_kernel(DType d) {
  return d == DType::f64 || d == DType::f32 || d == DType::f16 || d == DType::bf16 ||
         d == DType::f8_e4m3fn || d == DType::f8_e5m2;
}

/// Element `i` of a small-float (or f32) array as the exact f32 the host conversion produces.
template <DType D>
__device__ inline float load_exact(const void* p, std::int64_t i) {
  if constexpr (D == DType::f32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (D == DType::f16) {
    return codec::decode_f16(static_cast<const std::uint16_t*>(p)[i]);
  } else if constexpr (D == DType::bf16) {
    return codec::decode<codec::bf16>(static_cast<const std::uint16_t*>(p)[i]);
  } else if constexpr (D == DType::f8_e4m3fn) {
    return codec::decode<codec::e4m3fn>(static_cast<const std::uint8_t*>(p)[i]);
  } else {
    static_assert(D == DType::f8_e5m2);
    return codec::decode<codec::e5m2>(static_cast<const std::uint8_t*>(p)[i]);
  }
}

/// Stores an f32 (already rounded to odd when it came from f64) as a small format.
template <DType D>
__device__ inline void store_small(void* p, std::int64_t i, float v) {
  if constexpr (D == DType::f16) {
    static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>(codec::encode<codec::f16>(v));
  } else if constexpr (D == DType::bf16) {
    static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>(codec::encode<codec::bf16>(v));
  } else if constexpr (D == DType::f8_e4m3fn) {
    static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(codec::encode<codec::e4m3fn>(v));
  } else {
    static_assert(D == DType::f8_e5m2);
    static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(codec::encode<codec::e5m2>(v));
  }
}

/// dst[i] = src[i] converted from S to D with the host's rounding (see float_codec.cuh).
template <DType S, DType D>
__global__ void convert_kernel(const void* __restrict__ src, void* __restrict__ dst, std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) {
    if constexpr (S == DType::f64) {
      const double v = static_cast<const double*>(src)[i];
      if constexpr (D == DType::f64) {
        static_cast<double*>(dst)[i] = v;
      } else if constexpr (D == DType::f32) {
        static_cast<float*>(dst)[i] = codec::f64_to_f32(v);
      } else {
        store_small<D>(dst, i, codec::narrow_double(v));
      }
    } else {
      const float v = load_exact<S>(src, i);
      if constexpr (D == DType::f64) {
        static_cast<double*>(dst)[i] = codec::f32_to_f64(v);
      } else if constexpr (D == DType::f32) {
        static_cast<float*>(dst)[i] = v;
      } else {
        store_small<D>(dst, i, v);
      }
    }
  }
}

/// Calls f(std::integral_constant<DType, d>{}) for a dtype with a conversion kernel.
template <class F>
void visit_convert_dtype(DType d, F&& f) {
  switch (d) {
    case DType::f64: f(std::integral_constant<DType, DType::f64>{}); break;
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); break;
    case DType::f16: f(std::integral_constant<DType, DType::f16>{}); break;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); break;
    case DType::f8_e4m3fn: f(std::integral_constant<DType, DType::f8_e4m3fn>{}); break;
    case DType::f8_e5m2: f(std::integral_constant<DType, DType::f8_e5m2>{}); break;
    default: throw DTypeError("no CUDA conversion kernel for " + std::string(dtype_name(d)));
  }
}

/// Converts `n` elements on the current device, queued on `stream`. False for dtypes without a
/// kernel (integers, bool: the caller converts through the host).
inline bool convert_on_device(int /*device*/, cudaStream_t stream, const void* src, DType src_dtype, void* dst,
                              DType dst_dtype, std::size_t n) {
  if (!has_convert_kernel(src_dtype) || !has_convert_kernel(dst_dtype)) return false;
  if (n == 0) return true;
  if (src_dtype == dst_dtype) {
    check(cudaMemcpyAsync(dst, src, n * itemsize(src_dtype), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    return true;
  }
  const auto count = static_cast<std::int64_t>(n);
  visit_convert_dtype(src_dtype, [&](auto s) {
    visit_convert_dtype(dst_dtype, [&](auto d) {
      convert_kernel<decltype(s)::value, decltype(d)::value><<<grid_for(count), block_threads, 0, stream>>>(src, dst, count);
    });
  });
  check_launch("convert_kernel");
  return true;
}

template <class Word>
__global__ void fill_kernel(Word* __restrict__ dst, Word value, std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) { dst[i] = value; }
}

template <class Word>
void launch_fill(cudaStream_t stream, void* dst, const void* pattern, std::size_t count) {
  Word w;
  std::memcpy(&w, pattern, sizeof w);
  const auto n = static_cast<std::int64_t>(count);
  fill_kernel<Word><<<grid_for(n), block_threads, 0, stream>>>(static_cast<Word*>(dst), w, n);
  check_launch("fill_kernel");
}

/// Repeats `pattern` `count` times at `dst`, queued on `stream`. False for pattern sizes other
/// than 1, 2, 4, 8 bytes or a destination not aligned to the pattern size.
inline bool fill_on_device(int /*device*/, cudaStream_t stream, void* dst, const void* pattern,
                           std::size_t pattern_bytes, std::size_t count) {
  if (reinterpret_cast<std::uintptr_t>(dst) % pattern_bytes != 0) return false;
  switch (pattern_bytes) {
    case 1: launch_fill<std::uint8_t>(stream, dst, pattern, count); return true;
    case 2: launch_fill<std::uint16_t>(stream, dst, pattern, count); return true;
    case 4: launch_fill<std::uint32_t>(stream, dst, pattern, count); return true;
    case 8: launch_fill<std::uint64_t>(stream, dst, pattern, count); return true;
    default: return false;
  }
}

template <class Word>
__global__ void strided_copy_kernel(const Word* __restrict__ src, Word* __restrict__ dst, StridedIndex index,
                                    std::int64_t n) {
  ACCEL_GRID_STRIDE(i, n) { dst[i] = src[index.offset(i)]; }
}

/// Calls f(Word{}) with an unsigned integer type as wide as one element of `d`.
template <class F>
void visit_word(DType d, F&& f) {
  switch (itemsize(d)) {
    case 1: f(std::uint8_t{}); break;
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    case 8: f(std::uint64_t{}); break;
    default: throw DTypeError("no CUDA copy kernel for elements of " + std::to_string(itemsize(d)) + " bytes");
  }
}

}  // namespace accel::cuda::kernels

namespace accel::cuda {

/// `t` itself when it is contiguous, otherwise a dense copy made on its GPU (the core's generic
/// path would stage a strided device view through host memory).
inline Tensor contiguous(const Tensor& t) {
  if (!t.is_cuda() || t.is_contiguous()) return t.contiguous();
  kernels::OpScope scope(t.device(), "contiguous");
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
/// Start-up registration of the conversion and fill kernels with the backend.
inline const bool kernels_registered = [] {
  kernel_hooks().convert = &kernels::convert_on_device;
  kernel_hooks().fill = &kernels::fill_on_device;
  return true;
}();
}  // namespace detail

}  // namespace accel::cuda

// Launch plumbing shared by the CUDA kernels (nvcc only).
//
//   grid_for(n)                   blocks for a grid-stride loop over n items
//   check_launch(name)            DeviceError if the last launch failed
//   ACCEL_GRID_STRIDE(i, n)       for-loop header of a grid-stride loop with 64-bit indices
//   load_f32 / store_f32          f32 / f16 / bf16 elements as f32, with the host's rounding
//   StridedIndex                  linear index -> element offset of a strided view
//   OpScope                       the device and stream an op runs on
//   block_sum / block_max         block-wide reductions (blockDim a multiple of 32, <= 1024)
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cstdint>

#include "accel/backend/cuda/runtime.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/tensor.hpp"

namespace accel::cuda::kernels {

/// Threads per block of the element-wise kernels.
inline constexpr int block_threads = 256;

/// Blocks for a grid-stride loop over `n` items: enough to fill any GPU, never more than needed.
inline unsigned grid_for(std::int64_t n, int threads = block_threads) {
  const std::int64_t blocks = (std::max<std::int64_t>(n, 1) + threads - 1) / threads;
  return static_cast<unsigned>(std::min<std::int64_t>(blocks, std::int64_t{1} << 16));
}

/// Turns a failed kernel launch into a DeviceError naming the kernel.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

#define ACCEL_GRID_STRIDE(i, n)                                                             \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < (n); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// The ops' kernels take their compute dtype (f32 / f16 / bf16, checked by the host op) as a
// runtime value rather than one instantiation per dtype: three times fewer kernels to compile
// for every architecture. The conversions are core/float_types.hpp's, as on the host.

/// Element `i` of an f32 / f16 / bf16 array as f32 (exact).
__device__ inline float load_f32(const void* p, std::int64_t i, DType d) {
  switch (d) {
    case DType::f16: return static_cast<float>(static_cast<const accel::half*>(p)[i]);
    case DType::bf16: return static_cast<float>(static_cast<const accel::bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

/// Stores `v` as element `i` of an f32 / f16 / bf16 array (round to nearest even).
__device__ inline void store_f32(void* p, std::int64_t i, DType d, float v) {
  switch (d) {
    case DType::f16: static_cast<accel::half*>(p)[i] = accel::half(v); break;
    case DType::bf16: static_cast<accel::bfloat16*>(p)[i] = accel::bfloat16(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

/// Maps the linear (row-major) index of an element of a view to its offset in elements.
struct StridedIndex {
  int nd = 0;
  std::int64_t shape[max_dims] = {};
  std::int64_t strides[max_dims] = {};

  __host__ __device__ std::int64_t offset(std::int64_t linear) const {
    std::int64_t off = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const std::int64_t idx = linear % shape[d];
      linear /= shape[d];
      off += idx * strides[d];
    }
    return off;
  }

  static StridedIndex of(const Shape& shape, const Shape& strides) {
    StridedIndex s;
    s.nd = static_cast<int>(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) {
      s.shape[i] = shape[i];
      s.strides[i] = strides[i];
    }
    return s;
  }
};

/// The GPU of an op made current for its scope, and the stream its kernels go on. Callers pass a
/// device that holds tensors, so it is a visible GPU (asserted in debug builds).
class OpScope {
 public:
  explicit OpScope(Device d) : index_(d.index()), guard_(index_), stream_(current_stream(index_)) {
    assert(d.is_cuda() && index_ < device_count());
  }
  int index() const noexcept { return index_; }
  Device device() const noexcept { return Device::cuda(index_); }
  cudaStream_t stream() const noexcept { return stream_; }

 private:
  int index_;
  DeviceGuard guard_;
  cudaStream_t stream_;
};

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum of `v` over the block, returned to every thread. `scratch` holds >= 33 floats of shared
/// memory; every thread of the block must call it.
__device__ inline float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  __syncthreads();  // the previous reduction's result has been read by everyone
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const unsigned warps = (blockDim.x + 31u) >> 5;
    float x = lane < warps ? scratch[lane] : 0.0f;
    x = warp_sum(x);
    if (lane == 0) scratch[32] = x;
  }
  __syncthreads();
  return scratch[32];
}

/// Maximum of `v` over the block (NaN-ignoring, as fmaxf), returned to every thread.
__device__ inline float block_max(float v, float* scratch) {
  v = warp_max(v);
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const unsigned warps = (blockDim.x + 31u) >> 5;
    float x = lane < warps ? scratch[lane] : -INFINITY;
    x = warp_max(x);
    if (lane == 0) scratch[32] = x;
  }
  __syncthreads();
  return scratch[32];
}

}  // namespace accel::cuda::kernels

// cuBLAS handles for the CUDA ops: one per (thread, GPU), created lazily and bound to the
// thread's current stream of that GPU on every request. Host code only.
//
//   cuda::check_cublas(status, what)    DeviceError naming the call and cuBLAS's message
//   cuda::cublas_handle(device)         the calling thread's handle for `device`
//
// A handle must not be used by two threads at once, hence one per thread; a thread's handles go
// back to a pool when it exits, and the pool is never torn down (destroying handles during
// static destruction races the runtime's own teardown).
#pragma once

#if defined(ACCEL_WITH_CUDA)

#include <cublas_v2.h>

#include <array>
#include <mutex>
#include <string>
#include <vector>

#include "accel/backend/cuda/runtime.hpp"

namespace accel::cuda {

/// Throws DeviceError "cuBLAS error in <what>: <status>" unless `st` is CUBLAS_STATUS_SUCCESS.
inline void check_cublas(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(std::string("cuBLAS error in ") + what + ": " + cublasGetStatusName(st) + " (" +
                    cublasGetStatusString(st) + ")");
}

namespace detail {

class CublasHandlePool {
 public:
  cublasHandle_t acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_[static_cast<std::size_t>(device)];
      if (!free.empty()) {
        cublasHandle_t h = free.back();
        free.pop_back();
        return h;
      }
    }
    DeviceGuard g(device);
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    return h;
  }
  void release(int device, cublasHandle_t h) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      free_[static_cast<std::size_t>(device)].push_back(h);
    } catch (...) {
      // Out of memory while exiting a thread: the handle leaks, nothing else breaks.
    }
  }

 private:
  std::mutex mutex_;
  std::array<std::vector<cublasHandle_t>, accel::detail::max_cuda_devices> free_;
};

inline CublasHandlePool& cublas_pool() {
  static auto* pool = new CublasHandlePool();  // deliberately never destroyed
  return *pool;
}

struct ThreadCublasHandles {
  std::array<cublasHandle_t, accel::detail::max_cuda_devices> handles{};
  ~ThreadCublasHandles() {
    for (std::size_t d = 0; d < handles.size(); ++d) {
      if (handles[d]) cublas_pool().release(static_cast<int>(d), handles[d]);
    }
  }
};

}  // namespace detail

/// The calling thread's cuBLAS handle for GPU `device`, set to the thread's current stream there.
inline cublasHandle_t cublas_handle(int device) {
  check_device_index(device, "cublas_handle");
  thread_local detail::ThreadCublasHandles mine;
  cublasHandle_t& h = mine.handles[static_cast<std::size_t>(device)];
  if (!h) h = detail::cublas_pool().acquire(device);
  check_cublas(cublasSetStream(h, current_stream(device)), "cublasSetStream");
  return h;
}

}  // namespace accel::cuda

#endif  // ACCEL_WITH_CUDA

// A stand-in CUDA runtime for tests on a machine without a GPU: cuda:0's allocation and copy
// slots served by host memory, installed for a scope and the real table restored after. Enough
// to place tensors "on cuda:0" and read them back (hooks, dispatch), not to compute there: the
// ops' CUDA kernels are not behind these slots. A test that needs streams and events adds its
// own slots on top (tests/hooks/test_device_stage.cpp). Every storage made on cuda:0 must be gone
// when the scope ends.
#pragma once

#include <cstdlib>
#include <cstring>

#include "accel/core/device_backend.hpp"

namespace accel_test {

class HostBackedCuda {
 public:
  HostBackedCuda() : saved_(accel::cuda_backend()) {
    accel::DeviceBackend& b = accel::cuda_backend();
    b = accel::DeviceBackend{};
    b.device_count = []() noexcept { return 1; };
    b.allocate = [](int, std::size_t n) { return std::aligned_alloc(256, (n + 255) / 256 * 256); };
    b.deallocate = [](int, void* p) noexcept { std::free(p); };
    b.allocate_pinned = [](std::size_t n) noexcept { return std::aligned_alloc(4096, (n + 4095) / 4096 * 4096); };
    b.deallocate_pinned = [](void* p) noexcept { std::free(p); };
    b.copy = [](void* dst, accel::Device, const void* src, accel::Device, std::size_t n, bool) { std::memcpy(dst, src, n); };
    b.synchronize = [](int) {};
  }
  ~HostBackedCuda() { accel::cuda_backend() = saved_; }
  HostBackedCuda(const HostBackedCuda&) = delete;
  HostBackedCuda& operator=(const HostBackedCuda&) = delete;

 private:
  accel::DeviceBackend saved_;
};

}  // namespace accel_test

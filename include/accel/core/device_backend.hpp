// DeviceBackend: the seam between the tensor layer and a device runtime.
//
// The core never includes a device runtime's headers. A backend (backend/cuda/runtime.hpp)
// registers itself in `device_backend_slot(type)` when it is compiled in, and the tensor layer
// reaches CUDA only through this interface, so host-only users build without the toolkit and
// get a DeviceError that says how to enable CUDA if they ask for it.
#pragma once

#include <cstddef>
#include <string>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"

namespace accel {

/// What the tensor layer needs from a device runtime.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual int device_count() const = 0;
  /// Raw device memory; throws OutOfMemoryError. Counting is the caller's job.
  virtual void* allocate(int index, std::size_t nbytes) = 0;
  virtual void deallocate(int index, void* p) noexcept = 0;
  /// Page-locked host memory, or nullptr when the runtime cannot provide it.
  virtual void* allocate_pinned(std::size_t nbytes) noexcept = 0;
  virtual void deallocate_pinned(void* p) noexcept = 0;
  /// Copies bytes between any two of host / device memory. With `non_blocking`, the copy is
  /// queued on the current stream of the device involved and may still be running on return.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    std::size_t nbytes, bool non_blocking) = 0;
  /// Converts `n` contiguous elements on device `d`; returns false when no kernel exists for the
  /// pair (the caller then converts through the host).
  virtual bool convert(Device d, const void* src, DType src_dtype, void* dst, DType dst_dtype,
                       std::size_t n) = 0;
  virtual void fill(Device d, void* dst, const void* pattern, std::size_t pattern_bytes,
                    std::size_t count) = 0;
  /// Waits for all work queued on device `index`.
  virtual void synchronize(int index) = 0;
};

/// The registration slot for a device type (cuda only, for now).
inline DeviceBackend*& device_backend_slot(DeviceType t) {
  static DeviceBackend* cuda = nullptr;
  if (t != DeviceType::cuda) {
    throw DeviceError("no device backend slot for this device type");
  }
  return cuda;
}

/// The backend for `d`, or a DeviceError naming what is missing.
inline DeviceBackend& device_backend(Device d) {
  DeviceBackend* b = device_backend_slot(d.type());
  if (!b) {
    throw DeviceError("device " + d.str() +
                      " needs the CUDA backend: build with ACCEL_WITH_CUDA=ON (CUDA toolkit found "
                      "by CMake) and include accel/accel.hpp");
  }
  return *b;
}

/// True when a CUDA backend is compiled in and sees at least one GPU.
inline bool cuda_is_available() {
  DeviceBackend* b = device_backend_slot(DeviceType::cuda);
  return b && b->device_count() > 0;
}

/// Number of visible GPUs (0 without a CUDA backend).
inline int cuda_device_count() {
  DeviceBackend* b = device_backend_slot(DeviceType::cuda);
  return b ? b->device_count() : 0;
}

}  // namespace accel

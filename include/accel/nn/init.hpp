// Where new parameters and buffers are created: Accelerate's init_empty_weights / init_on_device.
//
//   { auto scope = init_empty_weights(); auto m = std::make_shared<Linear>(10000, 10000); }   // meta, 0 bytes
//   { auto scope = init_on_device(Device::cuda(0), /*include_buffers=*/true); ... }
//   new_parameter_tensor(shape, dtype)   what layers call: honours the scope, never allocates on cpu first
//
// The scope is thread-local and nests (the innermost wins); it is restored when the guard dies.
#pragma once

#include <optional>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/tensor.hpp"

namespace accel::nn {

/// The active initialisation scope of this thread: where registered tensors go.
struct InitContext {
  std::optional<Device> device;  ///< nullopt: tensors stay where they were created
  bool include_buffers = false;  ///< buffers follow `device` too
};

namespace detail {
inline InitContext& init_context() {
  thread_local InitContext ctx;
  return ctx;
}
}  // namespace detail

/// The current scope (no device when none is active).
inline const InitContext& current_init_context() { return detail::init_context(); }

/// RAII guard of an initialisation scope; restores the enclosing scope when destroyed.
class InitScope {
 public:
  InitScope(Device device, bool include_buffers) : saved_(detail::init_context()) {
    detail::init_context() = InitContext{device, include_buffers};
  }
  ~InitScope() { detail::init_context() = saved_; }
  InitScope(const InitScope&) = delete;
  InitScope& operator=(const InitScope&) = delete;

 private:
  InitContext saved_;
};

/// Parameters (and buffers when `include_buffers`) registered in the scope are created on the meta
/// device: shapes and dtypes without a byte of storage. Keep the returned guard alive.
[[nodiscard]] inline InitScope init_empty_weights(bool include_buffers = false) {
  return InitScope(Device::meta(), include_buffers);
}

/// Parameters (and buffers when `include_buffers`) registered in the scope go to `device`.
[[nodiscard]] inline InitScope init_on_device(Device device, bool include_buffers = false) {
  return InitScope(device, include_buffers);
}

/// The device a new parameter (or buffer) should be created on under the current scope.
inline Device init_device_for(bool is_buffer, Device fallback = Device::cpu()) {
  const auto& ctx = current_init_context();
  if (ctx.device && (!is_buffer || ctx.include_buffers)) return *ctx.device;
  return fallback;
}

/// A new parameter tensor of `shape`, filled with `fill`, created directly on the scope's device
/// (meta: no storage at all). Layers create every weight through this.
inline Tensor new_parameter_tensor(const Shape& shape, DType dtype = DType::f32, double fill = 0.0,
                                   bool is_buffer = false) {
  const Device d = init_device_for(is_buffer);
  return d.is_meta() ? Tensor::empty(shape, dtype, d) : Tensor::full(shape, fill, dtype, d);
}

}  // namespace accel::nn

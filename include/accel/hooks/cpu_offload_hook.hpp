// CpuOffload and UserCpuOffloadHook: a whole model kept on the CPU and moved to its execution
// device when called, until the next model of a pipeline is (Accelerate's cpu_offload_with_hook).
//
//   auto [m2, hook2] = cpu_offload_with_hook(model2, cuda0, hook1);   // dispatch/big_modeling.hpp
//   hook.offload();   // back to the CPU now
//   hook.remove();    // the hook goes, the model stays where it is
//
// CpuOffload::pre_forward first offloads the previous model of the chain (prev_module_hook),
// then moves this model to the execution device, then the arguments. Nothing moves the model
// back after its call: the next model's hook does, or the caller with offload(), so a model
// called several times in a row pays one transfer.
//
// Differences from Accelerate: the execution device defaults to the first GPU when there is
// one, else the CPU (Accelerate's PartialState().default_device); moving a tied weight's module
// moves its partners too (the cells are shared: a whole model moves together).
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "accel/core/device.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/tensor.hpp"
#include "accel/hooks/model_hook.hpp"
#include "accel/nn/module.hpp"

namespace accel::hooks {

class UserCpuOffloadHook;

/// The device a process computes on by default: cuda:0 when a GPU is there, else the CPU.
inline Device default_execution_device() { return cuda_is_available() ? Device::cuda(0) : Device::cpu(); }

/// Keeps its module on the CPU between uses and moves it to the execution device for a call.
class CpuOffload : public ModelHook {
 public:
  explicit CpuOffload(std::optional<Device> execution_device = std::nullopt,
                      std::shared_ptr<UserCpuOffloadHook> prev_module_hook = nullptr)
      : device_(execution_device.value_or(default_execution_device())), prev_(std::move(prev_module_hook)) {}

  void init_hook(nn::Module& module) override { module.to(Device::cpu()); }
  inline void pre_forward(nn::Module& module, const TensorRefs& args) override;
  std::optional<Device> execution_device() const override { return device_; }
  const std::shared_ptr<UserCpuOffloadHook>& prev_module_hook() const noexcept { return prev_; }

 private:
  Device device_;
  std::shared_ptr<UserCpuOffloadHook> prev_;
};

/// What cpu_offload_with_hook returns beside the model: offload() puts the model back on the CPU
/// now, remove() takes the hook off.
class UserCpuOffloadHook {
 public:
  UserCpuOffloadHook(nn::Module& model, std::shared_ptr<CpuOffload> hook) : model_(&model), hook_(std::move(hook)) {}
  /// Moves the model back to the CPU (the hook's init_hook).
  void offload() { hook_->init_hook(*model_); }
  /// Removes the model's hook.
  void remove() { remove_hook_from_module(*model_); }
  nn::Module& model() const noexcept { return *model_; }
  const std::shared_ptr<CpuOffload>& hook() const noexcept { return hook_; }

 private:
  nn::Module* model_;
  std::shared_ptr<CpuOffload> hook_;
};

inline void CpuOffload::pre_forward(nn::Module& module, const TensorRefs& args) {
  if (prev_) prev_->offload();
  module.to(device_);
  args.for_each([&](Tensor& t) {
    if (t.defined() && t.device() != device_) t = t.to(device_);
  });
}

}  // namespace accel::hooks

namespace accel {
using hooks::CpuOffload, hooks::UserCpuOffloadHook;
}  // namespace accel

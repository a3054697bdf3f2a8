// set_module_tensor_to_device: put one parameter or buffer of a model on a device, optionally
// with a new value, following Accelerate's rules.
//
//   set_module_tensor_to_device(model, "lm_head.weight", Device::cuda(0), value);
//
// - a value of another shape is rejected (ShapeError naming the tensor and both shapes);
// - the value is cast to the existing tensor's dtype unless `dtype` is given; an explicit `dtype`
//   never casts integer or bool values;
// - the cell is updated in place, so names tied to it see the new tensor; `tied_params_map`
//   (cell -> already materialised tensor per device) lets tied names reuse one copy;
// - `fp16_statistics` (the overload with Accelerate's argument order) are bitsandbytes' int8 row
//   scales: they go to the "SCB" buffer of the module owning `name` on the same device, in
//   float32. Difference from Accelerate: it hangs them on the weight object (`param.SCB`); here SCB
//   is the int8 layer's own buffer, so a module without one is a ValueError naming it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/module.hpp"

namespace accel::nn {

/// Materialised copies of tied cells, so a second tied name does not copy the data again.
using TiedParamsMap = std::map<std::pair<const Parameter*, Device>, Tensor>;

/// Moves (or replaces with `value`) tensor `name` of `module` to `device`; see the header comment.
inline void set_module_tensor_to_device(Module& module, const std::string& name, Device device,
                                        const std::optional<Tensor>& value = std::nullopt,
                                        std::optional<DType> dtype = std::nullopt,
                                        TiedParamsMap* tied_params_map = nullptr) {
  ParameterPtr& cell = module.tensor_cell(name);
  const Tensor old = cell->data;
  if (tied_params_map) {
    auto it = tied_params_map->find({cell.get(), device});
    if (it != tied_params_map->end()) {
      cell->data = it->second;
      return;
    }
  }
  if (!value && old.is_meta() && !device.is_meta()) {
    throw ValueError(name + " is on the meta device, we need a `value` to put it on " + device.str());
  }
  Tensor v = value ? *value : old;
  if (value && old.defined() && value->shape() != old.shape()) {
    throw ShapeError("Trying to set a tensor of shape " + value->shape().str() + " in \"" + name +
                     "\" (which has shape " + old.shape().str() + "), this looks incorrect.");
  }
  std::optional<DType> target;
  if (dtype) {
    // An explicit dtype converts floating values only: quantized weights and index buffers stay.
    if (is_floating_point(v.dtype())) target = dtype;
  } else if (value && old.defined()) {
    target = old.dtype();  // as load_state_dict: the model's dtype wins
  }
  cell->data = v.to(device, target);
  if (tied_params_map) (*tied_params_map)[{cell.get(), device}] = cell->data;
}

/// The same with Accelerate's `fp16_statistics` (its argument order): the int8 row scales of a
/// bitsandbytes weight, set as the owning module's "SCB" buffer on `device` (see the header).
inline void set_module_tensor_to_device(Module& module, const std::string& name, Device device,
                                        const std::optional<Tensor>& value, std::optional<DType> dtype,
                                        const std::optional<Tensor>& fp16_statistics,
                                        TiedParamsMap* tied_params_map = nullptr) {
  std::string scb;
  if (fp16_statistics) {
    const auto dot = name.rfind('.');
    scb = (dot == std::string::npos ? std::string() : name.substr(0, dot + 1)) + "SCB";
    if (!module.find_buffer(scb)) {
      throw ValueError("set_module_tensor_to_device: fp16_statistics given for \"" + name + "\", but \"" + scb +
                       "\" is no buffer of the model (bitsandbytes int8 layers hold their row scales there)");
    }
  }
  set_module_tensor_to_device(module, name, device, value, dtype, tied_params_map);
  if (fp16_statistics) module.tensor_cell(scb)->data = fp16_statistics->to(device, DType::f32);
}

}  // namespace accel::nn

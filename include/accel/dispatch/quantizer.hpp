// Quantizer: the extension point loading consults, Diffusers' DiffusersQuantizer in C++.
//
//   template <class Q> concept Quantizer      what a quantization backend provides (below)
//   QuantizerDefaults                         the base's default for every hook: inherit, override some
//   AnyQuantizer                              a type-erased holder (cheap to copy; shares the backend)
//
// The hooks, in the order from_pretrained / load_checkpoint_in_model call them:
//   validate_environment()                         the machine has what the backend needs
//   update_torch_dtype(dtype)                      the dtype the model is built in
//   update_device_map(device_map)                  a default placement, when none was given
//   adjust_target_dtype(dtype)                     the dtype the planner sizes quantized weights in
//   adjust_max_memory(max_memory)                  headroom the backend needs while quantizing
//   get_special_dtypes_update(model, dtype)        per-tensor dtypes for the planner (kept weights)
//   preprocess_model(model, checkpoint_files)      swaps layers on the meta model (before the plan)
//   check_if_quantized_param(model, value, name)   the loader asks for every checkpoint tensor
//   check_quantized_param_shape(name, cur, loaded) a packed shape is the backend's to check
//   create_quantized_param(model, value, name, d)  stores it (quantizing it, or taking its bytes) on d
//   update_missing_keys(model, missing, prefix)    keys the backend fills itself are not missing
//   update_unexpected_keys(model, unexpected, prefix)  keys the backend read itself are not unexpected
//   offload_unquantized(model, value, name)        optional: a float weight to offload as it is
//                                                  (load_checkpoint_in_model without offload_8bit_bnb)
//   postprocess_model(model)                       after loading
//   dequantize(model)                              back to float layers, where the backend can
// and the attributes: name, modules_to_not_convert, required_features (the C++ side of
// required_packages: CPU or CUDA features the kernels need), requires_calibration,
// is_serializable, pre_quantized.
//
// Layering: the interface lives here because the loader (this layer) calls it; the backends
// (bitsandbytes, GGUF, Quanto, TorchAO) live in accel/quant/, which builds on this layer.
// Differences from Diffusers: hooks take the model and the checkpoint files explicitly instead of
// **kwargs; check_quantized_param_shape returns bool and throws ShapeError itself on a mismatch
// it can name; preprocess_model receives the checkpoint files (a pre-quantized file decides which
// layers are swapped, as the GGUF backend's state dict does in Diffusers).
#pragma once

#include <concepts>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/module.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/max_memory.hpp"

namespace accel::dispatch {

/// What a backend provides; every hook has a default in QuantizerDefaults.
template <class Q>
concept Quantizer = requires(Q& q, const Q& cq, nn::Module& m, const nn::Module& cm, const Tensor& t,
                             const std::string& s, Device d, std::optional<DType> od, DType dt,
                             std::optional<plan::DeviceMap> dm, plan::MaxMemory mm, std::vector<std::string> keys,
                             std::span<const std::string> files) {
  { cq.name() } -> std::convertible_to<std::string>;
  { cq.modules_to_not_convert() } -> std::convertible_to<std::vector<std::string>>;
  { cq.required_features() } -> std::convertible_to<std::vector<std::string>>;
  { cq.requires_calibration() } -> std::convertible_to<bool>;
  { cq.is_serializable() } -> std::convertible_to<bool>;
  { cq.pre_quantized() } -> std::convertible_to<bool>;
  q.validate_environment();
  { q.update_torch_dtype(od) } -> std::convertible_to<std::optional<DType>>;
  { q.update_device_map(dm) } -> std::convertible_to<std::optional<plan::DeviceMap>>;
  { q.adjust_target_dtype(dt) } -> std::convertible_to<DType>;
  { q.adjust_max_memory(mm) } -> std::convertible_to<plan::MaxMemory>;
  { q.get_special_dtypes_update(cm, dt) } -> std::convertible_to<std::map<std::string, DType>>;
  q.preprocess_model(m, files);
  { q.check_if_quantized_param(cm, t, s) } -> std::convertible_to<bool>;
  { q.check_quantized_param_shape(s, t, t) } -> std::convertible_to<bool>;
  q.create_quantized_param(m, t, s, d);
  { q.update_missing_keys(cm, keys, s) } -> std::convertible_to<std::vector<std::string>>;
  { q.update_unexpected_keys(cm, keys, s) } -> std::convertible_to<std::vector<std::string>>;
  q.postprocess_model(m);
  q.dequantize(m);
};

/// The defaults of Diffusers' base class; a backend inherits them and overrides what it changes.
struct QuantizerDefaults {
  std::vector<std::string> modules_to_not_convert() const { return {}; }
  std::vector<std::string> required_features() const { return {}; }
  bool requires_calibration() const { return false; }
  bool is_serializable() const { return true; }
  bool pre_quantized() const { return false; }
  void validate_environment() {}
  std::optional<DType> update_torch_dtype(std::optional<DType> dtype) { return dtype; }
  std::optional<plan::DeviceMap> update_device_map(std::optional<plan::DeviceMap> device_map) { return device_map; }
  DType adjust_target_dtype(DType dtype) { return dtype; }
  plan::MaxMemory adjust_max_memory(plan::MaxMemory max_memory) { return max_memory; }
  std::map<std::string, DType> get_special_dtypes_update(const nn::Module&, DType) { return {}; }
  void preprocess_model(nn::Module&, std::span<const std::string>) {}
  bool check_if_quantized_param(const nn::Module&, const Tensor&, const std::string&) { return false; }
  bool check_quantized_param_shape(const std::string&, const Tensor&, const Tensor&) { return true; }
  void create_quantized_param(nn::Module&, const Tensor&, const std::string& name, Device) {
    throw ValueError("create_quantized_param: this quantizer quantizes no parameter ('" + name + "')");
  }
  std::vector<std::string> update_missing_keys(const nn::Module&, std::vector<std::string> missing, const std::string&) {
    return missing;
  }
  std::vector<std::string> update_unexpected_keys(const nn::Module&, std::vector<std::string> unexpected,
                                                  const std::string&) {
    return unexpected;
  }
  void postprocess_model(nn::Module&) {}
  void dequantize(nn::Module&) { throw ValueError("this quantization backend cannot dequantize a model"); }
};

/// Any Quantizer, held by value behind a shared pointer (copies share the backend's state).
class AnyQuantizer {
 public:
  template <Quantizer Q>
    requires(!std::same_as<std::remove_cvref_t<Q>, AnyQuantizer>)
  AnyQuantizer(Q q) : self_(std::make_shared<Model<Q>>(std::move(q))) {}

  std::string name() const { return self_->name(); }
  std::vector<std::string> modules_to_not_convert() const { return self_->modules_to_not_convert(); }
  std::vector<std::string> required_features() const { return self_->required_features(); }
  bool requires_calibration() const { return self_->requires_calibration(); }
  bool is_serializable() const { return self_->is_serializable(); }
  bool pre_quantized() const { return self_->pre_quantized(); }
  void validate_environment() const { self_->validate_environment(); }
  std::optional<DType> update_torch_dtype(std::optional<DType> d) const { return self_->update_torch_dtype(d); }
  std::optional<plan::DeviceMap> update_device_map(std::optional<plan::DeviceMap> m) const {
    return self_->update_device_map(std::move(m));
  }
  DType adjust_target_dtype(DType d) const { return self_->adjust_target_dtype(d); }
  plan::MaxMemory adjust_max_memory(plan::MaxMemory m) const { return self_->adjust_max_memory(std::move(m)); }
  std::map<std::string, DType> get_special_dtypes_update(const nn::Module& m, DType d) const {
    return self_->get_special_dtypes_update(m, d);
  }
  void preprocess_model(nn::Module& m, std::span<const std::string> files) const { self_->preprocess_model(m, files); }
  bool check_if_quantized_param(const nn::Module& m, const Tensor& v, const std::string& n) const {
    return self_->check_if_quantized_param(m, v, n);
  }
  bool check_quantized_param_shape(const std::string& n, const Tensor& cur, const Tensor& loaded) const {
    return self_->check_quantized_param_shape(n, cur, loaded);
  }
  void create_quantized_param(nn::Module& m, const Tensor& v, const std::string& n, Device d) const {
    self_->create_quantized_param(m, v, n, d);
  }
  std::vector<std::string> update_missing_keys(const nn::Module& m, std::vector<std::string> k, const std::string& p) const {
    return self_->update_missing_keys(m, std::move(k), p);
  }
  std::vector<std::string> update_unexpected_keys(const nn::Module& m, std::vector<std::string> k, const std::string& p) const {
    return self_->update_unexpected_keys(m, std::move(k), p);
  }
  /// The float tensor to offload instead of quantizing `value` (a tensor the backend claims) for
  /// a layer placed on disk, the layer made ready to take it back per call; nullopt: quantize as
  /// usual. Optional in a backend (bitsandbytes' int8 layers have it, for Accelerate's
  /// offload_8bit_bnb=False); without it, nullopt.
  std::optional<Tensor> offload_unquantized(nn::Module& m, const Tensor& v, const std::string& n) const {
    return self_->offload_unquantized(m, v, n);
  }
  void postprocess_model(nn::Module& m) const { self_->postprocess_model(m); }
  void dequantize(nn::Module& m) const { self_->dequantize(m); }

  /// The backend, when it is a Q (nullptr otherwise).
  template <Quantizer Q>
  Q* target() const {
    auto* m = dynamic_cast<Model<Q>*>(self_.get());
    return m ? &m->q : nullptr;
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual std::string name() const = 0;
    virtual std::vector<std::string> modules_to_not_convert() const = 0;
    virtual std::vector<std::string> required_features() const = 0;
    virtual bool requires_calibration() const = 0;
    virtual bool is_serializable() const = 0;
    virtual bool pre_quantized() const = 0;
    virtual void validate_environment() = 0;
    virtual std::optional<DType> update_torch_dtype(std::optional<DType>) = 0;
    virtual std::optional<plan::DeviceMap> update_device_map(std::optional<plan::DeviceMap>) = 0;
    virtual DType adjust_target_dtype(DType) = 0;
    virtual plan::MaxMemory adjust_max_memory(plan::MaxMemory) = 0;
    virtual std::map<std::string, DType> get_special_dtypes_update(const nn::Module&, DType) = 0;
    virtual void preprocess_model(nn::Module&, std::span<const std::string>) = 0;
    virtual bool check_if_quantized_param(const nn::Module&, const Tensor&, const std::string&) = 0;
    virtual bool check_quantized_param_shape(const std::string&, const Tensor&, const Tensor&) = 0;
    virtual void create_quantized_param(nn::Module&, const Tensor&, const std::string&, Device) = 0;
    virtual std::vector<std::string> update_missing_keys(const nn::Module&, std::vector<std::string>, const std::string&) = 0;
    virtual std::vector<std::string> update_unexpected_keys(const nn::Module&, std::vector<std::string>, const std::string&) = 0;
    virtual std::optional<Tensor> offload_unquantized(nn::Module&, const Tensor&, const std::string&) = 0;
    virtual void postprocess_model(nn::Module&) = 0;
    virtual void dequantize(nn::Module&) = 0;
  };
  template <class Q>
  struct Model final : Concept {
    explicit Model(Q x) : q(std::move(x)) {}
    std::string name() const override { return q.name(); }
    std::vector<std::string> modules_to_not_convert() const override { return q.modules_to_not_convert(); }
    std::vector<std::string> required_features() const override { return q.required_features(); }
    bool requires_calibration() const override { return q.requires_calibration(); }
    bool is_serializable() const override { return q.is_serializable(); }
    bool pre_quantized() const override { return q.pre_quantized(); }
    void validate_environment() override { q.validate_environment(); }
    std::optional<DType> update_torch_dtype(std::optional<DType> d) override { return q.update_torch_dtype(d); }
    std::optional<plan::DeviceMap> update_device_map(std::optional<plan::DeviceMap> m) override {
      return q.update_device_map(std::move(m));
    }
    DType adjust_target_dtype(DType d) override { return q.adjust_target_dtype(d); }
    plan::MaxMemory adjust_max_memory(plan::MaxMemory m) override { return q.adjust_max_memory(std::move(m)); }
    std::map<std::string, DType> get_special_dtypes_update(const nn::Module& m, DType d) override {
      return q.get_special_dtypes_update(m, d);
    }
    void preprocess_model(nn::Module& m, std::span<const std::string> f) override { q.preprocess_model(m, f); }
    bool check_if_quantized_param(const nn::Module& m, const Tensor& v, const std::string& n) override {
      return q.check_if_quantized_param(m, v, n);
    }
    bool check_quantized_param_shape(const std::string& n, const Tensor& c, const Tensor& l) override {
      return q.check_quantized_param_shape(n, c, l);
    }
    void create_quantized_param(nn::Module& m, const Tensor& v, const std::string& n, Device d) override {
      q.create_quantized_param(m, v, n, d);
    }
    std::vector<std::string> update_missing_keys(const nn::Module& m, std::vector<std::string> k,
                                                 const std::string& p) override {
      return q.update_missing_keys(m, std::move(k), p);
    }
    std::vector<std::string> update_unexpected_keys(const nn::Module& m, std::vector<std::string> k,
                                                    const std::string& p) override {
      return q.update_unexpected_keys(m, std::move(k), p);
    }
    std::optional<Tensor> offload_unquantized(nn::Module& m, const Tensor& v, const std::string& n) override {
      if constexpr (requires { { q.offload_unquantized(m, v, n) } -> std::convertible_to<std::optional<Tensor>>; }) {
        return q.offload_unquantized(m, v, n);
      } else {
        return std::nullopt;
      }
    }
    void postprocess_model(nn::Module& m) override { q.postprocess_model(m); }
    void dequantize(nn::Module& m) override { q.dequantize(m); }
    Q q;
  };
  std::shared_ptr<Concept> self_;
};

}  // namespace accel::dispatch

namespace accel {
using dispatch::AnyQuantizer, dispatch::QuantizerDefaults;
}  // namespace accel

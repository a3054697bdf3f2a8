// AlignDevicesHook<Offload>: Accelerate's hook that runs a module on its execution device,
// bringing offloaded weights there for each call and parking them on meta after it.
//
//   AlignDevicesHook<> hook({.execution_device = Device::cpu(), .offload = true, .weights_map = map.prefixed("lm_head.")});
//   add_hook_to_module(lm_head, std::make_shared<AlignDevicesHook<>>(hook));
//   has_offloaded_params(module)   the module's hook offloads
//
// Behaviour (Accelerate's, option by option):
// - execution_device: where forward runs. pre_forward moves every argument tensor there
//   (send_to_device), leaving map entries named in skip_keys alone; Module::execution_device()
//   reports it, so the KV cache and positions are made there.
// - offload = false: init_hook moves the module's tensors (its own, or its whole subtree with
//   place_submodules) to the execution device once.
// - offload = true: init_hook parks the tensors on meta (buffers too with offload_buffers; others
//   go to the execution device); each call materialises them from weights_map on the execution
//   device (cast to the module's dtype), and post_forward parks them again. Without a weights map
//   the module's own tensors, on the CPU, are the offloaded copies.
// - io_same_device: outputs go back to the device of the first argument tensor.
// - tied_params_map: shared between hooks; a weight tied across modules and already materialised
//   on the device is reused, and each hook removes the copies it made after its call.
// - offload = true frees the module's copies: a cell no slot outside the hook shares is emptied
//   (meta) once the weights map serves it, and detach_hook fills it again from the map, on the
//   device it was on.
// - detach_hook puts the module's own cells back, with what they held before the hook.
//
// Tied weights: a module's slots share a cell with their tied partners (nn/module.hpp). Parking
// writes a cell, so the hook first re-points the module's own slots to cells of its own: parking
// lm_head leaves embed_tokens' weight where it is. Names of the hooked subtree that share a cell
// keep sharing one (the hook's). A move to another device (offload = false) re-points the slot
// the same way, so a tie split across devices keeps one copy on each, as Accelerate's re-bound
// parameters do.
//
// The Offload policy (policy/offload.hpp) is how weights travel: sync_offload copies them in
// before the forward, as Accelerate does; prefetch<N> reads the next N blocks ahead. Weights the
// weights map locates on disk are read through the stream the attach helpers give the hooks
// (hooks/weight_stream.hpp: direct reads into a reused buffer, so the page cache does not keep
// them); a hook without a stream reads through the weights map. On a GPU under prefetch<N>, the
// weights held on disk or in CPU memory reach the device through the stream's device stage
// (hooks/device_stage.hpp: a copy stream and events, the next N blocks copied while one
// computes); the weights then are views of its ring, cast per call when the module's dtype
// differs.
//
// Differences from Accelerate:
// - A weight whose shape in weights_map differs from the module's is a ShapeError naming the
//   module, the tensor and both shapes (Accelerate loads it silently).
// - With no execution device the arguments stay where they are (Accelerate would call .to(None)).
// - Moving a module whose weights the hook parks (Module::to) is a DeviceError; Accelerate warns
//   and moves the meta tensors.
// - The 8-bit SCB statistics of bitsandbytes are not looked up (quantized layers bring their own
//   state).
#pragma once

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/hooks/model_hook.hpp"
#include "accel/hooks/device_stage.hpp"
#include "accel/hooks/weight_stream.hpp"
#include "accel/hooks/weights_map.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/nested/traits.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/set_tensor.hpp"
#include "accel/policy/offload.hpp"

namespace accel::hooks {

/// AlignDevicesHook's keyword arguments, with Accelerate's names and defaults.
struct AlignDevicesOptions {
  /// Where forward runs; nullopt: where the arguments already are.
  std::optional<Device> execution_device{};
  /// Park the module's weights on meta between calls, loading them from weights_map for each call.
  bool offload = false;
  /// Send outputs back to the device of the first argument tensor.
  bool io_same_device = false;
  /// Where offloaded weights are read (names relative to the module); empty: the module's own
  /// tensors, moved to the CPU, are the offloaded copies.
  WeightsMap weights_map{};
  /// Offload the buffers too (otherwise they live on the execution device).
  bool offload_buffers = false;
  /// Handle the tensors of the whole subtree, not only the module's direct ones.
  bool place_submodules = false;
  /// Map keys of the arguments (and outputs) not to move.
  std::vector<std::string> skip_keys{};
  /// Copies of tied weights per device, shared between the hooks of one model.
  std::shared_ptr<nn::TiedParamsMap> tied_params_map{};
  /// How the hooks of one model read the weights the weights map locates on disk (direct reads,
  /// read ahead under prefetch<N>); null: through the weights map (mapped files).
  std::shared_ptr<WeightStream> stream{};
};

/// What every AlignDevicesHook<Offload> has, whatever its policy: how has_offloaded_params and
/// align_module_device see it. `policy` names the derived hook's offload tag, `depth` its
/// prefetch_depth and `offloads` whether it moves weights at all.
class AlignDevicesHookBase : public ModelHook {
 public:
  AlignDevicesHookBase(AlignDevicesOptions o, std::string_view policy, bool offloads, std::size_t depth)
      : o_(std::move(o)), skip_(o_.skip_keys), depth_(depth) {
    if (o_.execution_device && o_.execution_device->is_meta()) o_.tied_params_map.reset();  // meta has no copies
    if (o_.offload && !offloads) {
      throw ValueError("AlignDevicesHook<" + std::string(policy) + ">: offload = true, and the policy moves no weights "
                       "(use sync_offload or prefetch<N>)");
    }
    if (o_.stream && o_.stream->depth() != depth) {
      throw ValueError("AlignDevicesHook<" + std::string(policy) + ">: its stream reads " + std::to_string(o_.stream->depth()) +
                       " blocks ahead and the policy " + std::to_string(depth) +
                       " (the hooks of one model share a stream of their policy's depth)");
    }
  }
  /// The read-ahead depth of the hook's offload policy (0: each call reads its weights).
  std::size_t prefetch_depth() const noexcept { return depth_; }
  const AlignDevicesOptions& options() const noexcept { return o_; }
  bool offload() const noexcept { return o_.offload; }
  std::optional<Device> execution_device() const override { return o_.execution_device; }
  /// Changes where the next calls run (Accelerate assigns `hook.execution_device`).
  void set_execution_device(std::optional<Device> d) { o_.execution_device = d; }

  void init_hook(nn::Module& module) override {
    if (!o_.offload) {
      if (o_.execution_device) {
        for (const auto& t : module_tensors(module, true, o_.place_submodules, false)) place(module, t, *o_.execution_device);
      }
      return;
    }
    io::StateDict own_copies;  // the default weights map: the module's tensors on the CPU
    std::map<const nn::Parameter*, nn::ParameterPtr> parked;  // original cell -> the hook's cell
    for (const auto& t : module_tensors(module, o_.offload_buffers, o_.place_submodules, true)) {
      nn::ParameterPtr& slot = *t.slot;
      Managed m{t.name, t.slot, slot, nullptr, slot->data.shape(), slot->data.dtype()};
      if (!o_.weights_map && !slot->data.is_meta()) own_copies.insert_or_assign(t.name, slot->data.to(Device::cpu()));
      auto& cell = parked[slot.get()];
      if (!cell) cell = std::make_shared<nn::Parameter>(nn::Parameter{meta_like(slot->data), slot->requires_grad});
      m.own = cell;
      slot = cell;
      managed_.push_back(std::move(m));
    }
    if (!o_.weights_map) weights_ = WeightsMap(std::move(own_copies));
    else weights_ = o_.weights_map;
    // The weights map serves these weights from now on: a cell only this hook's slots held gives
    // its bytes up (Accelerate replaces the parameters by meta tensors), so offloading frees the
    // memory they took; detach_hook reads them back from the map. A cell a slot outside the hook
    // shares (a tie to a resident module) keeps them.
    std::map<const nn::Parameter*, long> held;
    for (const auto& m : managed_) ++held[m.original.get()];
    for (auto& m : managed_) {
      const Tensor& data = m.original->data;
      if (data.defined() && !data.is_meta() && m.original.use_count() == held[m.original.get()]) {
        m.restore_device = data.device();
        m.original->data = meta_like(data);
      }
    }
    if (o_.stream) join_stream(module);
    if (o_.execution_device) {
      // Buffers that are not offloaded live on the execution device (only non-persistent ones
      // when buffers are offloaded: those are never in a weights map).
      for (const auto& t : module_tensors(module, true, o_.place_submodules, false)) {
        if (!t.is_buffer || (o_.offload_buffers && t.persistent)) continue;
        place(module, t, *o_.execution_device);
      }
    }
  }

  void pre_forward(nn::Module& module, const TensorRefs& args) override {
    if (o_.io_same_device) {
      input_device_.reset();
      args.for_each([&](Tensor& t) {
        if (!input_device_ && t.defined()) input_device_ = t.device();
      });
    }
    if (o_.offload) materialize(module);
    if (o_.execution_device) {
      const Device d = *o_.execution_device;
      args.for_each([&](Tensor& t) {
        if (t.defined() && t.device() != d) t = t.to(d);
      }, &skip_);
    }
  }

  void post_forward(nn::Module&, const TensorRefs& outputs) override {
    if (o_.offload) park();
    if (o_.io_same_device && input_device_) {
      const Device d = *input_device_;
      outputs.for_each([&](Tensor& t) {
        if (t.defined() && t.device() != d) t = t.to(d);
      }, &skip_);
    }
  }

  void detach_hook(nn::Module&) override {
    park();
    // The stream forgets this hook's units: its read-ahead must not go on reading them (a hook
    // attached again registers new ones).
    if (stage_unit_) stage_->retire(*stage_unit_);
    if (host_unit_) o_.stream->retire(*host_unit_);
    unit_.reset();
    host_unit_.reset();
    stage_unit_.reset();
    stage_ = nullptr;
    for (auto& m : managed_) {
      if (m.restore_device && m.original->data.is_meta()) {  // a copy: the map's may be a mapped file
        m.original->data = weights_.at(m.name).to(*m.restore_device, m.dtype, /*non_blocking=*/false, /*copy=*/true);
      }
      *m.slot = m.original;
    }
    managed_.clear();
  }

  /// Moving a module whose weights this hook parks is refused; moving a dispatched model (its root
  /// hook aligns the inputs) warns once, as Accelerate's wrapped `model.to` does.
  void before_module_to(nn::Module& module, Device device) override {
    if (o_.offload) {
      throw DeviceError(module.class_name() + ": its weights are offloaded (on meta between calls); remove the hooks "
                        "(remove_hook_from_submodules) before moving the model to " + device.str());
    }
    if (o_.io_same_device && !warned_) {  // the root's hook speaks for the dispatched model
      std::clog << "accel: you shouldn't move a model that is dispatched using accelerate hooks (" << module.class_name()
                << " to " << device.str() << ")\n";
      warned_ = true;
    }
  }

  /// Brings the offloaded weights to the execution device (what pre_forward does before the
  /// arguments move); align_module_device uses it on its own.
  void materialize(nn::Module& module) {
    if (acquired_ || stage_acquired_) park();  // a call that threw before post_forward left its unit in use
    const Device d = o_.execution_device.value_or(Device::cpu());
    added_.clear();
    std::vector<Tensor> streamed, staged;
    if (unit_) {
      streamed = o_.stream->acquire(*unit_);
      acquired_ = true;
    }
    if (stage_unit_) {
      staged = stage_->acquire(*stage_unit_);
      stage_acquired_ = true;
    }
    for (auto& m : managed_) {
      if (!m.own->data.is_meta()) continue;  // a tied name of this hook already brought it
      if (o_.tied_params_map) {
        auto it = o_.tied_params_map->find({m.original.get(), d});
        if (it != o_.tied_params_map->end()) {
          m.own->data = it->second;
          continue;
        }
      }
      Tensor value = m.staged ? staged[m.stage_index] : m.streamed ? streamed[m.stream_index] : weights_.at(m.name);
      if (value.shape() != m.shape) {
        throw ShapeError(module.class_name() + ": offloaded weight '" + weights_.prefix() + m.name + "' has shape " +
                         value.shape().str() + " in the weights map but " + m.shape.str() + " in the module");
      }
      m.own->data = value.to(d, m.dtype);
      if (o_.tied_params_map) {
        o_.tied_params_map->emplace(std::pair{m.original.get(), d}, m.own->data);
        added_.emplace_back(m.original.get(), d);
      }
    }
  }
  /// Puts the offloaded weights back on meta and drops the tied copies this hook made.
  void park() {
    for (auto& m : managed_) {
      if (!m.own->data.is_meta()) m.own->data = meta_like(m.own->data);
    }
    if (o_.tied_params_map) {
      for (const auto& key : added_) o_.tied_params_map->erase(key);
    }
    added_.clear();
    // Every view of the unit's buffer is gone: the ring may reuse it.
    if (acquired_) o_.stream->release(*unit_);
    if (stage_acquired_) stage_->release(*stage_unit_);
    acquired_ = stage_acquired_ = false;
  }

 protected:
  struct Managed {
    std::string name;              ///< relative to the hooked module
    nn::ParameterPtr* slot;        ///< the module's slot
    nn::ParameterPtr original;     ///< the cell the slot held before the hook
    nn::ParameterPtr own;          ///< the hook's cell, meta between calls
    Shape shape;
    DType dtype;
    bool streamed = false;         ///< read through the stream, as its unit's weight stream_index
    std::size_t stream_index = 0;
    bool staged = false;           ///< copied in by the device stage, as its unit's piece stage_index
    std::size_t stage_index = 0;
    std::optional<Device> restore_device{};  ///< where detach_hook puts the bytes the original cell gave up
  };
  struct TensorSlot {
    std::string name;
    nn::ParameterPtr* slot;
    bool is_buffer, persistent;
  };

  // Registers the weights the map locates on disk as one unit of the stream; on a GPU under
  // prefetch<N>, every offloaded weight held on disk or in CPU memory as one unit of the stream's
  // device stage too, which then owns the disk unit.
  void join_stream(nn::Module& module) {
    std::vector<io::WeightLocation> locations;
    for (auto& m : managed_) {
      if (is_shared_cell(m)) continue;  // tied inside the subtree: one read serves both names
      auto loc = weights_.locate(m.name);
      if (!loc) continue;
      m.streamed = true;
      m.stream_index = locations.size();
      locations.push_back(std::move(*loc));
    }
    const std::string label = weights_.prefix().empty() ? module.class_name() : weights_.prefix();
    std::optional<std::size_t> host_unit;
    std::vector<DeviceStage::Piece> pieces;
    const bool gpu = o_.execution_device && o_.execution_device->is_cuda() && depth_ > 0;
    for (std::size_t i = 0; gpu && i < managed_.size(); ++i) {
      Managed& m = managed_[i];
      if (is_shared_cell(m)) continue;
      DeviceStage::Piece p;
      if (m.streamed) {
        p = {locations[m.stream_index].dtype, locations[m.stream_index].shape, m.stream_index, {}};
      } else if (weights_.contains(m.name)) {
        Tensor v = weights_.at(m.name);
        if (!v.defined() || v.device() != Device::cpu()) continue;  // elsewhere already: moved per call
        p = {v.dtype(), v.shape(), std::nullopt, std::move(v)};
      } else {
        continue;  // not in the map: the call reports it
      }
      m.staged = true;
      m.stage_index = pieces.size();
      pieces.push_back(std::move(p));
    }
    if (!locations.empty()) host_unit = host_unit_ = o_.stream->add_unit(label, std::move(locations));
    if (!pieces.empty()) {
      stage_ = &o_.stream->device_stage(*o_.execution_device);
      stage_unit_ = stage_->add_unit(label, host_unit, std::move(pieces));
    } else {
      unit_ = host_unit;
    }
  }
  // A second name of a cell this hook already streams (tied inside the hooked subtree).
  bool is_shared_cell(const Managed& m) const {
    for (const auto& other : managed_) {
      if (&other == &m) return false;
      if (other.own == m.own) return true;
    }
    return false;
  }

  static Tensor meta_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), Device::meta()); }

  /// Accelerate's named_module_tensors: parameters (each cell once), then buffers if asked,
  /// leaving out non-persistent buffers when asked; names relative to `module`.
  static std::vector<TensorSlot> module_tensors(nn::Module& module, bool include_buffers, bool recurse,
                                                bool remove_non_persistent) {
    std::vector<TensorSlot> out;
    const auto modules = recurse ? module.named_modules() : nn::Module::Named<nn::Module*>{{"", &module}};
    auto full = [](const std::string& prefix, const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
    for (const auto& [prefix, m] : modules) {
      for (const auto& p : m->parameter_slots()) {
        out.push_back({full(prefix, p.name), m->find_tensor_cell(p.name), false, true});
      }
    }
    if (include_buffers) {
      for (const auto& [prefix, m] : modules) {
        for (const auto& b : m->buffer_slots()) {
          if (remove_non_persistent && !b.persistent) continue;
          out.push_back({full(prefix, b.name), m->find_tensor_cell(b.name), true, b.persistent});
        }
      }
    }
    return out;
  }

  /// Moves one tensor to `d`, on a cell of the module's own when its cell lives elsewhere (a tie
  /// split across devices keeps a copy on each); copies already on `d` for a tied cell are reused.
  void place(nn::Module& module, const TensorSlot& t, Device d) {
    nn::ParameterPtr& slot = *t.slot;
    if (!slot->data.defined() || slot->data.device() == d) return;
    if (slot->data.is_meta()) {
      throw ValueError(module.class_name() + ": '" + t.name + "' is on the meta device and the hook has no value to put it on " +
                       d.str() + " (offload it, or load the weights first)");
    }
    Tensor moved;
    if (o_.tied_params_map) {
      auto it = o_.tied_params_map->find({slot.get(), d});
      if (it != o_.tied_params_map->end()) moved = it->second;
    }
    if (!moved.defined()) {
      moved = slot->data.to(d);
      if (o_.tied_params_map) o_.tied_params_map->emplace(std::pair{slot.get(), d}, moved);
    }
    slot = std::make_shared<nn::Parameter>(nn::Parameter{moved, slot->requires_grad});
  }

  AlignDevicesOptions o_;
  nested::skip_keys skip_;
  WeightsMap weights_;
  std::vector<Managed> managed_;
  std::vector<std::pair<const nn::Parameter*, Device>> added_;
  std::optional<Device> input_device_;
  bool warned_ = false;
  std::size_t depth_;  ///< the policy's prefetch_depth
  std::optional<std::size_t> unit_;  ///< this hook's unit of the stream when the hook reads it itself
  std::optional<std::size_t> host_unit_;  ///< this hook's unit of the stream, read by the hook or the device stage
  bool acquired_ = false;
  DeviceStage* stage_ = nullptr;     ///< the stream's stage for the execution GPU (owned by the stream)
  std::optional<std::size_t> stage_unit_;
  bool stage_acquired_ = false;
};

/// Accelerate's AlignDevicesHook, its offloaded weights travelling as `Offload` says (see the
/// header comment).
template <policy::Offload Offload = policy::sync_offload>
class AlignDevicesHook : public AlignDevicesHookBase {
 public:
  using offload_policy = Offload;
  /// ValueError when `o` offloads under no_offload, or shares a stream of another depth.
  explicit AlignDevicesHook(AlignDevicesOptions o = {})
      : AlignDevicesHookBase(std::move(o), policy::offload_name<Offload>(), Offload::offloads, Offload::prefetch_depth) {}
};

/// True when `module`'s hook (or a hook of its chain) is an AlignDevicesHook that offloads.
inline bool has_offloaded_params(const nn::Module& module) {
  if (const auto* seq = dynamic_cast<const SequentialHook<HookList>*>(module.hook().get())) {
    return std::any_of(seq->hooks().begin(), seq->hooks().end(), [](const std::shared_ptr<nn::ModuleHook>& h) {
      const auto* a = dynamic_cast<const AlignDevicesHookBase*>(h.get());
      return a && a->offload();
    });
  }
  const auto* h = find_hook<const AlignDevicesHookBase>(module);
  return h && h->offload();
}

}  // namespace accel::hooks

namespace accel {
using hooks::AlignDevicesHook, hooks::AlignDevicesOptions, hooks::has_offloaded_params;
}  // namespace accel

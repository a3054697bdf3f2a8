// DynamicLossScaler: torch's GradScaler over nested gradients (driven by GradScalerKwargs).
//
//   Tensor l = scaler.scale(loss);          loss x scale (a new tensor, same dtype)
//   bool inf = scaler.unscale_(grads);      grads /= scale in place; true if any inf/NaN
//   bool stepped = scaler.step(grads, f);   unscale_ if not done yet, then f() unless inf/NaN
//   scaler.update();                        back off on overflow; grow after growth_interval clean steps
//   scaler.unscale_(grads, state)           unscale_, then agree with every process on inf/NaN
//   scaler.step(grads, state, f)            step, agreeing first: every process steps or none does
//
// Gradients are any nested structure of floating tensors (recursively_apply's containers), on any
// device: non-host tensors are processed through a host copy.
//
// Across processes, every process must skip or take a step together, or their weights and scales
// drift apart. The overloads taking a process state reduce found_inf with one all-reduce, through
// `any_process(state, flag)` found by argument-dependent lookup: dist/grad_reducer.hpp defines it
// for dist::PartialState (a logical or over MPI), so this header needs no dist header and a user's
// own state type may bring its own. Gradients already averaged by dist::GradReducer carry an
// inf / NaN of any process to every process (IEEE sums keep them), but gradients unscaled before
// the reduce, a process whose reduced values differ in the last bit from another's, or gradients
// that are not reduced at all (sharded) do not: the agreement costs one one-byte all-reduce per step.
// torch's GradScaler does not agree (its ShardedGradScaler does, with a max all-reduce).
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>

#include "accel/core/convert.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nested/for_each_leaf.hpp"
#include "accel/utils/dataclasses.hpp"

namespace accel::utils {

/// A process state the scaler can agree through: `any_process(state, flag)` is found for it by
/// argument-dependent lookup (dist::PartialState once dist/grad_reducer.hpp is included).
template <class S>
concept FoundInfAgreement = requires(const S& s, bool flag) {
  { any_process(s, flag) } -> std::convertible_to<bool>;
};

namespace detail {

/// t *= factor in place; returns true if any element of t was inf or NaN before scaling.
inline bool scale_in_place(const Tensor& t, double factor, const char* op) {
  if (!t.defined() || t.numel() == 0) return false;
  if (t.is_meta()) throw DeviceError(std::string(op) + ": a meta tensor of shape " + t.shape().str() + " has no values");
  if (!t.is_floating_point()) {
    throw DTypeError(std::string(op) + ": expected floating-point gradients, got a " +
                     std::string(dtype_name(t.dtype())) + " tensor of shape " + t.shape().str());
  }
  if (!t.is_cpu() || !t.is_contiguous()) {
    Tensor h = t.to(Device::cpu(), std::nullopt, false, /*copy=*/true);
    const bool bad = scale_in_place(h, factor, op);
    Tensor dst = t;
    dst.copy_(h);
    return bad;
  }
  bool bad = false;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool> && !std::is_integral_v<T>) {
      T* p = static_cast<T*>(t.data_ptr());
      const auto n = static_cast<std::size_t>(t.numel());
      for (std::size_t i = 0; i < n; ++i) {
        const double v = convert_value<double>(p[i]);
        if (!std::isfinite(v)) bad = true;
        p[i] = convert_value<T>(v * factor);
      }
    }
  });
  return bad;
}

}  // namespace detail

/// A snapshot of a scaler (torch's GradScaler.state_dict()).
struct LossScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  int growth_tracker = 0;
};

/// Dynamic loss scaling for fp16 training; disabled, every call is a pass-through.
class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const GradScalerKwargs& kwargs = {}) : k_(kwargs), scale_(kwargs.init_scale) {
    kwargs.validate();
  }

  bool is_enabled() const noexcept { return k_.enabled; }
  /// The current scale (1 when disabled).
  double get_scale() const noexcept { return k_.enabled ? scale_ : 1.0; }
  /// Clean steps since the last growth or back-off.
  int growth_tracker() const noexcept { return tracker_; }

  /// loss x scale, as a new tensor of the loss's dtype.
  Tensor scale(const Tensor& loss) const {
    if (!k_.enabled) return loss;
    Tensor out = loss.clone();
    (void)detail::scale_in_place(out, scale_, "DynamicLossScaler::scale");
    return out;
  }

  /// Divides every gradient tensor by the scale, in place; returns (and remembers for step and
  /// update) whether any was inf or NaN. Calling it twice before update() is a ValueError.
  template <class Grads>
  bool unscale_(Grads& grads) {
    if (!k_.enabled) return false;
    if (unscaled_) throw ValueError("DynamicLossScaler::unscale_ was already called since the last update()");
    const double inv = 1.0 / scale_;
    bool bad = false;
    nested::for_each_leaf([&](const Tensor& g) { bad |= detail::scale_in_place(g, inv, "unscale_"); }, grads);
    unscaled_ = true;
    found_inf_ = bad;
    return bad;
  }

  /// unscale_(grads), then true on every process when any process found an inf or NaN: one
  /// all-reduce of the flag (see the header). Every process must call it.
  template <class Grads, class State>
  bool unscale_(Grads& grads, const State& state) {
    static_assert(FoundInfAgreement<State>,
                  "DynamicLossScaler::unscale_(grads, state): no any_process(state, bool) for this state; include "
                  "accel/dist/grad_reducer.hpp for dist::PartialState");
    if (!k_.enabled) return false;
    unscale_(grads);
    return agree(state);
  }

  /// Unscales (if not done yet) and calls optimizer_step() unless a gradient overflowed.
  /// Returns whether the step ran.
  template <class Grads, class F>
  bool step(Grads& grads, F&& optimizer_step) {
    if (k_.enabled && !unscaled_) unscale_(grads);
    if (k_.enabled && found_inf_) return false;
    optimizer_step();
    return true;
  }

  /// step(grads, f) with found_inf agreed across processes first (unscaling if not done yet, and
  /// agreeing once if unscale_(grads) ran without the state): every process steps, or none does.
  template <class Grads, class State, class F>
  bool step(Grads& grads, const State& state, F&& optimizer_step) {
    static_assert(FoundInfAgreement<State>,
                  "DynamicLossScaler::step(grads, state, f): no any_process(state, bool) for this state; include "
                  "accel/dist/grad_reducer.hpp for dist::PartialState");
    if (k_.enabled && !unscaled_) {
      unscale_(grads, state);
    } else if (k_.enabled && !agreed_) {
      agree(state);
    }
    if (k_.enabled && found_inf_) return false;
    optimizer_step();
    return true;
  }

  /// Ends an iteration: overflow -> scale x backoff_factor; growth_interval clean steps in a row
  /// -> scale x growth_factor. `new_scale` overrides both.
  void update(std::optional<double> new_scale = std::nullopt) {
    if (!k_.enabled) return;
    if (new_scale) {
      if (!(*new_scale > 0)) throw ValueError("DynamicLossScaler::update: new_scale must be > 0");
      scale_ = *new_scale;
      tracker_ = 0;
    } else if (found_inf_) {
      scale_ *= k_.backoff_factor;
      tracker_ = 0;
    } else if (++tracker_ == k_.growth_interval) {
      scale_ *= k_.growth_factor;
      tracker_ = 0;
    }
    unscaled_ = false;
    agreed_ = false;
    found_inf_ = false;
  }

  LossScalerState state_dict() const {
    return {scale_, k_.growth_factor, k_.backoff_factor, k_.growth_interval, tracker_};
  }
  void load_state_dict(const LossScalerState& s) {
    GradScalerKwargs k = k_;
    k.init_scale = s.scale;
    k.growth_factor = s.growth_factor;
    k.backoff_factor = s.backoff_factor;
    k.growth_interval = s.growth_interval;
    k.validate();
    if (s.growth_tracker < 0 || s.growth_tracker >= s.growth_interval) {
      throw ValueError("DynamicLossScaler::load_state_dict: growth_tracker " + std::to_string(s.growth_tracker) +
                       " outside [0, growth_interval)");
    }
    k_ = k;
    scale_ = s.scale;
    tracker_ = s.growth_tracker;
  }

 private:
  template <class State>
  bool agree(const State& state) {
    found_inf_ = static_cast<bool>(any_process(state, found_inf_));
    agreed_ = true;
    return found_inf_;
  }

  GradScalerKwargs k_;
  double scale_;
  int tracker_ = 0;
  bool unscaled_ = false;
  bool agreed_ = false;  // found_inf_ is every process's since the last update()
  bool found_inf_ = false;
};

}  // namespace accel::utils

namespace accel {
using utils::DynamicLossScaler;
}  // namespace accel

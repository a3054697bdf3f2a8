// GradientAccumulator: when to synchronize gradients and step the optimizer under gradient
// accumulation (Accelerate's Accelerator._do_sync, driven by GradientAccumulationPlugin).
//
//   GradientAccumulator acc(GradientAccumulationPlugin{.num_steps = 4});
//   for each batch: acc.accumulate(is_last_batch);  backward;  if (acc.sync_gradients()) step;
#pragma once

#include "accel/utils/dataclasses.hpp"

namespace accel::utils {

/// Counts batches; sync_gradients() is true every num_steps batches, and on the last batch of the
/// dataloader when sync_with_dataloader is set.
class GradientAccumulator {
 public:
  explicit GradientAccumulator(const GradientAccumulationPlugin& plugin) : p_(plugin) { plugin.validate(); }

  /// Call once per batch before its backward pass; returns sync_gradients().
  bool accumulate(bool end_of_dataloader = false) {
    if (p_.sync_with_dataloader && end_of_dataloader) {
      step_ = 0;
      sync_ = true;
    } else {
      ++step_;
      sync_ = step_ % *p_.num_steps == 0;
    }
    if (sync_) ++optimizer_steps_;
    return sync_;
  }

  /// This batch ends an accumulation window: all-reduce gradients, step the optimizer, zero grads.
  bool sync_gradients() const noexcept { return sync_; }
  /// Gradients are all-reduced on this batch (every batch under sync_each_batch, saving memory).
  bool should_all_reduce() const noexcept { return sync_ || p_.sync_each_batch; }
  /// Scheduler steps to take for this batch: 1 on a sync batch; with adjust_scheduler, a skipped
  /// batch still counts (Accelerate advances the scheduler's step count), else 0.
  int scheduler_steps() const noexcept { return sync_ || p_.adjust_scheduler ? 1 : 0; }
  /// Batches since the last synchronization.
  int step() const noexcept { return step_; }
  /// Optimizer steps taken so far.
  long long optimizer_steps() const noexcept { return optimizer_steps_; }
  int num_steps() const noexcept { return *p_.num_steps; }
  const GradientAccumulationPlugin& plugin() const noexcept { return p_; }

 private:
  GradientAccumulationPlugin p_;
  int step_ = 0;
  bool sync_ = false;
  long long optimizer_steps_ = 0;
};

}  // namespace accel::utils

namespace accel {
using utils::GradientAccumulator;
}  // namespace accel

// DeviceStage: the GPU half of prefetch<N>. The offloading hooks of a model running on a GPU
// register their weights as units (in call order); while unit i computes, a copy thread queues
// the host-to-device copies of units i+1 .. i+N on a copy stream of their own, into a ring of
// N+1 unit-sized device buffers allocated once (from the device allocator, so its peak counter
// shows them) and reused.
//
//   DeviceStage& stage = weight_stream->device_stage(Device::cuda(0));   // one per GPU and model
//   std::size_t u = stage.add_unit("model.layers.3", host_unit, pieces);  // at hook init
//   std::vector<Tensor> w = stage.acquire(u);  // device views; the compute stream waits for the copy
//   stage.release(u);                          // after the forward was queued
//
// Ordering happens on the GPU, not in the host thread: each buffer carries two events. `ready`
// is recorded on the copy stream after the unit's copies, and acquire makes the calling thread's
// current stream (the one the ops queue on) wait for it; `free` is recorded on that stream at
// release, and the copy stream waits for it before the buffer is overwritten. The host never
// waits for a kernel, so the copies of the next blocks run under the current block's compute.
//
// Sources: a piece is a host tensor (weights kept in CPU memory: copied straight from it when it
// is page-locked, through the backend's pinned staging when it is pageable) or a weight of the
// unit's disk unit in the host WeightStream (hooks/weight_stream.hpp), whose buffers are then
// page-locked. Disk units are taken from the host stream by the copy thread, which gives each
// back once its copy has finished: disk to host and host to device overlap, each bounded by its
// own ring.
//
// The queue operations come from the device backend's slots (core/device_backend.hpp), so this
// header needs no CUDA headers; a build without a GPU runtime gets a DeviceError on first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"
#include "accel/hooks/unit_ring.hpp"

namespace accel::hooks {

namespace detail {
/// The two events of one device buffer (see the header comment).
struct StageEvents {
  void* ready = nullptr;
  void* free = nullptr;
  bool ready_recorded = false;
  bool free_recorded = false;
};
}  // namespace detail

/// The device ring of one GPU (see the header comment).
class DeviceStage : public detail::UnitRing<DeviceStage, detail::StageEvents> {
  using Ring = detail::UnitRing<DeviceStage, detail::StageEvents>;
  friend Ring;

 public:
  static constexpr const char* name = "DeviceStage";
  /// Device buffers place each weight at a multiple of this (what every kernel may assume).
  static constexpr std::uint64_t alignment = 256;

  /// One weight of a unit: `streamed` is its index among the host unit's tensors; otherwise
  /// `host` holds it (CPU memory).
  struct Piece {
    DType dtype;
    Shape shape;
    std::optional<std::size_t> streamed{};
    Tensor host{};
  };
  using HostAcquire = std::function<std::vector<Tensor>(std::size_t)>;
  using HostRelease = std::function<void(std::size_t)>;

  /// `depth`: units in flight ahead of the computing one (>= 1: depth 0 would only add a copy);
  /// host_acquire / host_release reach the host stream's disk units.
  DeviceStage(Device device, std::size_t depth, HostAcquire host_acquire, HostRelease host_release)
      : Ring(depth, alignment), device_(device), backend_(device_backend(device)),
        host_acquire_(std::move(host_acquire)), host_release_(std::move(host_release)) {
    if (!backend_.stream_create || !backend_.copy_on_stream) {
      throw DeviceError("DeviceStage: the " + device.str() + " runtime has no copy streams");
    }
    copy_stream_ = backend_.stream_create(device.index());
  }
  ~DeviceStage() {
    stop_worker();
    // Copies still queued write into the ring's buffers: they finish before anything is freed.
    for_each_slot([&](Slot& s) {
      if (s.extra.ready_recorded) {
        try {
          backend_.event_synchronize(device_.index(), s.extra.ready);
        } catch (...) {  // a failed device has nothing left to wait for
        }
      }
      backend_.event_destroy(device_.index(), s.extra.ready);
      backend_.event_destroy(device_.index(), s.extra.free);
    });
    backend_.stream_destroy(device_.index(), copy_stream_);
  }

  /// Registers a unit: its pieces in the order acquire returns them, and the host stream's unit
  /// holding the streamed ones. Returns its id.
  std::size_t add_unit(std::string label, std::optional<std::size_t> host_unit, std::vector<Piece> pieces) {
    std::lock_guard lock(mu_);
    Unit u{std::move(label), host_unit, std::move(pieces), {}};
    std::uint64_t pos = 0;
    for (Piece& p : u.pieces) {
      if (!p.streamed) {
        if (!p.host.defined() || p.host.device() != Device::cpu()) {
          throw DeviceError("DeviceStage: unit '" + u.label + "' has a piece that is neither streamed nor a CPU tensor");
        }
        if (p.host.shape() != p.shape || p.host.dtype() != p.dtype) {
          throw ShapeError("DeviceStage: unit '" + u.label + "': host tensor " + p.host.shape().str() + " " +
                           std::string(dtype_name(p.host.dtype())) + " for a piece of " + p.shape.str() + " " +
                           std::string(dtype_name(p.dtype)));
        }
        p.host = p.host.contiguous();
      } else if (!host_unit) {
        throw ValueError("DeviceStage: unit '" + u.label + "' streams a piece but names no host unit");
      }
      pos = (pos + alignment - 1) / alignment * alignment;
      u.at.push_back(pos);
      pos += p.shape.numel() * itemsize(p.dtype);
    }
    info_.push_back(std::move(u));
    return add_scheduled(pos);
  }

  Device device() const noexcept { return device_; }

 private:
  struct Unit {
    std::string label;
    std::optional<std::size_t> host_unit;
    std::vector<Piece> pieces;
    std::vector<std::uint64_t> at;  ///< each piece's byte offset in the buffer
  };
  struct Job {
    const Unit* unit;  ///< stable (a deque element) and never changed after add_unit
    std::byte* base;
    detail::StageEvents* events;  ///< the slot's, owned by this job until the fill returns
  };

  // ---- the ring's customization points (hooks/unit_ring.hpp) ----
  Storage new_storage(std::size_t bytes) const { return Storage::allocate(device_, bytes); }
  Job prepare(std::size_t id, Slot& slot) {
    auto& e = slot.extra;
    if (!e.ready) e.ready = backend_.event_create(device_.index());
    if (!e.free) e.free = backend_.event_create(device_.index());
    return {&info_[id], slot_data(slot), &e};
  }
  std::uint64_t fill(const Job& job) {
    const int index = device_.index();
    // The compute stream is done with what the buffer held before.
    if (job.events->free_recorded) backend_.stream_wait_event(index, copy_stream_, job.events->free);
    const Unit& u = *job.unit;
    std::vector<Tensor> streamed;
    if (u.host_unit) streamed = host_acquire_(*u.host_unit);
    std::uint64_t bytes = 0;
    try {
      for (std::size_t i = 0; i < u.pieces.size(); ++i) {
        const Piece& p = u.pieces[i];
        const Tensor& src = p.streamed ? streamed.at(*p.streamed) : p.host;
        const std::size_t n = p.shape.numel() * itemsize(p.dtype);
        backend_.copy_on_stream(job.base + u.at[i], device_, src.data_ptr(), Device::cpu(), n, copy_stream_);
        bytes += n;
      }
      backend_.event_record(index, job.events->ready, copy_stream_);
      job.events->ready_recorded = true;
      // The host buffer may be refilled once the DMA engine has read it.
      if (u.host_unit) backend_.event_synchronize(index, job.events->ready);
    } catch (...) {
      if (u.host_unit) host_release_(*u.host_unit);
      throw;
    }
    if (u.host_unit) host_release_(*u.host_unit);
    return bytes;
  }
  std::vector<Tensor> views(std::size_t id, const Slot& s) const { return views_at(s, info_[id].pieces, info_[id].at); }
  void on_acquire(std::size_t, Slot& s) {
    if (s.extra.ready_recorded) backend_.stream_wait_event(device_.index(), nullptr, s.extra.ready);
  }
  void on_release(std::size_t, Slot& s) {
    if (!s.extra.free) s.extra.free = backend_.event_create(device_.index());
    backend_.event_record(device_.index(), s.extra.free, nullptr);
    s.extra.free_recorded = true;
  }

  Device device_;
  const DeviceBackend& backend_;
  HostAcquire host_acquire_;
  HostRelease host_release_;
  void* copy_stream_ = nullptr;
  std::deque<Unit> info_;
};

}  // namespace accel::hooks

// UnitRing: the scheduling both halves of prefetch<N> share (hooks/weight_stream.hpp brings
// units from disk into host buffers, hooks/device_stage.hpp from host memory into device
// buffers). A unit is one hook's weights; units are predicted to be called in the order they
// were added. While unit i computes, a worker thread fills units i+1 .. i+N (wrapping from the
// last to the first: the next token's forward) into a ring of N+1 unit-sized buffers, allocated
// once and reused.
//
//   Derived supplies (CRTP; all but fill are called with the ring's mutex held):
//     Storage new_storage(std::size_t bytes)          one buffer (its allocator counts it)
//     Job prepare(std::size_t id, Slot& slot)         what fill needs, copied out of shared state
//     std::uint64_t fill(Job&)                        unlocked, on the worker (or, at depth 0, the
//                                                     caller): fills the buffer, returns the bytes
//     std::vector<Tensor> views(std::size_t id, const Slot&)
//     void on_acquire(std::size_t id, Slot&)          the unit is handed to its caller
//     void on_release(std::size_t id, Slot&)          the caller is done with it
//   and calls stop_worker() first thing in its destructor (the worker calls into it).
//
// Depth 0 fills each unit when it is asked for, in the caller's thread, into one buffer. A call
// out of the predicted order is served all the same: the unit asked for goes to the front of the
// queue, and a buffer holding a unit nobody asked for yet is reused when none is free. A buffer
// some tensor still views when its unit is released is left to that tensor and replaced.
// A failed fill is rethrown, typed as it was thrown, by the acquire that waits for the unit.
// A retired unit (its hook detached) keeps its id but is never read again nor read ahead: the
// read-ahead skips it, so a hook detached and attached again leaves no stale unit in the ring.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"

namespace accel::hooks::detail {

struct NoSlotExtra {};

template <class Derived, class SlotExtra = NoSlotExtra>
class UnitRing {
 public:
  /// One buffer of the ring; `extra` is the derived ring's own per-buffer state.
  struct Slot {
    Storage storage;
    std::uint64_t base = 0;  ///< first byte at the ring's alignment
    bool busy = false;
    SlotExtra extra{};
  };
  /// Bytes filled, seconds the filling took, seconds callers waited for a unit.
  struct Stats {
    std::uint64_t bytes_read = 0;
    double read_seconds = 0;
    double wait_seconds = 0;
  };

  UnitRing(std::size_t depth, std::size_t alignment) : depth_(depth), alignment_(alignment) {}
  ~UnitRing() { stop_worker(); }
  UnitRing(const UnitRing&) = delete;
  UnitRing& operator=(const UnitRing&) = delete;

  /// Unit `id`'s tensors, views of its buffer; waits for the fill and schedules the next
  /// `depth` units. A unit asked for again before its release gets the same buffer.
  std::vector<Tensor> acquire(std::size_t id) {
    std::unique_lock lock(mu_);
    check_id(id);
    Unit& u = units_[id];
    if (u.retired) throw KeyError(std::string(Derived::name) + ": unit " + std::to_string(id) + " was retired (its hook was detached)");
    if (u.state == State::in_use) return self().views(id, slots_[u.slot]);
    if (depth_ == 0) {
      fill_now(lock, id);
    } else {
      start_worker();
      if (u.state == State::idle) {
        u.state = State::queued;
        queue_.push_front(id);
      } else if (u.state == State::queued) {  // asked for now: it jumps the queue
        queue_.erase(std::find(queue_.begin(), queue_.end(), id));
        queue_.push_front(id);
      }
      const auto t0 = std::chrono::steady_clock::now();
      waiting_ = id;
      cv_.notify_all();
      cv_.wait(lock, [&] { return u.state == State::ready || u.state == State::failed; });
      waiting_.reset();
      wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (u.state == State::failed) {
        std::exception_ptr e = std::exchange(u.error, nullptr);
        u.state = State::idle;
        std::rethrow_exception(e);
      }
    }
    u.state = State::in_use;
    last_ = id;
    self().on_acquire(id, slots_[u.slot]);
    for (std::size_t k = 1, ahead = 0; ahead < depth_ && k < units_.size(); ++k) {
      Unit& next = units_[(id + k) % units_.size()];
      if (next.retired) continue;
      ++ahead;
      if (next.state == State::idle) {
        next.state = State::queued;
        queue_.push_back((id + k) % units_.size());
      }
    }
    cv_.notify_all();
    return self().views(id, slots_[u.slot]);
  }

  /// Gives unit `id`'s buffer back to the ring (after the forward that used it).
  void release(std::size_t id) {
    {
      std::lock_guard lock(mu_);
      check_id(id);
      Unit& u = units_[id];
      if (u.state != State::in_use) return;
      self().on_release(id, slots_[u.slot]);
      free_slot(u);
      u.state = State::idle;
    }
    cv_.notify_all();
  }

  /// Takes unit `id` out of the schedule for good: it is neither read ahead nor served again
  /// (acquire is a KeyError), and the buffer it holds goes back to the ring once released.
  void retire(std::size_t id) {
    {
      std::lock_guard lock(mu_);
      check_id(id);
      Unit& u = units_[id];
      u.retired = true;
      if (u.state == State::queued) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), id));
        u.state = State::idle;
      } else if (u.state == State::ready) {
        free_slot(u);
        u.state = State::idle;
      } else if (u.state == State::failed) {
        u.error = nullptr;
        u.state = State::idle;
      }
      // reading: the worker frees the buffer when the read ends; in_use: release does.
    }
    cv_.notify_all();
  }

  std::size_t depth() const noexcept { return depth_; }
  /// Units registered, retired ones included (ids are never reused).
  std::size_t units() const {
    std::lock_guard lock(mu_);
    return units_.size();
  }
  /// Units registered and not retired: the ones the read-ahead goes through.
  std::size_t live_units() const {
    std::lock_guard lock(mu_);
    return static_cast<std::size_t>(std::count_if(units_.begin(), units_.end(), [](const Unit& u) { return !u.retired; }));
  }
  /// Bytes of the largest unit as laid out in a buffer (what each ring buffer holds).
  std::uint64_t slot_bytes() const {
    std::lock_guard lock(mu_);
    return slot_bytes_;
  }
  /// Ring buffers allocated so far.
  std::size_t buffers() const {
    std::lock_guard lock(mu_);
    return slots_.size();
  }
  /// True once the worker thread runs (the first acquire at depth >= 1; never at depth 0).
  bool reading_ahead() const {
    std::lock_guard lock(mu_);
    return worker_.joinable();
  }
  Stats stats() const {
    std::lock_guard lock(mu_);
    return stats_unlocked();
  }
  void reset_stats() {
    std::lock_guard lock(mu_);
    bytes_read_ = 0;
    read_seconds_ = wait_seconds_ = 0;
  }

 protected:
  /// Registers a unit of `bytes` (as laid out in a buffer); the caller holds mu_.
  std::size_t add_scheduled(std::uint64_t bytes) {
    units_.emplace_back();
    slot_bytes_ = std::max(slot_bytes_, bytes);
    return units_.size() - 1;
  }
  Stats stats_unlocked() const { return {bytes_read_, read_seconds_, wait_seconds_}; }
  std::byte* slot_data(Slot& s) const { return s.storage.data() + s.base; }
  /// Views of a filled buffer: item i (anything with a dtype and a shape) at byte at[i].
  template <class Items>
  static std::vector<Tensor> views_at(const Slot& s, const Items& items, const std::vector<std::uint64_t>& at) {
    std::vector<Tensor> out;
    out.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      out.push_back(Tensor::from_storage(s.storage, items[i].dtype, items[i].shape, std::nullopt,
                                         static_cast<std::int64_t>((s.base + at[i]) / itemsize(items[i].dtype))));
    }
    return out;
  }
  /// Every buffer, for a destructor (no worker left).
  template <class F>
  void for_each_slot(F&& f) {
    for (Slot& s : slots_) f(s);
  }
  void stop_worker() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  void check_id(std::size_t id) const {
    if (id >= units_.size()) {
      throw KeyError(std::string(Derived::name) + ": no unit " + std::to_string(id) + " (" +
                     std::to_string(units_.size()) + " registered)");
    }
  }

  mutable std::mutex mu_;

 private:
  enum class State : std::uint8_t { idle, queued, reading, ready, in_use, failed };
  struct Unit {
    State state = State::idle;
    std::size_t slot = 0;
    std::exception_ptr error;
    bool retired = false;
  };

  Derived& self() { return static_cast<Derived&>(*this); }

  // Depth 0: the unit is filled here, now (into another buffer when a nested unit holds the one).
  void fill_now(std::unique_lock<std::mutex>& lock, std::size_t id) {
    Unit& u = units_[id];
    u.slot = *take_slot(/*urgent=*/true);
    u.state = State::reading;
    auto job = self().prepare(id, slots_[u.slot]);
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t bytes = 0;
    try {
      bytes = self().fill(job);
    } catch (...) {
      lock.lock();
      slots_[u.slot].busy = false;
      u.state = State::idle;
      throw;
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    read_seconds_ += dt;
    wait_seconds_ += dt;  // the caller waited for all of it
    bytes_read_ += bytes;
  }

  void start_worker() {
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  }

  // A free buffer, else a new one while fewer than depth + 1 exist; for the unit a caller waits
  // on, else the buffer of a unit nobody asked for yet, else one more buffer (only when more
  // than depth + 1 units are in use at once). nullopt: wait for a release.
  std::optional<std::size_t> take_slot(bool urgent) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].busy) return claim(i);
    }
    if (slots_.size() >= depth_ + 1 && !urgent) return std::nullopt;
    if (slots_.size() >= depth_ + 1 && evict_one()) return take_slot(false);
    slots_.emplace_back();
    renew(slots_.back());
    return claim(slots_.size() - 1);
  }
  void renew(Slot& s) {
    s.storage = self().new_storage(static_cast<std::size_t>(slot_bytes_ + alignment_));
    const auto addr = reinterpret_cast<std::uintptr_t>(s.storage.data());
    s.base = (alignment_ - addr % alignment_) % alignment_;
  }
  std::size_t claim(std::size_t i) {
    // A unit added after this buffer was made may be larger than it: never fill past its end.
    if (slots_[i].storage.nbytes() < slot_bytes_ + alignment_) renew(slots_[i]);
    slots_[i].busy = true;
    return i;
  }
  // Frees the buffer of the ready unit furthest ahead of the last acquired one; false when none.
  bool evict_one() {
    std::optional<std::size_t> victim;
    std::size_t best = 0;
    for (std::size_t k = 0; k < units_.size(); ++k) {
      if (units_[k].state != State::ready) continue;
      const std::size_t ahead = (k + units_.size() - last_) % units_.size();
      if (!victim || ahead > best) victim = k, best = ahead;
    }
    if (!victim) return false;
    free_slot(units_[*victim]);
    units_[*victim].state = State::idle;
    return true;
  }
  void free_slot(Unit& u) {
    Slot& s = slots_[u.slot];
    // A tensor still viewing the buffer keeps it: the ring gets a fresh one instead.
    if (s.storage.use_count() > 1) renew(s);
    s.busy = false;
  }

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      std::optional<std::size_t> slot;
      std::size_t id = 0;
      cv_.wait(lock, [&] {
        if (stop_) return true;
        if (queue_.empty()) return false;
        id = queue_.front();
        // The front was asked for by a caller when it waits for it (acquire pushes it there).
        slot = take_slot(/*urgent=*/waiting_ && *waiting_ == id);
        return slot.has_value();
      });
      if (stop_) return;
      queue_.pop_front();
      Unit& u = units_[id];
      u.slot = *slot;
      u.state = State::reading;
      std::exception_ptr error;
      std::uint64_t bytes = 0;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        auto job = self().prepare(id, slots_[u.slot]);
        lock.unlock();
        try {
          bytes = self().fill(job);
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
      } catch (...) {
        error = std::current_exception();  // prepare threw, still locked
      }
      read_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      bytes_read_ += bytes;
      if (u.retired) {  // retired while it was read: nobody will ask for it
        free_slot(u);
        u.state = State::idle;
      } else if (error) {
        slots_[u.slot].busy = false;
        u.error = error;
        u.state = State::failed;
      } else {
        u.state = State::ready;
      }
      cv_.notify_all();
    }
  }

  const std::size_t depth_;
  const std::size_t alignment_;
  std::condition_variable cv_;
  std::deque<Unit> units_;  ///< deques: an element's address holds while the worker works unlocked
  std::deque<Slot> slots_;
  std::deque<std::size_t> queue_;
  std::uint64_t slot_bytes_ = 0;
  std::size_t last_ = 0;
  std::optional<std::size_t> waiting_;  ///< the unit an acquire is blocked on
  bool stop_ = false;
  std::uint64_t bytes_read_ = 0;
  double read_seconds_ = 0, wait_seconds_ = 0;
  std::thread worker_;
};

}  // namespace accel::hooks::detail

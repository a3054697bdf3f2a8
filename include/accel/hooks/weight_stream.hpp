// WeightStream: how offloaded weights are read from disk, and the read-ahead behind prefetch<N>.
// The offloading hooks of a dispatched model
// register their weights as units, in the order the model calls them; while unit i computes, a
// reader thread brings units i+1 .. i+N from disk into a ring of N+1 unit-sized buffers,
// allocated once and reused, wrapping from the last unit to the first (the next token's forward).
//
//   auto stream = std::make_shared<WeightStream>(2);                 // N = 2
//   std::size_t u = stream->add_unit("model.layers.3", locations);  // at hook init, in call order
//   std::vector<Tensor> w = stream->acquire(u);   // waits for unit u, schedules u+1 .. u+N; views of the ring
//   stream->release(u);                          // after the forward: its buffer may be reused
//
// Depth 0 is sync_offload: each unit is read when asked for, in the caller's thread, into one
// buffer reused from call to call (Accelerate's behaviour, without the page cache keeping what was
// read). A call out of the predicted order is served all the same: the unit asked for goes to the front
// of the queue, and a buffer holding a unit nobody asked for yet is reused when none is free.
// Extra memory is bounded by N + 1 buffers of the largest unit (allocated from the CPU
// allocator, so its peak counter shows them); a buffer some tensor still views when its unit is
// released is left to that tensor and a new one is allocated instead of overwriting it.
//
// Each unit's weights are grouped by file, sorted by offset, and read as few large ranges (two
// weights less than 1 MiB apart share a read), with io::WeightFileReader: direct reads that
// leave the page cache alone, and a check that no file changed since it was indexed. A failed
// read is rethrown, typed as the reader threw it, by the acquire that waits for the unit.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/weight_reader.hpp"

namespace accel::hooks {

/// The read-ahead of one dispatched model (see the header comment).
class WeightStream {
 public:
  /// Reads of at most this many bytes apart are merged into one.
  static constexpr std::uint64_t merge_gap = std::uint64_t{1} << 20;

  /// `depth`: units kept in flight ahead of the computing one (prefetch<N>'s N); 0 reads each
  /// unit when it is asked for, in the caller's thread, into one buffer (sync_offload).
  explicit WeightStream(std::size_t depth) : depth_(depth) {}
  ~WeightStream() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  WeightStream(const WeightStream&) = delete;
  WeightStream& operator=(const WeightStream&) = delete;

  /// Registers a unit (one hook's weights) and returns its id; units are predicted to be called
  /// in the order they are added. The files are opened now: a change after this is an error.
  std::size_t add_unit(std::string label, std::vector<io::WeightLocation> weights) {
    std::lock_guard lock(mu_);
    Unit u;
    u.label = std::move(label);
    std::map<std::string, std::vector<std::size_t>> by_file;
    for (std::size_t i = 0; i < weights.size(); ++i) by_file[weights[i].file].push_back(i);
    std::uint64_t pos = 0;
    u.at.resize(weights.size());
    for (auto& [file, idx] : by_file) {
      std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return weights[a].offset < weights[b].offset; });
      for (std::size_t k = 0; k < idx.size();) {
        Range r{file, weights[idx[k]].offset, weights[idx[k]].offset + weights[idx[k]].nbytes, pos, weights[idx[k]].name};
        std::size_t j = k + 1;
        while (j < idx.size() && weights[idx[j]].offset <= r.end + merge_gap) {
          r.end = std::max(r.end, weights[idx[j]].offset + weights[idx[j]].nbytes);
          ++j;
        }
        const std::uint64_t first = r.begin / io::WeightFileReader::alignment * io::WeightFileReader::alignment;
        for (std::size_t m = k; m < j; ++m) u.at[idx[m]] = pos + (weights[idx[m]].offset - first);
        pos += io::WeightFileReader::aligned_extent(r.begin, r.end - r.begin);
        u.ranges.push_back(std::move(r));
        reader_opened(file, weights[idx[k]].name);
        k = j;
      }
    }
    u.bytes = pos;
    u.weights = std::move(weights);
    slot_bytes_ = std::max(slot_bytes_, pos);
    units_.push_back(std::move(u));
    return units_.size() - 1;
  }

  /// The tensors of unit `id`, in the order add_unit got them, as views of its ring buffer in the
  /// stored dtype; waits for the read. Schedules the next `depth` units. A unit asked for again
  /// before its release gets the same buffer (one release frees it).
  std::vector<Tensor> acquire(std::size_t id) {
    std::unique_lock lock(mu_);
    check_id(id);
    Unit& u = units_[id];
    if (u.state == State::in_use) return views(u);  // asked again before its release: the same buffer
    if (depth_ == 0) return acquire_now(lock, u);
    start_worker();
    if (u.state == State::idle) {
      u.state = State::queued;
      queue_.push_front(id);
      cv_.notify_all();
    } else if (u.state == State::queued) {
      // Asked for now: it jumps the queue.
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
    u.state = State::in_use;
    last_ = id;
    for (std::size_t k = 1; k <= depth_ && k < units_.size(); ++k) {
      const std::size_t next = (id + k) % units_.size();
      if (units_[next].state == State::idle) {
        units_[next].state = State::queued;
        queue_.push_back(next);
      }
    }
    cv_.notify_all();
    return views(u);
  }

  /// Gives unit `id`'s buffer back to the ring (after the forward that used it).
  void release(std::size_t id) {
    {
      std::lock_guard lock(mu_);
      check_id(id);
      Unit& u = units_[id];
      if (u.state != State::in_use) return;
      free_slot(u);
      u.state = State::idle;
    }
    cv_.notify_all();
  }

  std::size_t depth() const noexcept { return depth_; }
  std::size_t units() const {
    std::lock_guard lock(mu_);
    return units_.size();
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
  /// Weight bytes read, seconds the reader spent reading, seconds callers waited for a unit.
  struct Stats {
    std::uint64_t bytes_read = 0;
    double read_seconds = 0;
    double wait_seconds = 0;
  };
  Stats stats() const {
    std::lock_guard lock(mu_);
    return {bytes_read_, read_seconds_, wait_seconds_};
  }
  void reset_stats() {
    std::lock_guard lock(mu_);
    bytes_read_ = 0;
    read_seconds_ = wait_seconds_ = 0;
  }

 private:
  enum class State : std::uint8_t { idle, queued, reading, ready, in_use, failed };
  struct Range {
    std::string file;
    std::uint64_t begin, end;  ///< file offsets
    std::uint64_t pos;         ///< where the aligned range starts in the buffer
    std::string name;          ///< the first weight of the range, for errors
  };
  struct Unit {
    std::string label;
    std::vector<io::WeightLocation> weights;
    std::vector<std::uint64_t> at;  ///< each weight's byte offset in the buffer
    std::vector<Range> ranges;
    std::uint64_t bytes = 0;
    State state = State::idle;
    std::size_t slot = 0;
    std::exception_ptr error;
  };
  struct Slot {
    Storage storage;
    std::uint64_t base = 0;  ///< first aligned byte
    bool busy = false;
  };

  // depth 0: the unit is read here, now, into the one buffer (another when a nested unit holds it).
  std::vector<Tensor> acquire_now(std::unique_lock<std::mutex>& lock, Unit& u) {
    if (u.state == State::in_use) return views(u);
    u.slot = *take_slot(/*urgent=*/true);
    u.state = State::reading;
    std::byte* base = slots_[u.slot].storage.data() + slots_[u.slot].base;
    const std::vector<Range> ranges = u.ranges;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t bytes = 0;
    try {
      bytes = read_ranges(ranges, base);
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
    u.state = State::in_use;
    return views(u);
  }
  // Reads a unit's ranges into its buffer at `base`; returns the weight bytes read.
  std::uint64_t read_ranges(const std::vector<Range>& ranges, std::byte* base) {
    std::lock_guard reading(reader_mu_);
    std::uint64_t bytes = 0;
    for (const Range& r : ranges) {
      reader_.read(r.file, r.begin, r.end - r.begin, base + r.pos, r.name);
      bytes += r.end - r.begin;
    }
    return bytes;
  }
  std::vector<Tensor> views(const Unit& u) const {
    std::vector<Tensor> out;
    out.reserve(u.weights.size());
    const Slot& s = slots_[u.slot];
    for (std::size_t i = 0; i < u.weights.size(); ++i) {
      const auto& w = u.weights[i];
      const std::uint64_t byte = s.base + u.at[i];
      out.push_back(Tensor::from_storage(s.storage, w.dtype, w.shape, std::nullopt,
                                         static_cast<std::int64_t>(byte / itemsize(w.dtype))));
    }
    return out;
  }

  void check_id(std::size_t id) const {
    if (id >= units_.size()) {
      throw KeyError("WeightStream: no unit " + std::to_string(id) + " (" + std::to_string(units_.size()) + " registered)");
    }
  }
  // Opens the file now, so that what it is at registration is what later reads must find.
  void reader_opened(const std::string& file, const std::string& weight) {
    std::lock_guard lock(reader_mu_);
    reader_.open(file, weight);
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
    slots_.push_back(new_slot());
    return claim(slots_.size() - 1);
  }
  Slot new_slot() const {
    Slot s;
    s.storage = Storage::allocate(Device::cpu(), static_cast<std::size_t>(slot_bytes_ + io::WeightFileReader::alignment));
    const auto addr = reinterpret_cast<std::uintptr_t>(s.storage.data());
    s.base = (io::WeightFileReader::alignment - addr % io::WeightFileReader::alignment) % io::WeightFileReader::alignment;
    return s;
  }
  std::size_t claim(std::size_t i) {
    // A unit added after this buffer was made may be larger than it: never read past its end.
    if (slots_[i].storage.nbytes() < slot_bytes_ + io::WeightFileReader::alignment) slots_[i] = new_slot();
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
    if (s.storage.use_count() > 1) s = new_slot();
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
      std::byte* base = slots_[*slot].storage.data() + slots_[*slot].base;
      const std::vector<Range> ranges = u.ranges;
      lock.unlock();
      std::exception_ptr error;
      const auto t0 = std::chrono::steady_clock::now();
      std::uint64_t bytes = 0;
      try {
        bytes = read_ranges(ranges, base);
      } catch (...) {
        error = std::current_exception();
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      read_seconds_ += dt;
      bytes_read_ += bytes;
      if (error) {
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
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Unit> units_;  ///< a deque: a unit's address holds while the reader works on it unlocked
  std::vector<Slot> slots_;
  std::deque<std::size_t> queue_;
  std::uint64_t slot_bytes_ = 0;
  std::size_t last_ = 0;
  std::optional<std::size_t> waiting_;  ///< the unit an acquire is blocked on
  bool stop_ = false;
  std::mutex reader_mu_;  ///< the reader is the worker's, and add_unit's while it opens a file
  io::WeightFileReader reader_;
  std::uint64_t bytes_read_ = 0;
  double read_seconds_ = 0, wait_seconds_ = 0;
  std::thread worker_;
};

}  // namespace accel::hooks

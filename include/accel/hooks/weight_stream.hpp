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
// read). The scheduling (calls out of order, buffers still viewed, failures) is the ring's
// (hooks/unit_ring.hpp). Extra memory is bounded by N + 1 buffers of the largest unit, allocated
// from the CPU allocator (so its peak counter shows them), page-locked once a GPU stage reads
// from them.
//
// GPU execution: device_stage(cuda:i) is the stream's second stage for that GPU
// (hooks/device_stage.hpp), which copies units from host memory (these buffers for disk
// weights) into a ring of device buffers on a copy stream. The stages live as long as the
// stream; the hooks of one model share both.
//
// Each unit's weights are grouped by file, sorted by offset, and read as few large ranges (two
// weights less than 1 MiB apart share a read), with io::WeightFileReader: direct reads that
// leave the page cache alone, and a check that no file changed since it was indexed. A failed
// read is rethrown, typed as the reader threw it, by the acquire that waits for the unit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"
#include "accel/hooks/device_stage.hpp"
#include "accel/hooks/unit_ring.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/weight_reader.hpp"

namespace accel::hooks {

/// The read-ahead of one dispatched model (see the header comment).
class WeightStream : public detail::UnitRing<WeightStream> {
  using Ring = detail::UnitRing<WeightStream>;
  friend Ring;

 public:
  static constexpr const char* name = "WeightStream";
  /// Reads of at most this many bytes apart are merged into one.
  static constexpr std::uint64_t merge_gap = std::uint64_t{1} << 20;

  /// `depth`: units kept in flight ahead of the computing one (prefetch<N>'s N); 0 reads each
  /// unit when it is asked for, in the caller's thread, into one buffer (sync_offload).
  explicit WeightStream(std::size_t depth) : Ring(depth, io::WeightFileReader::alignment) {}
  ~WeightStream() {
    stages_.clear();  // their workers read through this stream
    stop_worker();
  }

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
    u.weights = std::move(weights);
    info_.push_back(std::move(u));
    return add_scheduled(pos);
  }

  /// The stage that brings units to GPU `device` (made on first use, with this stream's depth);
  /// from then on the host buffers are page-locked, so the GPU reads them without staging.
  DeviceStage& device_stage(Device device) {
    if (!device.is_cuda()) throw DeviceError("WeightStream::device_stage: " + device.str() + " is not a GPU");
    std::lock_guard lock(mu_);
    auto& stage = stages_[device.index()];
    if (!stage) {
      pinned_ = true;
      stage = std::make_unique<DeviceStage>(device, depth(), [this](std::size_t id) { return acquire(id); },
                                            [this](std::size_t id) { release(id); });
    }
    return *stage;
  }

 private:
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
  };
  struct Job {
    std::vector<Range> ranges;
    std::byte* base;
  };

  // ---- the ring's customization points (hooks/unit_ring.hpp) ----
  Storage new_storage(std::size_t bytes) const {
    return pinned_ ? Storage::allocate_pinned(bytes) : Storage::allocate(Device::cpu(), bytes);
  }
  Job prepare(std::size_t id, Slot& slot) { return {info_[id].ranges, slot_data(slot)}; }
  std::uint64_t fill(const Job& job) {
    std::lock_guard reading(reader_mu_);
    std::uint64_t bytes = 0;
    for (const Range& r : job.ranges) {
      reader_.read(r.file, r.begin, r.end - r.begin, job.base + r.pos, r.name);
      bytes += r.end - r.begin;
    }
    return bytes;
  }
  std::vector<Tensor> views(std::size_t id, const Slot& s) const { return views_at(s, info_[id].weights, info_[id].at); }
  void on_acquire(std::size_t, Slot&) {}
  void on_release(std::size_t, Slot&) {}

  // Opens the file now, so that what it is at registration is what later reads must find.
  void reader_opened(const std::string& file, const std::string& weight) {
    std::lock_guard lock(reader_mu_);
    reader_.open(file, weight);
  }

  std::deque<Unit> info_;  ///< per unit, beside the ring's scheduling state
  bool pinned_ = false;
  std::map<int, std::unique_ptr<DeviceStage>> stages_;
  std::mutex reader_mu_;  ///< the reader is the worker's, and add_unit's while it opens a file
  io::WeightFileReader reader_;
};

}  // namespace accel::hooks

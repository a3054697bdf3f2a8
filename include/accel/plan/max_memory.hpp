// Memory budgets per device: Accelerate's `max_memory` dictionary.
//
//   MaxMemory mm = parse_max_memory("0=20GiB,1=20GiB,cpu=64GB");   // or ("...", "--max-memory", &std::cerr)
//   mm.add(Placement::cpu(), ByteSize(1 << 30));   mm.reserve(0, ByteSize(2 << 30));
//   if (const ByteSize* b = mm.find(Placement::disk())) ...
//
// The keys are device-map Placements: a budget names the same slot a device map puts weights in,
// so nothing converts between the two. Entries stay in Accelerate's order (GPUs by id, then cpu,
// disk), which Placement's own ordering gives. Budgets are ByteSize (balanced budgets may be
// fractional when bool tensors are involved).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cctype>
#include <fstream>
#include <optional>
#include <initializer_list>
#include <ostream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/checked.hpp"
#include "accel/core/device.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/errors.hpp"

namespace accel::plan {

/// A max_memory key as Accelerate spells it: "0" (or "cuda:0") for a GPU, "cpu", "disk". "mps" is
/// a valid Accelerate key but no accel device, so it throws DeviceError; anything else throws
/// ValueError with Accelerate's message.
inline Placement parse_memory_key(std::string_view s) {
  if (s == "cpu") return Placement::cpu();
  if (s == "disk") return Placement::disk();
  if (s == "mps") throw DeviceError("max_memory names the mps device, which accel does not support");
  std::string_view digits = s.starts_with("cuda:") ? s.substr(5) : s;
  if (!digits.empty() && digits.size() < 10 &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Placement::gpu(std::stoi(std::string(digits)));
  }
  throw ValueError("Device " + std::string(s) +
                   " is not recognized, available devices are integers(for GPU/XPU), 'mps', 'cpu' and 'disk'");
}

/// Device -> budget, kept in Accelerate's device order (GPUs by id, then cpu, disk) whatever the
/// order of insertion, so the planner walks the devices in the order it fills them.
class MaxMemory {
 public:
  using Entry = std::pair<Placement, ByteSize>;

  MaxMemory() = default;
  /// Each entry as by add(): a device named twice gets the sum.
  MaxMemory(std::initializer_list<Entry> entries) {
    for (const auto& [k, v] : entries) add(k, v);
  }

  /// Adds `bytes` to the budget of `key` (a new entry when absent): reserves from several
  /// sources (KV cache, workspace, prefetch) pile up on one device. ValueError for meta, which
  /// holds no bytes.
  void add(Placement key, ByteSize bytes) {
    auto it = slot(key);
    if (it != entries_.end() && it->first == key) {
      it->second += bytes;
    } else {
      entries_.insert(it, {key, bytes});
    }
  }
  /// A new entry: ValueError when `key` already has a budget, since a dictionary parsed from the
  /// user names each device once and a repeated one is a mistake, not a sum.
  void insert(Placement key, ByteSize bytes) {
    auto it = slot(key);
    if (it != entries_.end() && it->first == key) throw ValueError("max_memory names device " + key.str() + " twice");
    entries_.insert(it, {key, bytes});
  }
  /// Takes `bytes` off the budget of `key`, never below zero (a reserve larger than the budget
  /// leaves nothing, not a debt). Nothing happens when `key` has no budget.
  void reserve(Placement key, ByteSize bytes) {
    if (ByteSize* b = find(key)) *b = bytes > *b ? ByteSize{} : *b - bytes;
  }
  /// The budget of `key` (nullptr when absent).
  const ByteSize* find(Placement key) const {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), key, [](const Entry& e, Placement k) { return e.first < k; });
    return it != entries_.end() && it->first == key ? &it->second : nullptr;
  }
  /// The budget of `key`, writable (nullptr when absent); the key itself stays fixed so the
  /// order holds.
  ByteSize* find(Placement key) { return const_cast<ByteSize*>(std::as_const(*this).find(key)); }

  /// Number of devices with a budget.
  std::size_t size() const noexcept { return entries_.size(); }
  /// True when no device has a budget.
  bool empty() const noexcept { return entries_.empty(); }
  /// The entries in Accelerate's device order.
  auto begin() const noexcept { return entries_.begin(); }
  /// End of the entries.
  auto end() const noexcept { return entries_.end(); }
  /// The entries in Accelerate's device order, by position.
  const std::vector<Entry>& entries() const noexcept { return entries_; }
  /// Same devices with the same budgets.
  friend bool operator==(const MaxMemory&, const MaxMemory&) = default;

 private:
  // Where `key` is or would go; meta is refused here so no entry ever holds it.
  std::vector<Entry>::iterator slot(Placement key) {
    if (key.kind() == Placement::Kind::meta) throw ValueError("the meta placement has no memory budget");
    return std::lower_bound(entries_.begin(), entries_.end(), key, [](const Entry& e, Placement k) { return e.first < k; });
  }

  std::vector<Entry> entries_;
};

/// Bytes the kernel says a new allocation can take without swapping (MemAvailable of
/// /proc/meminfo, what psutil's virtual_memory().available reads); nullopt when unreadable.
inline std::optional<std::uint64_t> available_cpu_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return checked_mul<std::uint64_t>(kb, 1024, "MemAvailable");
  }
  return std::nullopt;
}

/// Accelerate's get_max_memory() with no argument: each GPU's free memory now (cudaMemGetInfo)
/// and the CPU memory available to a new allocation. No "disk" entry: the planner adds an
/// unbounded one.
inline MaxMemory get_max_memory() {
  MaxMemory mm;
  const DeviceBackend& b = cuda_backend();
  const int gpus = cuda_device_count();
  for (int i = 0; i < gpus; ++i) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (b.mem_get_info) b.mem_get_info(i, &free_bytes, &total_bytes);
    mm.add(Placement::gpu(i), ByteSize(static_cast<std::int64_t>(free_bytes)));
  }
  const auto cpu = available_cpu_memory();
  if (!cpu) throw IOError("get_max_memory: cannot read MemAvailable from /proc/meminfo; pass max_memory explicitly");
  mm.add(Placement::cpu(), ByteSize(static_cast<std::int64_t>(*cpu)));
  return mm;
}

/// Accelerate's get_max_memory for an explicit dictionary: a MaxMemory is already in Accelerate's
/// device order, so this only refuses negative budgets (ValueError). (Probing the machine is the
/// caller's business.)
inline MaxMemory get_max_memory(MaxMemory mm) {
  for (const auto& [k, v] : mm) {
    if (v < ByteSize{}) throw ValueError("max_memory for device " + k.str() + " is negative");
  }
  return mm;
}

/// Parses "0=20GiB,1=20GiB,cpu=64GB": DEVICE=SIZE items (devices 0, 1, ..., cuda:N, cpu, disk;
/// mps is a DeviceError) into Accelerate's device order; sizes as parse_byte_size reads them. A
/// device named twice, a malformed item or an out-of-range size is a ValueError naming `what`
/// (the option or argument: "--max-memory") and the item. A size that counts bits ("200mb", as
/// Accelerate reads it) is reported on `warnings` when given: people mostly mean megabytes.
inline MaxMemory parse_max_memory(std::string_view text, std::string_view what = "max_memory",
                                  std::ostream* warnings = nullptr) {
  const std::string w(what);
  // Every item is read before any is inserted, so a malformed item is reported before a repeat.
  std::vector<MaxMemory::Entry> items;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) throw ValueError(w + ": '" + std::string(item) + "' is not DEVICE=SIZE");
    const std::string_view device = item.substr(0, eq), size = item.substr(eq + 1);
    Placement key;
    try {
      key = parse_memory_key(device);
    } catch (const DeviceError&) {
      throw;
    } catch (const ValueError& e) {
      throw ValueError(w + ": " + e.what());
    }
    const std::string item_what = w + " " + std::string(device);
    if (warnings && size_string_counts_bits(size)) {
      std::string bytes_unit(size.substr(0, size.size() - 2));
      bytes_unit += static_cast<char>(std::toupper(static_cast<unsigned char>(size[size.size() - 2])));
      *warnings << "warning: " << item_what << ": '" << size << "' counts bits, as Accelerate reads a lower-case 'b' ("
                << convert_file_size_to_int(size) << " bytes); write " << bytes_unit << "B for bytes\n";
    }
    items.emplace_back(key, parse_byte_size(item_what, size));
  }
  try {
    MaxMemory mm;
    for (const auto& [k, v] : items) mm.insert(k, v);
    return get_max_memory(std::move(mm));
  } catch (const ValueError& e) {
    throw ValueError(w + ": " + e.what());
  }
}

}  // namespace accel::plan

namespace accel {
using plan::get_max_memory, plan::MaxMemory, plan::parse_max_memory, plan::parse_memory_key;
}  // namespace accel

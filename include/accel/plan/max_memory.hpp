// Memory budgets per device: Accelerate's `max_memory` dictionary.
//
//   MaxMemory mm = parse_max_memory("0=20GiB,1=20GiB,cpu=64GB");
//   mm = get_max_memory(mm);      GPUs sorted by id, then mps, cpu, disk
//
// Budgets are ByteSize (balanced budgets may be fractional when bool tensors are involved).
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/device.hpp"
#include "accel/core/errors.hpp"

namespace accel::plan {

/// A key of max_memory: a GPU id, "mps", "cpu" or "disk".
struct MemoryKey {
  enum class Kind : std::uint8_t { gpu, mps, cpu, disk };
  Kind kind = Kind::cpu;
  int index = -1;

  static constexpr MemoryKey gpu(int i) { return {Kind::gpu, i}; }
  static constexpr MemoryKey cpu() { return {Kind::cpu, -1}; }
  static constexpr MemoryKey disk() { return {Kind::disk, -1}; }
  static constexpr MemoryKey mps() { return {Kind::mps, -1}; }

  /// "0", "cpu", "disk", "mps" ("cuda:N" also names GPU N). Anything else throws ValueError with
  /// Accelerate's message.
  static MemoryKey parse(std::string_view s) {
    if (s == "cpu") return cpu();
    if (s == "disk") return disk();
    if (s == "mps") return mps();
    std::string_view digits = s.starts_with("cuda:") ? s.substr(5) : s;
    if (!digits.empty() && digits.size() < 10 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return gpu(std::stoi(std::string(digits)));
    }
    throw ValueError("Device " + std::string(s) +
                     " is not recognized, available devices are integers(for GPU/XPU), 'mps', 'cpu' and 'disk'");
  }
  /// The key of a device-map placement (meta has none).
  static MemoryKey from(Placement p) {
    if (p.is_gpu()) return gpu(p.index());
    if (p.is_cpu()) return cpu();
    if (p.is_disk()) return disk();
    throw ValueError("the meta placement has no memory budget");
  }
  bool is_gpu() const noexcept { return kind == Kind::gpu; }
  /// The device-map value for this key; mps has none in accel (DeviceError).
  Placement placement() const {
    switch (kind) {
      case Kind::gpu: return Placement::gpu(index);
      case Kind::cpu: return Placement::cpu();
      case Kind::disk: return Placement::disk();
      case Kind::mps: break;
    }
    throw DeviceError("the mps device is not supported by accel device maps");
  }
  /// Accelerate's spelling: "0", "mps", "cpu", "disk".
  std::string str() const {
    switch (kind) {
      case Kind::gpu: return std::to_string(index);
      case Kind::mps: return "mps";
      case Kind::cpu: return "cpu";
      case Kind::disk: return "disk";
    }
    return "?";
  }
  friend constexpr bool operator==(MemoryKey, MemoryKey) = default;
  /// Accelerate's device order: GPUs by id, then mps, cpu, disk.
  friend constexpr auto operator<=>(MemoryKey a, MemoryKey b) {
    if (a.kind != b.kind) return static_cast<int>(a.kind) <=> static_cast<int>(b.kind);
    return a.index <=> b.index;
  }
};

/// Ordered device -> budget.
using MaxMemory = std::vector<std::pair<MemoryKey, ByteSize>>;

/// The budget of `key` (nullptr when absent).
inline const ByteSize* find_budget(const MaxMemory& mm, MemoryKey key) {
  for (const auto& [k, v] : mm) {
    if (k == key) return &v;
  }
  return nullptr;
}

/// Accelerate's get_max_memory for an explicit dictionary: re-ordered GPUs (sorted), mps, cpu,
/// disk. Duplicate keys throw ValueError. (Probing the machine is the caller's business.)
inline MaxMemory get_max_memory(MaxMemory mm) {
  std::stable_sort(mm.begin(), mm.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < mm.size(); ++i) {
    if (mm[i].first == mm[i - 1].first) throw ValueError("max_memory names device " + mm[i].first.str() + " twice");
  }
  for (const auto& [k, v] : mm) {
    if (v < ByteSize{}) throw ValueError("max_memory for device " + k.str() + " is negative");
  }
  return mm;
}

/// Parses "0=20GiB,1=20GiB,cpu=64GB" lists (values: bytes or
/// convert_file_size_to_int strings).
inline MaxMemory parse_max_memory(std::string_view text) {
  MaxMemory mm;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw ValueError("max_memory entry '" + std::string(item) + "' is not DEVICE=SIZE");
    }
    const std::string_view value = item.substr(eq + 1);
    std::int64_t bytes = 0;
    if (!value.empty() && std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      bytes = std::stoll(std::string(value));
    } else {
      bytes = convert_file_size_to_int(value);
    }
    mm.emplace_back(MemoryKey::parse(item.substr(0, eq)), ByteSize(bytes));
  }
  return get_max_memory(std::move(mm));
}

}  // namespace accel::plan

namespace accel {
using plan::get_max_memory;
using plan::MaxMemory;
using plan::MemoryKey;
using plan::parse_max_memory;
}  // namespace accel

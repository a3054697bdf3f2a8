// Device: where a tensor's bytes live (meta, cpu, cuda:N). Placement: where a device map puts a
// module, which may also be "disk" (a placement, not a tensor device).
//
//   Device::parse("cuda:1"), Device(1) == cuda:1, Device::cpu(), Device::meta()
//   Placement::parse("disk"), Placement(0) == GPU 0, Placement::cpu()
#pragma once

#include <charconv>
#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "accel/core/errors.hpp"

namespace accel {

enum class DeviceType : std::uint8_t { cpu, cuda, meta };

namespace detail {
inline int parse_device_index(std::string_view digits, std::string_view whole) {
  int v = -1;
  const auto* end = digits.data() + digits.size();
  auto [p, ec] = std::from_chars(digits.data(), end, v);
  if (digits.empty() || ec != std::errc{} || p != end || v < 0) {
    throw DeviceError("invalid device '" + std::string(whole) +
                      "': expected 'cpu', 'meta', 'cuda', 'cuda:N' or a GPU index N >= 0");
  }
  return v;
}
}  // namespace detail

/// A tensor device. CUDA devices always carry an index; cpu and meta have index -1.
class Device {
 public:
  constexpr Device() = default;  // cpu
  constexpr Device(DeviceType t, int index = -1) : type_(t), index_(t == DeviceType::cuda ? (index < 0 ? 0 : index) : -1) {}
  /// A bare integer names a GPU, as in Accelerate's device maps.
  constexpr Device(int cuda_index) : type_(DeviceType::cuda), index_(cuda_index) {
    if (cuda_index < 0) throw DeviceError("invalid GPU index " + std::to_string(cuda_index));
  }

  static constexpr Device cpu() { return Device(DeviceType::cpu); }
  static constexpr Device meta() { return Device(DeviceType::meta); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::cuda, index); }

  /// "cpu", "meta", "cuda", "cuda:N" or "N". "disk" is rejected: it is a Placement only.
  static Device parse(std::string_view s) {
    if (s == "cpu") return cpu();
    if (s == "meta") return meta();
    if (s == "cuda") return cuda(0);
    if (s.starts_with("cuda:")) return cuda(detail::parse_device_index(s.substr(5), s));
    if (s == "disk") {
      throw DeviceError("'disk' is a device-map placement, not a tensor device");
    }
    return cuda(detail::parse_device_index(s, s));
  }

  constexpr DeviceType type() const noexcept { return type_; }
  constexpr int index() const noexcept { return index_; }
  constexpr bool is_cpu() const noexcept { return type_ == DeviceType::cpu; }
  constexpr bool is_cuda() const noexcept { return type_ == DeviceType::cuda; }
  constexpr bool is_meta() const noexcept { return type_ == DeviceType::meta; }

  std::string str() const {
    switch (type_) {
      case DeviceType::cpu: return "cpu";
      case DeviceType::meta: return "meta";
      case DeviceType::cuda: return "cuda:" + std::to_string(index_);
    }
    return "?";
  }

  friend constexpr bool operator==(Device, Device) = default;
  friend constexpr auto operator<=>(Device, Device) = default;
  friend std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

 private:
  DeviceType type_ = DeviceType::cpu;
  int index_ = -1;
};

/// A device-map value: a GPU index, "cpu", "disk" (or "meta" for weights left unloaded).
class Placement {
 public:
  enum class Kind : std::uint8_t { gpu, cpu, disk, meta };

  constexpr Placement() = default;  // cpu
  constexpr Placement(int gpu) : kind_(Kind::gpu), index_(gpu) {
    if (gpu < 0) throw DeviceError("invalid GPU index " + std::to_string(gpu));
  }
  constexpr Placement(Device d)
      : kind_(d.is_cuda() ? Kind::gpu : d.is_meta() ? Kind::meta : Kind::cpu),
        index_(d.is_cuda() ? d.index() : -1) {}

  static constexpr Placement cpu() { return Placement(); }
  static constexpr Placement disk() {
    Placement p;
    p.kind_ = Kind::disk;
    return p;
  }
  static constexpr Placement gpu(int i) { return Placement(i); }

  /// "cpu", "disk", "meta", "cuda:N", "cuda", or "N".
  static Placement parse(std::string_view s) {
    if (s == "disk") return disk();
    return Placement(Device::parse(s));
  }

  constexpr Kind kind() const noexcept { return kind_; }
  constexpr int index() const noexcept { return index_; }
  constexpr bool is_gpu() const noexcept { return kind_ == Kind::gpu; }
  constexpr bool is_cpu() const noexcept { return kind_ == Kind::cpu; }
  constexpr bool is_disk() const noexcept { return kind_ == Kind::disk; }

  /// The tensor device for this placement; disk weights live on meta until streamed in.
  constexpr Device device() const noexcept {
    switch (kind_) {
      case Kind::gpu: return Device::cuda(index_);
      case Kind::cpu: return Device::cpu();
      default: return Device::meta();
    }
  }

  /// Accelerate's spelling: "0", "cpu", "disk".
  std::string str() const {
    switch (kind_) {
      case Kind::gpu: return std::to_string(index_);
      case Kind::cpu: return "cpu";
      case Kind::disk: return "disk";
      case Kind::meta: return "meta";
    }
    return "?";
  }

  friend constexpr bool operator==(Placement, Placement) = default;
  friend constexpr auto operator<=>(Placement, Placement) = default;
  friend std::ostream& operator<<(std::ostream& os, Placement p) { return os << p.str(); }

 private:
  Kind kind_ = Kind::cpu;
  int index_ = -1;
};

}  // namespace accel

template <>
struct std::hash<accel::Device> {
  std::size_t operator()(accel::Device d) const noexcept {
    return std::hash<int>()(int(d.type()) * 4099 + d.index());
  }
};

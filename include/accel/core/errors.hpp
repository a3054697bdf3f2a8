// accel::Error and its family: every failure the library reports is one of these.
//
// Messages name the file, tensor or module involved and what was expected, so a caller can act
// on `what()` alone. Catch `accel::Error` to catch everything the library throws on purpose.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace accel {

/// Root of every exception the library throws on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A file or string does not follow its format (safetensors header, GGUF, JSON index, ...).
class FormatError : public Error {
 public:
  using Error::Error;
};

/// Shapes do not agree with what an operation needs.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A dtype is unknown, or not supported by an operation.
class DTypeError : public Error {
 public:
  using Error::Error;
};

/// A device string is malformed, or an operation is not available on a device.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// An argument has a value outside its domain (Python's ValueError in Accelerate).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// A name (tensor, module, key) is not present where it was looked up.
class KeyError : public Error {
 public:
  using Error::Error;
};

/// Reading or writing a file failed at the operating-system level.
class IOError : public Error {
 public:
  using Error::Error;
};

/// A collective or process-group operation failed.
class DistributedError : public Error {
 public:
  using Error::Error;
};

/// An allocation could not be satisfied. Carries the device (as text) and the size requested.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(std::string device, std::size_t requested, const std::string& detail = {})
      : Error("out of memory on " + device + ": could not allocate " +
              std::to_string(requested) + " bytes" + (detail.empty() ? "" : " (" + detail + ")")),
        device_(std::move(device)),
        requested_(requested) {}

  /// The device that ran out, spelled as `Device::str()` ("cpu", "cuda:1").
  const std::string& device() const noexcept { return device_; }
  /// Bytes the failed allocation asked for.
  std::size_t requested_bytes() const noexcept { return requested_; }

 private:
  std::string device_;
  std::size_t requested_;
};

}  // namespace accel

// Byte-level helpers shared by the checkpoint readers and writers.
//
//   load_le<T>(p)                 little-endian integer from unaligned bytes (memcpy, no UB)
//   is_valid_utf8(s)              strict UTF-8 check (no overlongs, no surrogates)
//   AtomicFile                    write to a temporary beside the target, fsync, rename
//   write_file_atomic(path, s)    one-shot AtomicFile
//
// Every writer in accel::io goes through AtomicFile, so an error never leaves a half-written
// file under the final name.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/core/errors.hpp"
#include "accel/core/regular_file.hpp"

namespace accel::io {

/// A read-only view of bytes (a mapped file or an in-memory buffer).
using ByteSpan = std::span<const std::byte>;

/// Views the bytes of a string.
inline ByteSpan as_bytes(std::string_view s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

/// Unsigned little-endian integer of sizeof(T) bytes at `p` (any alignment).
template <class T>
T load_le(const std::byte* p) noexcept {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    v = static_cast<T>(v | (static_cast<T>(std::to_integer<unsigned char>(p[i])) << (8 * i)));
  }
  return v;
}

/// Appends `v` as sizeof(T) little-endian bytes.
template <class T>
void store_le(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xFF));
  }
}

/// True when `s` is well-formed UTF-8 (rejects overlong forms, surrogates and > U+10FFFF).
inline bool is_valid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (std::size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

/// A file written under a temporary name in the target's directory and renamed into place by
/// `commit()`. Destroyed without commit, it removes the temporary: no half-written file remains.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)) {
    static std::atomic<unsigned> counter{0};
    const std::filesystem::path p(path_);
    tmp_ = (p.parent_path() / ("." + p.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                               std::to_string(counter.fetch_add(1))))
               .string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IOError("cannot create '" + tmp_ + "' (for '" + path_ + "'): " + std::strerror(errno));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  /// Appends `n` bytes; IOError (naming the final path) on failure.
  void write(const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw IOError("cannot write '" + path_ + "': " + std::strerror(errno));
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void write(std::string_view s) { write(s.data(), s.size()); }

  /// Flushes the temporary to disk and closes it; the final path is untouched until commit().
  /// Lets a caller stage many files without holding a descriptor for each.
  void sync() {
    if (fd_ < 0) return;
    if (::fsync(fd_) != 0) throw IOError("cannot fsync '" + path_ + "': " + std::strerror(errno));
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw IOError("cannot close '" + path_ + "': " + std::strerror(errno));
    }
    fd_ = -1;
  }

  /// Flushes to disk (unless sync() already did) and renames over the final path.
  void commit() {
    sync();
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      throw IOError("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
    }
    committed_ = true;
  }

  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes `content` to `path` atomically.
inline void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

}  // namespace accel::io

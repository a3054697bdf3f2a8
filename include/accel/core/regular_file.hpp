// Only regular files are opened for reading: every reader of checkpoints, indexes, configs and
// specs opens its input here.
//
//   RegularFile f = RegularFile::open(path);    // IOError naming what `path` is when not a file
//   f.size();  f.read_at(buf, n, offset);
//   auto m = map_regular_file(path);            // MappedFile, after the same check
//   read_small_file(path, limit)                // a whole index, config or spec; FormatError past `limit`
//
// A FIFO, a socket, a device or a directory is refused at once instead of being read: a FIFO
// without a writer would block the reader forever, a device may never end, and a directory is
// never a checkpoint. The descriptor is opened with O_NONBLOCK (so opening a FIFO returns at once)
// and its type is taken from fstat on that very descriptor, not from an earlier stat of the path.
// Symbolic links are followed, as the Hugging Face cache (links into blobs/) needs.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"

namespace accel {

/// What a stat mode is, in words, for messages ("a FIFO", "a directory").
inline std::string_view file_type_name(mode_t mode) noexcept {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

/// A read-only descriptor of a regular file, closed when the object dies. Move-only.
class RegularFile {
 public:
  /// Opens `path` for reading; IOError naming it when it cannot be opened or is not a regular file
  /// (the message says what it is instead). Never waits, whatever `path` is.
  static RegularFile open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) throw IOError("cannot open '" + path + "': " + std::strerror(errno));
    RegularFile f(fd, path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw IOError("cannot stat '" + path + "': " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) {
      throw IOError("'" + path + "' is " + std::string(file_type_name(st.st_mode)) + ", not a regular file");
    }
    f.size_ = static_cast<std::uint64_t>(st.st_size);
    return f;
  }

  RegularFile(RegularFile&& o) noexcept : fd_(std::exchange(o.fd_, -1)), size_(o.size_), path_(std::move(o.path_)) {}
  RegularFile& operator=(RegularFile&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = std::exchange(o.fd_, -1);
      size_ = o.size_;
      path_ = std::move(o.path_);
    }
    return *this;
  }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile() { close(); }

  /// The descriptor, open while this object lives (O_NONBLOCK: no effect on a regular file).
  int fd() const noexcept { return fd_; }
  /// Size in bytes when opened.
  std::uint64_t size() const noexcept { return size_; }
  /// The path as given, for messages.
  const std::string& path() const noexcept { return path_; }

  /// Reads up to `n` bytes at `offset`; returns how many were read (fewer only at the end of the
  /// file). IOError naming the file on a read error.
  std::size_t read_at(void* buffer, std::size_t n, std::uint64_t offset) const {
    auto* p = static_cast<char*>(buffer);
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, p + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw IOError("cannot read '" + path_ + "': " + std::strerror(errno));
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    return got;
  }

 private:
  RegularFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::string path_;
};

/// Maps `path` read-only once RegularFile::open has accepted it: MappedFile opens without
/// O_NONBLOCK and would wait on a FIFO. It opens the path again, so only a path replaced by a FIFO
/// between the two opens could still wait; what it maps is checked to be a regular file either way.
inline std::shared_ptr<MappedFile> map_regular_file(const std::string& path) {
  const RegularFile checked = RegularFile::open(path);
  return MappedFile::open(path);
}

/// Reads a whole (small) file: index, config, spec and metadata files. IOError when it is not a
/// regular file (RegularFile), FormatError when it exceeds `limit`.
inline std::string read_small_file(const std::string& path, std::size_t limit = std::size_t{1} << 28) {
  const RegularFile f = RegularFile::open(path);
  if (f.size() > limit) {
    throw FormatError("'" + path + "' is " + std::to_string(f.size()) + " bytes, more than the " + std::to_string(limit) +
                      " accepted for this kind of file");
  }
  std::string out(static_cast<std::size_t>(f.size()), '\0');
  if (f.read_at(out.data(), out.size(), 0) != out.size()) {
    throw IOError("cannot read '" + path + "': unexpected end of file");
  }
  return out;
}

}  // namespace accel

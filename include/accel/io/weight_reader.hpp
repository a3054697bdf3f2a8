// WeightFileReader: reads byte ranges of checkpoint shards and offload files into memory the
// caller owns, with large reads that leave the page cache alone, and checks on every read that
// each file is still the one it was when first opened.
//
//   WeightFileReader r;
//   std::byte* p = r.read(path, offset, nbytes, dst, "model.layers.3.mlp.up_proj.weight");
//   // dst is aligned to WeightFileReader::alignment and has room for aligned_extent(offset, nbytes)
//   // bytes; the range lands at p = dst + offset % alignment.
//
// Why direct reads: an offloaded weight is read once per forward, and the page cache would keep
// every byte read, so the model's disk part would end up in memory the budget never granted (and
// a benchmark would measure the cache, not the disk). Files are opened with O_DIRECT where the
// file system allows it; elsewhere (tmpfs, some network file systems) they are read through the
// cache and each range is dropped from it after the read (POSIX_FADV_DONTNEED).
//
// A file truncated, rewritten or replaced after it was first read (its size, modification time
// or inode changed) is an IOError naming the file and the weight being read, never a read of
// whatever bytes are there now; a range past the file's end is a FormatError naming both.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <map>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/core/errors.hpp"

namespace accel::io {

/// Reads ranges of weight files (see the header comment). One reader serves one thread at a time.
class WeightFileReader {
 public:
  /// Buffer, offset and length alignment of direct reads.
  static constexpr std::uint64_t alignment = 4096;
  /// The largest single read: bigger ranges are read in pieces of this size.
  static constexpr std::uint64_t max_read = std::uint64_t{64} << 20;

  WeightFileReader() = default;
  WeightFileReader(const WeightFileReader&) = delete;
  WeightFileReader& operator=(const WeightFileReader&) = delete;
  ~WeightFileReader() {
    for (auto& [path, f] : files_) ::close(f.fd);
  }

  /// Bytes a destination needs to receive [offset, offset + nbytes) with aligned reads.
  static std::uint64_t aligned_extent(std::uint64_t offset, std::uint64_t nbytes) {
    const std::uint64_t begin = offset / alignment * alignment;
    const std::uint64_t end = (offset + nbytes + alignment - 1) / alignment * alignment;
    return end - begin;
  }

  /// Reads [offset, offset + nbytes) of `path` to dst + offset % alignment and returns that
  /// address. `dst` must be aligned and hold aligned_extent(offset, nbytes) bytes. `what` names the
  /// weight in errors.
  std::byte* read(const std::string& path, std::uint64_t offset, std::uint64_t nbytes, std::byte* dst,
                  const std::string& what) {
    if (reinterpret_cast<std::uintptr_t>(dst) % alignment != 0) {
      throw ValueError("WeightFileReader::read: the destination of '" + what + "' is not " +
                       std::to_string(alignment) + "-byte aligned");
    }
    File& f = file(path, what);
    check_unchanged(path, f, what);
    if (offset > f.size || nbytes > f.size - offset) {
      throw FormatError("'" + path + "' holds " + std::to_string(f.size) + " bytes; weight '" + what + "' needs bytes [" +
                        std::to_string(offset) + ", " + std::to_string(offset + nbytes) + ")");
    }
    const std::uint64_t begin = offset / alignment * alignment;
    const std::uint64_t need = offset + nbytes - begin;  // bytes that must arrive
    const std::uint64_t want = aligned_extent(offset, nbytes);
    std::uint64_t done = 0;
    while (done < need) {
      const std::uint64_t len = std::min(want - done, max_read);
      const ssize_t got = ::pread(f.fd, dst + done, len, static_cast<off_t>(begin + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw IOError("reading weight '" + what + "' from '" + path + "': " + std::strerror(errno));
      }
      if (got == 0) break;  // end of file: checked below
      done += static_cast<std::uint64_t>(got);
    }
    if (done < need) {
      throw IOError("reading weight '" + what + "' from '" + path + "': the file ended after " +
                    std::to_string(begin + done) + " bytes (it changed on disk after loading?)");
    }
    if (!f.direct) (void)::posix_fadvise(f.fd, static_cast<off_t>(begin), static_cast<off_t>(want), POSIX_FADV_DONTNEED);
    bytes_read_ += nbytes;
    return dst + (offset - begin);
  }

  /// Opens `path` now (`what` names the weight in errors): later reads check the file against
  /// what it is at this moment. Returns whether it is read with O_DIRECT (false: through the
  /// cache, each range dropped from it after the read).
  bool open(const std::string& path, const std::string& what) { return file(path, what).direct; }
  /// Weight bytes delivered so far.
  std::uint64_t bytes_read() const noexcept { return bytes_read_; }

 private:
  struct File {
    int fd = -1;
    bool direct = false;
    std::uint64_t size = 0;
    dev_t dev = 0;
    ino_t ino = 0;
    struct timespec mtime {};
  };

  File& file(const std::string& path, const std::string& what) {
    auto it = files_.find(path);
    if (it != files_.end()) return it->second;
    File f;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    f.direct = f.fd >= 0;
    if (f.fd < 0) f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) throw IOError("cannot open '" + path + "' to read weight '" + what + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(f.fd);
      throw IOError("'" + path + "' (weight '" + what + "') is not a regular file");
    }
    f.size = static_cast<std::uint64_t>(st.st_size);
    f.dev = st.st_dev;
    f.ino = st.st_ino;
    f.mtime = st.st_mtim;
    return files_.emplace(path, f).first->second;
  }

  static void check_unchanged(const std::string& path, const File& f, const std::string& what) {
    struct stat st {};
    const bool gone = ::stat(path.c_str(), &st) != 0;
    if (gone || st.st_dev != f.dev || st.st_ino != f.ino || static_cast<std::uint64_t>(st.st_size) != f.size ||
        st.st_mtim.tv_sec != f.mtime.tv_sec || st.st_mtim.tv_nsec != f.mtime.tv_nsec) {
      throw IOError("'" + path + "' changed on disk after the offloaded weights were indexed (reading weight '" + what +
                    "'): " + (gone ? std::string("it is gone") : "it now holds " + std::to_string(st.st_size) + " bytes, was " +
                                                                   std::to_string(f.size)) +
                    "; reload the model");
    }
  }

  std::map<std::string, File> files_;
  std::uint64_t bytes_read_ = 0;
};

}  // namespace accel::io

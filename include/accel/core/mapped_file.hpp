// MappedFile: a whole file mapped read-only; tensors view regions of it without copying.
//
//   auto f = MappedFile::open("model.safetensors");   // shared_ptr, IOError on failure
//   Storage s = f->region(offset, nbytes);             // zero-copy, keeps the mapping alive
//
// The mapping lives until the last storage viewing it is gone. Mapped bytes are not counted as
// allocations; memory_stats(cpu).mapped_bytes reports them.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/core/errors.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/storage.hpp"

namespace accel {

class MappedFile : public std::enable_shared_from_this<MappedFile> {
 public:
  /// Maps `path` read-only. Empty files map to a valid object of size 0.
  static std::shared_ptr<MappedFile> open(const std::string& path) {
    // O_NONBLOCK: a FIFO named like a checkpoint fails the regular-file check below instead of
    // blocking this open until a writer appears.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw IOError("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      throw IOError("cannot stat '" + path + "': " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw IOError("'" + path + "' is not a regular file");
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    void* p = nullptr;
    if (size > 0) {
      p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        throw IOError("cannot map '" + path + "': " + std::strerror(e));
      }
    }
    ::close(fd);  // the mapping stays valid without the descriptor
    return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<std::byte*>(p), size));
  }

  ~MappedFile() {
    if (data_) {
      ::munmap(data_, size_);
      detail::memory_counter(Device::cpu()).unmap(size_);
    }
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

  /// Read-only cpu storage over [offset, offset + nbytes); FormatError if out of the file.
  Storage region(std::size_t offset, std::size_t nbytes) const {
    if (offset > size_ || nbytes > size_ - offset) {
      throw FormatError("'" + path_ + "': region [" + std::to_string(offset) + ", +" +
                        std::to_string(nbytes) + ") lies outside the file of " +
                        std::to_string(size_) + " bytes");
    }
    return Storage::wrap(data_ + offset, nbytes, Device::cpu(), shared_from_this(),
                         /*writable=*/false, MemoryKind::mapped);
  }

 private:
  MappedFile(std::string path, std::byte* data, std::size_t size)
      : path_(std::move(path)), data_(data), size_(size) {
    if (data_) detail::memory_counter(Device::cpu()).map(size_);
  }
  std::string path_;
  std::byte* data_;
  std::size_t size_;
};

}  // namespace accel

// MappedFile: a whole file mapped read-only; tensors view regions of it without copying.
//
//   auto f = MappedFile::open("model.safetensors");   // shared_ptr, IOError on failure
//   Storage s = f->region(offset, nbytes);             // zero-copy, keeps the mapping alive
//   populate_mapped_pages(p, n)                        map a viewed range's pages in one call
//   release_mapped_pages(p, n)                         hand a read-only range's pages back
//
// The mapping lives until the last storage viewing it is gone. Mapped bytes are not counted as
// allocations; memory_stats(cpu).mapped_bytes reports them.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
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

/// Maps the pages under [p, p + n) of a file mapping into the page table now, in one call: first
/// touch would fault them in one by one (a few pages each, for every byte of a forward that
/// reads weights in place). Best effort: kernels before Linux 5.14 and anonymous memory already
/// mapped skip it.
inline void populate_mapped_pages(const void* p, std::size_t n) noexcept {
#if defined(MADV_POPULATE_READ)
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<std::uintptr_t>(p) & ~(page - 1);
  const auto stop = reinterpret_cast<std::uintptr_t>(p) + n;
  if (n > 0) (void)::madvise(reinterpret_cast<void*>(start), stop - start, MADV_POPULATE_READ);
#else
  (void)p;
  (void)n;
#endif
}

/// Hands back the whole pages inside [p, p + n) of a read-only file mapping (MADV_DONTNEED): the
/// process stops holding them, and a later read maps them from the file again. Pages shared with
/// bytes outside the range are left alone. Only for read-only file mappings: anonymous or written
/// pages would lose their contents.
inline void release_mapped_pages(const void* p, std::size_t n) noexcept {
#if defined(MADV_DONTNEED)
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const auto begin = (start + page - 1) & ~(page - 1), end = (start + n) & ~(page - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
#else
  (void)p;
  (void)n;
#endif
}

}  // namespace accel

// Storage: one block of bytes on one device, shared by every tensor that views it.
//
//   Storage::allocate(device, nbytes)    counted, budget-checked; throws OutOfMemoryError; host
//                                        blocks come from and go back to the host block cache
//   Storage::allocate_pinned(nbytes)     page-locked when a CUDA runtime is present
//   Storage::wrap(ptr, n, dev, owner)    external or file-mapped bytes kept alive by `owner`
//
// A tensor on the meta device has no Storage at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "accel/core/device.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/host_block_cache.hpp"
#include "accel/core/memory_stats.hpp"

namespace accel {

/// How a storage's bytes were obtained (and so how they are given back).
enum class MemoryKind : unsigned char { host, pinned, mapped, cuda, external };

namespace detail {

/// The transparent huge page size on x86-64 and most aarch64 kernels.
inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

/// Asks the kernel to back the 2 MiB-aligned interior of a fresh host block with transparent
/// huge pages, before anything touches it. Why: a host block of weights is streamed end to end
/// on every decoded token, and with 4 KiB pages each 2 MiB of it costs 512 TLB misses; and first
/// touch of fresh memory faults 512x fewer times. Kernels whose THP mode is "madvise" (the
/// common default) only do this when asked; "never" ignores the advice, and so does any kernel
/// without THP. Blocks under two huge pages are left alone (no aligned interior worth it).
inline void advise_huge_pages(void* p, std::size_t nbytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (nbytes < 2 * huge_page_bytes) return;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + huge_page_bytes - 1) & ~(huge_page_bytes - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + nbytes) & ~(huge_page_bytes - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)nbytes;
#endif
}

}  // namespace detail

class StorageImpl {
 public:
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  ~StorageImpl() { release(); }

  std::byte* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return nbytes_; }
  Device device() const noexcept { return device_; }
  MemoryKind kind() const noexcept { return kind_; }
  /// File-mapped and external storages may be read-only.
  bool writable() const noexcept { return writable_; }

 private:
  friend class Storage;
  StorageImpl() = default;

  void release() noexcept {
    if (!data_ && !owner_) return;
    switch (kind_) {
      case MemoryKind::host: {
        auto& counter = detail::memory_counter(device_);
        counter.release(nbytes_);
        const std::size_t held = counter.stats().allocated_bytes, limit = counter.limit();
        detail::host_block_cache().deallocate(data_, nbytes_, held < limit ? limit - held : 0);
        break;
      }
      case MemoryKind::pinned:
        if (via_backend_) {
          cuda_backend().deallocate_pinned(data_);
        } else {
          ::operator delete(data_, std::align_val_t(host_alignment));
        }
        detail::memory_counter(Device::cpu()).release(nbytes_);
        detail::pinned_memory_counter().release(nbytes_);
        break;
      case MemoryKind::cuda:
        if (auto* free_fn = cuda_backend().deallocate) free_fn(device_.index(), data_);
        detail::memory_counter(device_).release(nbytes_);
        break;
      case MemoryKind::mapped:
      case MemoryKind::external:
        break;
    }
    owner_.reset();
    data_ = nullptr;
  }

  std::byte* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_ = Device::cpu();
  MemoryKind kind_ = MemoryKind::host;
  bool writable_ = true;
  bool via_backend_ = false;
  std::shared_ptr<const void> owner_;
};

/// Shared handle to a StorageImpl; tensors compare storages by identity.
class Storage {
 public:
  Storage() = default;

  /// `nbytes` on `device` (cpu or cuda:N), uninitialised, counted against the device's budget.
  static Storage allocate(Device device, std::size_t nbytes) {
    if (device.is_meta()) throw DeviceError("cannot allocate storage on the meta device");
    auto& counter = detail::memory_counter(device);
    if (!counter.reserve(nbytes)) {
      throw OutOfMemoryError(device.str(), nbytes,
                             "budget of " + std::to_string(counter.limit()) + " bytes, " +
                                 std::to_string(counter.stats().allocated_bytes) + " in use");
    }
    auto impl = std::shared_ptr<StorageImpl>(new StorageImpl());
    impl->nbytes_ = nbytes;
    impl->device_ = device;
    try {
      if (device.is_cpu()) {
        impl->kind_ = MemoryKind::host;
        // The cache asks for nothrow memory: a failed request must come back here as null
        // (sanitizer runtimes abort inside a throwing operator new instead of throwing bad_alloc).
        auto& cache = detail::host_block_cache();
        cache.fit(counter);
        bool fresh = true;
        impl->data_ = static_cast<std::byte*>(cache.allocate(nbytes, fresh));
        if (!impl->data_) {  // the system is out: what the cache keeps may be the difference
          cache.clear();
          impl->data_ = static_cast<std::byte*>(cache.allocate(nbytes, fresh));
        }
        if (!impl->data_) throw std::bad_alloc();
        if (fresh) detail::advise_huge_pages(impl->data_, nbytes);
      } else {
        impl->kind_ = MemoryKind::cuda;
        impl->data_ = static_cast<std::byte*>(device_backend(device).allocate(device.index(), nbytes));
      }
    } catch (const std::bad_alloc&) {
      counter.release(nbytes);
      impl->data_ = nullptr;
      throw OutOfMemoryError(device.str(), nbytes, "the system allocator failed");
    } catch (...) {
      counter.release(nbytes);
      impl->data_ = nullptr;
      throw;
    }
    return Storage(std::move(impl));
  }

  /// Page-locked host bytes (cudaHostAlloc) when a CUDA runtime with a GPU is present, plain
  /// aligned host bytes otherwise. Counted as cpu memory and in pinned_memory_stats().
  static Storage allocate_pinned(std::size_t nbytes) {
    auto& counter = detail::memory_counter(Device::cpu());
    if (!counter.reserve(nbytes)) throw OutOfMemoryError("cpu", nbytes, "pinned allocation over budget");
    detail::pinned_memory_counter().reserve(nbytes);
    auto impl = std::shared_ptr<StorageImpl>(new StorageImpl());
    impl->nbytes_ = nbytes;
    impl->kind_ = MemoryKind::pinned;
    void* p = nullptr;
    if (cuda_is_available()) {
      p = cuda_backend().allocate_pinned(nbytes ? nbytes : 1);
      impl->via_backend_ = p != nullptr;
    }
    if (!p) p = ::operator new(nbytes ? nbytes : 1, std::align_val_t(host_alignment), std::nothrow);
    if (!p) {
      counter.release(nbytes);
      detail::pinned_memory_counter().release(nbytes);
      throw OutOfMemoryError("cpu", nbytes, "pinned allocation failed");
    }
    impl->data_ = static_cast<std::byte*>(p);
    return Storage(std::move(impl));
  }

  /// Views bytes owned elsewhere; `owner` keeps them alive as long as any tensor uses them.
  /// Not counted as an allocation.
  static Storage wrap(void* data, std::size_t nbytes, Device device,
                      std::shared_ptr<const void> owner, bool writable,
                      MemoryKind kind = MemoryKind::external) {
    auto impl = std::shared_ptr<StorageImpl>(new StorageImpl());
    impl->data_ = static_cast<std::byte*>(data);
    impl->nbytes_ = nbytes;
    impl->device_ = device;
    impl->kind_ = kind;
    impl->writable_ = writable;
    impl->owner_ = std::move(owner);
    return Storage(std::move(impl));
  }

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  std::byte* data() const noexcept { return impl_ ? impl_->data() : nullptr; }
  std::size_t nbytes() const noexcept { return impl_ ? impl_->nbytes() : 0; }
  Device device() const noexcept { return impl_ ? impl_->device() : Device::meta(); }
  MemoryKind kind() const noexcept { return impl_ ? impl_->kind() : MemoryKind::external; }
  bool writable() const noexcept { return impl_ && impl_->writable(); }
  long use_count() const noexcept { return impl_.use_count(); }
  const StorageImpl* get() const noexcept { return impl_.get(); }

  friend bool operator==(const Storage& a, const Storage& b) noexcept { return a.impl_ == b.impl_; }

 private:
  explicit Storage(std::shared_ptr<StorageImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<StorageImpl> impl_;
};

}  // namespace accel

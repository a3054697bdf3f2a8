// The CUDA runtime side of accel: error checks, devices, streams, events and the runtime slots
// of the device backend (core/device_backend.hpp), through which the tensor layer reaches CUDA
// memory. Host code only (<cuda_runtime_api.h>, no kernels): any g++ translation unit may
// include it when ACCEL_WITH_CUDA is defined.
//
//   cuda::check(err, what)                 DeviceError naming the call and CUDA's message
//   cuda::device_count()                   0 (never throws) when no driver or GPU is visible
//   cuda::device_properties(i), mem_get_info(i)
//   cuda::DeviceGuard, Stream, Event       RAII over cudaSetDevice / cudaStream_t / cudaEvent_t
//   cuda::current_stream(i), StreamGuard   this thread's stream for device i (default: legacy 0)
//   cuda::synchronize(i)
//   cuda::CudaRuntime                      memory (cached: backend/cuda/caching_allocator.hpp), copies
//                                          and fills; its functions fill the runtime slots of
//                                          accel::cuda_backend() at start-up
//   cuda::empty_cache(i)                   freed device memory back to the driver
//
// Every copy, fill and kernel of the backend runs on the current stream of its device, and a
// blocking copy waits for that stream, so work queued by the ops is always finished first.
//
// Uploads from pageable host memory (a memory-mapped checkpoint, say) of at least
// staged_upload_min_bytes go through two pinned staging blocks per device: the CPU threads fill
// one block while the DMA engine drains the other, instead of the driver's single-threaded
// pageable path. The blocks (2 x staged_upload_block_bytes per device, allocated on first use and
// kept) are the backend's own and are not counted in memory_stats.
#pragma once

#if defined(ACCEL_WITH_CUDA)

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "accel/backend/cuda/caching_allocator.hpp"
#include "accel/core/device.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/parallel.hpp"

namespace accel::cuda {

/// Throws DeviceError "CUDA error in <what>: <name> (<message>)" unless `err` is cudaSuccess.
/// The runtime's last-error slot is cleared, so one failure is reported once.
inline void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  throw DeviceError(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ")");
}

/// Visible GPUs; 0 when the driver is missing or too old, or no GPU is visible. Read once: the
/// set of visible devices is fixed for the life of the process.
inline int device_count() noexcept {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return std::clamp(n, 0, accel::detail::max_cuda_devices);
  }();
  return count;
}

/// DeviceError unless `index` names a visible GPU; `op` prefixes the message.
inline void check_device_index(int index, const char* op) {
  const int n = device_count();
  if (index < 0 || index >= n) {
    throw DeviceError(std::string(op) + ": cuda:" + std::to_string(index) + " is not available (" +
                      std::to_string(n) + " CUDA device(s) visible)");
  }
}

/// Makes `index` the current device for the scope and restores the previous one at exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index) {
      check(cudaSetDevice(index), "cudaSetDevice");
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// What a planner needs to know about one GPU.
struct DeviceProperties {
  std::string name;
  std::size_t total_memory = 0;  ///< bytes of global memory
  int multiprocessor_count = 0;
  int major = 0;  ///< compute capability, e.g. 9.0 for H100
  int minor = 0;
};

/// Properties of GPU `index`; DeviceError when it does not exist.
inline DeviceProperties device_properties(int index) {
  check_device_index(index, "device_properties");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  DeviceProperties r;
  r.name = p.name;
  r.total_memory = p.totalGlobalMem;
  r.multiprocessor_count = p.multiProcessorCount;
  r.major = p.major;
  r.minor = p.minor;
  return r;
}

/// Free and total bytes of a GPU as the driver sees them (other processes included).
struct MemInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// cudaMemGetInfo on GPU `index`: what `max_memory` probing starts from.
inline MemInfo mem_get_info(int index) {
  check_device_index(index, "mem_get_info");
  DeviceGuard g(index);
  MemInfo m;
  check(cudaMemGetInfo(&m.free_bytes, &m.total_bytes), "cudaMemGetInfo");
  return m;
}

// ---- streams --------------------------------------------------------------------------------

namespace detail {
inline std::array<cudaStream_t, accel::detail::max_cuda_devices>& current_streams() noexcept {
  thread_local std::array<cudaStream_t, accel::detail::max_cuda_devices> streams{};
  return streams;
}
}  // namespace detail

/// This thread's current stream on GPU `index` (nullptr, the legacy default stream, unless a
/// StreamGuard or set_current_stream chose another).
inline cudaStream_t current_stream(int index) {
  if (index < 0 || index >= accel::detail::max_cuda_devices) {
    throw DeviceError("current_stream: invalid CUDA device index " + std::to_string(index));
  }
  return detail::current_streams()[static_cast<std::size_t>(index)];
}

/// Makes `s` (a stream created on GPU `index`) this thread's current stream there.
inline void set_current_stream(int index, cudaStream_t s) {
  (void)current_stream(index);  // validates the index
  detail::current_streams()[static_cast<std::size_t>(index)] = s;
}

/// Waits for all work queued on GPU `index`, on every stream.
inline void synchronize(int index) {
  check_device_index(index, "synchronize");
  DeviceGuard g(index);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

class Event;

/// An owned CUDA stream on one GPU. Non-blocking streams do not wait for the legacy default
/// stream; a lower priority number runs first (cudaDeviceGetStreamPriorityRange).
class Stream {
 public:
  explicit Stream(int device, bool non_blocking = true, int priority = 0) : device_(device) {
    check_device_index(device, "Stream");
    DeviceGuard g(device);
    check(cudaStreamCreateWithPriority(&stream_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault,
                                       priority),
          "cudaStreamCreateWithPriority");
  }
  ~Stream() {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (stream_) (void)cudaStreamDestroy(stream_);
      stream_ = std::exchange(o.stream_, nullptr);
      device_ = o.device_;
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t handle() const noexcept { return stream_; }
  int device() const noexcept { return device_; }
  /// Blocks until everything queued on the stream has run.
  void synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  /// True when the stream has no pending work.
  bool query() const {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaErrorNotReady) return false;
    check(e, "cudaStreamQuery");
    return true;
  }
  /// Later work on this stream waits for `e` (recorded on any stream, any GPU).
  void wait(const Event& e) const;

  /// (least, greatest) priority numbers that GPU `device` accepts.
  static std::pair<int, int> priority_range(int device) {
    DeviceGuard g(device);
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    return {least, greatest};
  }

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

/// Makes a stream current on its GPU for the scope (this thread only), restoring the previous.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s) : StreamGuard(s.device(), s.handle()) {}
  StreamGuard(int device, cudaStream_t s) : device_(device), previous_(current_stream(device)) {
    set_current_stream(device, s);
  }
  ~StreamGuard() { detail::current_streams()[static_cast<std::size_t>(device_)] = previous_; }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

/// A CUDA event, created on the GPU of the first stream it is recorded on. With timing enabled,
/// `elapsed_ms` measures between two recorded events.
class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event() {
    if (event_) (void)cudaEventDestroy(event_);
  }
  Event(Event&& o) noexcept
      : event_(std::exchange(o.event_, nullptr)), device_(o.device_), timing_(o.timing_) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (event_) (void)cudaEventDestroy(event_);
      event_ = std::exchange(o.event_, nullptr);
      device_ = o.device_;
      timing_ = o.timing_;
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Records the event at the current end of stream `s` of GPU `device`.
  void record(int device, cudaStream_t s) {
    check_device_index(device, "Event::record");
    if (event_ && device != device_) {
      throw DeviceError("Event::record: event was created on cuda:" + std::to_string(device_) +
                        ", cannot record it on cuda:" + std::to_string(device));
    }
    DeviceGuard g(device);
    if (!event_) {
      check(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
      device_ = device;
    }
    check(cudaEventRecord(event_, s), "cudaEventRecord");
  }
  void record(const Stream& s) { record(s.device(), s.handle()); }
  /// Records on this thread's current stream of GPU `device`.
  void record(int device) { record(device, current_stream(device)); }

  /// Blocks until the recorded work is done (returns at once if never recorded).
  void synchronize() const {
    if (event_) check(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  /// True when the recorded work is done (or nothing was recorded).
  bool query() const {
    if (!event_) return true;
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    check(e, "cudaEventQuery");
    return true;
  }
  /// Milliseconds from this event to `end`; both recorded, completed and timing-enabled.
  float elapsed_ms(const Event& end) const {
    if (!event_ || !end.event_) throw ValueError("Event::elapsed_ms: both events must be recorded first");
    if (!timing_ || !end.timing_) throw ValueError("Event::elapsed_ms: events need enable_timing = true");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, event_, end.event_), "cudaEventElapsedTime");
    return ms;
  }
  cudaEvent_t handle() const noexcept { return event_; }
  int device() const noexcept { return device_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
  bool timing_ = false;
};

inline void Stream::wait(const Event& e) const {
  if (!e.handle()) return;
  DeviceGuard g(device_);
  check(cudaStreamWaitEvent(stream_, e.handle(), 0), "cudaStreamWaitEvent");
}

// ---- staged uploads -----------------------------------------------------------------------------

inline constexpr std::size_t staged_upload_min_bytes = std::size_t{4} << 20;
inline constexpr std::size_t staged_upload_block_bytes = std::size_t{16} << 20;

/// True when `p` is host memory the GPU cannot read directly (not allocated or registered with
/// CUDA), i.e. a copy from it would go through the driver's pageable path.
inline bool is_pageable_host(const void* p) noexcept {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeUnregistered;
}

/// Two pinned blocks and their events for one device; used under the device's mutex.
class StagingPair {
 public:
  StagingPair() = default;
  StagingPair(const StagingPair&) = delete;
  StagingPair& operator=(const StagingPair&) = delete;
  ~StagingPair() {
    for (auto& b : blocks_) {
      if (b.done) (void)cudaEventDestroy(b.done);
      if (b.data) (void)cudaFreeHost(b.data);
    }
  }

  /// Copies `nbytes` from pageable `src` to device memory `dst` on `stream`. Returns false (and
  /// copies nothing) when the staging blocks cannot be allocated; the caller then falls back.
  bool upload(void* dst, const void* src, std::size_t nbytes, cudaStream_t stream) {
    if (!ready()) return false;
    auto* out = static_cast<std::byte*>(dst);
    const auto* in = static_cast<const std::byte*>(src);
    for (std::size_t done = 0, i = 0; done < nbytes; ++i) {
      Block& b = blocks_[i % 2];
      const std::size_t n = std::min(staged_upload_block_bytes, nbytes - done);
      check(cudaEventSynchronize(b.done), "cudaEventSynchronize (staging)");  // its last DMA has finished
      constexpr std::size_t grain = std::size_t{1} << 20;
      parallel_for((n + grain - 1) / grain, 1, [&](std::size_t lo, std::size_t hi) {
        const std::size_t begin = lo * grain, end = std::min(n, hi * grain);
        prefault(in + done + begin, end - begin);
        std::memcpy(b.data + begin, in + done + begin, end - begin);
      });
      check(cudaMemcpyAsync(out + done, b.data, n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (staged)");
      check(cudaEventRecord(b.done, stream), "cudaEventRecord (staging)");
      done += n;
    }
    return true;
  }

 private:
  struct Block {
    std::byte* data = nullptr;
    cudaEvent_t done = nullptr;
  };

  // A memory-mapped checkpoint faults its pages in one by one on first touch; asking the kernel
  // to map the whole range in one call is several times faster (core/mapped_file.hpp).
  static void prefault(const std::byte* p, std::size_t n) noexcept { populate_mapped_pages(p, n); }

  bool ready() {
    for (auto& b : blocks_) {
      if (!b.data && cudaHostAlloc(reinterpret_cast<void**>(&b.data), staged_upload_block_bytes,
                                   cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        b.data = nullptr;
        return false;
      }
      if (!b.done && cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        b.done = nullptr;
        return false;
      }
    }
    return true;
  }

  std::array<Block, 2> blocks_{};
};

// ---- the backend ------------------------------------------------------------------------------


/// Memory, copies and fills over the CUDA runtime (see the header comment for stream semantics).
class CudaRuntime {
 public:

  /// Device memory from the caching allocator (backend/cuda/caching_allocator.hpp): a block
  /// freed earlier is reused, ordered after the work that used it.
  void* allocate(int index, std::size_t nbytes) {
    check_device_index(index, "allocate");
    DeviceGuard g(index);
    cudaError_t e = cudaSuccess;
    void* p = cache_.allocate(index, nbytes, current_stream(index), &e);
    if (!p) {
      throw OutOfMemoryError("cuda:" + std::to_string(index), nbytes,
                             std::string("cudaMalloc (with the cache released): ") + cudaGetErrorString(e));
    }
    return p;
  }

  /// Returns `p` to the cache, after the work queued on this thread's current stream.
  void deallocate(int index, void* p) noexcept {
    if (!p || index < 0 || index >= accel::detail::max_cuda_devices) return;
    int previous = -1;
    const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != index &&
                               cudaSetDevice(index) == cudaSuccess;
    // Errors here (e.g. the runtime already unloading at exit) have nobody to report to.
    cache_.deallocate(index, p, detail::current_streams()[static_cast<std::size_t>(index)]);
    if (switch_device) (void)cudaSetDevice(previous);
  }

  /// Gives the cached blocks of GPU `index` back to the driver (Accelerate's clear_device_cache).
  void empty_cache(int index) {
    check_device_index(index, "empty_cache");
    DeviceGuard g(index);
    cache_.empty_cache(index);
  }
  /// Bytes of freed device memory the cache holds for GPU `index`.
  std::size_t cached_bytes(int index) const { return cache_.cached_bytes(index); }

  void* allocate_pinned(std::size_t nbytes) noexcept {
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<std::size_t>(nbytes, 1), cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }

  void deallocate_pinned(void* p) noexcept {
    if (p && cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
            bool non_blocking) {
    if (nbytes == 0) return;
    if (!dst_device.is_cuda() && !src_device.is_cuda()) {
      std::memcpy(dst, src, nbytes);
      return;
    }
    const int dev = dst_device.is_cuda() ? dst_device.index() : src_device.index();
    check_device_index(dev, "copy");
    DeviceGuard g(dev);
    cudaStream_t s = current_stream(dev);
    if (dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device) {
      const int sdev = src_device.index();
      check_device_index(sdev, "copy");
      wait_for_stream_of(sdev, s);
      check(cudaMemcpyPeerAsync(dst, dev, src, sdev, nbytes, s), "cudaMemcpyPeerAsync");
    } else if (!(dst_device.is_cuda() && !src_device.is_cuda() && nbytes >= staged_upload_min_bytes &&
                 is_pageable_host(src) && staged_upload(dev, dst, src, nbytes, s))) {
      check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
    }
    if (!non_blocking) check(cudaStreamSynchronize(s), "cudaStreamSynchronize (copy)");
  }

  /// The copy_on_stream slot: queued on `s` (null: the current stream); pageable host sources
  /// of staged_upload_min_bytes or more go through the staging pair, so they have been read on
  /// return, and smaller ones through the driver's pageable path, which also reads them first.
  void copy_on_stream(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
                      cudaStream_t s) {
    if (nbytes == 0) return;
    if (!dst_device.is_cuda() && !src_device.is_cuda()) {
      std::memcpy(dst, src, nbytes);
      return;
    }
    if (dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device) {
      throw DeviceError("copy_on_stream: " + src_device.str() + " to " + dst_device.str() +
                        " is a peer copy; queue it with copy() on the current streams");
    }
    const int dev = dst_device.is_cuda() ? dst_device.index() : src_device.index();
    check_device_index(dev, "copy_on_stream");
    DeviceGuard g(dev);
    if (!s) s = current_stream(dev);
    if (dst_device.is_cuda() && !src_device.is_cuda() && nbytes >= staged_upload_min_bytes && is_pageable_host(src) &&
        staged_upload(dev, dst, src, nbytes, s)) {
      return;
    }
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s), "cudaMemcpyAsync (copy_on_stream)");
  }

  void fill(Device d, void* dst, const void* pattern, std::size_t pattern_bytes,
            std::size_t count) {
    if (count == 0 || pattern_bytes == 0) return;
    check_device_index(d.index(), "fill");
    DeviceGuard g(d.index());
    cudaStream_t s = current_stream(d.index());
    const auto* pat = static_cast<const unsigned char*>(pattern);
    // A pattern of one repeated byte (zero above all) is a memset.
    if (std::all_of(pat, pat + pattern_bytes, [&](unsigned char c) { return c == pat[0]; })) {
      check(cudaMemsetAsync(dst, pat[0], pattern_bytes * count, s), "cudaMemsetAsync");
      return;
    }
    if (auto* kernel = cuda_backend().fill_kernel; kernel && kernel(d, dst, pattern, pattern_bytes, count)) {
      return;
    }
    // No kernel compiled in: repeat the pattern in a host buffer and upload it chunk by chunk.
    const std::size_t chunk = std::min<std::size_t>(count, std::max<std::size_t>(1, (std::size_t{1} << 20) / pattern_bytes));
    std::vector<unsigned char> buf(chunk * pattern_bytes);
    for (std::size_t i = 0; i < chunk; ++i) std::memcpy(buf.data() + i * pattern_bytes, pat, pattern_bytes);
    auto* out = static_cast<unsigned char*>(dst);
    for (std::size_t done = 0; done < count; done += chunk) {
      const std::size_t m = std::min(chunk, count - done);
      check(cudaMemcpyAsync(out + done * pattern_bytes, buf.data(), m * pattern_bytes, cudaMemcpyHostToDevice, s),
            "cudaMemcpyAsync (fill)");
    }
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (fill)");  // buf dies at return
  }

 private:
  struct DeviceStaging {
    std::mutex mutex;
    StagingPair pair;
  };

  bool staged_upload(int dev, void* dst, const void* src, std::size_t nbytes, cudaStream_t s) {
    DeviceStaging& st = staging_[static_cast<std::size_t>(dev)];
    std::lock_guard lock(st.mutex);
    return st.pair.upload(dst, src, nbytes, s);
  }

  std::array<DeviceStaging, accel::detail::max_cuda_devices> staging_;

  // Orders stream `s` (current device) after the work queued on GPU `src_dev`'s current stream.
  static void wait_for_stream_of(int src_dev, cudaStream_t s) {
    cudaEvent_t e = nullptr;
    {
      DeviceGuard g(src_dev);
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      const cudaError_t r = cudaEventRecord(e, current_stream(src_dev));
      if (r != cudaSuccess) {
        (void)cudaEventDestroy(e);
        check(r, "cudaEventRecord");
      }
    }
    const cudaError_t w = cudaStreamWaitEvent(s, e, 0);
    (void)cudaEventDestroy(e);  // released once the wait has been satisfied
    check(w, "cudaStreamWaitEvent");
  }

  CachingAllocator cache_;
};

/// The process-wide runtime. Never destroyed: storages freed during static destruction may
/// still reach it through the device backend's slots.
inline CudaRuntime& runtime() {
  static CudaRuntime* r = new CudaRuntime();
  return *r;
}

/// Gives the freed device memory the cache holds for GPU `index` back to the driver.
inline void empty_cache(int index) { runtime().empty_cache(index); }

namespace detail {
/// Start-up registration of the runtime slots: any translation unit that includes this header
/// installs them (the same functions every time, so the order of TUs does not matter).
inline const bool runtime_registered = [] {
  DeviceBackend& b = cuda_backend();
  b.device_count = [] () noexcept { return cuda::device_count(); };
  b.allocate = [](int index, std::size_t nbytes) { return runtime().allocate(index, nbytes); };
  b.deallocate = [](int index, void* p) noexcept { runtime().deallocate(index, p); };
  b.allocate_pinned = [](std::size_t nbytes) noexcept { return runtime().allocate_pinned(nbytes); };
  b.deallocate_pinned = [](void* p) noexcept { runtime().deallocate_pinned(p); };
  b.copy = [](void* dst, Device dd, const void* src, Device sd, std::size_t n, bool non_blocking) {
    runtime().copy(dst, dd, src, sd, n, non_blocking);
  };
  b.fill = [](Device d, void* dst, const void* pattern, std::size_t pattern_bytes, std::size_t count) {
    runtime().fill(d, dst, pattern, pattern_bytes, count);
  };
  b.synchronize = [](int index) { cuda::synchronize(index); };
  b.stream_create = [](int index) -> void* {
    check_device_index(index, "stream_create");
    DeviceGuard g(index);
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
    return s;
  };
  b.stream_destroy = [](int, void* s) noexcept {
    if (s) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
  };
  b.event_create = [](int index) -> void* {
    check_device_index(index, "event_create");
    DeviceGuard g(index);
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  };
  b.event_destroy = [](int, void* e) noexcept {
    if (e) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
  };
  b.event_record = [](int index, void* e, void* s) {
    DeviceGuard g(index);
    check(cudaEventRecord(static_cast<cudaEvent_t>(e), s ? static_cast<cudaStream_t>(s) : current_stream(index)),
          "cudaEventRecord");
  };
  b.stream_wait_event = [](int index, void* s, void* e) {
    DeviceGuard g(index);
    check(cudaStreamWaitEvent(s ? static_cast<cudaStream_t>(s) : current_stream(index), static_cast<cudaEvent_t>(e), 0),
          "cudaStreamWaitEvent");
  };
  b.event_synchronize = [](int, void* e) { check(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "cudaEventSynchronize"); };
  b.copy_on_stream = [](void* dst, Device dd, const void* src, Device sd, std::size_t n, void* s) {
    runtime().copy_on_stream(dst, dd, src, sd, n, static_cast<cudaStream_t>(s));
  };
  b.mem_get_info = [](int index, std::size_t* free_bytes, std::size_t* total_bytes) {
    const MemInfo m = mem_get_info(index);
    *free_bytes = m.free_bytes;
    *total_bytes = m.total_bytes;
  };
  return true;
}();
}  // namespace detail

}  // namespace accel::cuda

#endif  // ACCEL_WITH_CUDA

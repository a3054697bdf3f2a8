// The NCCL communicator under multi_gpu<nccl>: one per process, for the GPU this process owns,
// created at the first collective on a CUDA tensor.
//
//   detail::NcclGroup& g = detail::NcclGroup::join(mpi_group, device);
//   g.all_gather(send, n, recv, op)  g.broadcast(buf, n, root, op)
//   g.all_reduce(buf, count, dtype, factor, op)      sum, each input multiplied by `factor` first
//
// Why it looks like this:
// - The communicator is bootstrapped over MPI: rank 0 draws the ncclUniqueId and broadcasts it
//   over the MPI group, so no other rendezvous (no TCP store, no MASTER_ADDR) is involved.
// - It is non-blocking (ncclConfig_t::blocking = 0): creation and every call are polled, like the
//   stream they run on, against the InitProcessGroupKwargs timeout. A peer that never arrives gets
//   the communicator aborted (ncclCommAbort) and a DistributedError instead of a hang.
// - Calls run on the device's current stream (backend/cuda/runtime.hpp), so they follow the work
//   queued before them; each collective waits for its stream before returning, so the tensors it
//   returns are final and temporary buffers may be freed.
// - mean and scale become one NCCL call: a PreMulSum operator multiplies every input by
//   scale / num_processes before summing (floating dtypes). Integer sums use ncclSum, bool's "or"
//   is ncclMax over bytes.
//
// Built only with ACCEL_WITH_NCCL, ACCEL_WITH_CUDA and ACCEL_WITH_MPI (CMake sets them when the
// toolkit ships NCCL and MPI is found).
#pragma once

#if defined(ACCEL_WITH_NCCL) && defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_MPI)

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "accel/backend/cuda/runtime.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/dist/mpi.hpp"

namespace accel::dist::detail {

class NcclGroup {
 public:
  /// The process's communicator on GPU `device`, created on the first call (later calls must name
  /// the same device).
  static NcclGroup& join(MpiGroup* mpi, int device) {
    static std::once_flag once;
    static std::unique_ptr<NcclGroup> group;
    std::call_once(once, [&] { group.reset(new NcclGroup(mpi, device)); });
    if (group->device_ != device) {
      throw DeviceError("multi_gpu<nccl>: this process communicates on cuda:" + std::to_string(group->device_) +
                        ", not cuda:" + std::to_string(device));
    }
    return *group;
  }

  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  ~NcclGroup() {
    if (comm_ == nullptr) return;
    if (broken_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommFinalize(comm_);
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress) sched_yield();
      ncclCommDestroy(comm_);
    }
  }

  int device() const noexcept { return device_; }

  void all_gather(const void* send, std::size_t bytes, void* recv, const char* op) {
    begin(op);
    cuda::DeviceGuard g(device_);
    finish(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream()), op, "ncclAllGather");
  }

  void broadcast(void* buf, std::size_t bytes, int root, const char* op) {
    begin(op);
    cuda::DeviceGuard g(device_);
    finish(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream()), op, "ncclBroadcast");
  }

  /// Sums `count` elements of `dtype` in place; floating inputs are multiplied by `factor` first.
  void all_reduce(void* buf, std::size_t count, DType dtype, double factor, const char* op) {
    begin(op);
    cuda::DeviceGuard g(device_);
    const ncclDataType_t type = datatype(dtype, op);
    if (dtype == DType::boolean) {
      finish(ncclAllReduce(buf, buf, count, ncclUint8, ncclMax, comm_, stream()), op, "ncclAllReduce");
      return;
    }
    if (factor == 1.0 || !is_floating_point(dtype)) {
      finish(ncclAllReduce(buf, buf, count, type, ncclSum, comm_, stream()), op, "ncclAllReduce");
      return;
    }
    // The scalar lives on the host and is read when the call is enqueued; its type is the data's.
    ncclRedOp_t premul;
    float f32 = static_cast<float>(factor);
    double f64 = factor;
    void* scalar = dtype == DType::f64 ? static_cast<void*>(&f64) : static_cast<void*>(&f32);
    ncclDataType_t scalar_type = dtype == DType::f64 ? ncclFloat64 : type;
    std::uint16_t half_bits = 0;
    if (dtype == DType::f16 || dtype == DType::bf16) {
      half_bits = dtype == DType::f16 ? accel::half(f32).bits : accel::bfloat16(f32).bits;
      scalar = &half_bits;
    }
    check(ncclRedOpCreatePreMulSum(&premul, scalar, scalar_type, ncclScalarHostImmediate, comm_), op,
          "ncclRedOpCreatePreMulSum");
    finish(ncclAllReduce(buf, buf, count, type, premul, comm_, stream()), op, "ncclAllReduce");
    ncclRedOpDestroy(premul, comm_);
  }

  /// NCCL's type for a dtype's reduction; DTypeError for those NCCL has none of (i16, fp8: the
  /// collectives reduce them in a wider type).
  static ncclDataType_t datatype(DType dtype, const char* op) {
    switch (dtype) {
      case DType::f64: return ncclFloat64;
      case DType::f32: return ncclFloat32;
      case DType::f16: return ncclFloat16;
      case DType::bf16: return ncclBfloat16;
      case DType::i64: return ncclInt64;
      case DType::i32: return ncclInt32;
      case DType::i8: return ncclInt8;
      case DType::u8: return ncclUint8;
      case DType::boolean: return ncclUint8;
      default: break;
    }
    throw DTypeError(std::string(op) + ": NCCL cannot reduce " + std::string(dtype_name(dtype)) + " tensors");
  }

 private:
  NcclGroup(MpiGroup* mpi, int device) : device_(device) {
    const int size = mpi ? mpi->size() : 1;
    const int rank = mpi ? mpi->rank() : 0;
    timeout_ = mpi ? mpi->timeout() : std::chrono::milliseconds(std::chrono::minutes(10));
    cuda::check_device_index(device, "multi_gpu<nccl>");
    ncclUniqueId id{};
    if (rank == 0) check(ncclGetUniqueId(&id), "init_process_group", "ncclGetUniqueId");
    if (mpi) mpi->broadcast(&id, sizeof id, 0, "init_process_group (NCCL id)");
    cuda::DeviceGuard g(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t rc = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) check(rc, "init_process_group", "ncclCommInitRankConfig");
    poll_comm("init_process_group");
  }

  cudaStream_t stream() const { return cuda::current_stream(device_); }

  void begin(const char* op) const {
    if (broken_) {
      throw DistributedError(std::string(op) + ": an earlier NCCL collective failed or timed out; the communicator "
                             "cannot be used any more");
    }
  }

  void check(ncclResult_t rc, const char* op, const char* call) {
    if (rc == ncclSuccess) return;
    broken_ = true;
    throw DistributedError(std::string(op) + ": " + call + " failed: " + ncclGetErrorString(rc) +
                           (comm_ ? std::string(" (") + ncclGetLastError(comm_) + ")" : std::string()));
  }

  void expired(const char* op) {
    broken_ = true;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    throw DistributedError(std::string(op) + ": timed out after " +
                           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
                           " s waiting for the other processes' GPUs (the communicator was aborted)");
  }

  /// Waits until the communicator has no call in progress (non-blocking mode).
  void poll_comm(const char* op) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), op, "ncclCommGetAsyncError");
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) check(state, op, "NCCL");
      if (std::chrono::steady_clock::now() - start > timeout_) expired(op);
      sched_yield();
    }
  }

  /// Waits for an enqueued call: its enqueueing (non-blocking mode), then the stream's work.
  void finish(ncclResult_t rc, const char* op, const char* call) {
    if (rc != ncclSuccess && rc != ncclInProgress) check(rc, op, call);
    poll_comm(op);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream());
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda::check(q, op);
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), op, "ncclCommGetAsyncError");
      if (state != ncclSuccess && state != ncclInProgress) check(state, op, call);
      if (std::chrono::steady_clock::now() - start > timeout_) expired(op);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  std::chrono::milliseconds timeout_{};
  bool broken_ = false;
};

}  // namespace accel::dist::detail

#endif

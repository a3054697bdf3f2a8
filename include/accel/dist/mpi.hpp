// The MPI process group under multi_cpu<mpi> (and the CPU side and NCCL bootstrap of
// multi_gpu<nccl>): one per process, joined at first use, left at exit.
//
//   detail::MpiGroup& g = detail::MpiGroup::join(timeout);     MPI_Init_thread unless already done
//   g.rank(), g.size(), g.local_rank(), g.local_size()           MPI's answers (the node from
//                                                                MPI_Comm_split_type SHARED)
//   g.barrier(op)  g.broadcast(buf, n, root, op)  g.all_gather(send, n, recv, op)
//   g.all_gather_bytes(bytes, op)  g.broadcast_bytes(bytes, root, op)
//   g.all_reduce(buf, count, dtype, sum_or_or, op)              in place; f32 f64 and the integers
//   g.send(buf, n, dest, tag, op)  g.recv(buf, n, source, tag, op)   point to point (pipeline stages)
//
// Why it looks like this:
// - The group works on a duplicate of MPI_COMM_WORLD, so a program's own MPI traffic never meets
//   accel's, and errors return (MPI_ERRORS_RETURN) and become DistributedErrors naming the
//   operation, instead of aborting the job.
// - Every call is the non-blocking form followed by a wait that polls MPI_Test against the
//   InitProcessGroupKwargs timeout (MPI has none of its own): a process whose peers never arrive
//   gets a DistributedError after the timeout instead of hanging. The group is then broken (its
//   pending call cannot be cancelled) and every later call fails at once; at exit it is aborted,
//   not finalized, so the launcher ends the other processes too.
// - The wait tests for up to 20 ms while the node's processes have a core each (Open MPI moves a
//   transfer on only inside MPI_Test), then yields, then sleeps in short steps; processes that
//   outnumber the cores (mpirun --oversubscribe) yield at once and still let each other run.
// - All-reduces of 256 KiB and more ask Open MPI's non-blocking collectives for their ring
//   algorithm (dist/mpi_tuning.hpp): for fewer than four processes libnbc would take a binomial
//   tree at half the rate.
// - all_gather in groups of up to four processes is a point-to-point exchange (every process
//   receives each peer's block straight into its place and sends its own to each peer) on a
//   communicator of its own: libnbc's non-blocking all-gather ran 10-25% slower than the blocking
//   MPI_Allgather between two processes at 256 KiB - 1 MiB, the exchange within a few percent of
//   it, and ahead of both with three. The bytes on each link are those of a ring; larger groups,
//   where so many messages at once would crowd a network, keep MPI_Iallgather.
// - Byte counts above what an MPI int holds are sent in chunks of 1 GiB.
// - MPI is initialized with MPI_THREAD_SERIALIZED: collectives may come from any thread, one at a
//   time. A program that called MPI_Init itself keeps it, and finalizes it itself.
#pragma once

#if defined(ACCEL_WITH_MPI)

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/dist/mpi_tuning.hpp"

namespace accel::dist::detail {

/// What an all_reduce combines with.
enum class MpiReduce : std::uint8_t { sum, logical_or };

class MpiGroup {
 public:
  /// The process's group: joins MPI on the first call (the timeout of that call is kept).
  static MpiGroup& join(std::chrono::milliseconds timeout) {
    static std::once_flag once;
    static std::unique_ptr<MpiGroup> group;
    std::call_once(once, [&] { group.reset(new MpiGroup(timeout)); });
    return *group;
  }

  /// True when this process runs under MPI already (a launcher's MPI_Init or the program's own).
  static bool initialized() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
  }

  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;
  ~MpiGroup() {
    if (broken_) {
      // A collective is still pending and cannot be cancelled: finalizing would wait for it.
      MPI_Abort(comm_, 1);
      return;
    }
    if (exchange_comm_ != MPI_COMM_NULL) MPI_Comm_free(&exchange_comm_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    tuning_.reset();
    if (owns_init_) {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Finalize();
    }
  }

  /// How long a wait keeps testing before it yields; waits for another process's compute (a
  /// pipeline stage) would only take a core from it, so they set zero for their calls.
  std::chrono::steady_clock::duration spin_budget() const noexcept { return spin_budget_; }
  void set_spin_budget(std::chrono::steady_clock::duration d) noexcept { spin_budget_ = d; }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  MPI_Comm comm() const noexcept { return comm_; }

  void barrier(const char* op) {
    usable(op);
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), op, "MPI_Ibarrier");
    wait(req, op);
  }

  /// `bytes` bytes of `buf` from `root` to every process, in place.
  void broadcast(void* buf, std::size_t bytes, int root, const char* op) {
    usable(op);
    auto* p = static_cast<char*>(buf);
    for (std::size_t off = 0; off < bytes; off += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, bytes - off);
      MPI_Request req;
      check(MPI_Ibcast(p + off, static_cast<int>(n), MPI_BYTE, root, comm_, &req), op, "MPI_Ibcast");
      wait(req, op);
    }
  }

  /// Every process's `bytes` bytes of `send`, in rank order, into `recv` (size() * bytes).
  void all_gather(const void* send, std::size_t bytes, void* recv, const char* op) {
    usable(op);
    if (bytes == 0) return;
    auto* out = static_cast<char*>(recv);
    const auto* in = static_cast<const char*>(send);
    if (size_ <= exchange_max_processes) {
      exchange(in, bytes, out, op);
      return;
    }
    if (bytes <= chunk_bytes) {
      MPI_Request req;
      check(MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE, comm_, &req),
            op, "MPI_Iallgather");
      wait(req, op);
      return;
    }
    std::vector<char> staging(chunk_bytes * static_cast<std::size_t>(size_));
    for (std::size_t off = 0; off < bytes; off += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, bytes - off);
      MPI_Request req;
      check(MPI_Iallgather(in + off, static_cast<int>(n), MPI_BYTE, staging.data(), static_cast<int>(n), MPI_BYTE,
                           comm_, &req),
            op, "MPI_Iallgather");
      wait(req, op);
      for (int r = 0; r < size_; ++r) {
        std::memcpy(out + static_cast<std::size_t>(r) * bytes + off, staging.data() + static_cast<std::size_t>(r) * n, n);
      }
    }
  }

  /// Every process's byte string (any length, 2 GiB in all at most), in rank order.
  std::vector<std::vector<std::byte>> all_gather_bytes(std::span<const std::byte> mine, const char* op) {
    std::vector<std::uint64_t> sizes(static_cast<std::size_t>(size_));
    const std::uint64_t n = mine.size();
    all_gather(&n, sizeof n, sizes.data(), op);
    std::uint64_t total = 0;
    for (const auto s : sizes) total += s;
    if (total > static_cast<std::uint64_t>(INT32_MAX)) {
      throw DistributedError(std::string(op) + ": the processes' objects take " + std::to_string(total) +
                             " bytes together; at most 2 GiB travel in one object collective");
    }
    std::vector<int> counts(sizes.size()), displs(sizes.size());
    int at = 0;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      counts[r] = static_cast<int>(sizes[r]);
      displs[r] = at;
      at += counts[r];
    }
    std::vector<std::byte> all(static_cast<std::size_t>(total));
    usable(op);
    MPI_Request req;
    check(MPI_Iallgatherv(mine.data(), static_cast<int>(n), MPI_BYTE, all.data(), counts.data(), displs.data(),
                          MPI_BYTE, comm_, &req),
          op, "MPI_Iallgatherv");
    wait(req, op);
    std::vector<std::vector<std::byte>> out(sizes.size());
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
    }
    return out;
  }

  /// `bytes` as `root` holds them, on every process (receivers' contents are replaced).
  void broadcast_bytes(std::vector<std::byte>& bytes, int root, const char* op) {
    std::uint64_t n = bytes.size();
    broadcast(&n, sizeof n, root, op);
    bytes.resize(static_cast<std::size_t>(n));
    broadcast(bytes.data(), bytes.size(), root, op);
  }

  /// `bytes` bytes of `buf` to process `dest`, matched by its recv of the same tag.
  void send(const void* buf, std::size_t bytes, int dest, int tag, const char* op) {
    usable(op);
    const auto* p = static_cast<const char*>(buf);
    for (std::size_t off = 0; off < bytes || off == 0; off += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, bytes - off);
      MPI_Request req;
      check(MPI_Isend(p + off, static_cast<int>(n), MPI_BYTE, dest, tag, comm_, &req), op, "MPI_Isend");
      wait(req, op);
      if (bytes == 0) break;
    }
  }

  /// `bytes` bytes from process `source` into `buf`; a message of another length is a
  /// DistributedError (the two sides disagree on what travels).
  void recv(void* buf, std::size_t bytes, int source, int tag, const char* op) {
    usable(op);
    auto* p = static_cast<char*>(buf);
    for (std::size_t off = 0; off < bytes || off == 0; off += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, bytes - off);
      MPI_Request req;
      check(MPI_Irecv(p + off, static_cast<int>(n), MPI_BYTE, source, tag, comm_, &req), op, "MPI_Irecv");
      MPI_Status status;
      wait(req, op, &status);
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      if (static_cast<std::size_t>(got) != n) {
        broken_ = true;
        throw DistributedError(std::string(op) + ": expected " + std::to_string(n) + " bytes from process " +
                               std::to_string(source) + ", received " + std::to_string(got));
      }
      if (bytes == 0) break;
    }
  }

  /// Combines `count` elements of `dtype` at `buf` over all processes, in place.
  void all_reduce(void* buf, std::size_t count, DType dtype, MpiReduce how, const char* op) {
    all_reduce(nullptr, buf, count, dtype, how, op);
  }
  /// Combines `count` elements of `dtype` at `send` (in place when null) into `buf`: reading the
  /// input where it lies saves the copy an in-place reduce of a fresh result would need.
  void all_reduce(const void* send, void* buf, std::size_t count, DType dtype, MpiReduce how, const char* op) {
    usable(op);
    const MPI_Datatype type = datatype(dtype, op);
    const MPI_Op mop = how == MpiReduce::logical_or ? MPI_LOR : MPI_SUM;
    const std::size_t item = itemsize(dtype);
    const std::size_t per_chunk = chunk_bytes / item;
    auto* p = static_cast<char*>(buf);
    for (std::size_t off = 0; off < count; off += per_chunk) {
      const std::size_t n = std::min(per_chunk, count - off);
      MPI_Request req;
      const void* in = send ? static_cast<const char*>(send) + off * item : MPI_IN_PLACE;
      if (tuning_) tuning_->prepare(n * item);
      check(MPI_Iallreduce(in, p + off * item, static_cast<int>(n), type, mop, comm_, &req), op, "MPI_Iallreduce");
      wait(req, op);
    }
  }

  /// The MPI datatype an all_reduce of `dtype` runs in; DTypeError for the floats MPI lacks.
  static MPI_Datatype datatype(DType dtype, const char* op) {
    switch (dtype) {
      case DType::f64: return MPI_DOUBLE;
      case DType::f32: return MPI_FLOAT;
      case DType::i64: return MPI_INT64_T;
      case DType::i32: return MPI_INT32_T;
      case DType::i16: return MPI_INT16_T;
      case DType::i8: return MPI_INT8_T;
      case DType::u8: return MPI_UINT8_T;
      case DType::boolean: return MPI_C_BOOL;
      default: break;
    }
    throw DTypeError(std::string(op) + ": MPI has no " + std::string(dtype_name(dtype)) +
                     " type; reduce it in float32");
  }

 private:
  static constexpr std::size_t chunk_bytes = std::size_t{1} << 30;
  /// Groups up to this size gather by point-to-point exchange (see the header comment).
  static constexpr int exchange_max_processes = 4;
  static constexpr int exchange_tag = 1;
  static constexpr std::size_t copy_step = std::size_t{64} << 10;

  explicit MpiGroup(std::chrono::milliseconds timeout) : timeout_(timeout) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) throw DistributedError("MPI was finalized already; the process group cannot be joined again");
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        throw DistributedError("MPI_Init_thread failed; was the program started by mpirun?");
      }
      owns_init_ = true;
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "init_process_group", "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check(MPI_Comm_dup(comm_, &exchange_comm_), "init_process_group", "MPI_Comm_dup");
    MPI_Comm_set_errhandler(exchange_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "init_process_group",
          "MPI_Comm_split_type");
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
    tuning_.emplace();
    const unsigned cores = std::thread::hardware_concurrency();
    if (cores != 0 && static_cast<unsigned>(local_size_) <= cores) spin_budget_ = std::chrono::milliseconds(20);
  }

  void usable(const char* op) const {
    if (broken_) {
      throw DistributedError(std::string(op) + ": an earlier collective of this process group failed or timed out; "
                             "the group cannot be used any more");
    }
  }

  void check(int rc, const char* op, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    broken_ = true;
    throw DistributedError(std::string(op) + ": " + call + " failed: " + std::string(text, static_cast<std::size_t>(len)));
  }

  /// all_gather for small groups: every process posts a receive from each peer straight into its
  /// place in `out` and sends its block to each peer, then copies its own block while they travel.
  void exchange(const char* in, std::size_t bytes, char* out, const char* op) {
    const auto peers = static_cast<std::size_t>(size_ - 1);
    std::vector<MPI_Request> reqs(2 * peers);
    std::vector<MPI_Status> statuses(reqs.size());
    for (std::size_t off = 0; off < bytes; off += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, bytes - off);
      for (int k = 1; k < size_; ++k) {
        const int from = (rank_ - k + size_) % size_;
        check(MPI_Irecv(out + static_cast<std::size_t>(from) * bytes + off, static_cast<int>(n), MPI_BYTE, from,
                        exchange_tag, exchange_comm_, &reqs[static_cast<std::size_t>(k - 1)]),
              op, "MPI_Irecv");
      }
      for (int k = 1; k < size_; ++k) {
        const int to = (rank_ + k) % size_;
        check(MPI_Isend(in + off, static_cast<int>(n), MPI_BYTE, to, exchange_tag, exchange_comm_,
                        &reqs[peers + static_cast<std::size_t>(k - 1)]),
              op, "MPI_Isend");
      }
      // The own block is copied in steps with a test between them: Open MPI answers the peers'
      // requests only inside a test (4-5% at 1-4 MiB against one memcpy before the wait).
      char* own = out + static_cast<std::size_t>(rank_) * bytes + off;
      bool done = false;
      for (std::size_t at = 0; at < n; at += copy_step) {
        if (own != in + off) std::memcpy(own + at, in + off + at, std::min(copy_step, n - at));
        if (!done) done = test_all(reqs, op, statuses.data());
      }
      if (!done) wait_all(reqs, op, statuses.data());
      for (std::size_t k = 0; k < peers; ++k) {
        int got = 0;
        MPI_Get_count(&statuses[k], MPI_BYTE, &got);
        if (static_cast<std::size_t>(got) != n) {
          broken_ = true;
          throw DistributedError(std::string(op) + ": expected " + std::to_string(n) + " bytes from process " +
                                 std::to_string(statuses[k].MPI_SOURCE) + ", received " + std::to_string(got) +
                                 " (the processes gathered tensors of different sizes)");
        }
      }
    }
  }

  void wait(MPI_Request& req, const char* op, MPI_Status* status = MPI_STATUS_IGNORE) {
    wait_all(std::span<MPI_Request>(&req, 1), op, status == MPI_STATUS_IGNORE ? MPI_STATUSES_IGNORE : status);
  }

  /// One MPI_Testall of `reqs`: true when all are done (their statuses filled, the requests null).
  bool test_all(std::span<MPI_Request> reqs, const char* op, MPI_Status* statuses) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, statuses);
    if (rc == MPI_ERR_IN_STATUS && statuses != MPI_STATUSES_IGNORE) {
      // Name the failing transfer's error (a truncated receive, say), not the summary code.
      for (std::size_t k = 0; k < reqs.size(); ++k) {
        if (statuses[k].MPI_ERROR != MPI_SUCCESS && statuses[k].MPI_ERROR != MPI_ERR_PENDING) {
          rc = statuses[k].MPI_ERROR;
          break;
        }
      }
    }
    check(rc, op, "MPI_Testall");
    return done != 0;
  }

  /// Tests `reqs` until all are done, spinning, yielding and sleeping as the header says; a
  /// DistributedError after the group's timeout.
  void wait_all(std::span<MPI_Request> reqs, const char* op, MPI_Status* statuses = MPI_STATUSES_IGNORE) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (unsigned spins = 0;; ++spins) {
      if (test_all(reqs, op, statuses)) return;
      if (spins < 256) continue;
      const auto waited = clock::now() - start;
      // Open MPI moves a transfer on only inside MPI_Test: while every process of the node has a
      // core of its own, keep testing (yielding or sleeping stalls a large reduce several fold);
      // processes that outnumber the cores give theirs up at once.
      if (waited < spin_budget_) continue;
      if (waited > timeout_) {
        broken_ = true;
        throw DistributedError(std::string(op) + ": timed out after " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
                               " s waiting for the other processes (a process died, or the processes called "
                               "different collectives; set ACCELERATE_DEBUG_MODE=1 to compare their shapes)");
      }
      if (waited < spin_budget_ + std::chrono::milliseconds(5)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  /// all_gather's point-to-point messages, apart from send / recv's tags on comm_.
  MPI_Comm exchange_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::chrono::milliseconds timeout_;
  bool owns_init_ = false;
  bool broken_ = false;
  /// How long a wait keeps testing before it yields (0: yield at once).
  std::chrono::steady_clock::duration spin_budget_{};
  std::optional<NbcAllreduceTuning> tuning_;
};

}  // namespace accel::dist::detail

#endif  // ACCEL_WITH_MPI

// The all-reduce algorithm Open MPI's non-blocking collectives use, chosen per call through MPI's
// tool interface (MPI_T control variables):
//
//   detail::NbcAllreduceTuning tuning;    after MPI_Init; inert where the variable does not exist
//   tuning.prepare(bytes);                before each MPI_Iallreduce of `bytes` bytes
//
// Why: the group's collectives are non-blocking (the timeout needs them, dist/mpi.hpp), and Open
// MPI's libnbc picks the binomial tree for them whenever there are fewer than four processes, which
// moved a 16 MiB all-reduce between two processes at 3.5 GB/s where its ring ran at 7.8 GB/s, and
// blocking MPI_Allreduce at 3.1-3.6 GB/s (medians on the 2-core test machine, two and three
// processes). The ring pays more steps of latency on small messages (three processes: 0.5 against
// 0.85 GB/s at 16 KiB), so it is asked for from `ring_from_bytes` up and libnbc keeps its own
// choice below.
//
// The variable is Open MPI's `coll_libnbc_iallreduce_algorithm` (0: libnbc decides, 1: ring). A
// value the user set (OMPI_MCA_coll_libnbc_iallreduce_algorithm, an MCA parameter file) is read
// once and then left alone; so is any MPI without that variable, or without a writable one. The
// variable's scope asks every process to hold the same value: an all-reduce's byte count is the
// same on every process, so each writes the same value before the same call.
#pragma once

#if defined(ACCEL_WITH_MPI)

#include <mpi.h>

#include <cstddef>

namespace accel::dist::detail {

class NbcAllreduceTuning {
 public:
  /// From this many bytes per process the ring is asked for.
  static constexpr std::size_t ring_from_bytes = std::size_t{256} << 10;

  NbcAllreduceTuning() {
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return;
    tool_ = true;
    int index = -1, count = 0;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS) return;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle_, &count) != MPI_SUCCESS || count != 1) return;
    has_handle_ = true;
    int value = -1;
    // Only an unset variable (libnbc decides) is ours to change.
    if (MPI_T_cvar_read(handle_, &value) != MPI_SUCCESS || value != decides) return;
    current_ = decides;
    usable_ = true;
  }
  NbcAllreduceTuning(const NbcAllreduceTuning&) = delete;
  NbcAllreduceTuning& operator=(const NbcAllreduceTuning&) = delete;
  ~NbcAllreduceTuning() {
    if (has_handle_) MPI_T_cvar_handle_free(&handle_);
    if (tool_) MPI_T_finalize();
  }

  /// Sets the algorithm for the next MPI_Iallreduce of `bytes` bytes per process.
  void prepare(std::size_t bytes) noexcept {
    if (!usable_) return;
    int want = bytes >= ring_from_bytes ? ring : decides;
    if (want == current_) return;
    if (MPI_T_cvar_write(handle_, &want) == MPI_SUCCESS) {
      current_ = want;
    } else {
      usable_ = false;
    }
  }

 private:
  static constexpr int decides = 0;
  static constexpr int ring = 1;
  bool tool_ = false;
  bool has_handle_ = false;
  bool usable_ = false;
  int current_ = decides;
  MPI_T_cvar_handle handle_{};
};

}  // namespace accel::dist::detail

#endif  // ACCEL_WITH_MPI

// PartialState<D>: where this process sits in a run, and the process group its collectives use.
// D is a distributed tag (policy/distributed.hpp) and decides the implementation at compile time.
//
//   dist::PartialState<> state;                                 no_dist: one process, no launcher, no MPI
//   dist::PartialState<multi_cpu<mpi>> state(InitProcessGroupKwargs{.timeout = 60s});
//   state.process_index() num_processes() local_process_index() local_world_size()
//   state.is_main_process() is_local_main_process() is_last_process() use_distributed()
//   state.distributed_type() backend() device() debug() set_debug(on) timeout()
//   state.wait_for_everyone()
//   state.split_between_processes(inputs, apply_padding = false)   this process's share of inputs
//   state.main_process_first(f), state.local_main_process_first(f)  f() on the main process first
//
// The state is shared as Accelerate's is: the first PartialState<D> of a process initializes it
// (reading the launcher's variables, dist/launch_environment.hpp, and joining MPI when the policy
// communicates), later ones see the same state and ignore their kwargs. Under
//   no_dist          nothing is joined; every collective is an identity, even under a launcher
//                    (each process is then a run of its own).
//   multi_cpu<mpi>   MPI is joined when an MPI launcher started the process (or the program
//                    initialized MPI itself). Started alone, the process is a world of one and
//                    collectives are identities, with no MPI_Init. Torchrun-style variables that
//                    ask for several processes without an MPI launcher are a DistributedError:
//                    MPI cannot join them.
//   multi_gpu<nccl>  as multi_cpu for MPI; CUDA tensors travel over NCCL (dist/nccl.hpp) on the
//                    device cuda:(local_process_index % visible GPUs), CPU tensors over MPI.
//
// Kwargs: any struct with `backend` (optional<string>) and `timeout` (optional<seconds>), such as
// utils' InitProcessGroupKwargs. backend must name the policy's library ("mpi" / "nccl"), else
// ValueError; "nccl", InitProcessGroupKwargs' default, counts as unset, as Accelerate's to_kwargs()
// leaves a default out. The timeout bounds every wait for the other processes (default 1800 s
// over MPI, 600 s over NCCL, torch's defaults).
//
// Differences from Accelerate:
// - distributed_type() is the policy's type whenever a process group is joined, one process
//   included (mpirun -np 1); Accelerate reports NO for a single CPU process. use_distributed()
//   is the same in both.
// - split_between_processes returns the share (C++ has no with-block), pads with the input's last
//   element for every input kind (Accelerate pads lists with the share's own last element, and
//   pads lists by one even when the split is even), and pads tensors without a collective (every
//   process knows the longest share). Its inputs: vector / deque / list, Tensor (along dim 0),
//   maps of those (each value split alike; ValueError when their lengths differ).
// - Threads: as Accelerate's PartialState does for several CPU processes, a multi_cpu state whose
//   group has more than one process sets this thread's kernel threads to the node's physical cores
//   over its local processes (at least 1, at most the affinity mask's CPUs) unless OMP_NUM_THREADS
//   or MKL_NUM_THREADS is set; Accelerate warns when it does, this does it silently.
// - InitProcessGroupKwargs::init_method is not read: MPI's launcher is the rendezvous, and NCCL's
//   is a broadcast over MPI. The timeout also bounds MPI, which has none of its own.
// - main_process_first takes the block as a callable and returns its result.
// - Not here: on_main_process and friends (decorators; write `if (state.is_main_process())`),
//   print, set_device / default_device (the device follows the local rank), destroy_process_group
//   (the group ends with the process), MEGATRON_LM's last-process-is-main rule.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "accel/core/device.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/core/env.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dist/launch_environment.hpp"
#include "accel/dist/mpi.hpp"
#include "accel/nested/traits.hpp"
#include "accel/policy/distributed.hpp"

namespace accel::dist {

using policy::DistributedType;

/// Process-group options: a struct with `backend` and `timeout` fields (utils' InitProcessGroupKwargs).
template <class K>
concept ProcessGroupKwargs = requires(const K& k) {
  { k.backend } -> std::convertible_to<std::optional<std::string>>;
  { k.timeout } -> std::convertible_to<std::optional<std::chrono::seconds>>;
};

namespace detail {

/// The options a PartialState is created with when none are given.
struct DefaultProcessGroupKwargs {
  std::optional<std::string> backend;
  std::optional<std::chrono::seconds> timeout;
};

/// What one policy's PartialStates share in a process.
struct SharedProcessState {
  bool initialized = false;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  DistributedType type = DistributedType::no;
  bool debug = false;
  std::chrono::milliseconds timeout{std::chrono::seconds(1800)};
  Device device = Device::cpu();
  LaunchEnvironment launch;
#if defined(ACCEL_WITH_MPI)
  MpiGroup* mpi = nullptr;
#endif
};

template <class D>
SharedProcessState& shared_state() {
  static SharedProcessState s;
  return s;
}

template <class D>
std::mutex& shared_state_mutex() {
  static std::mutex m;
  return m;
}

template <class D>
constexpr std::string_view policy_backend() {
  if constexpr (D::id == DistributedType::no) {
    return "";
  } else {
    return D::backend::name;
  }
}

/// Accelerate's rule for CPU processes: unless OMP_NUM_THREADS or MKL_NUM_THREADS says otherwise,
/// each of a node's `local_size` processes computes on its share of the physical cores (at least
/// one thread), and never on more CPUs than its affinity mask holds. Why: OpenMP would otherwise
/// start a thread per CPU in every process, and on a node where the processes outnumber the cores
/// their kernels' barriers wait for descheduled threads (a bucketed gradient all-reduce of 64 MiB
/// on two processes of a 2-core machine took 0.84 s with two threads each, 0.06 s with one).
inline bool cpu_threads_set_by_user() {
  for (const char* key : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}) {
    if (const auto v = get_env(key); v && !v->empty()) return true;
  }
  return false;
}
inline void share_cpu_threads(int local_size) {
  if (cpu_threads_set_by_user()) return;
  set_num_threads(std::min(affinity_cpus(), std::max(physical_cores() / std::max(local_size, 1), 1)));
}

template <class D, class K>
void init_shared_state(SharedProcessState& s, const K& kwargs) {
  constexpr std::string_view library = policy_backend<D>();
  if (kwargs.backend && *kwargs.backend != "nccl" && *kwargs.backend != library) {
    throw ValueError("Your assigned backend " + *kwargs.backend + " is not available, please use " +
                     (library.empty() ? std::string("none (no_dist runs one process)") : std::string(library)));
  }
  const std::optional<std::chrono::seconds> timeout = kwargs.timeout;
  if (timeout && timeout->count() <= 0) {
    throw ValueError("InitProcessGroupKwargs: timeout must be positive, got " + std::to_string(timeout->count()) + " s");
  }
  s.timeout = timeout ? std::chrono::milliseconds(*timeout)
                      : std::chrono::milliseconds(std::chrono::seconds(library == "nccl" ? 600 : 1800));
  s.debug = debug_mode_from_env();
  if constexpr (D::id == DistributedType::no) {
    return;  // one process whatever launched it
  } else {
    s.launch = read_launch_environment();
#if defined(ACCEL_WITH_MPI)
    const bool join = s.launch.launcher == Launcher::mpi || MpiGroup::initialized();
#else
    const bool join = false;
    if (s.launch.launcher == Launcher::mpi && s.launch.world_size > 1) {
      throw DistributedError(std::string(D::distributed_type) + ": started by an MPI launcher as " +
                             std::to_string(s.launch.world_size) +
                             " processes, but accel was built without MPI (ACCEL_WITH_MPI)");
    }
#endif
    if (!join && s.launch.world_size > 1) {
      throw DistributedError(std::string(D::distributed_type) + ": the environment asks for " +
                             std::to_string(s.launch.world_size) +
                             " processes (WORLD_SIZE) but no MPI launcher started them; accel's collectives run "
                             "over MPI: launch with mpirun -np " + std::to_string(s.launch.world_size));
    }
#if defined(ACCEL_WITH_MPI)
    if (join) {
      MpiGroup& g = MpiGroup::join(s.timeout);
      if (s.launch.launcher == Launcher::mpi &&
          (g.rank() != s.launch.rank || g.size() != s.launch.world_size)) {
        throw DistributedError("init_process_group: MPI places this process at rank " + std::to_string(g.rank()) +
                               " of " + std::to_string(g.size()) + ", the environment at rank " +
                               std::to_string(s.launch.rank) + " of " + std::to_string(s.launch.world_size) +
                               " (is RANK or WORLD_SIZE exported by hand?)");
      }
      s.mpi = &g;
      s.rank = g.rank();
      s.size = g.size();
      s.local_rank = g.local_rank();
      s.local_size = g.local_size();
      s.type = D::id;
      if constexpr (D::id == DistributedType::multi_cpu) {
        if (s.size > 1) share_cpu_threads(s.local_size);
      }
    }
#endif
    if constexpr (D::id == DistributedType::multi_gpu) {
      const int gpus = cuda_device_count();
      if (gpus > 0) s.device = Device::cuda(s.local_rank % gpus);
    }
  }
}

}  // namespace detail

/// This process's place in the run and its process group under the distributed policy D
/// (Accelerate's PartialState). Cheap to copy: every PartialState<D> of a process shares one state.
template <policy::Distributed D = policy::no_dist>
class PartialState {
 public:
  /// The distributed tag this state was compiled for.
  using distributed = D;

  /// Joins (or sees) the process's state with default options.
  PartialState() : PartialState(detail::DefaultProcessGroupKwargs{}) {}

  /// Joins (or sees) the process's state; `kwargs` count only for the first state of the process.
  template <ProcessGroupKwargs K>
  explicit PartialState(const K& kwargs) : s_(&detail::shared_state<D>()) {
    std::lock_guard lock(detail::shared_state_mutex<D>());
    if (!s_->initialized) {
      detail::SharedProcessState fresh;
      detail::init_shared_state<D>(fresh, kwargs);
      fresh.initialized = true;
      *s_ = fresh;
    }
  }

  /// Rank of this process among all (Accelerate's process_index).
  int process_index() const noexcept { return s_->rank; }
  /// Processes in the run.
  int num_processes() const noexcept { return s_->size; }
  /// Rank of this process on its node.
  int local_process_index() const noexcept { return s_->local_rank; }
  /// Processes on this node.
  int local_world_size() const noexcept { return s_->local_size; }
  bool is_main_process() const noexcept { return s_->rank == 0; }
  bool is_local_main_process() const noexcept { return s_->local_rank == 0; }
  bool is_last_process() const noexcept { return s_->rank == s_->size - 1; }
  /// More than one process, joined by a process group.
  bool use_distributed() const noexcept { return s_->type != DistributedType::no && s_->size > 1; }
  /// The policy's type when a process group is joined, else NO.
  DistributedType distributed_type() const noexcept { return s_->type; }
  /// "mpi" or "nccl" when a process group is joined, else nullopt (Accelerate's None).
  std::optional<std::string_view> backend() const {
    if (s_->type == DistributedType::no) return std::nullopt;
    return detail::policy_backend<D>();
  }
  /// The device this process computes on: cuda:(local rank % GPUs) under multi_gpu, else cpu.
  Device device() const noexcept { return s_->device; }
  /// Debug mode: collectives compare shapes across processes first (ACCEL_DEBUG_MODE /
  /// ACCELERATE_DEBUG_MODE when the state was created).
  bool debug() const noexcept { return s_->debug; }
  /// Turns debug mode on or off for every PartialState<D> of the process; every process must
  /// make the same choice, as each collective's check is itself a collective.
  void set_debug(bool on) const noexcept { s_->debug = on; }
  /// How long a collective waits for the other processes before a DistributedError.
  std::chrono::milliseconds timeout() const noexcept { return s_->timeout; }
  /// The launcher's variables as read when the state was created (default values under no_dist).
  const LaunchEnvironment& launch_environment() const noexcept { return s_->launch; }
  /// A process group is joined: collectives talk to the other processes (possibly none).
  bool communicates() const noexcept { return s_->type != DistributedType::no; }

#if defined(ACCEL_WITH_MPI)
  /// The MPI group, or nullptr when none is joined (internal to the collectives).
  detail::MpiGroup* mpi_group() const noexcept { return s_->mpi; }
#endif

  /// Blocks until every process has reached this call (nothing to wait for in one process).
  void wait_for_everyone() const {
#if defined(ACCEL_WITH_MPI)
    if (s_->mpi) s_->mpi->barrier("wait_for_everyone");
#endif
  }

  /// Runs f() on the main process first, then on the others; returns what f returns.
  template <class F>
  decltype(auto) main_process_first(F&& f) const {
    return goes_first(is_main_process(), std::forward<F>(f));
  }
  /// Runs f() on each node's local main process first, then on the node's others.
  template <class F>
  decltype(auto) local_main_process_first(F&& f) const {
    return goes_first(is_local_main_process(), std::forward<F>(f));
  }

  /// This process's share of `inputs`: the samples [start, end) of an even split, the first
  /// `length % num_processes` processes taking one more. With apply_padding every share is as long
  /// as the longest, padded with the input's last element. See the header for the input kinds.
  template <class T>
  T split_between_processes(const T& inputs, bool apply_padding = false) const {
    if (s_->size == 1) return inputs;
    const std::int64_t length = split_length(inputs);
    const std::int64_t n = s_->size, p = s_->rank;
    const std::int64_t per = length / n, extras = length % n;
    const std::int64_t start = p * per + std::min(p, extras);
    const std::int64_t end = start + per + (p < extras ? 1 : 0);
    const std::int64_t longest = per + (extras > 0 ? 1 : 0);
    return split_values(inputs, start, end, apply_padding ? std::max<std::int64_t>(longest, 1) : 0);
  }

 private:
  template <class F>
  decltype(auto) goes_first(bool first, F&& f) const {
    if (!first) wait_for_everyone();
    struct After {
      const PartialState* self;
      bool first;
      ~After() noexcept(false) {
        if (first && std::uncaught_exceptions() == 0) self->wait_for_everyone();
      }
    } after{this, first};
    return std::forward<F>(f)();
  }

  template <class T>
  static std::int64_t split_length(const T& x) {
    if constexpr (std::is_same_v<T, Tensor>) {
      if (x.dim() == 0) throw ShapeError("split_between_processes: a zero-dimensional tensor cannot be split");
      return x.shape()[0];
    } else if constexpr (nested::MapNested<T>) {
      std::optional<std::int64_t> len;
      for (const auto& [k, v] : x) {
        const std::int64_t l = split_length(v);
        if (len && *len != l) throw ValueError("All values in the dictionary must have the same length");
        len = l;
      }
      return len.value_or(0);
    } else if constexpr (nested::SequenceNested<T> || std::is_same_v<T, std::vector<bool>>) {
      return static_cast<std::int64_t>(x.size());
    } else {
      static_assert(sizeof(T) == 0,
                    "split_between_processes: inputs must be a vector / deque / list, a Tensor, or a map of those");
      return 0;
    }
  }

  /// Samples [start, end) of x (its last one when start is past the end), padded to `pad_to`
  /// with x's last element when pad_to > 0.
  template <class T>
  static T split_values(const T& x, std::int64_t start, std::int64_t end, std::int64_t pad_to) {
    if constexpr (nested::MapNested<T>) {
      T out;
      for (const auto& [k, v] : x) out.emplace(k, split_values(v, start, end, pad_to));
      return out;
    } else if constexpr (std::is_same_v<T, Tensor>) {
      const std::int64_t len = x.shape()[0];
      if (len == 0) return x;
      Tensor share = start >= len ? x.narrow(0, len - 1, 1) : x.narrow(0, start, std::min(end, len) - start);
      const std::int64_t have = share.shape()[0];
      if (pad_to <= have) return share;
      Shape shape = x.shape();
      shape[0] = pad_to;
      Tensor out = Tensor::empty(shape, x.dtype(), x.device());
      out.narrow(0, 0, have).copy_(share);
      const Tensor last = x.narrow(0, len - 1, 1);
      for (std::int64_t i = have; i < pad_to; ++i) out.narrow(0, i, 1).copy_(last);
      return out;
    } else {
      const auto len = static_cast<std::int64_t>(x.size());
      if (len == 0) return x;
      auto at = [&](std::int64_t i) { return std::next(x.begin(), static_cast<std::ptrdiff_t>(i)); };
      T out = start >= len ? T(at(len - 1), x.end()) : T(at(start), at(std::min(end, len)));
      while (static_cast<std::int64_t>(out.size()) < pad_to) out.push_back(*at(len - 1));
      return out;
    }
  }

  detail::SharedProcessState* s_;
};

}  // namespace accel::dist

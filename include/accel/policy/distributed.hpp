// Distributed policies: no_dist, multi_cpu<mpi>, multi_gpu<nccl>.
//
// They decide at compile time what gather / reduce / broadcast / wait_for_everyone compile to.
// The default of a policy bundle is no_dist (one process; collectives are identities).
#pragma once

#include <string_view>
#include <type_traits>

namespace accel::policy {

struct distributed_tag {};

/// Communication libraries a distributed policy may name.
struct mpi {
  static constexpr std::string_view name = "mpi";
};
struct nccl {
  static constexpr std::string_view name = "nccl";
};

/// One process: every collective is the identity.
struct no_dist : distributed_tag {
  static constexpr std::string_view distributed_type = "NO";
};

/// Many CPU processes (or hosts) over MPI.
template <class Backend = mpi>
struct multi_cpu : distributed_tag {
  static_assert(std::is_same_v<Backend, mpi>,
                "accel::policy::multi_cpu<B>: CPU collectives run over MPI; valid choices: multi_cpu<mpi>");
  using backend = Backend;
  static constexpr std::string_view distributed_type = "MULTI_CPU";
};

/// Many GPUs over NCCL, bootstrapped over MPI.
template <class Backend = nccl>
struct multi_gpu : distributed_tag {
  static_assert(std::is_same_v<Backend, nccl>,
                "accel::policy::multi_gpu<B>: GPU collectives run over NCCL; valid choices: multi_gpu<nccl>");
  using backend = Backend;
  static constexpr std::string_view distributed_type = "MULTI_GPU";
};

template <class T>
inline constexpr bool is_distributed_v = std::is_base_of_v<distributed_tag, T>;

/// A distributed tag: no_dist, multi_cpu<mpi> or multi_gpu<nccl>.
template <class T>
concept Distributed = is_distributed_v<T>;

}  // namespace accel::policy

// Distributed policies: no_dist, multi_cpu<mpi>, multi_gpu<nccl>, and distributed_kind, the trait
// a policy bundle finds them by.
//
// They decide at compile time what gather / reduce / broadcast / wait_for_everyone compile to.
// Each tag carries the DistributedType it stands for (Accelerate's distributed_type) and, when it
// communicates, the library it runs over (`backend`: mpi or nccl, a type, no enum beside it). The default of a policy bundle is no_dist (one
// process; collectives are identities). The dist layer's PartialState<D> and collectives
// (dist/partial_state.hpp, dist/collectives.hpp) are what they select.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "accel/policy/kind.hpp"

namespace accel::policy {

/// MPI, for multi_cpu<mpi>: CPU collectives, and the bootstrap of NCCL.
struct mpi {
  /// The library's usual lower-case name, as logs and launchers write it.
  static constexpr std::string_view name = "mpi";
};
/// NCCL, for multi_gpu<nccl>: GPU collectives.
struct nccl {
  /// The library's usual lower-case name, as logs and launchers write it.
  static constexpr std::string_view name = "nccl";
};

/// The kind of distributed run: Accelerate's DistributedType, the one runtime enum of the library
/// for it. The tags below carry its first three values; utils parses and prints all of them
/// (enum_from_string, to_string) for config files, and the dist layer's PartialState reports one.
enum class DistributedType : std::uint8_t {
  no,            ///< one process
  multi_cpu,     ///< several CPU processes (or hosts) over MPI (multi_cpu<mpi>)
  multi_gpu,     ///< several GPUs over NCCL (multi_gpu<nccl>)
  multi_npu,     ///< Ascend NPU: no C++ meaning here.
  multi_mlu,     ///< Cambricon MLU: no C++ meaning here.
  multi_sdaa,    ///< SDAA: no C++ meaning here.
  multi_musa,    ///< Moore Threads MUSA: no C++ meaning here.
  multi_xpu,     ///< Intel XPU: no C++ meaning here.
  deepspeed,     ///< DeepSpeed is a Python engine: no C++ meaning here.
  fsdp,          ///< PyTorch FSDP: no C++ meaning here.
  xla,           ///< XLA / TPU: no C++ meaning here.
  megatron_lm,   ///< Megatron-LM is a Python engine: no C++ meaning here.
  multi_hpu,     ///< Gaudi HPU: no C++ meaning here.
  multi_neuron,  ///< AWS Neuron: no C++ meaning here.
};

/// Accelerate's string value of each DistributedType, in enumerator order.
inline constexpr std::string_view distributed_type_names[] = {
    "NO",        "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU",   "MULTI_SDAA", "MULTI_MUSA",
    "MULTI_XPU", "DEEPSPEED", "FSDP",      "XLA",       "MEGATRON_LM", "MULTI_HPU",  "MULTI_NEURON"};

/// Accelerate's spelling of `t` ("NO", "MULTI_CPU", ...), as config files write it.
constexpr std::string_view to_string(DistributedType t) {
  const auto i = static_cast<std::size_t>(t);
  return i < std::size(distributed_type_names) ? distributed_type_names[i] : std::string_view("?");
}

/// Prints Accelerate's spelling.
inline std::ostream& operator<<(std::ostream& os, DistributedType t) { return os << to_string(t); }

/// Base of every distributed tag; `is_distributed_v` detects it, so a tag needs no registration.
struct distributed_tag {};

/// The members every distributed tag carries, written once.
template <DistributedType Id>
struct basic_distributed : distributed_tag {
  /// The kind of run this tag stands for; switch on it rather than on `distributed_type`.
  static constexpr DistributedType id = Id;
  /// `id` as Accelerate spells it, for configs and logs.
  static constexpr std::string_view distributed_type = to_string(Id);
};

/// One process: every collective is the identity.
struct no_dist : basic_distributed<DistributedType::no> {};

/// Many CPU processes (or hosts) over MPI.
template <class Backend = mpi>
struct multi_cpu : basic_distributed<DistributedType::multi_cpu> {
  static_assert(std::is_same_v<Backend, mpi>,
                "accel::policy::multi_cpu<B>: CPU collectives run over MPI; valid choices: multi_cpu<mpi>");
  /// The communication library collectives run over.
  using backend = Backend;
};

/// Many GPUs over NCCL, bootstrapped over MPI.
template <class Backend = nccl>
struct multi_gpu : basic_distributed<DistributedType::multi_gpu> {
  static_assert(std::is_same_v<Backend, nccl>,
                "accel::policy::multi_gpu<B>: GPU collectives run over NCCL; valid choices: multi_gpu<nccl>");
  /// The communication library collectives run over.
  using backend = Backend;
};

/// True for distributed tags.
template <class T>
inline constexpr bool is_distributed_v = std::is_base_of_v<distributed_tag, T>;

/// A distributed tag: no_dist, multi_cpu<mpi> or multi_gpu<nccl>.
template <class T>
concept Distributed = is_distributed_v<T>;

/// The distributed kind of a policy bundle (see kind.hpp for what each member is for).
struct distributed_kind {
  /// The kind's name, that of the bundle member it fills.
  static constexpr std::string_view name = "distributed";
  /// Recognises distributed tags among a bundle's tags.
  template <class T>
  using matches = std::bool_constant<is_distributed_v<T>>;
  /// A bundle that names no distributed policy runs as one process.
  using default_tag = no_dist;
  /// Gives a bundle `P::distributed`.
  template <class Tag>
  struct member {
    /// The bundle's distributed tag.
    using distributed = Tag;
  };
  /// Compiles only when Ok; otherwise the error lists the distributed tags.
  template <bool Ok>
  static constexpr void valid_choices() {
    static_assert(Ok, "accel::policies<...>: at most one distributed tag per bundle; valid choices: no_dist, "
                      "multi_cpu<mpi>, multi_gpu<nccl>");
  }
};

static_assert(PolicyKind<distributed_kind>);

}  // namespace accel::policy

// Where this process sits in a run, as its launcher wrote it into the environment:
//
//   LaunchEnvironment env = read_launch_environment();
//   env.rank, env.world_size, env.local_rank, env.local_world_size   0, 1, 0, 1 without a launcher
//   env.launcher          Launcher::none | mpi (mpirun / mpiexec / srun with PMI) | torchrun
//   env.master_addr, env.master_port      MASTER_ADDR (nullopt when unset), MASTER_PORT (29500)
//   debug_mode_from_env(default)          ACCEL_DEBUG_MODE, else ACCELERATE_DEBUG_MODE, else default
//
// Each value is the first of its variables that is set, in Accelerate's order
// (get_cpu_distributed_information): torchrun's RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE,
// then Intel MPI / MPICH (PMI_*, MPI_LOCAL*), Open MPI (OMPI_COMM_WORLD_*) and MVAPICH (MV2_*).
// The launcher is MPI when one of the MPI families' size variables is set: only then can MPI_Init
// join the other processes, so a PartialState over MPI needs it for more than one process.
//
// Differences from Accelerate:
// - Contradictions are errors (ValueError naming the variables): a rank that is not below the
//   world size, a local world size above the world size, a local rank not below a local world
//   size that a variable set. Accelerate passes them to init_process_group, which hangs or fails later.
// - Nothing is written back: Accelerate exports RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
//   MASTER_PORT for torch's sake; here the values are returned, and setenv (not thread-safe) is
//   left to the program.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "accel/core/env.hpp"
#include "accel/core/errors.hpp"

namespace accel::dist {

/// The variables each value is read from, first set wins (Accelerate's order).
inline constexpr std::string_view rank_variables[] = {"RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"};
inline constexpr std::string_view world_size_variables[] = {"WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                                                            "MV2_COMM_WORLD_SIZE"};
inline constexpr std::string_view local_rank_variables[] = {"LOCAL_RANK", "MPI_LOCALRANKID",
                                                            "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"};
inline constexpr std::string_view local_world_size_variables[] = {"LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS",
                                                                  "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                                  "MV2_COMM_WORLD_LOCAL_SIZE"};

/// Who started this process.
enum class Launcher : std::uint8_t {
  none,      ///< nobody: a single process
  mpi,       ///< an MPI launcher (mpirun, mpiexec, srun --mpi): MPI_Init can join the others
  torchrun,  ///< torchrun-style variables (RANK, WORLD_SIZE, ...) and no MPI launcher
};

/// "none", "mpi", "torchrun".
constexpr std::string_view to_string(Launcher l) {
  switch (l) {
    case Launcher::mpi: return "mpi";
    case Launcher::torchrun: return "torchrun";
    case Launcher::none: break;
  }
  return "none";
}

/// This process's place in the run, as the environment tells it.
struct LaunchEnvironment {
  std::int64_t rank = 0;              ///< among all processes (Accelerate's process_index)
  std::int64_t world_size = 1;        ///< processes in all (num_processes)
  std::int64_t local_rank = 0;        ///< on this node (local_process_index)
  std::int64_t local_world_size = 1;  ///< processes on this node
  Launcher launcher = Launcher::none;
  std::optional<std::string> master_addr;  ///< MASTER_ADDR: rank 0's host (torchrun); unused over MPI
  std::int64_t master_port = 29500;        ///< MASTER_PORT, Accelerate's default when unset
  friend bool operator==(const LaunchEnvironment&, const LaunchEnvironment&) = default;
};

namespace detail {
template <std::size_t N>
std::int64_t first_int(const std::string_view (&keys)[N], std::int64_t fallback) {
  for (const std::string_view k : keys) {
    const std::string key(k);
    const auto v = get_env(key);
    if (!v) continue;
    const std::int64_t i = accel::detail::parse_python_int(key, *v);
    if (i >= 0) return i;
  }
  return fallback;
}
template <std::size_t N>
bool any_set(const std::string_view (&keys)[N], std::size_t from) {
  for (std::size_t i = from; i < N; ++i) {
    if (get_env(std::string(keys[i]))) return true;
  }
  return false;
}
}  // namespace detail

/// Reads LaunchEnvironment (see the header comment for the variables). ValueError for a value that
/// is not an integer, or for values that contradict each other.
inline LaunchEnvironment read_launch_environment() {
  LaunchEnvironment env;
  env.rank = detail::first_int(rank_variables, 0);
  env.world_size = detail::first_int(world_size_variables, 1);
  env.local_rank = detail::first_int(local_rank_variables, 0);
  env.local_world_size = detail::first_int(local_world_size_variables, 1);
  // Entries 1.. of the size list are the MPI families' own variables.
  if (detail::any_set(world_size_variables, 1)) {
    env.launcher = Launcher::mpi;
  } else if (get_env("WORLD_SIZE") || get_env("RANK") || get_env("LOCAL_RANK")) {
    env.launcher = Launcher::torchrun;
  }
  env.master_addr = get_env("MASTER_ADDR");
  if (env.master_addr && env.master_addr->empty()) env.master_addr.reset();
  env.master_port = get_int_from_env({"MASTER_PORT"}, 29500);
  if (env.world_size < 1) {
    throw ValueError("launch environment: the world size must be at least 1, got " + std::to_string(env.world_size));
  }
  if (env.rank >= env.world_size) {
    throw ValueError("launch environment: rank " + std::to_string(env.rank) + " is not below the world size " +
                     std::to_string(env.world_size) + " (RANK / *_COMM_WORLD_RANK against WORLD_SIZE / *_SIZE)");
  }
  if (env.local_world_size < 1 || env.local_world_size > env.world_size) {
    throw ValueError("launch environment: the local world size " + std::to_string(env.local_world_size) +
                     " must be between 1 and the world size " + std::to_string(env.world_size));
  }
  // Checked only when a launcher set the local size: a hand-written RANK / LOCAL_RANK pair has no
  // LOCAL_WORLD_SIZE, and Accelerate's default of 1 must not turn it into an error.
  if (detail::any_set(local_world_size_variables, 0) && env.local_rank >= env.local_world_size) {
    throw ValueError("launch environment: local rank " + std::to_string(env.local_rank) +
                     " is not below the local world size " + std::to_string(env.local_world_size));
  }
  return env;
}

/// Debug mode as the environment asks: ACCEL_DEBUG_MODE when set, else ACCELERATE_DEBUG_MODE
/// (Accelerate's variable), else `default_value`. ValueError for a value that is not a truth value.
inline bool debug_mode_from_env(bool default_value = false) {
  if (get_env("ACCEL_DEBUG_MODE")) return parse_flag_from_env("ACCEL_DEBUG_MODE");
  return parse_flag_from_env("ACCELERATE_DEBUG_MODE", default_value);
}

}  // namespace accel::dist

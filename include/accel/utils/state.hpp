// The library's start-up state: the config file (utils/config.hpp) overlaid by the environment,
// read once at first use, the way `accelerate launch` turns a config into the variables that
// Accelerator then reads.
//
//   library_state().mixed_precision   ACCELERATE_MIXED_PRECISION, else the config's, else "no"
//   library_state().distributed_type  ACCELERATE_DISTRIBUTED_TYPE, else the config's, else NO
//   library_state().num_processes     WORLD_SIZE, else the config's, else 1
//   library_state().use_cpu           ACCELERATE_USE_CPU, else the config's, else true without a GPU
//   library_state().debug_mode        ACCEL_DEBUG_MODE, else ACCELERATE_DEBUG_MODE, else the config's "debug"
//   library_state().config_file       the file that was read (nullopt: none at the default location)
//   is_debug_mode()                   library_state().debug_mode
//   reload_library_state()            reads everything again (tests, after patch_environment)
//   default_autocast()                an AutocastScope in the configured mixed precision
//
// A malformed config file throws FormatError (naming the file and the key) from library_state()
// until it is fixed; a missing one is not an error.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "accel/core/device_backend.hpp"
#include "accel/core/errors.hpp"
#include "accel/dist/launch_environment.hpp"
#include "accel/utils/autocast.hpp"
#include "accel/utils/config.hpp"
#include "accel/utils/enums.hpp"
#include "accel/utils/environment.hpp"

namespace accel::utils {

/// What the library runs with: the config file's settings, with the environment taking precedence.
struct LibraryState {
  PrecisionType mixed_precision = PrecisionType::no;
  DistributedType distributed_type = DistributedType::no;
  int num_processes = 1;
  bool use_cpu = true;
  bool debug_mode = false;  ///< extra cross-process shape checks in collectives
  std::optional<std::filesystem::path> config_file;
};

namespace detail {
template <class E>
E enum_from_env(const char* key, E fallback) {
  const auto v = get_env(key);
  if (!v || v->empty()) return fallback;
  try {
    return enum_from_string<E>(*v);
  } catch (const std::exception& e) {
    throw ValueError(std::string("environment variable ") + key + ": " + e.what());
  }
}

inline LibraryState read_library_state() {
  LibraryState s;
  s.use_cpu = cuda_device_count() == 0;
  const auto path = default_config_file();
  if (const auto config = read_config(path)) {
    s.config_file = path;
    s.mixed_precision = config->mixed_precision;
    s.distributed_type = config->distributed_type;
    s.num_processes = config->num_processes;
    s.use_cpu = config->use_cpu;
    s.debug_mode = config->debug;
  }
  s.mixed_precision = enum_from_env("ACCELERATE_MIXED_PRECISION", s.mixed_precision);
  s.distributed_type = enum_from_env("ACCELERATE_DISTRIBUTED_TYPE", s.distributed_type);
  if (const auto ws = get_env("WORLD_SIZE"); ws && !ws->empty()) {
    try {
      std::size_t used = 0;
      s.num_processes = std::stoi(*ws, &used);
      if (used != ws->size() || s.num_processes < 1) throw ValueError("");
    } catch (const std::exception&) {
      throw ValueError("environment variable WORLD_SIZE: expected a positive integer, got '" + *ws + "'");
    }
  }
  s.use_cpu = parse_flag_from_env("ACCELERATE_USE_CPU", s.use_cpu);
  s.debug_mode = dist::debug_mode_from_env(s.debug_mode);
  return s;
}

inline LibraryState& library_state_slot() {
  static LibraryState s = read_library_state();
  return s;
}
}  // namespace detail

/// The state read at first use (see the header comment for where each field comes from).
inline const LibraryState& library_state() { return detail::library_state_slot(); }
/// Reads the config file and the environment again; not thread-safe.
inline void reload_library_state() { detail::library_state_slot() = detail::read_library_state(); }
/// Debug mode, as read at start-up.
inline bool is_debug_mode() { return library_state().debug_mode; }

/// An autocast scope in the configured mixed precision (none for "no"), so that code written once
/// follows `write_basic_config(...)` or ACCELERATE_MIXED_PRECISION without a rebuild.
[[nodiscard]] inline AutocastScope default_autocast(const AutocastKwargs& kwargs = {}) {
  return AutocastScope(library_state().mixed_precision, kwargs);
}

}  // namespace accel::utils

namespace accel {
using utils::default_autocast, utils::is_debug_mode, utils::library_state;
}  // namespace accel

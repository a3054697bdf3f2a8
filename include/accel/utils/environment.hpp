// Environment variables and what the build and machine provide.
//
//   auto env = patch_environment({{"rank", "1"}});   keys upper-cased; restored exactly at scope exit
//   auto none = clear_environment();                 empty environment; the old one restored at exit
//   auto purge = purge_accelerate_environment();     ACCELERATE_* variables restored at exit
//   str_to_bool(s), parse_flag_from_env(key, default), parse_choice_from_env(key, default)
//   get_int_from_env({keys...}, default), get_cpu_distributed_information()
//   convert_dict_to_env_variables(env)               "KEY=value\n" lines, unsafe entries skipped
//   is_cuda_available is_bf16_available is_fp8_available is_nccl_available is_mpi_available is_dnnl_available
//
// The scopes edit the process environment (setenv), which is not thread-safe: use them where no
// other thread reads the environment, as in tests and at start-up.
//
// Differences from Accelerate:
// - patch_environment takes {key, value} pairs and returns a scope, where Accelerate takes
//   **kwargs in a with-block. Values are spelled as Python's str() spells them: 3, 0.5, 1e-05,
//   True, None (nullptr).
// - A key given twice (or in two cases, "a" and "A") ends the scope at its value from before the
//   scope. Accelerate records the first patched value as the one to restore and leaves it set.
// - purge_accelerate_environment is a scope, not a decorator for functions and test classes, and
//   it also brings back ACCELERATE_* variables deleted inside it (Accelerate restores or removes
//   only those still set at exit).
// - str_to_bool returns a bool (Accelerate: 1 / 0 unless to_bool=True). get_int_from_env reads
//   an int64: a value beyond it is a ValueError, where Python's int is unbounded.
// - The availability checks (Accelerate's imports.py): is_bf16_available is true on every device,
//   where Accelerate asks torch.cuda.is_bf16_supported() when CUDA is present, and
//   is_fp8_available means fp8 storage and conversion, where Accelerate asks for an fp8 training
//   backend (Transformer Engine, MS-AMP, torchao).
// - Not here: are_libraries_initialized (it lists imported Python modules),
//   get_current_device_type (CUDA is the only accelerator: is_cuda_available), the nvidia-smi
//   helpers get_gpu_info / get_driver_version / check_cuda_p2p_ib_support /
//   check_cuda_fp8_capability (the CUDA backend's cuda::device_properties asks the runtime
//   instead of a subprocess), set_numa_affinity / override_numa_affinity (NVML is not a
//   dependency).
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "accel/core/device_backend.hpp"
#include "accel/core/env.hpp"
#include "accel/core/errors.hpp"
#include "accel/dist/launch_environment.hpp"

extern char** environ;

namespace accel::utils {

// get_env, str_to_bool, parse_flag_from_env and get_int_from_env live in core/env.hpp, so that
// layers below utils (dist reads its launcher's variables) share them; they are utils' names too.
using accel::get_env;
using accel::get_int_from_env;
using accel::parse_flag_from_env;
using accel::str_to_bool;

namespace detail {
inline void set_or_unset(const std::string& key, const std::optional<std::string>& value) {
  if (value) {
    ::setenv(key.c_str(), value->c_str(), 1);
  } else {
    ::unsetenv(key.c_str());
  }
}
inline std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

/// Python's str() of a float: the shortest digits that round-trip, positional for exponents in
/// [-4, 16), else d.ddde+XX; integral values keep ".0". A C++ float gets its own shortest digits
/// (0.1f is "0.1"), as numpy's float32 does.
template <std::floating_point T>
std::string python_float_str(T v) {
  if (v != v) return "nan";
  if (v == std::numeric_limits<T>::infinity()) return "inf";
  if (v == -std::numeric_limits<T>::infinity()) return "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(r.ptr - buf));  // "-1.25e+02"
  std::string sign;
  if (sci.front() == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const auto e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  const int exp = std::stoi(std::string(sci.substr(e + 1)));
  if (digits == "0") return sign + "0.0";
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else if (digits.size() <= static_cast<std::size_t>(exp) + 1) {
      out = digits + std::string(static_cast<std::size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<std::size_t>(exp) + 1) + "." + digits.substr(static_cast<std::size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const std::string mag = std::to_string(exp < 0 ? -exp : exp);
    out += std::string(exp < 0 ? "e-" : "e+") + (mag.size() < 2 ? "0" : "") + mag;
  }
  return sign + out;
}
}  // namespace detail

/// A value for patch_environment: text, or a number / bool / nullptr spelled as Python's str()
/// spells it ("3", "0.5", "1e-05", "True", "None").
struct EnvValue {
  std::string text;
  EnvValue(const char* s) : text(s ? s : "None") {}
  EnvValue(std::nullptr_t) : text("None") {}
  EnvValue(std::string s) : text(std::move(s)) {}
  EnvValue(std::string_view s) : text(s) {}
  EnvValue(bool b) : text(b ? "True" : "False") {}
  EnvValue(int v) : text(std::to_string(v)) {}
  EnvValue(long v) : text(std::to_string(v)) {}
  EnvValue(long long v) : text(std::to_string(v)) {}
  EnvValue(unsigned v) : text(std::to_string(v)) {}
  EnvValue(unsigned long v) : text(std::to_string(v)) {}
  EnvValue(unsigned long long v) : text(std::to_string(v)) {}
  EnvValue(float v) : text(detail::python_float_str(v)) {}
  EnvValue(double v) : text(detail::python_float_str(v)) {}
};

/// RAII: sets variables for a scope; at exit each is restored to its previous value, or unset if
/// it did not exist. Keys are upper-cased, as Accelerate does.
class PatchEnvironment {
 public:
  explicit PatchEnvironment(std::initializer_list<std::pair<std::string, EnvValue>> vars) {
    saved_.reserve(vars.size());
    for (const auto& [k, v] : vars) {
      std::string key = detail::upper(k);
      if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos) {
        restore();
        throw ValueError("patch_environment: invalid variable name '" + k + "'");
      }
      if (v.text.find('\0') != std::string::npos) {
        // setenv would cut the value at the NUL; Python refuses it too ("embedded null byte").
        restore();
        throw ValueError("patch_environment: the value of '" + key + "' holds a NUL byte");
      }
      saved_.emplace_back(key, get_env(key));
      ::setenv(key.c_str(), v.text.c_str(), 1);
    }
  }
  ~PatchEnvironment() { restore(); }
  PatchEnvironment(const PatchEnvironment&) = delete;
  PatchEnvironment& operator=(const PatchEnvironment&) = delete;

 private:
  void restore() noexcept {
    // Reverse order, so a key listed twice ends at its value from before the scope.
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) detail::set_or_unset(it->first, it->second);
    saved_.clear();
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

/// Sets `vars` until the returned scope ends: `auto env = patch_environment({{"KEY", "v"}});`.
[[nodiscard]] inline PatchEnvironment patch_environment(std::initializer_list<std::pair<std::string, EnvValue>> vars) {
  return PatchEnvironment(vars);
}

/// RAII: empties the environment for a scope, then restores exactly the variables there were
/// (anything set inside the scope is dropped).
class ClearEnvironment {
 public:
  ClearEnvironment() {
    for (char** e = environ; e && *e; ++e) saved_.emplace_back(*e);
    wipe();
  }
  ~ClearEnvironment() {
    wipe();
    for (const auto& kv : saved_) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) continue;
      ::setenv(kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);
    }
  }
  ClearEnvironment(const ClearEnvironment&) = delete;
  ClearEnvironment& operator=(const ClearEnvironment&) = delete;

 private:
  static void wipe() {
    std::vector<std::string> keys;
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      keys.emplace_back(kv.substr(0, kv.find('=')));
    }
    for (const auto& k : keys) ::unsetenv(k.c_str());
  }
  std::vector<std::string> saved_;
};

/// An empty environment until the returned scope ends.
[[nodiscard]] inline ClearEnvironment clear_environment() { return ClearEnvironment(); }

/// RAII: at exit, every ACCELERATE_* variable is put back as it was when the scope began: values
/// restored, ones set inside removed, ones deleted inside set again. Other variables are untouched.
class PurgeAccelerateEnvironment {
 public:
  static constexpr std::string_view prefix = "ACCELERATE_";

  PurgeAccelerateEnvironment() : saved_(snapshot()) {}
  ~PurgeAccelerateEnvironment() {
    for (const auto& kv : snapshot()) ::unsetenv(kv.first.c_str());
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  PurgeAccelerateEnvironment(const PurgeAccelerateEnvironment&) = delete;
  PurgeAccelerateEnvironment& operator=(const PurgeAccelerateEnvironment&) = delete;

 private:
  static std::vector<std::pair<std::string, std::string>> snapshot() {
    std::vector<std::pair<std::string, std::string>> out;
    for (char** e = environ; e && *e; ++e) {
      const std::string_view kv(*e);
      const auto eq = kv.find('=');
      if (eq == std::string_view::npos || !kv.starts_with(prefix)) continue;
      out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    return out;
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

/// ACCELERATE_* variables as they are now, restored when the returned scope ends (Accelerate's
/// purge_accelerate_environment decorator, as a scope).
[[nodiscard]] inline PurgeAccelerateEnvironment purge_accelerate_environment() { return PurgeAccelerateEnvironment(); }

/// The value of `key`, or `default_value` when unset (Accelerate's parse_choice_from_env).
inline std::string parse_choice_from_env(const std::string& key, std::string default_value = "no") {
  auto v = get_env(key);
  return v ? std::move(*v) : std::move(default_value);
}

/// Where this process sits among the CPU processes of a distributed run (Accelerate's
/// CPUInformation), read from the variables torchrun, Intel MPI / MPICH, Open MPI and MVAPICH set.
struct CPUInformation {
  std::int64_t rank = 0;              ///< of this process, among all
  std::int64_t world_size = 1;        ///< processes in all
  std::int64_t local_rank = 0;        ///< of this process, on this node
  std::int64_t local_world_size = 1;  ///< processes on this node
  friend bool operator==(const CPUInformation&, const CPUInformation&) = default;
};

/// Reads CPUInformation from the environment: RANK / PMI_RANK / OMPI_COMM_WORLD_RANK /
/// MV2_COMM_WORLD_RANK and the matching size, local rank and local size variables.
inline CPUInformation get_cpu_distributed_information() {
  // The variable lists are the dist layer's, which reads the same launchers.
  CPUInformation info;
  info.rank = dist::detail::first_int(dist::rank_variables, 0);
  info.world_size = dist::detail::first_int(dist::world_size_variables, 1);
  info.local_rank = dist::detail::first_int(dist::local_rank_variables, 0);
  info.local_world_size = dist::detail::first_int(dist::local_world_size_variables, 1);
  return info;
}

/// "KEY=value\n" for each entry of `env` (pairs of string-likes, in their order) that is safe to
/// write into an environment file: key and value non-empty and free of ';', '\n', '<', '>' and
/// ' '. The others are skipped with a warning on `warnings` (when given).
template <class Env>
std::vector<std::string> convert_dict_to_env_variables(const Env& env, std::ostream* warnings = nullptr) {
  std::vector<std::string> out;
  for (const auto& [k, v] : env) {
    const std::string key(k), value(v);
    const bool ok = !key.empty() && !value.empty() && (key + value).find_first_of(";\n<> ") == std::string::npos;
    if (ok) {
      out.push_back(key + "=" + value + "\n");
    } else if (warnings) {
      *warnings << "WARNING: Skipping " << key << "=" << value
                << " as it contains forbidden characters or missing values.\n";
    }
  }
  return out;
}

/// convert_dict_to_env_variables over a braced list: {{"KEY", "value"}, ...}.
inline std::vector<std::string> convert_dict_to_env_variables(
    std::initializer_list<std::pair<std::string_view, std::string_view>> env, std::ostream* warnings = nullptr) {
  return convert_dict_to_env_variables<std::initializer_list<std::pair<std::string_view, std::string_view>>>(env,
                                                                                                           warnings);
}

/// A CUDA backend is compiled in and sees a GPU.
inline bool is_cuda_available() { return accel::cuda_is_available(); }
/// bf16 tensors can be stored and converted on every device (conversion is exact in software);
/// bf16 matmuls on a GPU need compute capability 8.0, which this does not check.
inline bool is_bf16_available() { return true; }
/// fp8 (e4m3fn / e5m2) storage and conversion are always available; fp8 GEMMs are not part of it.
inline bool is_fp8_available() { return true; }
/// Built with NCCL (ACCEL_WITH_NCCL).
constexpr bool is_nccl_available() noexcept {
#if defined(ACCEL_WITH_NCCL)
  return true;
#else
  return false;
#endif
}
/// Built with MPI (ACCEL_WITH_MPI).
constexpr bool is_mpi_available() noexcept {
#if defined(ACCEL_WITH_MPI)
  return true;
#else
  return false;
#endif
}
/// oneDNN's headers are present (the CPU matmul backend).
constexpr bool is_dnnl_available() noexcept {
#if __has_include(<oneapi/dnnl/dnnl.hpp>) || __has_include(<dnnl.hpp>)
  return true;
#else
  return false;
#endif
}

}  // namespace accel::utils

namespace accel {
using utils::clear_environment, utils::patch_environment, utils::purge_accelerate_environment;
}  // namespace accel

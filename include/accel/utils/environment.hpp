// Environment variables and what the build and machine provide.
//
//   auto env = patch_environment({{"rank", "1"}});   keys upper-cased; restored exactly at scope exit
//   auto none = clear_environment();                 empty environment; the old one restored at exit
//   str_to_bool(s), parse_flag_from_env(key, default)
//   is_cuda_available is_bf16_available is_fp8_available is_nccl_available is_mpi_available is_dnnl_available
//
// The scopes edit the process environment (setenv), which is not thread-safe: use them where no
// other thread reads the environment, as in tests and at start-up.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/core/device_backend.hpp"
#include "accel/core/errors.hpp"

extern char** environ;

namespace accel::utils {

/// The value of `key`, or nullopt when unset.
inline std::optional<std::string> get_env(const std::string& key) {
  const char* v = std::getenv(key.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

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
}  // namespace detail

/// A value for patch_environment: text, or a number / bool spelled as Python's str() does.
struct EnvValue {
  std::string text;
  EnvValue(const char* s) : text(s) {}
  EnvValue(std::string s) : text(std::move(s)) {}
  EnvValue(std::string_view s) : text(s) {}
  EnvValue(bool b) : text(b ? "True" : "False") {}
  EnvValue(int v) : text(std::to_string(v)) {}
  EnvValue(long v) : text(std::to_string(v)) {}
  EnvValue(long long v) : text(std::to_string(v)) {}
  EnvValue(unsigned v) : text(std::to_string(v)) {}
  EnvValue(unsigned long v) : text(std::to_string(v)) {}
};

/// RAII: sets variables for a scope; at exit each is restored to its previous value, or unset if
/// it did not exist. Keys are upper-cased, as Accelerate does.
class PatchEnvironment {
 public:
  explicit PatchEnvironment(std::initializer_list<std::pair<std::string, EnvValue>> vars) {
    saved_.reserve(vars.size());
    for (const auto& [k, v] : vars) {
      std::string key = detail::upper(k);
      if (key.empty() || key.find('=') != std::string::npos) {
        restore();
        throw ValueError("patch_environment: invalid variable name '" + k + "'");
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

/// Accelerate's str_to_bool: y/yes/t/true/on/1 -> true, n/no/f/false/off/0 -> false (any case);
/// anything else is a ValueError.
inline bool str_to_bool(std::string_view value) {
  std::string v(value);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* t : {"y", "yes", "t", "true", "on", "1"}) {
    if (v == t) return true;
  }
  for (const char* f : {"n", "no", "f", "false", "off", "0"}) {
    if (v == f) return false;
  }
  throw ValueError("invalid truth value '" + std::string(value) + "'; expected y/yes/t/true/on/1 or n/no/f/false/off/0");
}

/// The boolean flag `key`, or `default_value` when unset.
inline bool parse_flag_from_env(const std::string& key, bool default_value = false) {
  const auto v = get_env(key);
  return v ? str_to_bool(*v) : default_value;
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
using utils::clear_environment;
using utils::patch_environment;
}  // namespace accel

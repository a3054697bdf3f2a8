// The default config file (Accelerate's `accelerate config default`), as JSON.
//
//   write_basic_config(mixed_precision = "no", save_location = default_config_file())
//       -> the path written, or nullopt when a file is already there (never overwritten)
//   read_config(path = default_config_file()) -> optional<ClusterConfig> (nullopt: no file)
//   library_state() (utils/state.hpp)       what the library runs with: this file under the environment
//   default_config_file(): $ACCEL_CONFIG_FILE, else $XDG_CACHE_HOME/accel/default_config.json,
//                          else ~/.cache/accel/default_config.json
//
// Files are written to a temporary name in the same folder and renamed, so a reader never sees
// half a file. Keys follow Accelerate's ClusterConfig.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "accel/core/device_backend.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/utils/enums.hpp"
#include "accel/utils/environment.hpp"

namespace accel::utils {

/// What the library reads from its config file at start-up.
struct ClusterConfig {
  ComputeEnvironment compute_environment = ComputeEnvironment::local_machine;
  DistributedType distributed_type = DistributedType::no;
  PrecisionType mixed_precision = PrecisionType::no;
  int num_processes = 1;
  bool use_cpu = true;
  bool debug = false;
  bool enable_cpu_affinity = false;

  nlohmann::json to_json() const {
    return {{"compute_environment", to_string(compute_environment)},
            {"distributed_type", to_string(distributed_type)},
            {"mixed_precision", to_string(mixed_precision)},
            {"num_processes", num_processes},
            {"use_cpu", use_cpu},
            {"debug", debug},
            {"enable_cpu_affinity", enable_cpu_affinity}};
  }
  friend bool operator==(const ClusterConfig&, const ClusterConfig&) = default;
};

/// Where the config lives unless a path is given (see the header comment).
inline std::filesystem::path default_config_file() {
  if (auto f = get_env("ACCEL_CONFIG_FILE"); f && !f->empty()) return *f;
  if (auto x = get_env("XDG_CACHE_HOME"); x && !x->empty()) {
    return std::filesystem::path(*x) / "accel" / "default_config.json";
  }
  const auto home = get_env("HOME");
  if (!home || home->empty()) {
    throw ValueError("default_config_file: none of ACCEL_CONFIG_FILE, XDG_CACHE_HOME or HOME is set");
  }
  return std::filesystem::path(*home) / ".cache" / "accel" / "default_config.json";
}

namespace detail {
/// Writes `text` to `path` through a temporary file in the same folder and a rename.
inline void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) throw IOError("cannot create folder " + path.parent_path().string() + ": " + ec.message());
  }
  std::random_device rd;
  auto tmp = path;
  tmp += ".tmp" + std::to_string(rd());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      throw IOError("cannot write " + tmp.string());
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignore;
    std::filesystem::remove(tmp, ignore);
    throw IOError("cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  }
}
}  // namespace detail

/// Writes a basic config for this machine: one process per GPU (MULTI_GPU when more than one),
/// else one CPU process. Returns the path, or nullopt when a config is already there.
inline std::optional<std::filesystem::path> write_basic_config(std::string_view mixed_precision = "no",
                                                               std::filesystem::path save_location = {}) {
  if (save_location.empty()) save_location = default_config_file();
  const std::string mp = [&] {
    std::string s(mixed_precision);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }();
  if (mp != "no" && mp != "fp16" && mp != "bf16" && mp != "fp8") {
    throw ValueError("write_basic_config: `mixed_precision` should be one of 'no', 'fp16', 'bf16', or 'fp8'. Received " +
                     std::string(mixed_precision));
  }
  if (std::filesystem::exists(save_location)) return std::nullopt;
  ClusterConfig c;
  c.mixed_precision = enum_from_string<PrecisionType>(mp);
  const int gpus = cuda_device_count();
  if (gpus > 0) {
    c.num_processes = gpus;
    c.use_cpu = false;
    c.distributed_type = gpus > 1 ? DistributedType::multi_gpu : DistributedType::no;
  }
  detail::write_file_atomically(save_location, c.to_json().dump(2) + "\n");
  return save_location;
}

/// Reads a config; nullopt when the file does not exist. FormatError (naming the file and the
/// key) for malformed JSON or values; missing keys keep their defaults.
inline std::optional<ClusterConfig> read_config(std::filesystem::path path = {}) {
  if (path.empty()) path = default_config_file();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  // Regular files only and bounded nesting: errors name the file.
  const nlohmann::json j = read_json_file(path.string());
  if (!j.is_object()) throw FormatError("config file " + path.string() + ": expected a JSON object");
  ClusterConfig c;
  auto field = [&](const char* key, auto& out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    try {
      using T = std::remove_reference_t<decltype(out)>;
      if constexpr (AccelerateEnum<T>) {
        out = enum_from_string<T>(it->template get<std::string>());
      } else {
        out = it->template get<T>();
      }
    } catch (const std::exception& e) {
      throw FormatError("config file " + path.string() + ": bad value for '" + key + "': " + e.what());
    }
  };
  field("compute_environment", c.compute_environment);
  field("distributed_type", c.distributed_type);
  field("mixed_precision", c.mixed_precision);
  field("num_processes", c.num_processes);
  field("use_cpu", c.use_cpu);
  field("debug", c.debug);
  field("enable_cpu_affinity", c.enable_cpu_affinity);
  if (c.num_processes < 1) {
    throw FormatError("config file " + path.string() + ": num_processes must be >= 1, got " +
                      std::to_string(c.num_processes));
  }
  return c;
}

}  // namespace accel::utils

namespace accel {
using utils::read_config, utils::write_basic_config;
}  // namespace accel

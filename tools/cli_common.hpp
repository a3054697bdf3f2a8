// Shared pieces of the `accel` commands: model loading, tables, byte printing.
//
//   load_cli_model(path)          model spec JSON, transformers config.json, any checkpoint format
//                                 registered in model_loaders() (see cli_checkpoint_model.hpp), or a
//                                 folder holding one of them
//   find_hf_config(path)          the transformers config.json that describes MODEL, if any
//   print_table(os, headers, rows)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/file_names.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/spec.hpp"

namespace accel::cli {

/// Model builders for inputs that are not JSON specs or configs, by checkpoint format as
/// io::detect_checkpoint_format tells it from the file's bytes (safetensors, sharded_index,
/// torch_bin; gguf once a reader exists). They must return a meta model (init_empty_weights is
/// active). `float_dtype`, when set, is the dtype floating-point weights are sized in; unset means
/// as stored.
using ModelLoader = std::function<std::shared_ptr<nn::Module>(const std::filesystem::path&, std::optional<DType> float_dtype)>;
inline std::map<io::CheckpointFormat, ModelLoader>& model_loaders() {
  static std::map<io::CheckpointFormat, ModelLoader> loaders;
  return loaders;
}

/// The loader registered for `format`, or nullptr.
inline const ModelLoader* find_model_loader(io::CheckpointFormat format) {
  const auto it = model_loaders().find(format);
  return it == model_loaders().end() ? nullptr : &it->second;
}

/// The model file inside a folder: config.json first (it knows the module structure), else the
/// checkpoint io::find_checkpoint_in_folder finds (its search order), else config.json, whose
/// absence the caller then reports.
inline std::filesystem::path model_file_in(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir / io::CONFIG_NAME, ec)) return dir / io::CONFIG_NAME;
  if (const auto found = io::find_checkpoint_in_folder(dir)) return found->path;
  return dir / io::CONFIG_NAME;
}

/// The meta model described by `path`: a model spec JSON, a transformers config.json, a file with
/// a registered loader, or a folder holding one of these. `float_dtype` sizes the floating-point
/// weights: configs default to float32, checkpoints to their stored dtypes. `kind` picks the class
/// a config.json is built as; specs and checkpoints hold what they hold.
inline std::shared_ptr<nn::Module> load_cli_model(const std::filesystem::path& input,
                                                  std::optional<DType> float_dtype = std::nullopt,
                                                  models::HFModelKind kind = models::HFModelKind::causal_lm) {
  std::filesystem::path path = input;
  if (std::filesystem::is_directory(path)) path = model_file_in(path);
  auto guard = nn::init_empty_weights(/*include_buffers=*/true);
  if (const auto format = io::try_detect_checkpoint_format(path)) {
    io::require_readable({*format, path});
    if (const ModelLoader* loader = find_model_loader(*format)) return (*loader)(path, float_dtype);
    throw FormatError(path.string() + " is " + std::string(io::checkpoint_format_info(*format).description) +
                      ", which accel cannot build a model from (expected a checkpoint file, a sharded index, a "
                      "config.json or a model spec)");
  }
  const DType dtype = float_dtype.value_or(DType::f32);
  const nlohmann::json j = read_json_file(path);
  if (j.contains("format") && j["format"] == "accelerate-oracle-spec/v1") return nn::module_from_spec(j, path.string());
  if (j.contains("model_type")) return models::model_from_hf_config(j, dtype, kind, path.string());
  throw FormatError(path.string() + ": neither a model spec (\"format\") nor a transformers config (\"model_type\")");
}

/// The transformers config.json describing MODEL: MODEL itself when it is one, else the
/// config.json of MODEL's folder (or of the folder MODEL's file sits in), else nullopt.
inline std::optional<nlohmann::json> find_hf_config(const std::filesystem::path& input) {
  const std::filesystem::path dir = std::filesystem::is_directory(input) ? input : input.parent_path();
  std::filesystem::path path = std::filesystem::is_directory(input) ? model_file_in(input) : input;
  if (!std::filesystem::is_regular_file(path) || io::try_detect_checkpoint_format(path)) path = dir / io::CONFIG_NAME;
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  nlohmann::json j = read_json_file(path);
  if (!j.is_object() || !j.contains("model_type")) return std::nullopt;
  return j;
}

/// How human_bytes labels its 1024 steps: `accelerate` as Accelerate's convert_bytes prints them
/// ("1.5 MB", kept where output is compared with Accelerate's), `binary` as what they are ("1.5 MiB").
enum class ByteUnits : bool { accelerate, binary };

/// Accelerate's convert_bytes: 1024 steps and two decimals at most, labelled per `units`.
inline std::string human_bytes(double size, ByteUnits units = ByteUnits::accelerate) {
  static const char* accelerate_units[] = {"bytes", "KB", "MB", "GB", "TB", "PB"};
  static const char* binary_units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const char* const* names = units == ByteUnits::binary ? binary_units : accelerate_units;
  std::size_t u = 0;
  for (; u < 5 && size >= 1024.0; ++u) size /= 1024.0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g %s", std::round(size * 100.0) / 100.0, names[u]);
  return buf;
}

/// A byte count for --json output: a whole number, rounded up when sub-byte dtypes (int4, bool)
/// leave a fraction, since that fraction still occupies a byte.
inline std::int64_t json_bytes(double size) { return static_cast<std::int64_t>(std::ceil(size)); }

/// `j` as text for stdout: names from a file may hold invalid UTF-8, which is replaced (U+FFFD)
/// instead of failing the dump; control characters are escaped as JSON requires.
template <class Json>
std::string dump_json(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

/// A plain ASCII table: | a | b |, columns as wide as their widest cell.
inline void print_table(std::ostream& os, const std::vector<std::string>& headers,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) w[c] = headers[c].size();
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], io::printable_entry(r[c]).size());
  }
  auto rule = [&] {
    os << '+';
    for (auto x : w) os << std::string(x + 2, '-') << '+';
    os << '\n';
  };
  auto line = [&](const std::vector<std::string>& r) {
    os << '|';
    for (std::size_t c = 0; c < w.size(); ++c) {
      // Cells carry names from files: escaped, so a crafted name cannot drive the terminal.
      const std::string cell = c < r.size() ? io::printable_entry(r[c]) : "";
      os << ' ' << cell << std::string(w[c] - cell.size(), ' ') << " |";
    }
    os << '\n';
  };
  rule();
  line(headers);
  rule();
  for (const auto& r : rows) line(r);
  rule();
}

}  // namespace accel::cli

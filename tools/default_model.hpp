// The built-in default model of `accel run`: a LLaMA-architecture checkpoint in the Hugging Face
// layout, generated deterministically on first use into a cache folder and reused after. What it
// is, how its weights are derived and what its text is like: default_model_parts.hpp.
//
//   ensure_default_model(shape, progress, log) -> DefaultModel   the folder, made when missing
//   write_default_model(dir, shape, progress)                    the files, into an empty folder
//   find_default_model(dir) -> optional<DefaultModel>            a folder that is complete, or nullopt
//   default_model_cache_root()                                   $XDG_CACHE_HOME/accel (~/.cache/accel)
//
// The folder is written into a temporary folder beside it and renamed into place only when every
// file is written and synced, the marker file last; a folder without a marker that lists every
// file at its size is never used (it is moved aside and removed, and the model written again).
// ACCEL_DEFAULT_MODEL_SHAPE ("layers=2,intermediate=1024,shard=16MB") makes a smaller model of the
// same vocabulary and layer 0, in its own folder: for tests, which cannot afford 310 MB.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/sharding.hpp"
#include "accel/tokenize/tokenizer.hpp"
#include "cli_progress.hpp"
#include "default_model_parts.hpp"
#include "default_model_text.hpp"

namespace accel::cli {

/// A complete default-model folder.
struct DefaultModel {
  std::filesystem::path dir;
  std::int64_t parameters = 0;
  std::int64_t weight_bytes = 0;
  std::size_t shards = 0;
  bool written_now = false;   ///< this call wrote it
  double write_seconds = 0;   ///< how long writing took, when written_now
};

namespace default_model {

inline constexpr const char* marker_name = "accel-default-model.json";
inline constexpr const char* marker_format = "accel-default-model/v1";

}  // namespace default_model

/// The folder default models live in: $XDG_CACHE_HOME/accel, else $HOME/.cache/accel. IOError when
/// neither variable gives an absolute path.
inline std::filesystem::path default_model_cache_root() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg && std::filesystem::path(xdg).is_absolute()) return std::filesystem::path(xdg) / "accel";
  const char* home = std::getenv("HOME");
  if (home && *home && std::filesystem::path(home).is_absolute()) return std::filesystem::path(home) / ".cache" / "accel";
  throw IOError("no folder for the default model: set XDG_CACHE_HOME or HOME to an absolute path");
}

/// The default model in `dir` when its marker lists every file at its size; nullopt otherwise.
inline std::optional<DefaultModel> find_default_model(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path marker = dir / default_model::marker_name;
  if (!fs::is_regular_file(marker, ec)) return std::nullopt;
  try {
    const nlohmann::json j = read_json_file<nlohmann::json>(marker.string(), file_json_limits, std::size_t{1} << 20);
    if (j.value("format", "") != default_model::marker_format || !j.contains("files") || !j["files"].is_object()) return std::nullopt;
    for (const auto& [name, size] : j["files"].items()) {
      if (name.find('/') != std::string::npos || !size.is_number_unsigned()) return std::nullopt;
      const auto actual = fs::file_size(dir / name, ec);
      if (ec || actual != size.get<std::uintmax_t>()) return std::nullopt;
    }
    DefaultModel m;
    m.dir = dir;
    m.parameters = j.at("parameters").get<std::int64_t>();
    m.weight_bytes = j.at("weight_bytes").get<std::int64_t>();
    m.shards = j.at("shards").get<std::size_t>();
    return m;
  } catch (const std::exception&) {
    return std::nullopt;  // a marker that does not parse marks nothing
  }
}

/// Writes the default model of `shape` into `dir` (an existing, empty folder), the marker last.
/// `progress` hears the weight bytes written. FormatError when the written tokenizer does not
/// round-trip the story; IOError when the disk refuses.
inline DefaultModel write_default_model(const std::filesystem::path& dir, const DefaultModelShape& shape,
                                        const ByteProgressFn& progress = {}) {
  namespace dm = default_model;
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  const auto write_json = [&](const char* name, const nlohmann::ordered_json& j) {
    const std::string text = j.dump(2) + "\n";
    io::write_file_atomic((dir / name).string(), text);
    files[name] = text.size();
  };

  const dm::ByteLevelBpe bpe = dm::learn_byte_level_bpe(default_model_text, dm::merges);
  if (static_cast<std::int64_t>(bpe.tokens.size()) != dm::vocab - 1) {
    throw FormatError("default_model_text.hpp: the story yields " + std::to_string(bpe.tokens.size()) +
                      " tokens for the default model's vocabulary, expected " + std::to_string(dm::vocab - 1));
  }
  write_json("tokenizer.json", dm::tokenizer_json(bpe, dm::eos_id));
  const std::string tokenizer_path = (dir / "tokenizer.json").string();
  const auto tok = tokenize::Tokenizer::from_file(tokenizer_path);
  const auto ids = tok.encode(default_model_text, /*add_special_tokens=*/false);
  if (tok.decode(ids) != default_model_text) {
    throw FormatError(tokenizer_path + ": the tokenizer written does not give back the text it was learned from");
  }
  write_json("config.json", dm::config_json(shape));
  write_json("generation_config.json", {{"bos_token_id", dm::eos_id}, {"eos_token_id", dm::eos_id}, {"do_sample", false},
                                        {"max_new_tokens", 32}});

  const auto shapes = dm::tensor_shapes(shape);
  std::vector<io::ShardItem> items;
  std::map<std::string, Shape> shape_of;
  std::int64_t parameters = 0;
  for (const auto& [name, s] : shapes) {
    items.push_back({name, DType::bf16, s.numel(), nullptr});
    shape_of.emplace(name, s);
    parameters += s.numel();
  }
  const std::size_t total = static_cast<std::size_t>(parameters) * 2;
  const io::ShardPlan plan = io::plan_shards(items, shape.max_shard_bytes, "model.safetensors");
  const dm::WeightMaker maker(ids);
  std::size_t done = 0;
  if (progress) progress(0, total);
  for (std::size_t s = 0; s < plan.shards.size(); ++s) {
    io::NamedTensors tensors;
    for (const auto& name : plan.shards[s]) {
      tensors.emplace_back(name, maker.make(name, shape_of.at(name)));
      done += tensors.back().second.nbytes();
      if (progress) progress(done, total);
    }
    const fs::path path = dir / plan.filenames[s];
    io::save_file(tensors, path.string(), {{"format", "pt"}});
    files[plan.filenames[s]] = fs::file_size(path);
  }
  if (plan.is_sharded()) {
    const fs::path index = dir / "model.safetensors.index.json";
    io::write_sharded_index(index.string(), plan.total_size.bytes(), plan.weight_map);
    files[index.filename().string()] = fs::file_size(index);
  }
  const nlohmann::ordered_json marker = {{"format", dm::marker_format}, {"parameters", parameters},
                                         {"weight_bytes", total}, {"shards", plan.filenames.size()}, {"files", files}};
  io::write_file_atomic((dir / dm::marker_name).string(), marker.dump(2) + "\n");
  DefaultModel m;
  m.dir = dir;
  m.parameters = parameters;
  m.weight_bytes = static_cast<std::int64_t>(total);
  m.shards = plan.filenames.size();
  m.written_now = true;
  m.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

namespace default_model {

/// Removes `path` and everything in it, ignoring errors (a leftover is retried next time).
inline void remove_quietly(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

/// Removes temporary folders of `name` under `root` left by runs that died more than a day ago.
inline void remove_stale_temporaries(const std::filesystem::path& root, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (!f.starts_with("." + name + ".tmp-") && !f.starts_with("." + name + ".old-")) continue;
    std::error_code tec;
    const auto t = fs::last_write_time(it->path(), tec);
    if (!tec && now - t > std::chrono::hours(24)) remove_quietly(it->path());
  }
}

/// A folder made by mkdtemp from `pattern` (ending in XXXXXX).
inline std::filesystem::path make_temporary_folder(const std::filesystem::path& pattern) {
  std::string s = pattern.string();
  if (!::mkdtemp(s.data())) throw IOError("cannot create the folder '" + s + "' for the default model");
  return s;
}

}  // namespace default_model

/// The default model of `shape` in the cache (default_model_cache_root()), written first when
/// missing or incomplete (see the header comment). `log` hears one line when it is written.
inline DefaultModel ensure_default_model(const DefaultModelShape& shape = DefaultModelShape::from_env(),
                                         const ByteProgressFn& progress = {}, std::ostream* log = nullptr) {
  namespace fs = std::filesystem;
  const fs::path root = default_model_cache_root();
  const std::string name = shape.folder_name();
  const fs::path dir = root / name;
  if (auto m = find_default_model(dir)) return *m;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw IOError("cannot create the cache folder '" + root.string() + "' for the default model: " + ec.message());
  default_model::remove_stale_temporaries(root, name);
  const fs::path tmp = default_model::make_temporary_folder(root / ("." + name + ".tmp-XXXXXX"));
  struct Cleanup {
    fs::path path;
    ~Cleanup() { default_model::remove_quietly(path); }
  } cleanup{tmp};
  if (log) *log << "writing the default model into " << dir.string() << " (once)\n" << std::flush;
  DefaultModel m = write_default_model(tmp, shape, progress);
  // A folder without a complete marker is moved aside first: rename() replaces only empty folders.
  if (fs::exists(dir, ec) && !find_default_model(dir)) {
    const fs::path old = default_model::make_temporary_folder(root / ("." + name + ".old-XXXXXX"));
    fs::rename(dir, old / "model", ec);
    default_model::remove_quietly(old);
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    // Another run may have published its copy first; that one is as good as this one.
    if (auto other = find_default_model(dir)) return *other;
    throw IOError("cannot move the default model from '" + tmp.string() + "' to '" + dir.string() + "': " + ec.message());
  }
  m.dir = dir;
  return m;
}

}  // namespace accel::cli

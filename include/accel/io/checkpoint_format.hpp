// CheckpointFormat: what a checkpoint path is, decided in one place, and the one folder rule.
//
//   CheckpointFormat                    safetensors, sharded_index, torch_bin, torch_legacy,
//                                       offload_folder, gguf, model_folder
//   detect_checkpoint_format(path)      from the bytes first, then the name; FormatError if none
//   resolve_checkpoint_folder(folder)   the checkpoint a folder holds, by the search order below
//   resolve_checkpoint(path)            a file as detected, a folder as resolved
//   require_readable(checkpoint)        FormatError for the formats accel recognises but does not read
//
// Detection reads at most the first 64 KiB and decides by content:
//   safetensors     a u64 little-endian header length N that fits the file (and the 100 MB limit),
//                   then '{'
//   torch_bin       a zip ("PK\3\4"): torch.save's format since torch 1.6, whatever the file's name
//   gguf            "GGUF"
//   torch_legacy    a pickle (0x80, protocol 2-5): torch.save without the zip container, which
//                   accel refuses by name instead of misreading it
//   sharded_index   JSON whose object holds "weight_map"
// Only when the bytes say nothing does the name decide (.safetensors, .index.json, .bin, .gguf), so
// that an empty or truncated checkpoint reaches its reader and hears what is wrong with it. Text
// (the first bytes printable) is never taken for a binary format on its name alone: a Git LFS
// pointer called model.safetensors is "not a checkpoint format", not a header of absurd length.
//
// Folder search order (transformers' from_pretrained, the first one present wins):
//   model.safetensors, model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json,
//   then exactly one other *.index.json (Accelerate's rule; several are a ValueError), then an
//   Accelerate offload folder's index.json.
// Accelerate's load_checkpoint_in_model looks for pytorch_model.bin before model.safetensors, and
// raises when a named index sits beside another *.index.json. A folder holding both formats holds
// one model saved twice; the safetensors copy is mapped without a copy and runs no pickle, so it is
// the one taken, here and in load_checkpoint_in_model alike. A name of the list that is there but
// is not a regular file (a directory, a FIFO) is an IOError naming it, where transformers would pass
// over it: it is a broken download or a mistake, and passing over it would load another file
// without a word.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <sys/stat.h>

#include "accel/core/errors.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/file_names.hpp"
#include "accel/core/regular_file.hpp"

namespace accel::io {

/// What a checkpoint path holds.
enum class CheckpointFormat : std::uint8_t {
  safetensors,     ///< one .safetensors file
  sharded_index,   ///< a *.index.json naming safetensors or torch .bin shards
  torch_bin,       ///< torch.save's zip format (pytorch_model.bin, *.pt)
  torch_legacy,    ///< torch.save's pre-zip pickle: recognised, refused
  offload_folder,  ///< Accelerate's offload folder: index.json + <name>.dat
  gguf,            ///< a GGUF model file (io/gguf_model.hpp)
  model_folder,    ///< a folder holding a checkpoint (and usually config.json)
};

/// Number of CheckpointFormat values (rows of checkpoint_format_table).
inline constexpr std::size_t checkpoint_format_count = 7;

/// Everything the library knows about one format, in one row.
struct CheckpointFormatInfo {
  CheckpointFormat format;
  std::string_view name;         ///< how `accel inspect` prints it: "safetensors"
  std::string_view description;  ///< for messages: "a safetensors file"
  std::string_view suffix;       ///< the name's suffix that stands for it when the bytes cannot
  bool is_folder;
  std::string_view refusal;      ///< why accel does not read it; empty when it does
};

/// One row per format, in enum order: a new format (a reader, a refusal) is one row here.
inline constexpr std::array<CheckpointFormatInfo, checkpoint_format_count> checkpoint_format_table{{
    {CheckpointFormat::safetensors, "safetensors", "a safetensors file", ".safetensors", false, ""},
    {CheckpointFormat::sharded_index, "sharded", "a sharded checkpoint index", ".index.json", false, ""},
    {CheckpointFormat::torch_bin, "torch_bin", "a torch .bin (zip) file", ".bin", false, ""},
    {CheckpointFormat::torch_legacy, "torch_legacy",
     "a legacy torch pickle, not a zip archive (torch < 1.6, or _use_new_zipfile_serialization=False)", "", false,
     "accel reads torch.save's zip format only; save it again with torch.save, or as safetensors"},
    {CheckpointFormat::offload_folder, "offload", "an Accelerate offload folder", "", true, ""},
    {CheckpointFormat::gguf, "gguf", "a GGUF file", ".gguf", false, ""},
    {CheckpointFormat::model_folder, "folder", "a model folder", "", true, ""},
}};

/// The table row of `f`.
constexpr const CheckpointFormatInfo& checkpoint_format_info(CheckpointFormat f) {
  return checkpoint_format_table[static_cast<std::size_t>(f)];
}
/// "safetensors", "sharded", "torch_bin", "offload", ...
constexpr std::string_view checkpoint_format_name(CheckpointFormat f) { return checkpoint_format_info(f).name; }
/// Prints the format's name, as `accel inspect` does.
inline std::ostream& operator<<(std::ostream& os, CheckpointFormat f) { return os << checkpoint_format_name(f); }

/// Bytes detection reads: enough for a sharded index's "weight_map" after a long "metadata".
inline constexpr std::size_t checkpoint_sniff_bytes = 64 * 1024;

/// The format `head` (the first bytes of a file of `file_size` bytes) shows by its content alone,
/// or nullopt. Pure: no name, no disk.
inline std::optional<CheckpointFormat> sniff_checkpoint_format(ByteSpan head, std::uint64_t file_size) {
  const auto byte = [&](std::size_t i) { return std::to_integer<unsigned char>(head[i]); };
  const auto starts = [&](std::string_view magic) {
    if (head.size() < magic.size()) return false;
    for (std::size_t i = 0; i < magic.size(); ++i) {
      if (byte(i) != static_cast<unsigned char>(magic[i])) return false;
    }
    return true;
  };
  if (head.size() >= 9 && file_size >= 9) {
    const std::uint64_t n = load_le<std::uint64_t>(head.data());
    if (n >= 2 && n <= 100'000'000 && n <= file_size - 8 && byte(8) == '{') return CheckpointFormat::safetensors;
  }
  if (starts(std::string_view("PK\x03\x04", 4)) || starts(std::string_view("PK\x05\x06", 4))) return CheckpointFormat::torch_bin;
  if (starts("GGUF")) return CheckpointFormat::gguf;
  if (head.size() >= 2 && byte(0) == 0x80 && byte(1) >= 2 && byte(1) <= 5) return CheckpointFormat::torch_legacy;
  const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{' && text.find("\"weight_map\"") != std::string_view::npos) {
    return CheckpointFormat::sharded_index;
  }
  return std::nullopt;
}

namespace detail {

struct Sniffed {
  std::optional<CheckpointFormat> format;
  std::string head;
};

/// True when the first bytes are printable ASCII or whitespace: no binary checkpoint starts so
/// (a safetensors length has zero high bytes, a zip starts with "PK\3\4").
inline bool looks_like_text(std::string_view head) {
  const std::string_view start = head.substr(0, 8);
  return !start.empty() && std::all_of(start.begin(), start.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u >= 0x20 && u < 0x7f) || u == '\t' || u == '\n' || u == '\r';
  });
}

/// The format whose suffix ends `name` (the longest such suffix), or nullopt.
inline std::optional<CheckpointFormat> format_by_suffix(std::string_view name) {
  std::optional<CheckpointFormat> best;
  std::size_t best_len = 0;
  for (const auto& info : checkpoint_format_table) {
    const auto& s = info.suffix;
    if (!s.empty() && s.size() > best_len && name.size() > s.size() && name.ends_with(s)) {
      best = info.format;
      best_len = s.size();
    }
  }
  return best;
}

inline Sniffed sniff_file(const std::filesystem::path& path) {
  const RegularFile f = RegularFile::open(path.string());
  Sniffed s;
  s.head.resize(static_cast<std::size_t>(std::min<std::uint64_t>(f.size(), checkpoint_sniff_bytes)));
  s.head.resize(f.read_at(s.head.data(), s.head.size(), 0));
  s.format = sniff_checkpoint_format(as_bytes(s.head), f.size());
  if (s.format) return s;
  const auto by_name = format_by_suffix(path.filename().string());
  if (by_name && (*by_name == CheckpointFormat::sharded_index || !looks_like_text(s.head))) s.format = by_name;
  return s;
}

}  // namespace detail

/// What one checkpoint path resolved to: its format and the file (or, for an offload folder, the
/// folder) to read.
struct ResolvedCheckpoint {
  CheckpointFormat format = CheckpointFormat::safetensors;
  std::filesystem::path path;
};

/// The names a folder is searched for, in order; see the header comment for what follows them.
inline constexpr std::array<std::string_view, 4> checkpoint_folder_search_order = {
    SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME};

inline CheckpointFormat detect_checkpoint_format(const std::filesystem::path& path);

/// The checkpoint `folder` holds by the search order, or nullopt when it holds none. ValueError
/// (Accelerate's) when no named file is there and several *.index.json are; IOError naming a
/// name of the order that is not a regular file.
inline std::optional<ResolvedCheckpoint> find_checkpoint_in_folder(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string_view name : checkpoint_folder_search_order) {
    const fs::path p = folder / name;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;  // absent, or a link to nothing
      throw IOError("cannot stat '" + p.string() + "': " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
      throw IOError("'" + p.string() + "' is " + std::string(file_type_name(st.st_mode)) + ", not a regular file");
    }
    return ResolvedCheckpoint{detect_checkpoint_format(p), p};
  }
  std::vector<fs::path> indexes;
  const std::string_view index_suffix = checkpoint_format_info(CheckpointFormat::sharded_index).suffix;
  fs::directory_iterator entries(folder, ec);
  if (ec) throw IOError("cannot list '" + folder.string() + "': " + ec.message());
  for (const auto& e : entries) {
    const std::string name = e.path().filename().string();
    if (name.size() > index_suffix.size() && name.ends_with(index_suffix) && e.is_regular_file(ec)) indexes.push_back(e.path());
  }
  std::sort(indexes.begin(), indexes.end());
  if (indexes.size() > 1) {
    std::string names;
    for (const auto& i : indexes) names += (names.empty() ? "" : ", ") + i.filename().string();
    throw ValueError(folder.string() + " containing more than one `.index.json` file, delete the irrelevant ones (" + names +
                     ").");
  }
  if (indexes.size() == 1) return ResolvedCheckpoint{CheckpointFormat::sharded_index, indexes.front()};
  if (fs::is_regular_file(folder / offload_index_name, ec)) return ResolvedCheckpoint{CheckpointFormat::offload_folder, folder};
  return std::nullopt;
}

/// As find_checkpoint_in_folder, with Accelerate's ValueError naming the folder when it holds none.
inline ResolvedCheckpoint resolve_checkpoint_folder(const std::filesystem::path& folder) {
  if (auto found = find_checkpoint_in_folder(folder)) return *found;
  std::string order;
  for (const std::string_view name : checkpoint_folder_search_order) order += std::string(name) + ", ";
  throw ValueError(folder.string() + " is not a folder containing a `.index.json` file or a " + std::string(WEIGHTS_NAME) +
                   " or a " + std::string(SAFE_WEIGHTS_NAME) + " file (looked for " + order + "one *.index.json, or an " +
                   std::string(offload_index_name) + " of offloaded weights)");
}

/// The format of `path` (see the header comment), or nullopt when it is none accel recognises.
/// A folder is an offload folder when that is what the search order finds in it, else a model
/// folder. IOError when `path` cannot be opened or is not a regular file or a folder; ValueError
/// for a folder with several *.index.json and no named one (find_checkpoint_in_folder).
inline std::optional<CheckpointFormat> try_detect_checkpoint_format(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const auto found = find_checkpoint_in_folder(path);
    return found && found->format == CheckpointFormat::offload_folder ? CheckpointFormat::offload_folder
                                                                      : CheckpointFormat::model_folder;
  }
  return detail::sniff_file(path).format;
}

/// As try_detect_checkpoint_format; FormatError naming the file when it is no checkpoint format.
inline CheckpointFormat detect_checkpoint_format(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return *try_detect_checkpoint_format(path);
  const detail::Sniffed s = detail::sniff_file(path);
  if (s.format) return *s.format;
  std::string hint;
  if (s.head.starts_with("version https://git-lfs.github.com/spec/")) {
    hint = "; it is a Git LFS pointer: fetch the file itself (git lfs pull)";
  } else if (s.head.empty()) {
    hint = "; it is empty";
  }
  throw FormatError("'" + path.string() +
                    "' is not a checkpoint format accel reads (expected safetensors, a sharded *.index.json, a torch .bin "
                    "zip, an offload folder)" + hint);
}

/// A folder resolved by the search order, any other path as detected.
inline ResolvedCheckpoint resolve_checkpoint(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return resolve_checkpoint_folder(path);
  return {detect_checkpoint_format(path), path};
}

/// FormatError naming the file when accel recognises `c`'s format but does not read it.
inline void require_readable(const ResolvedCheckpoint& c) {
  const auto& info = checkpoint_format_info(c.format);
  if (info.refusal.empty()) return;
  throw FormatError("'" + c.path.string() + "' is " + std::string(info.description) + ": " + std::string(info.refusal));
}

}  // namespace accel::io

namespace accel {
using io::CheckpointFormat;
}  // namespace accel

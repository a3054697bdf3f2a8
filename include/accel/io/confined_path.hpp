// Paths that a file names, kept inside the folder of that file.
//
//   fs::path rel  = confined_entry(entry, where);                         // pure: parsers use it
//   fs::path full = confined_path(folder, entry, where);                  // folder / entry
//   fs::path st   = confined_path(folder, entry, where, AbsolutePath::allowed);
//
// Every file name read from a checkpoint or an offload folder goes through here: shard names of a
// sharded `*.index.json`, the `<tensor>.dat` files of an offload `index.json` and its
// `safetensors_file` entries. The rule is lexical, on the entry as written:
// - it is not empty and holds no NUL byte (the OS would cut the name at the NUL);
// - it is relative, unless the format allows an absolute path (only `safetensors_file` of an
//   offload index does, because Accelerate and load_checkpoint_in_model record absolute paths
//   there); an allowed absolute entry is taken as is;
// - once normalised ("a/./b", "a/../b"), it does not start with "..": it stays inside the folder,
//   and it names a file in it, not the folder itself.
// Relative entries are resolved against the folder of the file that names them, never against
// the current directory. Symbolic links inside the folder are followed as the OS follows them,
// wherever they point: the Hugging Face cache is made of links (snapshots/<rev>/model.safetensors
// -> ../../blobs/<sha>), and a link is placed by whoever owns the folder, not by the file's text.
// A violation is a FormatError that names the file and the entry.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "accel/core/errors.hpp"

namespace accel::io {

/// Whether an entry may name its file by absolute path (see the header comment).
enum class AbsolutePath : bool { refused, allowed };

/// `entry` with control characters escaped, for messages and tables that reach a terminal
/// ("a\0b" -> "a\x00b"): C0 bytes, DEL, and the C1 range U+0080..U+009F (0xC2 0x80..0x9F in
/// UTF-8, where CSI starts escape sequences some terminals obey). Other bytes pass unchanged.
inline std::string printable_entry(std::string_view entry) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(entry.size());
  const auto escape = [&](unsigned char u) {
    out += "\\x";
    out += hex[u >> 4];
    out += hex[u & 0xf];
  };
  for (std::size_t i = 0; i < entry.size(); ++i) {
    const auto u = static_cast<unsigned char>(entry[i]);
    if (u < 0x20 || u == 0x7f) {
      escape(u);
    } else if (u == 0xc2 && i + 1 < entry.size() && static_cast<unsigned char>(entry[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(entry[i + 1]) <= 0x9f) {
      escape(u);
      escape(static_cast<unsigned char>(entry[++i]));
    } else {
      out += entry[i];
    }
  }
  return out;
}

/// Checks `entry` by the rule of the header comment and returns it normalised. `where` names the
/// file and the entry in the FormatError ("offload index 'f/index.json', tensor 'w'").
inline std::filesystem::path confined_entry(std::string_view entry, const std::string& where,
                                            AbsolutePath absolute = AbsolutePath::refused) {
  const auto refuse = [&](const std::string& why) {
    throw FormatError(where + ": path '" + printable_entry(entry) + "' " + why);
  };
  if (entry.empty()) refuse("is empty; a file inside the folder is expected");
  if (entry.find('\0') != std::string_view::npos) refuse("holds a NUL byte; a file inside the folder is expected");
  const std::filesystem::path p(entry);
  if (p.is_absolute()) {
    if (absolute == AbsolutePath::refused) refuse("is absolute; only a file inside the folder is allowed here");
    return p.lexically_normal();
  }
  const std::filesystem::path n = p.lexically_normal();
  if (n.empty() || n == ".") refuse("names the folder itself, not a file inside it");
  if (*n.begin() == "..") refuse("leads out of the folder; only a file inside the folder is allowed");
  return n;
}

/// `folder / entry` once `entry` passed confined_entry (an allowed absolute entry as is).
inline std::filesystem::path confined_path(const std::filesystem::path& folder, std::string_view entry,
                                           const std::string& where, AbsolutePath absolute = AbsolutePath::refused) {
  const std::filesystem::path n = confined_entry(entry, where, absolute);
  return n.is_absolute() ? n : folder / n;
}

}  // namespace accel::io

// A minimal, validating zip reader for torch.save archives (stored entries only).
//
//   ZipArchive z = ZipArchive::parse(bytes, "model.bin");
//   const ZipEntry* e = z.find("archive/data.pkl");   // e->data_offset, e->size
//
// Reads the end-of-central-directory record (and its zip64 form), then every central directory
// entry and its local header. Every offset and size is checked against the archive before use;
// compressed or encrypted entries, duplicate names and inconsistent sizes are FormatErrors.
// CRCs are not verified (torch's own loader does not require them either).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/io/bytes.hpp"

namespace accel::io {

/// One stored entry: its name and where its bytes lie in the archive.
struct ZipEntry {
  std::string name;
  std::uint64_t data_offset = 0;  ///< absolute offset of the first data byte
  std::uint64_t size = 0;
  std::uint32_t crc32 = 0;
};

/// The entries of a zip archive held in memory (the archive bytes are not copied).
class ZipArchive {
 public:
  /// Parses the directory of `bytes`; `source` names the archive in errors.
  static ZipArchive parse(ByteSpan bytes, const std::string& source) {
    ZipArchive z;
    z.source_ = source;
    z.read(bytes);
    return z;
  }

  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  /// The entry named `name`, or nullptr.
  const ZipEntry* find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &entries_[it->second];
  }

 private:
  static constexpr std::uint32_t sig_local = 0x04034b50, sig_central = 0x02014b50, sig_eocd = 0x06054b50,
                                 sig_zip64_eocd = 0x06064b50, sig_zip64_locator = 0x07064b50;

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError("zip archive '" + source_ + "': " + what);
  }
  void need(std::uint64_t off, std::uint64_t len, std::uint64_t limit, const std::string& what) const {
    if (off > limit || len > limit - off) {
      fail(what + " at offset " + std::to_string(off) + " (+" + std::to_string(len) +
           ") lies outside the archive");
    }
  }

  void read(ByteSpan b) {
    const std::uint64_t n = b.size();
    if (n < 22) fail("too small to be a zip archive (" + std::to_string(n) + " bytes)");
    // The EOCD record sits in the last 22 + 65535 bytes (its comment is at most 65535 bytes).
    std::uint64_t eocd = n;
    const std::uint64_t lowest = n > 22 + 65535 ? n - 22 - 65535 : 0;
    for (std::uint64_t p = n - 22 + 1; p-- > lowest;) {
      if (load_le<std::uint32_t>(b.data() + p) == sig_eocd &&
          p + 22 + load_le<std::uint16_t>(b.data() + p + 20) == n) {
        eocd = p;
        break;
      }
    }
    if (eocd == n) fail("no end-of-central-directory record (not a zip archive, or a legacy torch file)");
    const std::byte* e = b.data() + eocd;
    if (load_le<std::uint16_t>(e + 4) != 0 || load_le<std::uint16_t>(e + 6) != 0) fail("multi-disk archives are not supported");
    std::uint64_t count = load_le<std::uint16_t>(e + 10);
    std::uint64_t cd_size = load_le<std::uint32_t>(e + 12);
    std::uint64_t cd_off = load_le<std::uint32_t>(e + 16);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
      if (eocd < 20) fail("zip64 locator missing");
      const std::byte* loc = b.data() + eocd - 20;
      if (load_le<std::uint32_t>(loc) != sig_zip64_locator) fail("zip64 locator missing");
      const std::uint64_t z64 = load_le<std::uint64_t>(loc + 8);
      need(z64, 56, eocd - 20, "zip64 end-of-central-directory record");
      const std::byte* r = b.data() + z64;
      if (load_le<std::uint32_t>(r) != sig_zip64_eocd) fail("bad zip64 end-of-central-directory signature");
      count = load_le<std::uint64_t>(r + 32);
      cd_size = load_le<std::uint64_t>(r + 40);
      cd_off = load_le<std::uint64_t>(r + 48);
    }
    need(cd_off, cd_size, eocd, "central directory");
    if (count > cd_size / 46) {
      fail(std::to_string(count) + " entries cannot fit a central directory of " + std::to_string(cd_size) + " bytes");
    }
    entries_.reserve(static_cast<std::size_t>(count));
    std::uint64_t p = cd_off;
    const std::uint64_t cd_end = cd_off + cd_size;
    for (std::uint64_t i = 0; i < count; ++i) {
      need(p, 46, cd_end, "central directory entry");
      const std::byte* c = b.data() + p;
      if (load_le<std::uint32_t>(c) != sig_central) fail("bad central directory signature for entry " + std::to_string(i));
      const std::uint16_t flags = load_le<std::uint16_t>(c + 8);
      const std::uint16_t method = load_le<std::uint16_t>(c + 10);
      ZipEntry ent;
      ent.crc32 = load_le<std::uint32_t>(c + 16);
      std::uint64_t csize = load_le<std::uint32_t>(c + 20);
      std::uint64_t usize = load_le<std::uint32_t>(c + 24);
      const std::uint16_t name_len = load_le<std::uint16_t>(c + 28);
      const std::uint16_t extra_len = load_le<std::uint16_t>(c + 30);
      const std::uint16_t comment_len = load_le<std::uint16_t>(c + 32);
      std::uint64_t local = load_le<std::uint32_t>(c + 42);
      need(p + 46, std::uint64_t{name_len} + extra_len + comment_len, cd_end, "central directory entry name");
      ent.name.assign(reinterpret_cast<const char*>(c + 46), name_len);
      // zip64 extended information: present fields replace the 0xFFFFFFFF placeholders, in order.
      const std::byte* x = c + 46 + name_len;
      for (std::uint32_t k = 0; k + 4 <= extra_len;) {
        const std::uint16_t id = load_le<std::uint16_t>(x + k);
        const std::uint16_t len = load_le<std::uint16_t>(x + k + 2);
        if (std::uint32_t{len} > extra_len - k - 4) fail("entry '" + ent.name + "': extra field overruns its record");
        if (id == 0x0001) {
          std::uint32_t q = k + 4;
          auto take = [&](std::uint64_t& field) {
            if (field != 0xFFFFFFFF) return;
            if (q + 8 > k + 4u + len) fail("entry '" + ent.name + "': truncated zip64 extra field");
            field = load_le<std::uint64_t>(x + q);
            q += 8;
          };
          take(usize);
          take(csize);
          take(local);
        }
        k += 4u + len;
      }
      if (flags & 0x1) fail("entry '" + ent.name + "' is encrypted");
      if (method != 0) {
        fail("entry '" + ent.name + "' uses compression method " + std::to_string(method) +
             "; only stored entries are supported (torch.save never compresses)");
      }
      if (csize != usize) fail("entry '" + ent.name + "': stored sizes differ (" + std::to_string(csize) + " vs " + std::to_string(usize) + ")");
      need(local, 30, cd_off, "local header of '" + ent.name + "'");
      const std::byte* l = b.data() + local;
      if (load_le<std::uint32_t>(l) != sig_local) fail("entry '" + ent.name + "': bad local header signature");
      const std::uint64_t data = local + 30 + load_le<std::uint16_t>(l + 26) + load_le<std::uint16_t>(l + 28);
      need(data, usize, cd_off, "data of '" + ent.name + "'");
      ent.data_offset = data;
      ent.size = usize;
      if (!by_name_.emplace(ent.name, entries_.size()).second) fail("duplicate entry '" + ent.name + "'");
      entries_.push_back(std::move(ent));
      p += 46u + name_len + extra_len + comment_len;
    }
  }

  std::string source_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, std::size_t, std::less<>> by_name_;
};

}  // namespace accel::io

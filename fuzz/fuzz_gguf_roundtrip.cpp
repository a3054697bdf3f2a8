// Fuzz target: a GGUF file parse_gguf accepts, written again by GgufWriter and parsed back, holds
// the same metadata (keys, types and values in order) and the same tensors (names, types, extents
// and bytes). The writer may refuse what the reader accepts (its key and name rules are the
// spec's, the reader's are lenient): a typed error then, never a crash or a file that does not
// read back. Tensor offsets and the version are the writer's own (v3, tensors packed in order).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <variant>

#include "accel/core/errors.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/gguf_write.hpp"

namespace {

using accel::io::GgufHeader;
using accel::io::GgufValue;

// Aliased tensors may each span the whole file; this bound keeps every execution short.
constexpr std::uint64_t max_tensor_bytes = std::uint64_t{16} << 20;

void check(bool ok) {
  if (!ok) std::abort();
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.data.index() != b.data.index()) return false;
  if (const auto* x = std::get_if<double>(&a.data)) {
    const double y = std::get<double>(b.data);
    return (std::isnan(*x) && std::isnan(y)) || *x == y;
  }
  if (const auto* x = a.as_array()) {
    const auto* y = b.as_array();
    if (x->elem_type != y->elem_type || x->items.size() != y->items.size()) return false;
    for (std::size_t i = 0; i < x->items.size(); ++i) {
      if (!same_value(x->items[i], y->items[i])) return false;
    }
    return true;
  }
  if (const auto* x = std::get_if<std::uint64_t>(&a.data)) return *x == std::get<std::uint64_t>(b.data);
  if (const auto* x = std::get_if<std::int64_t>(&a.data)) return *x == std::get<std::int64_t>(b.data);
  if (const auto* x = std::get_if<bool>(&a.data)) return *x == std::get<bool>(b.data);
  return std::get<std::string>(a.data) == std::get<std::string>(b.data);
}

// One file per process (libFuzzer may run several jobs at once), in memory-backed /dev/shm where
// there is one.
std::string scratch_path() {
  const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  return (dir / ("accel_fuzz_gguf_roundtrip_" + std::to_string(::getpid()) + ".gguf")).string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const accel::io::ByteSpan bytes(reinterpret_cast<const std::byte*>(data), size);
  GgufHeader h;
  try {
    h = accel::io::parse_gguf(bytes, "fuzz.gguf");
  } catch (const accel::Error&) {
    return 0;
  }
  static const std::string path = scratch_path();
  try {
    accel::io::GgufWriter w(h.alignment);
    for (const auto& [key, value] : h.metadata) w.add(key, value);
    for (const auto& t : h.tensors) {
      if (t.nbytes > max_tensor_bytes) return 0;
      w.add_tensor_bytes(t.name, t.type, t.ne, std::string(reinterpret_cast<const char*>(data) + t.file_offset, t.nbytes));
    }
    w.save(path);
  } catch (const accel::Error&) {
    return 0;  // refused by the writer: named, typed, no file left to read
  }
  std::ifstream f(path, std::ios::binary);
  const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  GgufHeader back;
  try {
    back = accel::io::parse_gguf(accel::io::ByteSpan(reinterpret_cast<const std::byte*>(out.data()), out.size()), "roundtrip.gguf");
  } catch (const accel::Error&) {
    std::abort();  // the writer made a file its own reader refuses
  }
  check(back.version == 3 && back.alignment == h.alignment);
  // The writer adds general.alignment when the alignment is not the default and the file did
  // not carry the key.
  const bool added = h.alignment != accel::io::gguf_default_alignment && !h.find("general.alignment");
  check(back.metadata.size() == h.metadata.size() + (added ? 1 : 0));
  for (std::size_t i = 0; i < h.metadata.size(); ++i) {
    check(back.metadata[i].first == h.metadata[i].first);
    check(same_value(back.metadata[i].second, h.metadata[i].second));
  }
  check(back.tensors.size() == h.tensors.size());
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& a = h.tensors[i];
    const auto& b = back.tensors[i];
    check(a.name == b.name && a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes);
    check(b.file_offset % back.alignment == 0);
    check(std::memcmp(data + a.file_offset, out.data() + b.file_offset, a.nbytes) == 0);
  }
  return 0;
}

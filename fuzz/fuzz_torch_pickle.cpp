// Fuzz target: the data.pkl of a torch checkpoint, run through parse_torch_bin inside a fixed,
// well-formed archive.
//
// fuzz_torch_bin mutates whole archives, where most insertions or deletions inside data.pkl
// break the zip directory and never reach the pickle interpreter. Here the input is the pickle
// alone; the harness stores it as archive/data.pkl beside storages archive/data/0 ... /7 of 64
// bytes each (and archive/data/8, empty), so every mutation exercises pickle.hpp and the tensor
// rebuilding in torch_bin.hpp. Accepted tensors are read as fuzz_torch_bin reads them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/torch_bin.hpp"

namespace {

constexpr std::uint64_t max_copied_bytes = 1 << 20;
constexpr int storage_count = 8;
constexpr std::size_t storage_bytes = 64;

/// A zip of stored entries (no CRCs: the reader does not check them).
std::string make_zip(const std::vector<std::pair<std::string, std::string_view>>& entries) {
  using accel::io::store_le;
  std::string out, central;
  for (const auto& [name, data] : entries) {
    const auto local = static_cast<std::uint32_t>(out.size());
    store_le<std::uint32_t>(out, 0x04034b50);
    store_le<std::uint16_t>(out, 20);  // version needed
    store_le<std::uint16_t>(out, 0);   // flags
    store_le<std::uint16_t>(out, 0);   // stored
    store_le<std::uint32_t>(out, 0);   // time, date
    store_le<std::uint32_t>(out, 0);   // crc
    store_le<std::uint32_t>(out, static_cast<std::uint32_t>(data.size()));
    store_le<std::uint32_t>(out, static_cast<std::uint32_t>(data.size()));
    store_le<std::uint16_t>(out, static_cast<std::uint16_t>(name.size()));
    store_le<std::uint16_t>(out, 0);  // extra length
    out += name;
    out += data;
    store_le<std::uint32_t>(central, 0x02014b50);
    store_le<std::uint16_t>(central, 20);  // version made by
    store_le<std::uint16_t>(central, 20);  // version needed
    store_le<std::uint16_t>(central, 0);
    store_le<std::uint16_t>(central, 0);
    store_le<std::uint32_t>(central, 0);
    store_le<std::uint32_t>(central, 0);
    store_le<std::uint32_t>(central, static_cast<std::uint32_t>(data.size()));
    store_le<std::uint32_t>(central, static_cast<std::uint32_t>(data.size()));
    store_le<std::uint16_t>(central, static_cast<std::uint16_t>(name.size()));
    store_le<std::uint16_t>(central, 0);  // extra
    store_le<std::uint16_t>(central, 0);  // comment
    store_le<std::uint16_t>(central, 0);  // disk
    store_le<std::uint16_t>(central, 0);  // internal attributes
    store_le<std::uint32_t>(central, 0);  // external attributes
    store_le<std::uint32_t>(central, local);
    central += name;
  }
  const auto cd_off = static_cast<std::uint32_t>(out.size());
  out += central;
  store_le<std::uint32_t>(out, 0x06054b50);
  store_le<std::uint16_t>(out, 0);
  store_le<std::uint16_t>(out, 0);
  store_le<std::uint16_t>(out, static_cast<std::uint16_t>(entries.size()));
  store_le<std::uint16_t>(out, static_cast<std::uint16_t>(entries.size()));
  store_le<std::uint32_t>(out, static_cast<std::uint32_t>(central.size()));
  store_le<std::uint32_t>(out, cd_off);
  store_le<std::uint16_t>(out, 0);  // comment length
  return out;
}

void use_state_dict(const accel::io::StateDict& sd) {
  for (const auto& [name, t] : sd) {
    if (!t.defined() || !t.is_cpu()) std::abort();
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(t.numel()), t.element_size(), &nbytes) ||
        nbytes > max_copied_bytes) {
      continue;
    }
    const accel::Tensor c = t.contiguous();
    unsigned sum = 0;
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (std::size_t i = 0; i < c.nbytes(); ++i) sum += b[i];
    (void)sum;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string payload = [] {
    std::string s(storage_bytes, '\0');
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 37 + 11);
    return s;
  }();
  std::vector<std::pair<std::string, std::string_view>> entries;
  entries.emplace_back("archive/data.pkl", std::string_view(reinterpret_cast<const char*>(data), size));
  entries.emplace_back("archive/byteorder", "little");
  for (int k = 0; k < storage_count; ++k) entries.emplace_back("archive/data/" + std::to_string(k), payload);
  entries.emplace_back("archive/data/" + std::to_string(storage_count), std::string_view());
  const std::string zip = make_zip(entries);
  try {
    use_state_dict(accel::io::parse_torch_bin(accel::io::as_bytes(zip), "fuzz.bin"));
  } catch (const accel::Error&) {
  }
  return 0;
}

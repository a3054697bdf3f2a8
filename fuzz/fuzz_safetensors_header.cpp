// Fuzz target: parse_safetensors_header over arbitrary file bytes.
//
// A header the parser accepts is then used the way SafetensorsFile::tensor uses it (a view of
// the data section per tensor, one read of its bytes), so an accepted header that would make a
// later read go out of bounds or overflow is caught here, not in a user's process.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "accel/core/errors.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/safetensors.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void use_header(const accel::io::SafetensorsHeader& h, const std::uint8_t* data, std::size_t size) {
  check(h.data_start == 8 + h.header_size && h.data_start <= size);
  check(h.index.size() == h.tensors.size());
  std::uint64_t cursor = 0;
  for (const auto& t : h.tensors) {
    check(t.begin == cursor && t.end >= t.begin && h.data_start + t.end <= size);
    cursor = t.end;
    check(h.find(t.name) == &t);
    // The parser's output feeds Tensor::from_storage in SafetensorsFile::tensor; do the same
    // over the input bytes (wrapped read-only, never copied).
    auto* p = const_cast<std::uint8_t*>(data) + h.data_start + t.begin;
    const accel::Storage s = accel::Storage::wrap(p, t.nbytes(), accel::Device::cpu(), nullptr, false);
    const accel::Tensor v = accel::Tensor::from_storage(s, t.dtype, t.shape);
    check(v.nbytes() == t.nbytes());
    unsigned sum = 0;
    const auto* b = static_cast<const unsigned char*>(v.data_ptr());
    for (std::size_t i = 0; i < v.nbytes(); ++i) sum += b[i];
    (void)sum;
  }
  check(h.data_start + cursor == size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const accel::io::ByteSpan bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    use_header(accel::io::parse_safetensors_header(bytes, "fuzz.safetensors"), data, size);
  } catch (const accel::Error&) {
  }
  return 0;
}

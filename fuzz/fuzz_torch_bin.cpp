// Fuzz target: parse_torch_bin (zip directory, restricted pickle, tensor rebuilding) over
// arbitrary archive bytes.
//
// Every tensor of an accepted checkpoint is read element by element through its shape, strides
// and offset (a contiguous copy), so a view the parser let past its storage shows up as an
// AddressSanitizer report. Views are only copied when small: an expanded view (stride 0) of a
// huge shape is legal and would only measure the allocator.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/torch_bin.hpp"

namespace {

constexpr std::uint64_t max_copied_bytes = 1 << 20;

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
  const accel::io::ByteSpan bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    use_state_dict(accel::io::parse_torch_bin(bytes, "fuzz.bin"));
  } catch (const accel::Error&) {
  }
  return 0;
}

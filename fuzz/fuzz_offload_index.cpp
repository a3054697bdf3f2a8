// Fuzz target: parse_offload_index (and so validate_offload_index) over arbitrary index.json text.
//
// An accepted index must survive what the offload code does with it next: be written back by
// offload_index_json and parsed again to the same value (save_offload_index merges that way),
// and have each .dat entry turned into a dtype, shape and byte count by load_offloaded_weight.
// The weight files named here do not exist, so loading stops at the IOError from opening them:
// everything before that (a shape that overflows is a FormatError) is pure and is what the
// fuzzer reaches.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "accel/core/errors.hpp"
#include "accel/io/offload.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void use_index(const accel::io::OffloadIndex& ix) {
  check(ix.is_object());
  const std::string again = accel::io::offload_index_json(ix);
  check(accel::io::parse_offload_index(again, "fuzz-rewritten/index.json") == ix);
  for (const auto& [name, info] : ix.items()) {
    if (const auto f = info.find("safetensors_file"); f != info.end() && !f->is_null()) continue;
    try {
      (void)accel::io::load_offloaded_weight("/nonexistent-accel-fuzz/weight.dat", info);
      std::abort();  // the file cannot exist
    } catch (const accel::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    use_index(accel::io::parse_offload_index(text, "fuzz/index.json"));
  } catch (const accel::Error&) {
  }
  return 0;
}

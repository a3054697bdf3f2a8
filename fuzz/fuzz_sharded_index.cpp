// Fuzz target: parse_sharded_index over arbitrary index.json text.
//
// An accepted index is checked for the promises ShardedCheckpoint relies on: every tensor maps
// to a listed shard that stays inside the checkpoint folder, and the index agrees with
// weight_map. The index is then written back with sharded_index_json, as sharding does.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "accel/core/errors.hpp"
#include "accel/io/sharded_index.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void use_index(const accel::io::ShardedIndex& ix) {
  check(ix.index.size() == ix.weight_map.size());
  for (const auto& [name, shard] : ix.weight_map) {
    const std::string* s = ix.shard_of(name);
    check(s != nullptr && *s == shard);
    check(!shard.empty() && !std::filesystem::path(shard).is_absolute());
    // confined_entry's rule: "a/../b" is "b", inside the folder; only a normal form that
    // starts with ".." leaves it.
    const std::filesystem::path normal = std::filesystem::path(shard).lexically_normal();
    check(!normal.empty() && *normal.begin() != "..");
    check(std::find(ix.shard_files.begin(), ix.shard_files.end(), shard) != ix.shard_files.end());
  }
  check(ix.metadata.is_object());
  (void)accel::io::sharded_index_json(0, ix.weight_map);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    use_index(accel::io::parse_sharded_index(text, "fuzz.index.json"));
  } catch (const accel::Error&) {
  }
  return 0;
}

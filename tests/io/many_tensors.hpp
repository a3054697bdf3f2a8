// Checkpoint headers and indexes naming many tensors, built in memory, for the parse-time tests
// (tests/io/test_parse_limits.cpp) and benchmarks/bench_parse.cpp. Names follow the shape of a
// real decoder's ("model.layers.12.mlp.w3.weight"), so keys share long prefixes as they do in
// real files and comparisons cost what they cost there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace accel_test {

/// The name of tensor `i` of a many-tensor checkpoint.
inline std::string many_tensor_name(std::size_t i) {
  return "model.layers." + std::to_string(i / 10) + ".mlp.w" + std::to_string(i % 10) + ".weight";
}

/// A whole safetensors file of `n` F32 tensors of shape [extent], back to back (extent 0: every
/// tensor empty, all at offset 0).
inline std::string many_tensor_safetensors(std::size_t n, std::uint64_t extent) {
  std::string header = "{";
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t begin = i * extent * 4;
    header += (i ? ",\"" : "\"") + many_tensor_name(i) + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(extent) +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(begin + extent * 4) + "]}";
  }
  header += "}";
  std::string file(8, '\0');
  const std::uint64_t size = header.size();
  for (int b = 0; b < 8; ++b) file[b] = static_cast<char>(size >> (8 * b));
  return file + header + std::string(n * extent * 4, '\0');
}

/// model.safetensors.index.json of `n` tensors spread over 100 shards.
inline std::string many_tensor_sharded_index(std::size_t n) {
  std::string text = "{\"metadata\": {\"total_size\": " + std::to_string(n * 16) + "}, \"weight_map\": {";
  for (std::size_t i = 0; i < n; ++i) {
    text += (i ? ", \"" : "\"") + many_tensor_name(i) + "\": \"model-" + std::to_string(i % 100 + 1) +
            "-of-00100.safetensors\"";
  }
  return text + "}}";
}

/// An offload folder's index.json of `n` float16 [4, 4] entries.
inline std::string many_tensor_offload_index(std::size_t n) {
  std::string text = "{";
  for (std::size_t i = 0; i < n; ++i) {
    text += (i ? ", \"" : "\"") + many_tensor_name(i) + "\": {\"dtype\": \"float16\", \"shape\": [4, 4]}";
  }
  return text + "}";
}

}  // namespace accel_test

// Bounds on what a file may ask of the library: one table, so every reader refuses the same
// things with the same numbers.
//
//   max_name_bytes      longest tensor or module name (dotted path) a checkpoint, index or spec may hold
//   max_module_depth    deepest module nesting: dotted components of a name, levels of a spec
//   max_json_depth      deepest nesting of arrays and objects in any JSON file read
//   max_json_key_bytes  longest key of a JSON object that is not a tensor name (tokenizer vocabularies)
//   max_tensor_count    most tensors one header, index or offload folder may list
//
// A checkpoint, an index or an offload folder often comes from strangers; without these a
// crafted file overflows the stack of a recursive walk or makes memory grow with the square of
// a name's length. The bounds sit far above real models (the longest transformers name is under
// 200 bytes and 10 levels deep; DeepSeek-V3's index lists ~91k weights), and a file beyond them
// is refused with a FormatError that names the file, the entry and the limit. The JSON nesting
// each checkpoint format can need (3 for a safetensors header) is in io/checkpoint_limits.hpp.
#pragma once

#include <cstddef>

namespace accel::limits {

/// Bytes in one tensor or module name, dots included.
inline constexpr std::size_t max_name_bytes = 4096;
/// Components of a dotted name ("model.layers.0.mlp" has 4), and levels of a model spec.
inline constexpr std::size_t max_module_depth = 256;
/// Nesting of JSON arrays and objects ({"a": [1]} has depth 2).
inline constexpr std::size_t max_json_depth = 512;
/// Bytes in one key of a JSON object other than a checkpoint's tensor names (a tokenizer's
/// vocabulary entries, metadata keys of configs).
inline constexpr std::size_t max_json_key_bytes = std::size_t{64} << 10;
/// Entries of one safetensors header, sharded index or offload index.
inline constexpr std::size_t max_tensor_count = 10'000'000;

}  // namespace accel::limits

// File names Accelerate uses for checkpoints and saved states, so that folders move between the
// two. WEIGHTS_NAME etc. keep Accelerate's spelling (they are its public constant names); the
// lower-case names are files Accelerate spells inline, without a constant. Which of these a
// folder is searched for, and in what order, is io/checkpoint_format.hpp's business.
#pragma once

#include <string_view>

namespace accel::io {

/// Stem of a saved model's weights ("pytorch_model.bin", "pytorch_model_1.bin", ...).
inline constexpr std::string_view MODEL_NAME = "pytorch_model";
/// Stem of a safetensors model ("model.safetensors").
inline constexpr std::string_view SAFE_MODEL_NAME = "model";
/// Stem of a saved optimizer state.
inline constexpr std::string_view OPTIMIZER_NAME = "optimizer";
/// Stem of the saved random states ("random_states_0.pkl" per process in Accelerate).
inline constexpr std::string_view RNG_STATE_NAME = "random_states";
/// File of the saved gradient scaler.
inline constexpr std::string_view SCALER_NAME = "scaler.pt";
/// Stem of a saved scheduler state.
inline constexpr std::string_view SCHEDULER_NAME = "scheduler";
/// Stem of a saved sampler state.
inline constexpr std::string_view SAMPLER_NAME = "sampler";
/// A PyTorch pickle checkpoint.
inline constexpr std::string_view WEIGHTS_NAME = "pytorch_model.bin";
/// The index of a sharded PyTorch checkpoint.
inline constexpr std::string_view WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json";
/// A safetensors checkpoint.
inline constexpr std::string_view SAFE_WEIGHTS_NAME = "model.safetensors";
/// The index of a sharded safetensors checkpoint.
inline constexpr std::string_view SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json";
/// Shard names: the pattern's "{suffix}" becomes "-00001-of-00003".
inline constexpr std::string_view WEIGHTS_PATTERN_NAME = "pytorch_model{suffix}.bin";
inline constexpr std::string_view SAFE_WEIGHTS_PATTERN_NAME = "model{suffix}.safetensors";
/// transformers' model configuration (its CONFIG_NAME), found beside a checkpoint.
inline constexpr std::string_view CONFIG_NAME = "config.json";
/// The index of an Accelerate offload folder.
inline constexpr std::string_view offload_index_name = "index.json";
/// Suffix of an offloaded tensor's file in an offload folder: "<tensor name>.dat".
inline constexpr std::string_view offload_data_suffix = ".dat";

}  // namespace accel::io

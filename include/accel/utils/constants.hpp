// Accelerate's constants: the checkpoint file names (defined by the io layer, which reads and
// writes those files) and the torch-dynamo modes.
#pragma once

#include <string_view>

#include "accel/io/file_names.hpp"

namespace accel::utils {

using io::MODEL_NAME;
using io::SAFE_MODEL_NAME;
using io::OPTIMIZER_NAME;
using io::RNG_STATE_NAME;
using io::SCALER_NAME;
using io::SCHEDULER_NAME;
using io::SAMPLER_NAME;
using io::WEIGHTS_NAME;
using io::WEIGHTS_INDEX_NAME;
using io::SAFE_WEIGHTS_NAME;
using io::SAFE_WEIGHTS_INDEX_NAME;
using io::WEIGHTS_PATTERN_NAME;
using io::SAFE_WEIGHTS_PATTERN_NAME;

/// Torch-dynamo modes (TorchDynamoPlugin::mode); no C++ meaning, kept for config files.
inline constexpr std::string_view TORCH_DYNAMO_MODES[] = {"default", "reduce-overhead", "max-autotune"};

}  // namespace accel::utils
namespace accel {
using utils::MODEL_NAME, utils::OPTIMIZER_NAME, utils::RNG_STATE_NAME, utils::SAFE_MODEL_NAME,
    utils::SAFE_WEIGHTS_INDEX_NAME, utils::SAFE_WEIGHTS_NAME, utils::SCALER_NAME, utils::SCHEDULER_NAME,
    utils::WEIGHTS_INDEX_NAME, utils::WEIGHTS_NAME;
}  // namespace accel

// The utils layer in one include: constants, Accelerate's enums and dataclasses, precision
// mapping, autocast, loss scaling, gradient accumulation, random generators, environment,
// config file and the start-up state read from it, versions and find_executable_batch_size.
#pragma once

#include "accel/utils/autocast.hpp"
#include "accel/utils/config.hpp"
#include "accel/utils/constants.hpp"
#include "accel/utils/dataclasses.hpp"
#include "accel/utils/enums.hpp"
#include "accel/utils/environment.hpp"
#include "accel/utils/gradient_accumulation.hpp"
#include "accel/utils/loss_scaler.hpp"
#include "accel/utils/memory.hpp"
#include "accel/utils/precision.hpp"
#include "accel/utils/random.hpp"
#include "accel/utils/random_sync.hpp"
#include "accel/utils/state.hpp"
#include "accel/utils/versions.hpp"

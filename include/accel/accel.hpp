// The umbrella header: every public facility of accel.
#pragma once

#include "accel/core/convert.hpp"
#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/tensor.hpp"
#include "accel/policy/policies.hpp"

#if defined(ACCEL_WITH_CUDA) && __has_include("accel/backend/cuda/runtime.hpp")
#include "accel/backend/cuda/runtime.hpp"
#endif

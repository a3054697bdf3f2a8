// The hooks layer: ModelHook and SequentialHook, AlignDevicesHook<Offload>, the attach helpers and
// the CPU-offload hooks.
#pragma once

#include "accel/hooks/align_devices_hook.hpp"
#include "accel/hooks/attach.hpp"
#include "accel/hooks/cpu_offload_hook.hpp"
#include "accel/hooks/device_stage.hpp"
#include "accel/hooks/model_hook.hpp"
#include "accel/hooks/weight_stream.hpp"
#include "accel/hooks/weights_map.hpp"

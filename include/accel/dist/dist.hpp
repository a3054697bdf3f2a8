// The dist layer in one include: process state, the launcher's environment, MPI and NCCL process
// groups, collectives over nested data, debug-mode checks, object serialization, save and
// extract_model_from_parallel, and models split across processes. Its public names are also accel::name.
#pragma once

#include "accel/dist/collectives.hpp"
#include "accel/dist/extract_model.hpp"
#include "accel/dist/grad_reducer.hpp"
#include "accel/dist/launch_environment.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/dist/save.hpp"
#include "accel/dist/serialize.hpp"
#include "accel/dist/split_device_map.hpp"
#include "accel/dist/split_model.hpp"
#include "accel/dist/verify.hpp"

namespace accel {
using dist::broadcast, dist::broadcast_object_list, dist::DistributedOperationException,
    dist::extract_model_from_parallel, dist::gather, dist::gather_object, dist::pad_across_processes,
    dist::PartialState, dist::reduce, dist::wait_for_everyone;
}  // namespace accel

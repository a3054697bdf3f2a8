// The nested-data layer in one include: recursively_apply, for_each_leaf, the operations built on
// them (send_to_device, find_batch_size, listify, convert_to_fp32, slice_tensors, ...) and
// concatenate. Every public function is also reachable as accel::name.
#pragma once

#include "accel/nested/concatenate.hpp"
#include "accel/nested/for_each_leaf.hpp"
#include "accel/nested/operations.hpp"
#include "accel/nested/recursively_apply.hpp"
#include "accel/nested/traits.hpp"

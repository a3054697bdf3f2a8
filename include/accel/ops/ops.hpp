// Every op of the ops layer: matmul / linear / matmul_u8s8, add / mul / gelu / silu,
// softmax / layer_norm / rms_norm, embedding / rotary_embedding,
// scaled_dot_product_attention, argmax, cat. CPU runs here; CUDA tensors go through the op slots
// of the device backend (core/device_backend.hpp, filled by accel/ops/cuda/ops.cuh in a .cu
// translation unit).
#pragma once

#include "accel/ops/argmax.hpp"
#include "accel/ops/attention.hpp"
#include "accel/ops/cat.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/ops/embedding.hpp"
#include "accel/ops/matmul.hpp"
#include "accel/ops/norm.hpp"

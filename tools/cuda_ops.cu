// The kernels of every program that runs models on a GPU (the `accel` CLI, the GPU benchmarks):
// compiling them here, once, registers the CUDA ops and conversion kernels that the g++ code
// reaches through the device backend's slots (core/device_backend.hpp).
#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/runtime.hpp"
#include "accel/ops/cuda/ops.cuh"
#include "accel/quant/kernels/cuda/kernels.cuh"

// The nvcc half of the GPU benchmarks: compiling the kernels here registers the CUDA ops (and
// conversion kernels) that the g++ benchmark code reaches through the device backend's slots.
#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/runtime.hpp"
#include "accel/ops/cuda/ops.cuh"

// ACCEL_HOST_DEVICE: marks a function that host code and CUDA kernels share.
//
// Under nvcc it expands to __host__ __device__, so one definition (the float rounding of
// core/float_types.hpp above all) serves both; for g++ and clang it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define ACCEL_HOST_DEVICE __host__ __device__
#else
#define ACCEL_HOST_DEVICE
#endif

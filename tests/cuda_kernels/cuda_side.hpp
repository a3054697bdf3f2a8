// What the nvcc half of the CUDA tests (test_cuda.cu) offers the g++ half (cuda_tests.cpp).
//
// test_cuda.cu compiles every kernel and, by including accel/ops/cuda/ops.cuh, registers
// them at start-up; the Catch2 cases live in g++ code because oneDNN's C++ header (pulled in by
// the CPU ops they compare against) does not get through nvcc 13's C++20 front end, and because
// nvcc parses every header once per GPU architecture (keeping Catch2 out keeps the build short).
#pragma once

#include <string>

#include "accel/core/tensor.hpp"

namespace accel_test::cuda_side {

/// Empty when the conversion kernels' element recipe (kernels::convert_element, run on the host)
/// gives the bits of the host's bulk conversion (convert_elements, vectorized where it can be)
/// for every pair of floating dtypes, every f16 / bf16 / f8 pattern and many f32 / f64 values;
/// otherwise a description of the first disagreements.
std::string conversion_disagreements();

/// Empty when StridedIndex and the binary kernels' dim coalescing address the elements a view's
/// strides say; otherwise what went wrong.
std::string indexing_disagreements();

/// True when runtime.hpp, kernels.cuh and ops.cuh filled every slot of the device backend.
bool kernels_and_ops_registered();

/// accel::cuda::contiguous: a dense copy of a strided CUDA view made by the strided-copy kernel.
accel::Tensor contiguous_on_device(const accel::Tensor& t);

/// accel::cuda::ops::matmul (the slot) called directly with the batch shape and result it needs,
/// without the accel::ops front end.
accel::Tensor direct_matmul(const accel::Tensor& a, const accel::Tensor& b);

}  // namespace accel_test::cuda_side

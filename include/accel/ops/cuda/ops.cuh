// Every op of accel/ops/cuda_table.hpp on CUDA tensors (nvcc only). Including this header in
// one .cu translation unit fills `accel::ops::cuda_ops()` at start-up, so accel::ops::matmul,
// softmax, ... run on the GPU for CUDA tensors; it also registers the conversion and fill
// kernels (kernels.cuh) with the CUDA backend.
//
//   cuda::ops::{matmul, linear}                        ops_gemm.cuh (cuBLAS)
//   cuda::ops::{add, mul, gelu, silu}                  ops_elementwise.cuh
//   cuda::ops::{softmax, layer_norm, rms_norm}         ops_norm.cuh
//   cuda::ops::{embedding, rotary_embedding, argmax, cat}   ops_misc.cuh
//   cuda::ops::scaled_dot_product_attention            ops_attention.cuh
//
// Work is queued on the current stream of the inputs' GPU (runtime.hpp); results are ready for
// any later op or blocking copy on that stream.
#pragma once

#include "accel/backend/cuda/kernels.cuh"
#include "accel/ops/cuda/attention.cuh"
#include "accel/ops/cuda/elementwise.cuh"
#include "accel/ops/cuda/gemm.cuh"
#include "accel/ops/cuda/misc.cuh"
#include "accel/ops/cuda/norm.cuh"
#include "accel/ops/cuda_table.hpp"

namespace accel::cuda::detail {

/// Start-up registration of the CUDA ops in accel::ops::cuda_ops().
inline const bool ops_registered = [] {
  auto& t = ::accel::ops::cuda_ops();
  t.matmul = &ops::matmul;
  t.linear = &ops::linear;
  t.add = &ops::add;
  t.mul = &ops::mul;
  t.softmax = &ops::softmax;
  t.layer_norm = &ops::layer_norm;
  t.rms_norm = &ops::rms_norm;
  t.gelu = &ops::gelu;
  t.silu = &ops::silu;
  t.embedding = &ops::embedding;
  t.rotary_embedding = &ops::rotary_embedding;
  t.scaled_dot_product_attention = &ops::scaled_dot_product_attention;
  t.argmax = &ops::argmax;
  t.cat = &ops::cat;
  return true;
}();

}  // namespace accel::cuda::detail

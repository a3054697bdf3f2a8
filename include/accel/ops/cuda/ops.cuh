// Every op slot of the device backend (core/device_backend.hpp) on CUDA tensors (nvcc only).
// Including this header in one .cu translation unit fills the op slots at start-up, so
// accel::ops::matmul, softmax, ... run on the GPU for CUDA tensors; it also brings the
// conversion and fill kernels (kernels.cuh), which fill the kernel slots.
//
//   cuda::ops::{matmul, linear}                           gemm.cuh (cuBLAS)
//   cuda::ops::{add, mul, gelu, silu}                     elementwise.cuh
//   cuda::ops::{softmax, layer_norm, rms_norm}            norm.cuh
//   cuda::ops::{embedding, rotary_embedding, argmax, cat} misc.cuh
//   cuda::ops::scaled_dot_product_attention               attention.cuh
//
// Work is queued on the current stream of the inputs' GPU (runtime.hpp); results are ready for
// any later op or blocking copy on that stream.
#pragma once

#include "accel/backend/cuda/kernels.cuh"
#include "accel/core/device_backend.hpp"
#include "accel/ops/cuda/attention.cuh"
#include "accel/ops/cuda/elementwise.cuh"
#include "accel/ops/cuda/gemm.cuh"
#include "accel/ops/cuda/misc.cuh"
#include "accel/ops/cuda/norm.cuh"

namespace accel::cuda::detail {

/// Start-up registration of the op slots of the device backend.
inline const bool ops_registered = [] {
  DeviceOps& t = cuda_backend().ops;
  t.matmul = &ops::matmul;
  t.linear = &ops::linear;
  t.add = &ops::add;
  t.mul = &ops::mul;
  t.gelu = &ops::gelu;
  t.silu = &ops::silu;
  t.softmax = &ops::softmax;
  t.layer_norm = &ops::layer_norm;
  t.rms_norm = &ops::rms_norm;
  t.embedding = &ops::embedding;
  t.rotary_embedding = &ops::rotary_embedding;
  t.scaled_dot_product_attention = &ops::scaled_dot_product_attention;
  t.argmax = &ops::argmax;
  t.cat = &ops::cat;
  return true;
}();

}  // namespace accel::cuda::detail

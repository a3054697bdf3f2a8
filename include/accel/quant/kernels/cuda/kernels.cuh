// The quant slots of the device backend (core/device_backend.hpp): packed weights decoded and
// multiplied on a GPU (nvcc only). Including this header in one .cu translation unit registers
// them; tools/cuda_ops.cu does so for the CLI and the GPU benchmarks.
//
//   ggml_dequantize / ggml_gemv     ggml.cuh: every ggml block type that dequantizes
//   bnb4_dequantize / bnb4_gemv     bnb4.cuh: bitsandbytes NF4 / FP4 (quant/formats/bnb_4bit.hpp's packing)
//   int8_dequantize / int8_gemv     int8.cuh: row-scaled int8 (LLM.int8's CB * SCB / 127)
//   affine_dequantize / affine_gemv affine.cuh: Quanto / TorchAO codes (affine_scheme.hpp's affine_value)
//   gemv.cuh                        what the GEMVs share
//
// Why the ggml kernels call io::dequantize_block / dequantize_group: one definition of each block
// format serves the CPU and the GPU, so a GPU decodes the same bits (every block value is one
// rounding of exact products, so nvcc's FMA contraction cannot move it). A GEMV lane decodes one
// group (32 weights for Q4_K / Q6_K and the 32-weight types; the whole block for the other K
// types) into registers and dots it with up to 8 activation rows; a warp owns an output row, its
// lanes stride over the row's groups, so a warp's loads cover contiguous bytes. The 4-bit and int8
// GEMVs read 16 bytes per lane per step. Decoding is never rounded to a narrower type in the GEMVs:
// products and sums are float32, and the bias is added before the one rounding to x's dtype.
#pragma once

#include "accel/core/device_backend.hpp"
#include "accel/quant/kernels/cuda/affine.cuh"
#include "accel/quant/kernels/cuda/bnb4.cuh"
#include "accel/quant/kernels/cuda/ggml.cuh"
#include "accel/quant/kernels/cuda/int8.cuh"

namespace accel::cuda::quant_kernels {

/// Start-up registration of the quant slots.
inline const bool quant_registered = [] {
  DeviceQuantOps& t = cuda_backend().quant;
  t.ggml_dequantize = &ggml_dequantize;
  t.ggml_gemv = &ggml_gemv;
  t.bnb4_dequantize = &bnb4_dequantize;
  t.bnb4_gemv = &bnb4_gemv;
  t.int8_dequantize = &int8_dequantize;
  t.int8_gemv = &int8_gemv;
  t.affine_dequantize = &affine_dequantize;
  t.affine_gemv = &affine_gemv;
  return true;
}();

}  // namespace accel::cuda::quant_kernels

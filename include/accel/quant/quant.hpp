// The quant layer in one include: GGUF weights kept in ggml blocks (GgufQuantizer, GGUFLinear),
// ggml's reference quantizers and the integer dot-product kernels, and dequantize_tensor.
#pragma once

#include "accel/quant/dequantize_file.hpp"
#include "accel/quant/ggml_dot.hpp"
#include "accel/quant/ggml_linear.hpp"
#include "accel/quant/ggml_quantize.hpp"
#include "accel/quant/gguf_quantizer.hpp"

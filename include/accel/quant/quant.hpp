// The quant layer in one include: GGUF weights kept in ggml blocks (GgufQuantizer, GGUFLinear),
// ggml's reference quantizers and the integer dot-product kernels, bitsandbytes' NF4 / FP4 / int8
// (BnbQuantizer, Linear4bit, Linear8bitLt, load_and_quantize_model), and dequantize_tensor.
#pragma once

#include "accel/quant/bnb_4bit.hpp"
#include "accel/quant/bnb_checkpoint.hpp"
#include "accel/quant/bnb_config.hpp"
#include "accel/quant/bnb_int8.hpp"
#include "accel/quant/bnb_linear.hpp"
#include "accel/quant/bnb_quantizer.hpp"
#include "accel/quant/dequantize_file.hpp"
#include "accel/quant/ggml_dot.hpp"
#include "accel/quant/ggml_linear.hpp"
#include "accel/quant/ggml_quantize.hpp"
#include "accel/quant/gguf_quantizer.hpp"

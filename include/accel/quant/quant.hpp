// The quant layer in one include: GGUF weights kept in ggml blocks or quantized to them on load
// (GgufQuantizer, GGUFLinear), ggml's reference quantizers and the integer dot-product kernels,
// bitsandbytes' NF4 / FP4 / int8 (BnbQuantizer, Linear4bit, Linear8bitLt, load_and_quantize_model),
// Quanto and TorchAO weight schemes (QuantoQuantizer, TorchAoQuantizer, AffineLinear), a quantizer
// from any quantization_config, PipelineQuantizationConfig, and dequantize_tensor.
#pragma once

#include "accel/quant/affine.hpp"
#include "accel/quant/affine_quantizer.hpp"
#include "accel/quant/affine_scheme.hpp"
#include "accel/quant/auto_quantizer.hpp"
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
#include "accel/quant/layer_swap.hpp"
#include "accel/quant/pipeline_config.hpp"
#include "accel/quant/quanto.hpp"
#include "accel/quant/quanto_config.hpp"
#include "accel/quant/torchao.hpp"
#include "accel/quant/torchao_config.hpp"

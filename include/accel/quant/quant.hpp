// The quant layer in one include: GGUF weights kept in ggml blocks or quantized to them on load
// (GgufQuantizer, GGUFLinear), ggml's reference quantizers and the integer dot-product kernels,
// bitsandbytes' NF4 / FP4 / int8 (BnbQuantizer, Linear4bit, Linear8bitLt, load_and_quantize_model),
// Quanto and TorchAO weight schemes (QuantoQuantizer, TorchAoQuantizer, AffineLinear), a quantizer
// from any quantization_config, PipelineQuantizationConfig, dequantize_tensor, and a model folder
// written as a GGUF file in llama.cpp's schemes (convert_to_gguf, GgufTypeRules).
//
// The layer's rooms, each including only the ones before it (tests/layering enforces it):
//   formats/     codings and serialized forms: bitsandbytes' 4-bit and int8, the affine schemes,
//                Quanto's saved layers, ggml's reference quantizers, any file's tensor as float32
//   config/      quantization_config readers (light: no kernels, no modules)
//   kernels/     CPU products, one dispatch header per family and one file per tier; CUDA kernels
//   layers/      the modules computing on packed weights, over one CPU frame (cpu_linear.hpp) and
//                one GPU frame (device_linear.hpp)
//   quantizers/  dispatch::Quantizer backends, one file per scheme (bnb, quanto, torchao, gguf),
//                the parts they share, the registry (auto_quantizer, pipeline_config), and the
//                GGUF file writer (gguf_scheme, gguf_convert)
#pragma once

#include "accel/quant/config/bnb_config.hpp"
#include "accel/quant/config/quanto_config.hpp"
#include "accel/quant/config/torchao_config.hpp"
#include "accel/quant/formats/affine.hpp"
#include "accel/quant/formats/affine_scheme.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_checkpoint.hpp"
#include "accel/quant/formats/bnb_int8.hpp"
#include "accel/quant/formats/dequantize_file.hpp"
#include "accel/quant/formats/ggml_quantize.hpp"
#include "accel/quant/kernels/ggml_dot.hpp"
#include "accel/quant/layers/affine_linear.hpp"
#include "accel/quant/layers/bnb_linear.hpp"
#include "accel/quant/layers/bnb_products.hpp"
#include "accel/quant/layers/ggml_linear.hpp"
#include "accel/quant/quantizers/affine_quantizer.hpp"
#include "accel/quant/quantizers/auto_quantizer.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/gguf_convert.hpp"
#include "accel/quant/quantizers/gguf_scheme.hpp"
#include "accel/quant/quantizers/layer_swap.hpp"
#include "accel/quant/quantizers/pipeline_config.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"

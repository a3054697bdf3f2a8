// accel quantize IN_DIR OUT_DIR --scheme nf4|fp4|int8|quanto-int8|quanto-int4|quanto-int2|quanto-float8
//                [--double-quant] [--dtype DTYPE] [--json | --quiet] [--progress]
// accel quantize IN_DIR OUT.gguf --scheme f16|bf16|f32|q8_0|q4_0|q4_k_m|q5_k_m|q6_k|...
//                [--json | --quiet] [--progress]
//
//   QuantizeRequest r = parse_quantize_request(args);
//   QuantizeResult  q = compute_quantize(r);       the model quantized on load, saved as its library saves it
//   render_quantize(r, q);
//
// Quantizes a Hugging Face model folder on load (bitsandbytes' NF4 / FP4, with --double-quant the
// absmax quantized again, or LLM.int8; or one of Quanto's weight types) and writes OUT_DIR as the
// library saves it: bitsandbytes in transformers' layout (model.safetensors with each quantized
// weight's state tensors beside it), Quanto as Diffusers saves a Quanto model (optimum-quanto's
// tensors, quant/quantizers/quanto.hpp); config.json with "quantization_config", and the folder's
// tokenizer.json / generation_config.json / tokenizer_config.json copied. The folder loads back
// here (`accel run OUT_DIR`), in transformers (bitsandbytes) and Diffusers (Quanto). Each float weight is quantized as it
// streams in, so memory holds the quantized bytes plus one tensor. The float dtype (what the kept
// layers hold and what weights are rounded to before quantizing) is --dtype, else config.json's.
// With OUT.gguf the folder becomes one GGUF file, as llama.cpp's converter and llama-quantize make
// it (quant/quantizers/gguf_convert.hpp); it runs in llama.cpp and in `accel run OUT.gguf`.
// `bnb_scheme_config` is also what `accel run --quantize` uses for nf4 / fp4 / int8, and
// `run_quantizer` maps every --quantize scheme of `accel run` to its backend.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/quant/quantizers/auto_quantizer.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/gguf_convert.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"
#include "cli_progress.hpp"
#include "cli_values.hpp"

namespace accel::cli {

/// The bitsandbytes config of a --scheme / --quantize value: nf4, fp4 (4-bit, computing in
/// `compute`) or int8 (LLM.int8 with the default threshold). UsageError for anything else.
inline quant::BitsAndBytesConfig bnb_scheme_config(const std::string& option, const std::string& scheme, bool double_quant,
                                                   DType compute) {
  quant::BitsAndBytesConfig c;
  if (scheme == "int8") {
    if (double_quant) throw UsageError(option + " int8: --double-quant applies to nf4 and fp4 only");
    c.load_in_8bit = true;
  } else if (scheme == "nf4" || scheme == "fp4") {
    c.load_in_4bit = true;
    c.bnb_4bit_quant_type = scheme == "nf4" ? quant::BnbQuantType::nf4 : quant::BnbQuantType::fp4;
    c.bnb_4bit_use_double_quant = double_quant;
    c.bnb_4bit_compute_dtype = compute;
  } else {
    throw UsageError(option + ": '" + scheme + "' is not a scheme here (nf4, fp4, int8)");
  }
  return c;
}

/// The --quantize schemes of `accel run`, and their backends.
inline constexpr const char* run_quantize_schemes =
    "nf4, fp4, int8 (bitsandbytes), q8_0, q4_0, q4_k (or q4_1, q5_0, q5_1, q5_k, q6_k, iq4_nl, iq4_xs: GGUF "
    "blocks), int4-g128 (or -g32, -g64, -g256: TorchAO "
    "int4 weight-only groups) or fp8 (TorchAO float8 weight-only)";

/// The quantizer of an `accel run --quantize` scheme (see run_quantize_schemes), computing in
/// `compute`; UsageError naming the option for an unknown scheme or --double-quant beside a
/// scheme without an absmax.
inline AnyQuantizer run_quantizer(const std::string& option, const std::string& scheme, bool double_quant, DType compute) {
  if (scheme == "nf4" || scheme == "fp4" || scheme == "int8") {
    return quant::BnbQuantizer(bnb_scheme_config(option, scheme, double_quant, compute));
  }
  if (double_quant) throw UsageError(option + " " + scheme + ": --double-quant applies to nf4 and fp4 only");
  if (const auto t = io::ggml_type_from_string(scheme); t && quant::can_quantize_to(*t)) {
    return quant::GgufQuantizer({.compute_dtype = compute, .quant_type = *t});
  }
  for (const int g : {32, 64, 128, 256}) {
    if (scheme == "int4-g" + std::to_string(g)) {
      return quant::TorchAoQuantizer({.quant_type = "int4wo", .quant_type_kwargs = {{"group_size", g}}});
    }
  }
  if (scheme == "fp8") return quant::TorchAoQuantizer({.quant_type = "float8wo"});
  throw UsageError(option + ": '" + scheme + "' is not a scheme here (" + run_quantize_schemes + ")");
}

/// The Quanto weight type of an `accel quantize --scheme quanto-TYPE`, or nullopt for another scheme.
inline std::optional<std::string> quanto_scheme(const std::string& scheme) {
  for (const char* t : {"int8", "int4", "int2", "float8"}) {
    if (scheme == std::string("quanto-") + t) return std::string(t);
  }
  return std::nullopt;
}

/// What `accel quantize` was asked.
struct QuantizeRequest {
  std::filesystem::path in, out;
  std::string scheme;
  bool double_quant = false;
  std::optional<DType> dtype;
  bool json = false;
  /// --quiet: nothing on stdout or stderr but an error.
  bool quiet = false;
  bool progress = false;
  /// OUT ends in .gguf: one GGUF file in a GGUF scheme (quant/quantizers/gguf_scheme.hpp).
  bool gguf = false;
};

/// What it did.
struct QuantizeResult {
  std::string model_type;
  DType dtype = DType::f32;
  std::size_t swapped = 0;          ///< layers quantized
  double input_bytes = 0;           ///< the checkpoint's tensor bytes
  double output_bytes = 0;          ///< model.safetensors written
  double seconds = 0;
  double peak_bytes = 0;            ///< the CPU allocator's peak while loading and saving
  std::optional<quant::GgufConvertResult> gguf;  ///< what a GGUF output holds
};

inline QuantizeRequest parse_quantize_request(const ParsedArgs& args) {
  QuantizeRequest r;
  r.in = args.positional(0);
  r.out = args.positional(1);
  r.scheme = *args.value("--scheme");
  r.double_quant = args.flag("--double-quant");
  if (const auto v = args.value("--dtype")) r.dtype = parse_float_dtype("--dtype", *v);
  r.json = args.flag("--json");
  r.quiet = args.flag("--quiet");
  r.progress = args.flag("--progress");
  if (r.json && r.quiet) throw UsageError("--json and --quiet exclude each other");
  // Usage errors before any file is read.
  r.gguf = r.out.extension() == ".gguf";
  const bool gguf_scheme = std::any_of(quant::gguf_scheme_table.begin(), quant::gguf_scheme_table.end(),
                                       [&](const auto& s) { return s.name == r.scheme; });
  if (r.gguf) {
    if (!gguf_scheme) {
      throw UsageError("--scheme: '" + r.scheme + "' is not a GGUF scheme; OUT.gguf takes " + quant::gguf_scheme_names());
    }
    if (r.double_quant || r.dtype) throw UsageError("--double-quant and --dtype apply to a folder output, not OUT.gguf");
  } else if (gguf_scheme) {
    throw UsageError("--scheme " + r.scheme + " writes a GGUF file: give OUT as a path ending in .gguf");
  } else if (quanto_scheme(r.scheme)) {
    if (r.double_quant) throw UsageError("--scheme " + r.scheme + ": --double-quant applies to nf4 and fp4 only");
  } else if (r.scheme.starts_with("quanto")) {
    throw UsageError("--scheme: '" + r.scheme + "' is not a Quanto scheme here (quanto-int8, quanto-int4, quanto-int2, quanto-float8)");
  } else {
    (void)bnb_scheme_config("--scheme", r.scheme, r.double_quant, DType::f32);
  }
  std::error_code ec;
  if (std::filesystem::equivalent(r.in, r.out, ec)) throw UsageError("OUT_DIR must not be IN_DIR");
  return r;
}

/// OUT.gguf: the folder converted by quant::convert_to_gguf.
inline QuantizeResult compute_quantize_gguf(const QuantizeRequest& r) {
  const auto t0 = std::chrono::steady_clock::now();
  QuantizeResult q;
  reset_peak_memory_stats(Device::cpu());
  ByteProgressBar bar("Converting", progress_wanted(r.progress, r.quiet) ? &std::cerr : nullptr);
  q.gguf = quant::convert_to_gguf(r.in, r.out, {.scheme = r.scheme, .progress = bar.callback()});
  bar.finish();
  q.model_type = q.gguf->architecture;
  q.input_bytes = static_cast<double>(q.gguf->input_bytes);
  q.output_bytes = static_cast<double>(q.gguf->output_bytes);
  q.peak_bytes = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes);
  q.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return q;
}

inline QuantizeResult compute_quantize(const QuantizeRequest& r) {
  if (r.gguf) return compute_quantize_gguf(r);
  const auto t0 = std::chrono::steady_clock::now();
  QuantizeResult q;
  const nlohmann::json config = dispatch::read_model_config(r.in);
  if (dispatch::is_gguf_model(r.in)) throw UsageError(r.in.string() + ": a GGUF file is quantized already; give a model folder");
  if (config.contains("quantization_config")) {
    throw ValueError((r.in / "config.json").string() + ": the model is quantized already");
  }
  const DType dtype = r.dtype.value_or(dispatch::config_dtype(config, (r.in / "config.json").string()).value_or(DType::f32));
  const std::optional<std::string> quanto = quanto_scheme(r.scheme);
  const quant::BitsAndBytesConfig bnb = quanto ? quant::BitsAndBytesConfig{} : bnb_scheme_config("--scheme", r.scheme, r.double_quant, dtype);
  const dispatch::AnyQuantizer quantizer = quanto ? dispatch::AnyQuantizer(quant::QuantoQuantizer({.weights_dtype = *quanto}))
                                                  : dispatch::AnyQuantizer(quant::BnbQuantizer(bnb));
  reset_peak_memory_stats(Device::cpu());
  ByteProgressBar bar("Quantizing", progress_wanted(r.progress, r.quiet) ? &std::cerr : nullptr);
  auto p = dispatch::load_pretrained_causal_lm(r.in, {.dtype = dtype, .show_progress = false, .progress = bar.callback(),
                                                      .quantizer = quantizer});
  bar.finish();
  q.model_type = p.model->info().model_type;
  q.dtype = p.dtype;
  q.swapped = quant::count_quantized_layers(p.model->module());
  for (const auto& f : io::resolve_checkpoint_files(io::resolve_checkpoint_folder(r.in).path.string())) {
    q.input_bytes += static_cast<double>(std::filesystem::file_size(f));
  }
  nlohmann::json out_config = config;
  out_config["torch_dtype"] = std::string(dtype_name(dtype));
  if (quanto) {
    quant::save_quanto_model(p.model->module(), out_config, r.out, dtype);
  } else {
    quant::save_bnb_model(p.model->module(), out_config, r.out, bnb);
  }
  for (const char* extra : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(r.in / extra, ec)) {
      std::filesystem::copy_file(r.in / extra, r.out / extra, std::filesystem::copy_options::overwrite_existing);
    }
  }
  q.output_bytes = static_cast<double>(std::filesystem::file_size(r.out / "model.safetensors"));
  q.peak_bytes = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes);
  q.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return q;
}

/// The summary: one JSON object (--json), one line, or nothing (--quiet). The two outputs share
/// the paths, scheme, sizes and time; each adds what it holds.
inline void render_quantize(const QuantizeRequest& r, const QuantizeResult& q) {
  if (r.quiet) return;
  if (r.json) {
    nlohmann::ordered_json j;
    j["in"] = r.in.string();
    j["out"] = r.out.string();
    j["scheme"] = r.scheme;
    if (q.gguf) {
      j["architecture"] = q.gguf->architecture;
      j["tensors"] = q.gguf->tensors;
      j["types"] = q.gguf->types;
      j["tokenizer"] = q.gguf->tokenizer;
    } else {
      j["double_quant"] = r.double_quant;
      j["model_type"] = q.model_type;
      j["dtype"] = std::string(dtype_name(q.dtype));
      j["layers_quantized"] = q.swapped;
    }
    j["input_bytes"] = q.input_bytes;
    j["output_bytes"] = q.output_bytes;
    j["peak_bytes"] = q.peak_bytes;
    j["seconds"] = q.seconds;
    std::cout << dump_json(j, 2) << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(2);
  if (q.gguf) {
    std::string types;
    for (const auto& [t, n] : q.gguf->types) types += (types.empty() ? "" : ", ") + t + " " + std::to_string(n);
    std::cout << q.gguf->architecture << ": " << q.gguf->tensors << " tensors as " << r.scheme << " (" << types << ")"
              << (q.gguf->tokenizer ? ", with its tokenizer"
                                    : ", no tokenizer.json (llama.cpp loads only files with a tokenizer; "
                                      "`accel run FILE --ids ...` runs it)");
  } else {
    std::cout << q.model_type << " (" << dtype_name(q.dtype) << "): " << q.swapped << " layers quantized as " << r.scheme
              << (r.double_quant ? " with double quantization" : "");
  }
  std::cout << ", " << human_bytes(q.input_bytes) << " -> " << human_bytes(q.output_bytes) << " in " << r.out.string()
            << " (" << q.seconds << " s, CPU peak " << human_bytes(q.peak_bytes) << ")\n";
}

inline int run_quantize(const ParsedArgs& args) {
  const QuantizeRequest r = parse_quantize_request(args);
  render_quantize(r, compute_quantize(r));
  return exit_ok;
}

/// The `accel quantize` entry of the command table.
inline Command quantize_command() {
  return {
      .name = "quantize",
      .summary = "quantize a model folder with bitsandbytes (NF4 / FP4 / int8) or Quanto, saved as its library saves it,\n"
                 "or write it as a GGUF file (f16, q8_0, q4_k_m, ...) as llama.cpp's tools do",
      .usage = "IN_DIR OUT_DIR --scheme nf4|fp4|int8|quanto-int8|quanto-int4|quanto-int2|quanto-float8 [--double-quant]\n"
               "       [--dtype DTYPE] [--json | --quiet] [--progress]\n"
               "       IN_DIR OUT.gguf --scheme f16|bf16|f32|q8_0|q4_0|q4_k_m|q5_k_m|q6_k|... [--json | --quiet] [--progress]",
      .positionals = {{.name = "IN_DIR", .help = "a Hugging Face model folder (config.json + checkpoint)"},
                      {.name = "OUT_DIR", .help = "where the quantized folder is written (created); a path ending in .gguf\n"
                                                  "is written as one GGUF file"}},
      .options = {{.name = "--scheme", .placeholder = "SCHEME",
                   .help = "nf4, fp4 (4-bit, blocks of 64) or int8 (LLM.int8): bitsandbytes; quanto-int8,\n"
                           "quanto-float8 (per output row), quanto-int4, quanto-int2 (groups of 128): Quanto;\n"
                           "for OUT.gguf, llama.cpp's file types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
                           "q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs (the _M / _S mixtures as\n"
                           "llama-quantize chooses them, without an importance matrix)",
                   .required = true},
                  {.name = "--double-quant", .help = "quantize the 4-bit absmax again (8-bit, blocks of 256)"},
                  {.name = "--dtype", .placeholder = "DTYPE",
                   .help = "float32, float16 or bfloat16: the layers kept float, and what weights are rounded\n"
                           "to before quantizing (default: config.json's torch_dtype)"},
                  {.name = "--json", .help = "one JSON object: scheme, layers_quantized, input_bytes, output_bytes, peak_bytes"},
                  {.name = "--quiet", .help = "print nothing but errors (no summary, no progress)"},
                  {.name = "--progress", .help = "a progress bar on stderr even when it is not a terminal"}},
      .details = "The output folder loads back with `accel run OUT_DIR`, and in transformers (bitsandbytes) or\n"
                 "Diffusers (Quanto): quantization_config in config.json. The output head and weights tied to the\n"
                 "embedding stay float. A GGUF file (LLaMA, Mistral, Qwen2, GPT-2) carries the folder's tokenizer\n"
                 "and runs in llama.cpp and in `accel run OUT.gguf`.",
      .run = run_quantize,
  };
}

}  // namespace accel::cli

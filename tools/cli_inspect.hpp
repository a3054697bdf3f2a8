// accel inspect PATH [--json] [--progress]
// accel inspect PATH --dequantize TENSOR --out FILE
//
// Lists every tensor of a checkpoint (safetensors file, sharded index, checkpoint folder, torch
// .bin, offload folder, GGUF file) with dtype, shape, bytes and the SHA-256 of its raw little-endian
// bytes, as a table or as {"metadata", "tensors": [{"name", "dtype", "shape", "nbytes", "sha256"}]};
// a GGUF file adds its header, each metadata value's type, and each tensor's offset (io/inspect.hpp).
// A bitsandbytes checkpoint (safetensors, as transformers saves one) adds each quantized weight's
// scheme and logical shape: a table after the tensors, "bitsandbytes": [{"name", "scheme",
// "double_quant", "shape", "dtype", "blocksize"}] in the JSON (quant/formats/bnb_checkpoint.hpp).
// --dequantize writes one tensor as raw little-endian float32 to FILE (atomically), dequantized
// (GGUF block types, bit-identical to ggml; bitsandbytes weights to their logical shape) or
// converted, in the file's element order.
// Hashing shows a progress bar on stderr for large checkpoints when stderr is a terminal, or when
// --progress asks (for a log); stdout carries only the table or JSON. An unreadable or malformed
// checkpoint exits 1 (cli_command.hpp).
#pragma once

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <vector>

#include <unistd.h>

#include "accel/io/bytes.hpp"
#include "accel/io/inspect.hpp"
#include "accel/quant/formats/bnb_checkpoint.hpp"
#include "accel/quant/formats/dequantize_file.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"

namespace accel::cli {

/// `accel inspect`: the library's inspect_checkpoint, rendered as a table or JSON.
inline int run_inspect(const ParsedArgs& args) {
  const auto tensor = args.value("--dequantize");
  const auto out = args.value("--out");
  if (tensor.has_value() != out.has_value()) throw UsageError("--dequantize TENSOR and --out FILE go together");
  if (tensor) {
    const Tensor t = quant::dequantize_tensor(args.positional(0), *tensor);
    io::write_file_atomic(*out, std::string_view(static_cast<const char*>(t.data_ptr()), t.nbytes()));
    std::cerr << "wrote " << t.numel() << " float32 values of '" << io::printable_entry(*tensor) << "' " << t.shape().str()
              << " to " << io::printable_entry(*out) << "\n";
    return exit_ok;
  }
  io::InspectOptions options;
  if (args.flag("--progress") || ::isatty(STDERR_FILENO)) options.progress = &std::cerr;
  const auto r = io::inspect_checkpoint(args.positional(0), options);
  std::vector<quant::BnbWeightInfo> bnb;
  if (r.kind == io::CheckpointFormat::safetensors || r.kind == io::CheckpointFormat::sharded_index) {
    const std::string file = io::resolve_checkpoint(args.positional(0)).path.string();
    try {
      bnb = quant::bnb_weights(quant::bnb_checkpoint_tensors(file));
    } catch (const FormatError& e) {
      throw FormatError("'" + file + "': " + e.what());
    }
  }
  if (args.flag("--json")) {
    nlohmann::ordered_json j = io::inspect_to_json(r);
    if (!bnb.empty()) {
      auto& list = j["bitsandbytes"] = nlohmann::ordered_json::array();
      for (const auto& w : bnb) {
        list.push_back({{"name", w.name}, {"scheme", w.scheme}, {"double_quant", w.double_quant},
                        {"shape", w.shape.vec()}, {"dtype", std::string(dtype_name(w.dtype))}, {"blocksize", w.blocksize}});
      }
    }
    std::cout << dump_json(j, 2) << "\n";
  } else {
    std::cout << io::format_inspect_table(r);
    if (!bnb.empty()) {
      std::cout << "\nbitsandbytes: " << bnb.size() << " quantized weights\n";
      std::size_t width = 4;
      for (const auto& w : bnb) width = std::max(width, io::printable_entry(w.name).size());
      std::cout << std::left << std::setw(static_cast<int>(width) + 2) << "name" << "scheme  logical shape\n";
      for (const auto& w : bnb) {
        std::cout << std::setw(static_cast<int>(width) + 2) << io::printable_entry(w.name)
                  << std::setw(8) << (w.scheme + (w.double_quant ? "+dq" : "")) << w.shape.str() << "\n";
      }
      std::cout << std::right;
    }
  }
  return exit_ok;
}

/// The `accel inspect` entry of the command table.
inline Command inspect_command() {
  return {
      .name = "inspect",
      .summary = "every tensor of a checkpoint: dtype, shape, bytes, SHA-256, and its metadata",
      .usage = "PATH [--json] [--progress] | PATH --dequantize TENSOR --out FILE",
      .positionals = {{"PATH",
                       "a .safetensors file, a sharded *.index.json, a checkpoint\n"
                       "folder, a torch .bin, an Accelerate offload folder, or a .gguf file"}},
      .options = {{.name = "--json",
                   .help = "{\"metadata\", \"tensors\": [{name, dtype, shape, nbytes, sha256}]}"},
                  {.name = "--progress",
                   .help = "draw the hashing progress on stderr even when it is not a terminal"},
                  {.name = "--dequantize",
                   .placeholder = "TENSOR",
                   .help = "write this tensor as raw little-endian float32 (with --out)"},
                  {.name = "--out", .placeholder = "FILE", .help = "where --dequantize writes"}},
      .run = run_inspect,
  };
}

}  // namespace accel::cli

// accel inspect PATH [--json] [--progress]
// accel inspect PATH --dequantize TENSOR --out FILE
//
// Lists every tensor of a checkpoint (safetensors file, sharded index, checkpoint folder, torch
// .bin, offload folder, GGUF file) with dtype, shape, bytes and the SHA-256 of its raw little-endian
// bytes, as a table or as {"metadata", "tensors": [{"name", "dtype", "shape", "nbytes", "sha256"}]};
// a GGUF file adds its header, each metadata value's type, and each tensor's offset (io/inspect.hpp).
// --dequantize writes one tensor as raw little-endian float32 to FILE (atomically), dequantized
// (GGUF block types, bit-identical to ggml) or converted, in the file's element order.
// Hashing shows a progress bar on stderr for large checkpoints when stderr is a terminal, or when
// --progress asks (for a log); stdout carries only the table or JSON. An unreadable or malformed
// checkpoint exits 1 (cli_command.hpp).
#pragma once

#include <iostream>

#include <unistd.h>

#include "accel/io/bytes.hpp"
#include "accel/io/inspect.hpp"
#include "accel/quant/dequantize_file.hpp"
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
  if (args.flag("--json")) {
    std::cout << dump_json(io::inspect_to_json(r), 2) << "\n";
  } else {
    std::cout << io::format_inspect_table(r);
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

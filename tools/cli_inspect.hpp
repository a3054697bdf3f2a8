// accel inspect PATH [--json] [--progress]
//
// Lists every tensor of a checkpoint (safetensors file, sharded index, checkpoint folder, torch
// .bin, offload folder) with dtype, shape, bytes and the SHA-256 of its raw little-endian bytes,
// as a table or as {"metadata", "tensors": [{"name", "dtype", "shape", "nbytes", "sha256"}]}.
// Hashing shows a progress bar on stderr for large checkpoints when stderr is a terminal, or when
// --progress asks (for a log); stdout carries only the table or JSON. An unreadable or malformed
// checkpoint exits 1 (cli_command.hpp).
#pragma once

#include <iostream>

#include <unistd.h>

#include "accel/io/inspect.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"

namespace accel::cli {

/// `accel inspect`: the library's inspect_checkpoint, rendered as a table or JSON.
inline int run_inspect(const ParsedArgs& args) {
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
      .usage = "PATH [--json] [--progress]",
      .positionals = {{"PATH",
                       "a .safetensors file, a sharded *.index.json, a checkpoint\n"
                       "folder, a torch .bin, or an Accelerate offload folder"}},
      .options = {{.name = "--json",
                   .help = "{\"metadata\", \"tensors\": [{name, dtype, shape, nbytes, sha256}]}"},
                  {.name = "--progress",
                   .help = "draw the hashing progress on stderr even when it is not a terminal"}},
      .run = run_inspect,
  };
}

}  // namespace accel::cli

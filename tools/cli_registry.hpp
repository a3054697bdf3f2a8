// The commands of the `accel` program, in the order `accel --help` lists them.
//
// Adding a command takes two steps:
//   1. a header tools/cli_<name>.hpp with `inline Command <name>_command()`: its name, summary,
//      usage, positionals and options (cli_options.hpp), and a `run(const ParsedArgs&)` that
//      returns exit_ok and throws accel's exceptions on bad input. Parsing, --help, usage errors
//      and exit codes come from cli_command.hpp; numeric option values go through cli_values.hpp
//      so their errors name the option. Split run into parse (ParsedArgs -> a request struct),
//      compute (request -> result, through the library) and render (result -> stdout), as
//      cli_plan.hpp does;
//   2. its include and one line in accel_commands() below.
// main registers the checkpoint loaders before dispatching, so a command's load_cli_model reads
// .safetensors and .bin files as well as configs and specs.
#pragma once

#include <span>
#include <vector>

#include "cli_command.hpp"
#include "cli_estimate_memory.hpp"
#include "cli_inspect.hpp"
#include "cli_plan.hpp"
#include "cli_quantize.hpp"
#include "cli_run.hpp"

namespace accel::cli {

/// Every command of `accel`.
inline std::span<const Command> accel_commands() {
  static const std::vector<Command> commands = {
      estimate_memory_command(),
      plan_command(),
      inspect_command(),
      run_command(),
      quantize_command(),
  };
  return commands;
}

}  // namespace accel::cli

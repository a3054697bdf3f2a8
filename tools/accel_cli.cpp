// accel: command-line front end.
//
//   accel estimate-memory MODEL        sizes per dtype, like `accelerate estimate-memory`
//   accel plan MODEL --max-memory ...  a device map, like infer_auto_device_map
//   accel inspect PATH [--json]        every tensor of a checkpoint with dtype, shape, SHA-256
//
// MODEL is a transformers config.json, a model spec, or a checkpoint (.safetensors, .bin, a
// sharded index) whose tensor names give the module tree. Each subcommand lives in
// tools/cli_<name>.hpp as `int run_<name>(argc, argv)`; adding one is an include plus one line in
// `commands` below.
#include <exception>
#include <iostream>
#include <string>
#include <utility>

#include "cli_checkpoint_model.hpp"
#include "cli_estimate_memory.hpp"
#include "cli_inspect.hpp"
#include "cli_plan.hpp"

int main(int argc, char** argv) {
  accel::cli::register_checkpoint_loaders();
  using Command = int (*)(int, char**);
  const std::pair<const char*, Command> commands[] = {
      {"estimate-memory", accel::cli::run_estimate_memory},
      {"plan", accel::cli::run_plan},
      {"inspect", accel::cli::run_inspect},
  };
  const std::string cmd = argc > 1 ? argv[1] : "";
  for (const auto& [name, run] : commands) {
    if (cmd != name) continue;
    try {
      return run(argc, argv);
    } catch (const std::exception& e) {
      std::cerr << "accel " << cmd << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "usage: accel COMMAND ...\ncommands:";
  for (const auto& [name, run] : commands) std::cerr << " " << name;
  std::cerr << "\n";
  return 2;
}

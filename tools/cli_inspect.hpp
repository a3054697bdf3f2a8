// `accel inspect PATH [--json]`: lists every tensor of a checkpoint (safetensors file, sharded
// index, checkpoint folder, torch .bin, offload folder) with dtype, shape, bytes and SHA-256.
//
//   int run_inspect(int argc, char** argv);   // argv[0] is "inspect", then the arguments
//
// Exit codes: 0 success, 1 unreadable or malformed checkpoint, 2 usage error.
#pragma once

#include <iostream>
#include <string>
#include <string_view>

#include "accel/io/inspect.hpp"

/// Runs the inspect subcommand; prints the table (or JSON with --json) to stdout, errors to stderr.
inline int run_inspect(int argc, char** argv) {
  std::string path;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      std::cout << "usage: accel inspect PATH [--json]\n";
      return 0;
    } else if (path.empty() && !a.starts_with("--")) {
      path = a;
    } else {
      std::cerr << "accel inspect: unexpected argument '" << a << "'\nusage: accel inspect PATH [--json]\n";
      return 2;
    }
  }
  if (path.empty()) {
    std::cerr << "usage: accel inspect PATH [--json]\n";
    return 2;
  }
  try {
    const auto r = accel::io::inspect_checkpoint(path);
    if (json) {
      std::cout << accel::io::inspect_to_json(r).dump(2) << "\n";
    } else {
      std::cout << accel::io::format_inspect_table(r);
    }
    return 0;
  } catch (const accel::Error& e) {
    std::cerr << "accel inspect: " << e.what() << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "accel inspect: " << e.what() << "\n";
    return 1;
  }
}

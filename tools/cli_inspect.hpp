// accel inspect PATH [--json]
//
// Lists every tensor of a checkpoint (safetensors file, sharded index, checkpoint folder, torch
// .bin, offload folder) with dtype, shape, bytes and the SHA-256 of its raw little-endian bytes,
// as a table or as {"metadata", "tensors": [{"name", "dtype", "shape", "nbytes", "sha256"}]}.
// Exit codes: 0 success, 1 unreadable or malformed checkpoint, 2 usage error.
#pragma once

#include <iostream>
#include <string>
#include <string_view>

#include "accel/io/inspect.hpp"
#include "cli_common.hpp"

namespace accel::cli {

inline int run_inspect(int argc, char** argv) {
  static constexpr const char* usage = "usage: accel inspect PATH [--json]\n";
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << usage;
      return 0;
    }
  }
  const CliArgs args(argc, argv, 2, {"--json"});
  const auto unknown = args.unknown({"--json"});
  if (args.positionals().size() != 1 || !unknown.empty()) {
    std::cerr << usage;
    for (const auto& u : unknown) std::cerr << "unknown option " << u << "\n";
    return 2;
  }
  const auto r = io::inspect_checkpoint(args.positionals()[0]);
  if (args.flag("--json")) {
    std::cout << io::inspect_to_json(r).dump(2) << "\n";
  } else {
    std::cout << io::format_inspect_table(r);
  }
  return 0;
}

}  // namespace accel::cli

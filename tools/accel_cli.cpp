// accel: command-line front end. The commands are in cli_registry.hpp; how a command line becomes
// an exit code (0 success, 1 bad input or a failed check, 2 usage error) is in cli_command.hpp.
#include "cli_checkpoint_model.hpp"
#include "cli_registry.hpp"

#ifndef ACCEL_VERSION
#error "ACCEL_VERSION is the project version, defined by tools/CMakeLists.txt"
#endif

int main(int argc, char** argv) {
  accel::cli::register_checkpoint_loaders();
  return accel::cli::run_program("accel", ACCEL_VERSION, accel::cli::accel_commands(), argc, argv);
}

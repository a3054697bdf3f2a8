// A command of the accel programs, and the one place that turns a command line into an exit code.
//
//   Command{.name, .summary, .usage, .positionals, .options, .details, .run}
//   run_program("accel", version, commands, argc, argv)        accel COMMAND ..., --help, --version
//   run_single_command("accel-conformance", version, command, argc, argv)   a program that is one command
//
// Exit codes, the same for every program and command:
//   0  success (and --help, --version)
//   1  bad input or a failed check: a value the command rejects, a file that is missing or
//      malformed (accel's typed exceptions); printed as "PROGRAM COMMAND: error: MESSAGE"
//   2  usage error: no or unknown command, unknown option, missing value, flag given a value,
//      missing option or positional; printed with the command's usage line and a pointer to --help
// `--help` / `-h` anywhere before `--` prints the command's help on stdout.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <iostream>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "accel/io/confined_path.hpp"
#include "cli_options.hpp"

namespace accel::cli {

/// Exit codes of every accel program (see the header comment).
enum ExitCode : int { exit_ok = 0, exit_failed = 1, exit_usage = 2 };

/// One command: what `--help` shows and what runs. `run` receives arguments that already have the
/// declared shape; it returns an ExitCode and throws accel's exceptions on bad input (exit 1) or
/// UsageError when options conflict (exit 2).
struct Command {
  std::string name{};                     ///< "plan"; empty when the program is this one command
  std::string summary{};                  ///< one line, for the command list and the top of --help
  std::string usage{};                    ///< synopsis after the command's name: "MODEL --max-memory ..."
  std::vector<Positional> positionals{};  ///< in order
  std::vector<Option> options{};          ///< --help / -h is implicit
  std::string details{};                  ///< paragraphs printed after the options (may be empty)
  int (*run)(const ParsedArgs&) = nullptr;  ///< the command itself
};

/// "accel plan", or "accel-conformance" for a program that is one command.
inline std::string invocation(const std::string& program, const Command& cmd) {
  return cmd.name.empty() ? program : program + " " + cmd.name;
}

/// The full help of `cmd`: usage, summary, arguments, options, details, exit codes.
inline void print_command_help(std::ostream& os, const std::string& program, const Command& cmd) {
  const std::string who = invocation(program, cmd);
  os << "usage: " << who << (cmd.usage.empty() ? "" : " " + cmd.usage) << "\n\n" << cmd.summary << "\n";
  struct Row {
    std::string left, help;
  };
  std::vector<Row> args, opts;
  for (const auto& p : cmd.positionals) args.push_back({p.required ? p.name : "[" + p.name + "]", p.help});
  for (const auto& o : cmd.options) {
    const char* tags = o.required && o.repeatable ? "\n(required, may be repeated)"
                       : o.required               ? "\n(required)"
                       : o.repeatable             ? "\n(may be repeated)"
                                                  : "";
    opts.push_back({o.name + (o.is_flag() ? "" : " " + o.placeholder), o.help + tags});
  }
  opts.push_back({"-h, --help", "show this help and exit"});
  std::size_t width = 0;
  for (const auto* rows : {&args, &opts}) {
    for (const auto& r : *rows) width = std::max(width, r.left.size());
  }
  width = std::min<std::size_t>(width, 30);
  const auto section = [&](const char* title, const std::vector<Row>& rows) {
    if (rows.empty()) return;
    os << "\n" << title << ":\n";
    for (const auto& r : rows) {
      os << "  " << r.left;
      // A long left column gets its help on the next line, aligned with the others.
      if (r.left.size() > width) os << "\n" << std::string(width + 2, ' ');
      else os << std::string(width - r.left.size(), ' ');
      std::size_t start = 0;
      while (true) {
        const auto nl = r.help.find('\n', start);
        os << "  " << r.help.substr(start, nl == std::string::npos ? std::string::npos : nl - start) << "\n";
        if (nl == std::string::npos) break;
        start = nl + 1;
        os << std::string(width + 2, ' ');
      }
    }
  };
  section("arguments", args);
  section("options", opts);
  if (!cmd.details.empty()) os << "\n" << cmd.details << (cmd.details.ends_with('\n') ? "" : "\n");
  os << "\nexit status: 0 success, 1 bad input or a failed check, 2 usage error\n";
}

/// Reports a usage error on stderr ("PROGRAM COMMAND: MESSAGE", the usage line, where the help is)
/// and returns exit_usage.
inline int usage_error(const std::string& program, const Command& cmd, const std::string& message) {
  const std::string who = invocation(program, cmd);
  std::cerr << who << ": " << message << "\n"
            << "usage: " << who << (cmd.usage.empty() ? "" : " " + cmd.usage) << "\n"
            << "run '" << who << " --help' for its options\n";
  return exit_usage;
}

/// Runs `cmd` on `args` (the words after its name): help, parsing, the command, and the mapping of
/// what it throws to exit codes. Every program goes through here, so the codes cannot drift.
inline int run_command(const std::string& program, const Command& cmd, const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      print_command_help(std::cout, program, cmd);
      return exit_ok;
    }
  }
  try {
    return cmd.run(parse_arguments(cmd.options, cmd.positionals, args));
  } catch (const UsageError& e) {
    return usage_error(program, cmd, e.what());
  } catch (const std::exception& e) {
    // Messages quote names from the file: escaped, except the line breaks a message is built of.
    std::string message = e.what(), shown;
    for (std::size_t start = 0; start <= message.size();) {
      const auto nl = std::min(message.find('\n', start), message.size());
      shown += io::printable_entry(std::string_view(message).substr(start, nl - start));
      if (nl < message.size()) shown += '\n';
      start = nl + 1;
    }
    std::cerr << invocation(program, cmd) << ": error: " << shown << "\n";
    return exit_failed;
  }
}

/// The list of `commands` with their summaries, for `PROGRAM --help` and a bare `PROGRAM`.
inline void print_command_list(std::ostream& os, const std::string& program, std::span<const Command> commands) {
  os << "usage: " << program << " COMMAND [ARGS...]\n"
     << "       " << program << " COMMAND --help\n"
     << "       " << program << " --version\n\ncommands:\n";
  std::size_t width = 0;
  for (const auto& c : commands) width = std::max(width, c.name.size());
  for (const auto& c : commands) os << "  " << c.name << std::string(width - c.name.size() + 2, ' ') << c.summary << "\n";
  os << "\nrun '" << program << " COMMAND --help' for a command's arguments and options\n"
     << "exit status: 0 success, 1 bad input or a failed check, 2 usage error\n";
}

/// `PROGRAM COMMAND ARGS...` over a table of commands; `--help` and `--version` stand alone.
inline int run_program(const std::string& program, const std::string& version, std::span<const Command> commands,
                       int argc, char** argv) {
  const std::string first = argc > 1 ? argv[1] : "";
  if (first.empty()) {
    print_command_list(std::cerr, program, commands);
    return exit_usage;
  }
  if (first == "--help" || first == "-h") {
    print_command_list(std::cout, program, commands);
    return exit_ok;
  }
  if (first == "--version") {
    std::cout << program << " " << version << "\n";
    return exit_ok;
  }
  for (const auto& c : commands) {
    if (c.name == first) return run_command(program, c, std::vector<std::string>(argv + 2, argv + argc));
  }
  std::cerr << program << ": " << (first.starts_with("-") ? "unknown option " + first : "unknown command '" + first + "'")
            << "\nrun '" << program << " --help' for the list of commands\n";
  return exit_usage;
}

/// A program that is one command (its name empty): `PROGRAM --version`, else run_command.
inline int run_single_command(const std::string& program, const std::string& version, const Command& cmd, int argc,
                              char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::cout << program << " " << version << "\n";
    return exit_ok;
  }
  return run_command(program, cmd, std::vector<std::string>(argv + 1, argv + argc));
}

}  // namespace accel::cli

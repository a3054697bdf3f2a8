// The one command-line parser of the accel programs: what a command accepts, and what it was given.
//
//   ParsedArgs a = parse_arguments(options, positionals, args);   UsageError when the shape is wrong
//   a.positional(0)   a.flag("--json")   a.value("--dtype")   a.values("--max-memory")   a.list("--no-split")
//   split_list("a,b")   {"a", "b"}: how list-valued options are read
//
// Grammar: `--name VALUE` or `--name=VALUE` for an option that takes a value, `--name` for a flag,
// `--` ends the options. A value never starts with "--" unless written `--name=VALUE`, so a
// forgotten value is reported instead of swallowing the next option. Unknown options, a missing
// value, a flag given a value, a valued option given twice (unless repeatable), a missing
// required option and a wrong number of positionals are UsageErrors: the program exits 2 on them
// (cli_command.hpp). What the values mean is the command's business (cli_values.hpp).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace accel::cli {

/// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// The command line does not have the shape its command declares. Exit code 2, never bad input.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One `--name` a command accepts. An empty `placeholder` makes it a flag; otherwise it takes a
/// value, shown as `--name PLACEHOLDER` in help and usage messages.
struct Option {
  std::string name{};         ///< with its dashes: "--max-memory"
  std::string placeholder{};  ///< "DEVICE=SIZE,...", or "" for a flag
  std::string help{};         ///< one or more lines; later lines are indented under the first
  bool repeatable = false;    ///< may be given more than once; values() keeps every one, in order
  bool required = false;      ///< the command cannot run without it

  /// A flag is given bare; anything else needs a value.
  bool is_flag() const noexcept { return placeholder.empty(); }
};

/// One positional argument, in order. Optional positionals must follow the required ones.
struct Positional {
  std::string name{};  ///< "MODEL", shown as is in usage
  std::string help{};  ///< one or more lines, as Option::help
  bool required = true;
};

/// What parse_arguments found: positionals in order and every option's values. Asking about a
/// name the command did not declare throws std::logic_error, so a misspelt lookup fails loudly in
/// tests instead of reading as "not given".
class ParsedArgs {
 public:
  /// `declared` are the command's options; `given` maps each one given to its values (none for a flag).
  ParsedArgs(const std::vector<Option>& declared, std::vector<std::string> positionals,
             std::map<std::string, std::vector<std::string>> given)
      : positionals_(std::move(positionals)), given_(std::move(given)) {
    for (const auto& o : declared) declared_.insert(o.name);
  }

  /// Every positional, in command-line order.
  const std::vector<std::string>& positionals() const noexcept { return positionals_; }
  /// The i-th positional; std::logic_error when absent (declare it required, or check size).
  const std::string& positional(std::size_t i) const {
    if (i >= positionals_.size()) throw std::logic_error("positional argument " + std::to_string(i) + " was not given");
    return positionals_[i];
  }
  /// Whether the flag or option was given.
  bool flag(const std::string& name) const { return given_.count(checked(name)) != 0; }
  /// The value of a non-repeatable option (the last one of a repeatable one), nullopt if absent.
  std::optional<std::string> value(const std::string& name) const {
    const auto& v = values(name);
    if (v.empty()) return std::nullopt;
    return v.back();
  }
  /// Every value of the option, in command-line order.
  const std::vector<std::string>& values(const std::string& name) const {
    static const std::vector<std::string> none;
    const auto it = given_.find(checked(name));
    return it == given_.end() ? none : it->second;
  }
  /// The comma-separated items of every value of the option, concatenated (empty items dropped);
  /// nullopt when the option was not given at all.
  std::optional<std::vector<std::string>> list(const std::string& name) const {
    const auto& v = values(name);
    if (v.empty()) return std::nullopt;
    std::vector<std::string> out;
    for (const auto& s : v) {
      for (auto& item : split_list(s)) out.push_back(std::move(item));
    }
    return out;
  }

 private:
  const std::string& checked(const std::string& name) const {
    if (!declared_.count(name)) throw std::logic_error("option " + name + " is not declared by this command");
    return name;
  }

  std::vector<std::string> positionals_;
  std::map<std::string, std::vector<std::string>> given_;
  std::set<std::string> declared_;
};

/// `options` and `positionals` parse `args` (the words after the command's name). Throws
/// UsageError naming the first problem; `--help` is not handled here (the caller looks first).
inline ParsedArgs parse_arguments(const std::vector<Option>& options, const std::vector<Positional>& positionals,
                                  const std::vector<std::string>& args) {
  const auto find = [&](const std::string& name) -> const Option* {
    for (const auto& o : options) {
      if (o.name == name) return &o;
    }
    return nullptr;
  };
  std::vector<std::string> pos;
  std::map<std::string, std::vector<std::string>> given;
  bool options_ended = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_ended || a == "-" || !a.starts_with("-")) {
      pos.push_back(a);
      continue;
    }
    if (a == "--") {
      options_ended = true;
      continue;
    }
    const auto eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const Option* o = find(name);
    if (!o) throw UsageError("unknown option " + name);
    auto& slot = given[name];
    if (o->is_flag()) {
      if (eq != std::string::npos) throw UsageError("option " + name + " takes no value");
      continue;
    }
    if (!slot.empty() && !o->repeatable) throw UsageError("option " + name + " given twice");
    if (eq != std::string::npos) {
      slot.push_back(a.substr(eq + 1));
    } else if (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
      slot.push_back(args[++i]);
    } else {
      throw UsageError("option " + name + " needs a value (" + name + " " + o->placeholder + ")");
    }
  }
  for (const auto& o : options) {
    if (o.required && !given.count(o.name)) throw UsageError("option " + o.name + " is required");
  }
  std::size_t required = 0;
  for (const auto& p : positionals) required += p.required ? 1 : 0;
  if (pos.size() < required) throw UsageError("missing " + positionals[pos.size()].name);
  if (pos.size() > positionals.size()) throw UsageError("unexpected argument '" + pos[positionals.size()] + "'");
  return ParsedArgs(options, std::move(pos), std::move(given));
}

}  // namespace accel::cli

// accel-conformance QUERY.json: answers an Accelerate conformance query file with accel's API.
//
// The query's `spec` is resolved relative to the query file and built on meta with
// accel::nn::module_from_spec; every case is answered in order and printed as
// {"results": [{"id", "result"} | {"id", "error": {"type", "message"}}]}. A query file that cannot
// be read prints {"error": {...}} on stdout, where the comparison script looks, and exits 1. The
// command line goes through the same Command machinery as `accel` (cli_command.hpp): --help,
// --version and usage errors (exit 2) behave alike.
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/json_read.hpp"
#include "accel/nn/spec.hpp"
#include "cli_command.hpp"
#include "conformance_ops.hpp"

#ifndef ACCEL_VERSION
#error "ACCEL_VERSION is the project version, defined by tools/CMakeLists.txt"
#endif

namespace {

using accel::tools::ojson;

/// The query file, checked for its `cases` list and `spec` path; {"error"} and exit 1 otherwise.
int answer_query(const accel::cli::ParsedArgs& args) {
  const std::filesystem::path query_path = args.positional(0);
  ojson query;
  try {
    try {
      query = accel::read_json_file<ojson>(query_path.string());
    } catch (const accel::IOError& e) {
      throw accel::IOError(std::string("cannot open query file: ") + e.what());
    }
    if (!query.is_object() || !query.contains("cases") || !query["cases"].is_array()) {
      throw accel::FormatError(query_path.string() + ": $.cases: expected a list of cases");
    }
    if (!query.contains("spec") || !query["spec"].is_string()) {
      throw accel::FormatError(query_path.string() + ": $.spec: expected the path of a model spec");
    }
  } catch (const std::exception& e) {
    std::cout << ojson{{"error", accel::tools::error_json(e)}}.dump(1) << "\n";
    return accel::cli::exit_failed;
  }

  std::shared_ptr<accel::nn::Module> model;
  std::string model_error;
  try {
    const auto spec_path = query_path.parent_path() / query["spec"].get<std::string>();
    model = accel::nn::module_from_spec_file(spec_path);
  } catch (const std::exception& e) {
    model_error = e.what();
  }

  ojson results = ojson::array();
  for (const auto& c : query["cases"]) results.push_back(accel::tools::run_case(model.get(), c, model_error));
  std::cout << ojson{{"results", results}}.dump(1) << "\n";
  return accel::cli::exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  const accel::cli::Command command{
      .summary = "answers an Accelerate conformance query file with accel's API, as JSON on stdout",
      .usage = "QUERY.json",
      .positionals = {{"QUERY.json",
                       "{\"spec\": model spec path (relative to the query), \"cases\": [...]}, as in\n"
                       "shared/conformance/accelerate/queries"}},
      .details = "Prints {\"results\": [{\"id\", \"result\"} | {\"id\", \"error\": {\"type\", \"message\"}}]}; a case that\n"
                 "fails is an answer, not an exit code. A query file that cannot be read prints {\"error\": ...}.",
      .run = answer_query,
  };
  return accel::cli::run_single_command("accel-conformance", ACCEL_VERSION, command, argc, argv);
}

// accel-conformance QUERY.json: answers an Accelerate conformance query file with accel's API.
//
// The query's `spec` is resolved relative to the query file and built on meta with
// accel::nn::module_from_spec; every case is answered in order and printed as
// {"results": [{"id", "result"} | {"id", "error": {"type", "message"}}]}. A query file that cannot
// be read prints {"error": {...}} and exits 1.
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/nn/spec.hpp"
#include "conformance_ops.hpp"

int main(int argc, char** argv) {
  using accel::tools::ojson;
  if (argc != 2) {
    std::cerr << "usage: accel-conformance QUERY.json\n";
    return 2;
  }
  const std::filesystem::path query_path = argv[1];
  ojson query;
  try {
    std::ifstream in(query_path, std::ios::binary);
    if (!in) throw accel::IOError("cannot open query file '" + query_path.string() + "'");
    try {
      query = ojson::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw accel::FormatError(query_path.string() + ": invalid JSON: " + e.what());
    }
    if (!query.is_object() || !query.contains("cases") || !query["cases"].is_array()) {
      throw accel::FormatError(query_path.string() + ": $.cases: expected a list of cases");
    }
    if (!query.contains("spec") || !query["spec"].is_string()) {
      throw accel::FormatError(query_path.string() + ": $.spec: expected the path of a model spec");
    }
  } catch (const std::exception& e) {
    std::cout << ojson{{"error", accel::tools::error_json(e)}}.dump(1) << "\n";
    return 1;
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
  return 0;
}

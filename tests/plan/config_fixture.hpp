// The real transformers configs of tests/data/configs, by folder name.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace accel_test {
inline nlohmann::json config(const std::string& name) {
  std::ifstream in(std::filesystem::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "configs" / name / "config.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}
}  // namespace accel_test

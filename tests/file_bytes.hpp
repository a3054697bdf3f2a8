// Whole files as byte strings, for tests that write hand-made (often malformed) files and read
// back what the library wrote.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace accel_test {

inline void write_raw(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  if (!f) throw std::runtime_error("test fixture: cannot write " + path.string());
}

inline std::string read_raw(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("test fixture: cannot read " + path.string());
  return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace accel_test

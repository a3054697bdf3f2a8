// A fresh folder under the system's temporary directory, removed with everything in it when the
// test is done. Names carry the process id and a process-wide count, so that tests of any file
// running in one binary, or binaries running side by side, never share a folder.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace accel_test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("accel_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignore;
    std::filesystem::remove_all(path, ignore);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string str() const { return path.string(); }
};

}  // namespace accel_test

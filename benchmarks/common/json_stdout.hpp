// --json for a benchmark program: while on, its text goes to stderr, so that stdout carries only
// the one JSON object print() writes (what bench_peers reads).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

namespace accel_bench {

class JsonStdout {
 public:
  explicit JsonStdout(bool on) : saved_(on ? ::dup(1) : -1) {
    if (saved_ >= 0) ::dup2(2, 1);
  }
  JsonStdout(const JsonStdout&) = delete;
  JsonStdout& operator=(const JsonStdout&) = delete;
  bool on() const { return saved_ >= 0; }
  void print(const nlohmann::json& j) {
    if (saved_ < 0) return;
    std::cout.flush();
    std::fflush(stdout);
    ::dup2(saved_, 1);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }

 private:
  int saved_;
};

}  // namespace accel_bench

// Parsing a checkpoint's index and header files of 100,000 tensors, next to nlohmann::json::parse
// of the same bytes, in one run.
//
//   safetensors header    parse_safetensors_header: JSON, every entry validated, sorted by offset
//   sharded index         parse_sharded_index of model.safetensors.index.json (100 shards)
//   offload index         parse_offload_index of an offload folder's index.json
//
// The plain parse builds a std::map-backed tree without bounds, duplicate handling, file order
// or validation: it is the floor a reader of these files cannot go below by much, so the ratio
// says what the bounds, the order and the checks cost. Repetitions alternate between the two so
// that drift on a shared machine falls on both. Medians of process CPU time are printed (a
// loaded machine preempts a long parse more than a short one; CPU time leaves that out), wall
// time beside them. The files are generated in
// memory (tests/io/many_tensors.hpp), nothing touches the disk. Goal: each reader well under 1 s.
//
//   bench_parse [tensors=100000] [repetitions=7]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../tests/io/many_tensors.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sharded_index.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double process_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Times {
  std::vector<double> wall, cpu;
};

template <class F>
void time_call(F&& f, Times& out) {
  const double c0 = process_cpu_ms();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  out.wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  out.cpu.push_back(process_cpu_ms() - c0);
}

/// Times `ours` and a plain parse of `json` in alternating repetitions and prints one row.
template <class F>
void row(const char* label, std::size_t entries, std::string_view json, int reps, F&& ours) {
  Times a, b;
  volatile std::size_t sink = 0;  // keeps both results alive
  for (int r = 0; r < reps; ++r) {
    time_call([&] { sink = sink + ours(); }, a);
    time_call([&] { sink = sink + nlohmann::json::parse(json).size(); }, b);
  }
  const double o = median(a.cpu), p = median(b.cpu);
  const auto rate = [&](double t) { return static_cast<double>(entries) / (t / 1e3); };
  std::printf("%-20s ours %7.1f ms %9.0f entries/s | plain parse %7.1f ms %9.0f entries/s | ours/plain %4.2fx | wall %7.1f / %7.1f ms\n",
              label, o, rate(o), p, rate(p), o / p, median(a.wall), median(b.wall));
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100'000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  std::printf("parsing %zu-entry checkpoint files: medians of %d alternating repetitions\n", n, reps);

  const std::string safetensors = accel_test::many_tensor_safetensors(n, 16);
  const std::string_view header(safetensors.data() + 8, safetensors.size() - 8 - n * 16 * 4);
  row("safetensors header", n, header, reps,
      [&] { return accel::io::parse_safetensors_header(accel::io::as_bytes(safetensors), "bench.safetensors").tensors.size(); });

  const std::string sharded = accel_test::many_tensor_sharded_index(n);
  row("sharded index", n, sharded, reps,
      [&] { return accel::io::parse_sharded_index(sharded, "model.safetensors.index.json").weight_map.size(); });

  const std::string offload = accel_test::many_tensor_offload_index(n);
  row("offload index", n, offload, reps, [&] { return accel::io::parse_offload_index(offload, "index.json").size(); });

  std::printf("goal: each reader well under 1000 ms\n");
  return 0;
}

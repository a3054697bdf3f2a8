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
// that drift on a shared machine falls on both; medians are printed. The files are generated in
// memory (tests/io/many_tensors.hpp), nothing touches the disk. Goal: each reader well under 1 s.
//
//   bench_parse [tensors=100000] [repetitions=7]
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

template <class F>
double ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Times `ours` and a plain parse of `json` in alternating repetitions and prints one row.
template <class F>
void row(const char* label, std::size_t entries, std::string_view json, int reps, F&& ours) {
  std::vector<double> a, b;
  volatile std::size_t sink = 0;  // keeps both results alive
  for (int r = 0; r < reps; ++r) {
    a.push_back(ms([&] { sink = sink + ours(); }));
    b.push_back(ms([&] { sink = sink + nlohmann::json::parse(json).size(); }));
  }
  const double o = median(a), p = median(b);
  const auto rate = [&](double t) { return static_cast<double>(entries) / (t / 1e3); };
  std::printf("%-20s ours %8.1f ms %11.0f entries/s | plain parse %8.1f ms %11.0f entries/s | ours/plain %5.2fx\n",
              label, o, rate(o), p, rate(p), o / p);
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

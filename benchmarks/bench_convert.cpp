// Conversion bandwidth next to memcpy, in one run.
//
// Each conversion reads n source elements and writes n f32 (or the reverse); its GB/s counts
// the bytes read plus written, like memcpy's (n bytes read + n written). The summary prints
// each conversion as a fraction of the memcpy rate over the same output size.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "accel/core/convert.hpp"
#include "accel/core/tensor.hpp"

using namespace accel;

namespace {

constexpr std::size_t kElems = std::size_t{32} << 20;  // 32 Mi elements: far beyond the caches

std::map<std::string, double>& rates() {
  static std::map<std::string, double> r;
  return r;
}

void record(benchmark::State& state, const std::string& name, std::size_t bytes_per_iter) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes_per_iter));
  (void)name;
}

void BM_memcpy(benchmark::State& state) {
  const std::size_t bytes = kElems * 4;
  std::vector<char> a(bytes, 1), b(bytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  record(state, "memcpy", 2 * bytes);
}

template <DType From, DType To>
void BM_convert(benchmark::State& state) {
  Tensor src = Tensor::ones({static_cast<std::int64_t>(kElems)}, From);
  Tensor dst = Tensor::empty({static_cast<std::int64_t>(kElems)}, To);
  for (auto _ : state) {
    dst.copy_(src);
    benchmark::DoNotOptimize(dst.data_ptr());
    benchmark::ClobberMemory();
  }
  record(state, "", kElems * (itemsize(From) + itemsize(To)));
}

class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") {
        auto it = r.counters.find("bytes_per_second");
        if (it != r.counters.end()) rates()[r.run_name.function_name] = it->second.value / 1e9;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

BENCHMARK(BM_memcpy)->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::f16, DType::f32>)->Name("f16_to_f32")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::bf16, DType::f32>)->Name("bf16_to_f32")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::f32, DType::f16>)->Name("f32_to_f16")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::f32, DType::bf16>)->Name("f32_to_bf16")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::f8_e4m3fn, DType::f32>)->Name("e4m3_to_f32")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::f8_e5m2, DType::f32>)->Name("e5m2_to_f32")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::f32, DType::f8_e4m3fn>)->Name("f32_to_e4m3")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
BENCHMARK(BM_convert<DType::f32, DType::f8_e5m2>)->Name("f32_to_e5m2")->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  Collector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const double mem = rates()["BM_memcpy"];
  std::printf("\nmedian bandwidth (bytes read + written), %d threads\n", num_threads());
  std::printf("  %-14s %8.2f GB/s\n", "memcpy", mem);
  for (const char* name : {"f16_to_f32", "bf16_to_f32", "f32_to_f16", "f32_to_bf16", "e4m3_to_f32",
                           "e5m2_to_f32", "f32_to_e4m3", "f32_to_e5m2"}) {
    const double r = rates()[name];
    std::printf("  %-14s %8.2f GB/s  = %5.1f%% of memcpy\n", name, r, mem > 0 ? 100.0 * r / mem : 0.0);
  }
  return 0;
}

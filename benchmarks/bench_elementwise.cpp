// Memory throughput of the element-wise and row ops on a large tensor (32 Mi f32 = 128 MiB),
// next to a multithreaded memcpy moving the same bytes (read + write), in one run.
//
//   bench_elementwise [--benchmark_min_time=0.1] [--benchmark_repetitions=3]
//
// GB/s counts the bytes an op must read and write (inputs once, output once). Each op allocates
// its output; glibc is told to keep freed blocks (no mmap, no trimming) and each benchmark makes
// a few untimed calls first, so the figures measure the kernels rather than the kernel's
// page-fault path on fresh memory (what a caching allocator would give).
#include <benchmark/benchmark.h>

#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/ops/norm.hpp"

namespace {

constexpr std::int64_t numel = std::int64_t{1} << 25;
constexpr std::int64_t row = 4096;

struct Inputs {
  accel::Tensor x, y, w, xb, wb;
  Inputs() {
    x = accel::Tensor::full({numel / row, row}, 0.5);
    y = accel::Tensor::full({numel / row, row}, 0.25);
    w = accel::Tensor::full({row}, 1.5);
    xb = x.to(accel::DType::bf16);
    wb = w.to(accel::DType::bf16);
  }
};

Inputs& inputs() {
  static Inputs in;
  return in;
}

void set_bytes(benchmark::State& state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(numel) * 4;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    accel::parallel_for(bytes, std::size_t{1} << 20, [&](std::size_t b, std::size_t e) {
      std::memcpy(dst.data() + b, src.data() + b, e - b);
    });
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * double(bytes));  // read + write
}

template <class F>
void run_op(benchmark::State& state, F&& f, double bytes) {
  // Untimed calls first: the allocator needs a few rounds before a freed output block comes back
  // warm, and the kernels, not first-touch page faults, are what this program measures.
  for (int i = 0; i < 6; ++i) benchmark::DoNotOptimize(f());
  for (auto _ : state) benchmark::DoNotOptimize(f());
  set_bytes(state, bytes);
}

const double f32_unary = 2.0 * numel * 4, f32_binary = 3.0 * numel * 4, bf16_unary = 2.0 * numel * 2;

void BM_add(benchmark::State& s) { run_op(s, [] { return accel::ops::add(inputs().x, inputs().y); }, f32_binary); }
void BM_mul(benchmark::State& s) { run_op(s, [] { return accel::ops::mul(inputs().x, inputs().y); }, f32_binary); }
void BM_mul_row_broadcast(benchmark::State& s) {
  run_op(s, [] { return accel::ops::mul(inputs().x, inputs().w); }, f32_unary);
}
void BM_silu(benchmark::State& s) { run_op(s, [] { return accel::ops::silu(inputs().x); }, f32_unary); }
void BM_gelu_erf(benchmark::State& s) { run_op(s, [] { return accel::ops::gelu(inputs().x); }, f32_unary); }
void BM_gelu_tanh(benchmark::State& s) {
  run_op(s, [] { return accel::ops::gelu(inputs().x, accel::ops::GeluApproximate::tanh); }, f32_unary);
}
void BM_rms_norm(benchmark::State& s) { run_op(s, [] { return accel::ops::rms_norm(inputs().x, inputs().w); }, f32_unary); }
void BM_softmax(benchmark::State& s) { run_op(s, [] { return accel::ops::softmax(inputs().x); }, f32_unary); }
void BM_silu_bf16(benchmark::State& s) { run_op(s, [] { return accel::ops::silu(inputs().xb); }, bf16_unary); }
void BM_rms_norm_bf16(benchmark::State& s) {
  run_op(s, [] { return accel::ops::rms_norm(inputs().xb, inputs().wb); }, bf16_unary);
}

#define ACCEL_BENCH(fn) BENCHMARK(fn)->Unit(benchmark::kMillisecond)->UseRealTime()
ACCEL_BENCH(BM_memcpy);
ACCEL_BENCH(BM_add);
ACCEL_BENCH(BM_mul);
ACCEL_BENCH(BM_mul_row_broadcast);
ACCEL_BENCH(BM_silu);
ACCEL_BENCH(BM_gelu_erf);
ACCEL_BENCH(BM_gelu_tanh);
ACCEL_BENCH(BM_rms_norm);
ACCEL_BENCH(BM_softmax);
ACCEL_BENCH(BM_silu_bf16);
ACCEL_BENCH(BM_rms_norm_bf16);

class MedianCollector : public benchmark::ConsoleReporter {
 public:
  std::vector<std::pair<std::string, double>> rows;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.aggregate_name != "median") continue;
      auto it = r.counters.find("GB/s");
      rows.emplace_back(r.run_name.str(), it == r.counters.end() ? 0.0 : it->second.value);
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  // Keep freed output tensors in the heap (see the header comment). glibc refuses an mmap
  // threshold above 32 MiB, so blocks of this size would each be a fresh mmap: turn mmap off.
  if (mallopt(M_MMAP_MAX, 0) != 1 || mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1) {
    std::fprintf(stderr, "bench_elementwise: mallopt refused; figures include page faults on fresh memory\n");
  }
  std::vector<char*> args(argv, argv + 1);
  std::string min_time = "--benchmark_min_time=0.1", reps = "--benchmark_repetitions=3";
  std::string aggr = "--benchmark_report_aggregates_only=true";
  args.push_back(min_time.data());
  args.push_back(reps.data());
  args.push_back(aggr.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  (void)inputs();
  MedianCollector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  double memcpy_gbs = 0;
  for (const auto& [name, gbs] : reporter.rows) {
    if (name.rfind("BM_memcpy", 0) == 0) memcpy_gbs = gbs;
  }
  std::printf("\nsummary (medians, %lld elements, %d threads)\n%-32s %10s %12s\n", static_cast<long long>(numel),
              accel::num_threads(), "op", "GB/s", "of memcpy");
  for (const auto& [name, gbs] : reporter.rows) {
    std::printf("%-32s %10.1f %11.1f%%\n", name.c_str(), gbs, memcpy_gbs > 0 ? 100 * gbs / memcpy_gbs : 0.0);
  }
  return 0;
}

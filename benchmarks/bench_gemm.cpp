// fp32 GEMM throughput: accel::ops::matmul next to a oneDNN matmul primitive called directly
// (same shapes, same threads) next to this machine's FMA peak, plus the [1,4096]x[4096,4096]^T
// GEMV through accel::ops::linear next to oneDNN with the same transposed-weight layout.
//
// accel is measured twice: matmul_out into a buffer the caller keeps (what oneDNN is given here,
// the like-for-like row) and matmul, which allocates its result; on machines where fresh pages
// fault slowly the difference is the price of that allocation, not of the GEMM.
//
//   bench_gemm [--benchmark_min_time=0.1] [--benchmark_repetitions=5]
//
// Prints Google Benchmark's table, then a summary of the medians with the ratio to oneDNN.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <oneapi/dnnl/dnnl.hpp>

#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/ops/matmul.hpp"

namespace {

// ---- FMA peak: independent FMA chains on every thread ---------------------------------------

#if defined(__AVX512F__)
using fvec = __m512;
constexpr int lanes = 16;
inline fvec vset(float x) { return _mm512_set1_ps(x); }
inline fvec vfma(fvec a, fvec b, fvec c) { return _mm512_fmadd_ps(a, b, c); }
inline float vfirst(fvec a) { return _mm512_cvtss_f32(a); }
const char* isa_name = "AVX-512";
#elif defined(__FMA__)
using fvec = __m256;
constexpr int lanes = 8;
inline fvec vset(float x) { return _mm256_set1_ps(x); }
inline fvec vfma(fvec a, fvec b, fvec c) { return _mm256_fmadd_ps(a, b, c); }
inline float vfirst(fvec a) { return _mm256_cvtss_f32(a); }
const char* isa_name = "AVX2/FMA";
#else
using fvec = float;
constexpr int lanes = 1;
inline fvec vset(float x) { return x; }
inline fvec vfma(fvec a, fvec b, fvec c) { return a * b + c; }
inline float vfirst(fvec a) { return a; }
const char* isa_name = "scalar";
#endif

// 12 chains cover 2 FMA ports x 4-6 cycles latency on current x86 cores.
constexpr int chains = 12;

float fma_chains(long iters, float seed) {
  fvec acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = vset(seed + 0.001f * float(c));
  const fvec m = vset(0.999999f), a = vset(1e-7f);
  for (long i = 0; i < iters; ++i) {
    for (int c = 0; c < chains; ++c) acc[c] = vfma(acc[c], m, a);
  }
  float s = 0;
  for (int c = 0; c < chains; ++c) s += vfirst(acc[c]);
  return s;
}

double measure_fma_peak_gflops() {
  const long iters = 20'000'000;
  const int threads = accel::num_threads();
  volatile float sink = 0;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads)
    {
      const float r = fma_chains(iters, float(omp_get_thread_num()));
#pragma omp critical
      sink = sink + r;
    }
#else
    sink = sink + fma_chains(iters, 1.0f);
#endif
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * lanes * chains * double(iters) * threads / s / 1e9);
  }
  (void)sink;
  return best;
}

// ---- benchmarks --------------------------------------------------------------------------------

accel::Tensor filled(const accel::Shape& s, float v) { return accel::Tensor::full(s, v); }

void set_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_accel_matmul(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto a = filled({n, n}, 0.5f), b = filled({n, n}, 0.25f);
  for (auto _ : state) benchmark::DoNotOptimize(accel::ops::matmul(a, b));
  set_flops(state, 2.0 * double(n) * n * n);
}

// The raw oneDNN reference: one primitive built outside the loop, dst preallocated.
// The same product into a buffer the caller keeps, as oneDNN's side below does: no allocation and
// no first-touch page faults per call.
void BM_accel_matmul_out(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto a = filled({n, n}, 0.5f), b = filled({n, n}, 0.25f);
  auto c = filled({n, n}, 0.0f);
  for (auto _ : state) {
    accel::ops::matmul_out(c, a, b);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * double(n) * n * n);
}

void BM_onednn_matmul(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dnnl::memory::desc md({n, n}, dt::f32, tag::ab);
  std::vector<float> a(std::size_t(n * n), 0.5f), b(std::size_t(n * n), 0.25f), c(static_cast<std::size_t>(n * n));
  dnnl::memory am(md, eng, a.data()), bm(md, eng, b.data()), cm(md, eng, c.data());
  dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), eng));
  for (auto _ : state) {
    prim.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    s.wait();
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * double(n) * n * n);
}

void set_gemv_counters(benchmark::State& state, std::int64_t k, std::int64_t n) {
  set_flops(state, 2.0 * double(k) * n);
  state.counters["weight_GB/s"] =
      benchmark::Counter(double(k) * n * 4 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_accel_linear_gemv(benchmark::State& state) {
  const std::int64_t k = 4096, n = 4096;
  const auto x = filled({1, k}, 0.5f), w = filled({n, k}, 0.25f);
  for (auto _ : state) benchmark::DoNotOptimize(accel::ops::linear(x, w));
  set_gemv_counters(state, k, n);
}

void BM_onednn_gemv(benchmark::State& state) {
  const std::int64_t k = 4096, n = 4096;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dnnl::memory::desc xd({1, k}, dt::f32, tag::ab), wd({k, n}, dt::f32, tag::ba), yd({1, n}, dt::f32, tag::ab);
  std::vector<float> x(std::size_t(k), 0.5f), w(std::size_t(k * n), 0.25f), y(static_cast<std::size_t>(n));
  dnnl::memory xm(xd, eng, x.data()), wm(wd, eng, w.data()), ym(yd, eng, y.data());
  dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(xd, wd, yd), eng));
  for (auto _ : state) {
    prim.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    s.wait();
    benchmark::ClobberMemory();
  }
  set_gemv_counters(state, k, n);
}

BENCHMARK(BM_accel_matmul)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_accel_matmul_out)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_onednn_matmul)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_accel_linear_gemv)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_onednn_gemv)->Unit(benchmark::kMicrosecond)->UseRealTime();

/// Keeps each benchmark's median row for the summary.
class MedianCollector : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, std::map<std::string, double>> medians;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.aggregate_name != "median") continue;
      auto& row = medians[r.run_name.str()];
      row["ms"] = r.GetAdjustedRealTime() * (r.time_unit == benchmark::kMicrosecond ? 1e-3 : 1.0);
      for (const auto& [k, c] : r.counters) row[k] = c.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + 1);
  // Repetitions of every benchmark are interleaved in random order, so that the drift of a shared
  // machine (other tenants, frequency) falls on accel and oneDNN alike instead of on whichever
  // ran during a slow minute.
  std::string min_time = "--benchmark_min_time=0.1", reps = "--benchmark_repetitions=5";
  std::string aggr = "--benchmark_report_aggregates_only=true";
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  args.push_back(min_time.data());
  args.push_back(reps.data());
  args.push_back(aggr.data());
  args.push_back(interleave.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  const double peak = measure_fma_peak_gflops();
  std::printf("threads: %d, FMA peak (%s, %d chains): %.1f GFLOP/s\n", accel::num_threads(), isa_name, chains, peak);
  MedianCollector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  auto get = [&](const std::string& name, const std::string& key) {
    auto it = reporter.medians.find(name);
    if (it == reporter.medians.end()) return 0.0;
    auto jt = it->second.find(key);
    return jt == it->second.end() ? 0.0 : jt->second;
  };
  std::printf("\nsummary (medians; oneDNN writes a preallocated C)      GFLOP/s   of oneDNN   of FMA peak\n");
  for (const char* size : {"1024", "4096"}) {
    const double d = get(std::string("BM_onednn_matmul/") + size + "/real_time", "GFLOP/s");
    auto row = [&](const char* label, const std::string& bench) {
      const double g = get(bench + "/" + size + "/real_time", "GFLOP/s");
      std::printf("sgemm %4s^3  %-38s %8.1f   %8.1f%%   %10.1f%%\n", size, label, g, d > 0 ? 100 * g / d : 0.0,
                  peak > 0 ? 100 * g / peak : 0.0);
    };
    row("oneDNN called directly", "BM_onednn_matmul");
    row("accel matmul_out (caller's buffer)", "BM_accel_matmul_out");
    row("accel matmul (allocates C each call)", "BM_accel_matmul");
  }
  const double ga = get("BM_accel_linear_gemv/real_time", "weight_GB/s");
  const double gd = get("BM_onednn_gemv/real_time", "weight_GB/s");
  std::printf("linear gemv [1,4096]x[4096,4096]^T: accel %.1f GB/s of weights (%.1f us), oneDNN %.1f GB/s (%.1f us), ratio %.1f%%\n",
              ga, get("BM_accel_linear_gemv/real_time", "ms") * 1e3, gd,
              get("BM_onednn_gemv/real_time", "ms") * 1e3, gd > 0 ? 100 * ga / gd : 0.0);
  std::printf("FMA peak: %.1f GFLOP/s on %d threads\n", peak, accel::num_threads());
  return 0;
}

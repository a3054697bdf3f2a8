// send_to_device's machinery over a 1,000-leaf nested batch against the same copies by hand.
//
// The batch is map<string, vector<tuple<Tensor, Tensor>>> (10 keys x 50 pairs). Three variants,
// each as recursively_apply vs a hand-written loop building the same structure:
//   f16          every leaf to(cpu, f16): a converting copy per leaf
//   copy         every leaf to(cpu, nullopt, false, copy = true): a plain copy per leaf
//   same_device  send_to_device(batch, cpu) itself: tensors shared, only the structure rebuilt
// Prints the median of each and the ratio ours / by hand: the claim is <= 1.0x plus noise.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "accel/core/tensor.hpp"
#if defined(ACCEL_WITH_CUDA)
#include "accel/backend/cuda/runtime.hpp"  // registers the CUDA backend for the to_cuda rows
#endif
#include "accel/nested/operations.hpp"

using accel::Device;
using accel::DType;
using accel::Tensor;

namespace {

using Batch = std::map<std::string, std::vector<std::tuple<Tensor, Tensor>>>;

const Batch& batch() {
  static const Batch b = [] {
    Batch out;
    for (int k = 0; k < 10; ++k) {
      auto& v = out["field_" + std::to_string(k)];
      for (int i = 0; i < 50; ++i) v.emplace_back(Tensor::full({4, 16}, i), Tensor::full({16}, k));
    }
    return out;
  }();
  return b;
}

struct ToF16 {
  Tensor operator()(const Tensor& t) const { return t.to(Device::cpu(), DType::f16); }
};
struct PlainCopy {
  Tensor operator()(const Tensor& t) const { return t.to(Device::cpu(), std::nullopt, false, true); }
};

template <class Op>
Batch by_hand(const Batch& in, Op op) {
  Batch out;
  for (const auto& [k, v] : in) {
    auto& dst = out.emplace_hint(out.end(), k, std::vector<std::tuple<Tensor, Tensor>>{})->second;
    dst.reserve(v.size());
    for (const auto& [a, b] : v) dst.emplace_back(op(a), op(b));
  }
  return out;
}

void BM_nested_f16(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = accel::nested::recursively_apply(ToF16{}, b);
    benchmark::DoNotOptimize(out);
  }
}
void BM_by_hand_f16(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = by_hand(b, ToF16{});
    benchmark::DoNotOptimize(out);
  }
}
void BM_nested_copy(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = accel::nested::recursively_apply(PlainCopy{}, b);
    benchmark::DoNotOptimize(out);
  }
}
void BM_by_hand_copy(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = by_hand(b, PlainCopy{});
    benchmark::DoNotOptimize(out);
  }
}
void BM_nested_same_device(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = accel::send_to_device(b, Device::cpu());  // already there: structure rebuilt, tensors shared
    benchmark::DoNotOptimize(out);
  }
}
void BM_by_hand_same_device(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = by_hand(b, [](const Tensor& t) { return t.to(Device::cpu()); });
    benchmark::DoNotOptimize(out);
  }
}

// Host to GPU: send_to_device against the same blocking copies by hand (registered in main only
// where a GPU is visible; wall time, since the copies wait for the DMA engine).
void BM_nested_to_cuda(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = accel::send_to_device(b, Device::cuda(0));
    benchmark::DoNotOptimize(out);
  }
}
void BM_by_hand_to_cuda(benchmark::State& state) {
  const Batch& b = batch();
  for (auto _ : state) {
    auto out = by_hand(b, [](const Tensor& t) { return t.to(Device::cuda(0)); });
    benchmark::DoNotOptimize(out);
  }
}

constexpr int reps = 15;
BENCHMARK(BM_nested_f16)->Repetitions(reps)->ReportAggregatesOnly(true);
BENCHMARK(BM_by_hand_f16)->Repetitions(reps)->ReportAggregatesOnly(true);
BENCHMARK(BM_nested_copy)->Repetitions(reps)->ReportAggregatesOnly(true);
BENCHMARK(BM_by_hand_copy)->Repetitions(reps)->ReportAggregatesOnly(true);
BENCHMARK(BM_nested_same_device)->Repetitions(reps)->ReportAggregatesOnly(true);
BENCHMARK(BM_by_hand_same_device)->Repetitions(reps)->ReportAggregatesOnly(true);

/// Console output plus the median of each benchmark, kept for the comparison.
class MedianReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> median_ns;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.aggregate_name == "median") {
        const bool wall = r.run_name.function_name.find("to_cuda") != std::string::npos;
        median_ns[r.run_name.function_name] = wall ? r.GetAdjustedRealTime() : r.GetAdjustedCPUTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  // Repetitions run interleaved in random order: heap state and machine drift then fall on both
  // sides of each ratio alike.
  std::vector<char*> args(argv, argv + argc);
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  args.insert(args.begin() + 1, interleave.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (accel::cuda_is_available()) {
    benchmark::RegisterBenchmark("BM_nested_to_cuda", BM_nested_to_cuda)->Repetitions(reps)->ReportAggregatesOnly(true)->UseRealTime();
    benchmark::RegisterBenchmark("BM_by_hand_to_cuda", BM_by_hand_to_cuda)->Repetitions(reps)->ReportAggregatesOnly(true)->UseRealTime();
  }
  MedianReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  std::printf("\nsend_to_device over %zu leaves, medians of %d repetitions (ours vs by hand; CPU time, wall time for to_cuda):\n",
              accel::nested::count_leaves(batch()), reps);
  for (const char* v : {"f16", "copy", "same_device", "to_cuda"}) {
    const auto a = rep.median_ns.find(std::string("BM_nested_") + v);
    const auto b = rep.median_ns.find(std::string("BM_by_hand_") + v);
    if (a == rep.median_ns.end() || b == rep.median_ns.end()) continue;
    std::printf("  %-12s ours %10.1f us   by hand %10.1f us   ratio %.3fx\n", v, a->second / 1e3, b->second / 1e3,
                a->second / b->second);
  }
  if (!accel::cuda_is_available()) std::printf("  to_cuda      not measured: no GPU visible\n");
  benchmark::Shutdown();
  return 0;
}

// Loading a safetensors checkpoint next to memcpy of the same bytes, in one run.
//
// Writes two bf16 checkpoints of 8 tensors each (0.5 GiB and 2 GiB) into a temporary folder,
// reuses them for every iteration and deletes them at exit. The page cache is warm throughout:
// this measures what the loader adds on top of the bytes already being in memory.
//
//   views_*          open + every tensor as a same-dtype cpu tensor: zero-copy views of the
//                    mapping, so the time must not grow with the file (checked: no tensor bytes
//                    are allocated, or the program fails)
//   load_to_f32      open + every tensor converted bf16 -> f32 into fresh memory (what a load
//                    with a dtype change costs, page faults of the new buffers included)
//   convert_warm     the conversion alone: mapped bf16 -> preallocated, already touched f32
//   memcpy_warm      memcpy of the 2 GiB data section into a preallocated, touched buffer
//   load_memcpy      open + memcpy of every tensor into fresh memory (a copying loader, no
//                    conversion): the fair baseline for load_to_f32
//   fresh_pages      allocating the 4 GiB of f32 outputs and touching one byte per page: the
//                    part of load_to_f32 that is the kernel handing out new memory (on virtual
//                    machines that return freed memory to the host it dominates)
//
// Rates count input bytes (bf16 read) and, for conversions, also output bytes (f32 written); a
// memcpy's input and output bytes are the same. The conversion is multi-threaded (OMP_NUM_THREADS),
// memcpy is one thread.
//
//   bench_safetensors [--json] [Google Benchmark flags]
//
// --json sends the text to stderr and prints the medians as one JSON object on stdout (for
// bench_peers).
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_stdout.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/safetensors_write.hpp"

using namespace accel;
namespace fs = std::filesystem;

namespace {

constexpr int kTensors = 8;
constexpr std::int64_t kCols = 4096;
constexpr std::size_t kSmallBytes = std::size_t{512} << 20;  // 0.5 GiB
constexpr std::size_t kLargeBytes = std::size_t{2} << 30;    // 2 GiB

struct Checkpoints {
  fs::path dir;
  std::string small, large;
  ~Checkpoints() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

Checkpoints& checkpoints() {
  static Checkpoints c;
  return c;
}

std::map<std::string, double>& median_seconds() {
  static std::map<std::string, double> m;
  return m;
}

bool& views_allocated() {
  static bool v = false;
  return v;
}

// kTensors bf16 tensors of total_bytes / kTensors each, finite values of every magnitude class.
void write_checkpoint(const std::string& path, std::size_t total_bytes) {
  io::NamedTensors tensors;
  const std::int64_t rows = static_cast<std::int64_t>(total_bytes / kTensors / 2) / kCols;
  std::uint32_t state = 12345;
  for (int i = 0; i < kTensors; ++i) {
    Tensor t = Tensor::empty({rows, kCols}, DType::bf16);
    auto* p = static_cast<std::uint16_t*>(t.data_ptr());
    for (std::int64_t k = 0; k < t.numel(); ++k) {
      state = state * 1664525u + 1013904223u;
      p[k] = static_cast<std::uint16_t>((state >> 16) & 0xBFFF);  // exponent never all ones
    }
    tensors.emplace_back("model.layers." + std::to_string(i) + ".mlp.weight", std::move(t));
  }
  io::save_file(tensors, path);
}

void BM_views(benchmark::State& state, const std::string* path) {
  reset_peak_memory_stats(Device::cpu());
  const MemoryStats before = memory_stats(Device::cpu());
  std::size_t bytes = 0;
  for (auto _ : state) {
    const auto f = io::SafetensorsFile::open(*path);
    bytes = 0;
    for (const auto& name : f.keys()) {
      Tensor t = f.tensor(name, Device::cpu());
      benchmark::DoNotOptimize(t.data_ptr());
      bytes += t.nbytes();
    }
  }
  const MemoryStats after = memory_stats(Device::cpu());
  if (after.num_allocs != before.num_allocs || after.peak_allocated_bytes > before.allocated_bytes) {
    views_allocated() = true;
    state.SkipWithError("zero-copy views allocated tensor memory");
  }
  state.counters["GB"] = static_cast<double>(bytes) / 1e9;
}

void BM_load_to_f32(benchmark::State& state) {
  for (auto _ : state) {
    const auto f = io::SafetensorsFile::open(checkpoints().large);
    for (const auto& name : f.keys()) {
      Tensor t = f.tensor(name, Device::cpu(), DType::f32);
      benchmark::DoNotOptimize(t.data_ptr());
      benchmark::ClobberMemory();
    }
  }
}

void BM_convert_warm(benchmark::State& state) {
  const auto f = io::SafetensorsFile::open(checkpoints().large);
  std::vector<std::pair<Tensor, Tensor>> pairs;
  for (const auto& name : f.keys()) {
    Tensor src = f.tensor(name);
    Tensor dst = Tensor::empty(src.shape(), DType::f32);
    dst.copy_(src);  // touches both sides before timing
    pairs.emplace_back(std::move(src), std::move(dst));
  }
  for (auto _ : state) {
    for (auto& [src, dst] : pairs) {
      dst.copy_(src);
      benchmark::DoNotOptimize(dst.data_ptr());
      benchmark::ClobberMemory();
    }
  }
}

void BM_memcpy_warm(benchmark::State& state) {
  const auto f = io::SafetensorsFile::open(checkpoints().large);
  const auto& h = f.header();
  const std::byte* src = f.mapped_file()->data() + h.data_start;
  const std::size_t n = f.mapped_file()->size() - h.data_start;
  std::unique_ptr<std::byte[]> dst(new std::byte[n]);
  std::memcpy(dst.get(), src, n);  // touches both sides before timing
  for (auto _ : state) {
    std::memcpy(dst.get(), src, n);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
}

void BM_load_memcpy(benchmark::State& state) {
  for (auto _ : state) {
    const auto f = io::SafetensorsFile::open(checkpoints().large);
    for (const auto& name : f.keys()) {
      const Tensor src = f.tensor(name);
      Tensor dst = Tensor::empty(src.shape(), src.dtype());
      std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
      benchmark::DoNotOptimize(dst.data_ptr());
      benchmark::ClobberMemory();
    }
  }
}

void BM_fresh_pages(benchmark::State& state) {
  const auto f = io::SafetensorsFile::open(checkpoints().large);
  for (auto _ : state) {
    for (const auto& name : f.keys()) {
      Tensor dst = Tensor::empty(f.info(name).shape, DType::f32);
      auto* p = static_cast<volatile unsigned char*>(dst.data_ptr());
      for (std::size_t i = 0; i < dst.nbytes(); i += 4096) p[i] = 1;
      benchmark::ClobberMemory();
    }
  }
}

using accel_bench::JsonStdout;

class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") {
        median_seconds()[r.run_name.function_name] = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  JsonStdout json(std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string_view(a) == "--json"; }));
  auto& ck = checkpoints();
  ck.dir = fs::temp_directory_path() / ("accel_bench_safetensors_" + std::to_string(::getpid()));
  fs::create_directories(ck.dir);
  ck.small = (ck.dir / "small.safetensors").string();
  ck.large = (ck.dir / "large.safetensors").string();
  std::printf("writing %s and %s ...\n", ck.small.c_str(), ck.large.c_str());
  try {
    write_checkpoint(ck.small, kSmallBytes);
    write_checkpoint(ck.large, kLargeBytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot write the checkpoints: %s\n", e.what());
    return 1;  // returning (not terminating) runs the cleanup
  }

  auto micro = [](benchmark::internal::Benchmark* b) {
    b->Unit(benchmark::kMicrosecond)->UseRealTime()->Repetitions(7)->ReportAggregatesOnly(true);
  };
  // Seconds per iteration: few repetitions keep the run within minutes.
  auto macro = [](benchmark::internal::Benchmark* b, int iterations, int repetitions) {
    b->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(iterations)->Repetitions(repetitions)->ReportAggregatesOnly(true);
  };
  micro(benchmark::RegisterBenchmark("views_0.5GiB", BM_views, &ck.small));
  micro(benchmark::RegisterBenchmark("views_2GiB", BM_views, &ck.large));
  macro(benchmark::RegisterBenchmark("memcpy_warm", BM_memcpy_warm), 2, 5);
  macro(benchmark::RegisterBenchmark("convert_warm", BM_convert_warm), 1, 5);
  macro(benchmark::RegisterBenchmark("fresh_pages", BM_fresh_pages), 1, 3);
  macro(benchmark::RegisterBenchmark("load_memcpy", BM_load_memcpy), 1, 3);
  macro(benchmark::RegisterBenchmark("load_to_f32", BM_load_to_f32), 1, 3);
  Collector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  auto& m = median_seconds();
  const double in = static_cast<double>(kLargeBytes), out = 2 * in;
  auto rate = [](double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0.0; };
  auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
  std::printf("\nmedians, %d threads, bf16 checkpoints of %d tensors, page cache warm (GB = 1e9 bytes)\n",
              num_threads(), kTensors);
  std::printf("(a) open + zero-copy views, 0.5 GiB  %9.1f us\n", m["views_0.5GiB"] * 1e6);
  std::printf("(a) open + zero-copy views, 2 GiB    %9.1f us   x%.2f for 4x the bytes; tensor bytes allocated: %s\n",
              m["views_2GiB"] * 1e6, m["views_0.5GiB"] > 0 ? m["views_2GiB"] / m["views_0.5GiB"] : 0.0,
              views_allocated() ? "SOME (bug)" : "0");

  const double mem = rate(in, m["memcpy_warm"]), conv_in = rate(in, m["convert_warm"]), conv_out = rate(out, m["convert_warm"]);
  std::printf("destination already allocated and touched:\n");
  std::printf("(c) memcpy_warm   2 GiB -> 2 GiB     %9.1f ms   %6.2f GB/s copied\n", m["memcpy_warm"] * 1e3, mem);
  std::printf("(b) convert_warm  2 GiB -> 4 GiB     %9.1f ms   %6.2f GB/s in (%5.1f%% of memcpy), %6.2f GB/s out (%5.1f%%)\n",
              m["convert_warm"] * 1e3, conv_in, pct(conv_in, mem), conv_out, pct(conv_out, mem));

  const double lmem = rate(in, m["load_memcpy"]), load_in = rate(in, m["load_to_f32"]), load_out = rate(out, m["load_to_f32"]);
  std::printf("fresh destination memory, as a load allocates it:\n");
  std::printf("    fresh_pages   4 GiB touched      %9.1f ms   %6.2f GB/s\n", m["fresh_pages"] * 1e3, rate(out, m["fresh_pages"]));
  std::printf("(c) load_memcpy   2 GiB -> 2 GiB     %9.1f ms   %6.2f GB/s copied\n", m["load_memcpy"] * 1e3, lmem);
  std::printf("(b) load_to_f32   2 GiB -> 4 GiB     %9.1f ms   %6.2f GB/s in (%5.1f%% of load_memcpy), %6.2f GB/s out (%5.1f%%)\n",
              m["load_to_f32"] * 1e3, load_in, pct(load_in, lmem), load_out, pct(load_out, lmem));
  json.print({{"threads", num_threads()},
              {"views_us", {{"0.5GiB", m["views_0.5GiB"] * 1e6}, {"2GiB", m["views_2GiB"] * 1e6}}},
              {"views_allocated", views_allocated()},
              {"memcpy_warm_gbps", mem},
              {"convert_warm_gbps_in", conv_in},
              {"convert_warm_pct_of_memcpy", pct(conv_in, mem)},
              {"fresh_pages_gbps", rate(out, m["fresh_pages"])},
              {"load_memcpy_gbps", lmem},
              {"load_to_f32_gbps_in", load_in},
              {"load_to_f32_pct_of_load_memcpy", pct(load_in, lmem)}});
  return views_allocated() ? 1 : 0;
}

// infer_auto_device_map and compute_module_sizes on a LLaMA-3-70B-shaped meta model (80 layers,
// hidden 8192, intermediate 28672, 64 heads / 8 KV heads, vocab 128256, bf16, no-split
// LlamaDecoderLayer) with 4 GPUs x 40GB + cpu 64GB + disk, next to Accelerate on the same model in
// the same run.
//
//   bench_plan [--accelerate_src=PATH] [--python=EXE] [--rounds=N] [--json] [Google Benchmark flags]
//
// Accelerate is measured when an Accelerate checkout is given (--accelerate_src, or the
// ACCELERATE_SRC environment variable) and EXE (default /usr/bin/python3) imports torch and it:
// benchmarks/accelerate/bench_infer_auto_device_map.py builds the same model from plain torch
// modules on meta and answers timing requests over a pipe, so that the two libraries run in
// alternating rounds and a slow minute of a shared machine falls on both. Each side is timed in
// wall time and in process CPU time: on a loaded machine a 10 ms Python call is preempted where a
// 0.1 ms one is not, and the CPU-time ratio leaves that out. The run also checks that both chose
// the same device map and size table (exit status 1 when not). Without Accelerate it prints
// accel's medians and says that Accelerate was not measured here. --json skips the Google
// Benchmark table (the rounds measure the same calls), sends the text to stderr and prints the
// medians as one JSON object on stdout (for bench_peers).
#include <benchmark/benchmark.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_stdout.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/module_sizes.hpp"

#ifndef ACCEL_BENCHMARKS_DIR
#define ACCEL_BENCHMARKS_DIR "benchmarks"
#endif

namespace {

std::shared_ptr<accel::nn::Module> llama3_70b() {
  auto guard = accel::nn::init_empty_weights(/*include_buffers=*/true);
  accel::models::LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 8192;
  c.intermediate_size = 28672;
  c.num_hidden_layers = 80;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 8;
  return std::make_shared<accel::models::LlamaForCausalLM<>>(c, accel::DType::bf16);
}

const accel::nn::Module& model() {
  static auto m = llama3_70b();
  return *m;
}

accel::plan::MaxMemory budgets() {
  using accel::ByteSize;
  using accel::Placement;
  accel::plan::MaxMemory mm;
  for (int i = 0; i < 4; ++i) mm.add(Placement::gpu(i), ByteSize(accel::convert_file_size_to_int("40GB")));
  mm.add(Placement::cpu(), ByteSize(accel::convert_file_size_to_int("64GB")));
  mm.add(Placement::disk(), ByteSize(accel::convert_file_size_to_int("1000GB")));
  return mm;
}

accel::plan::InferOptions options() {
  accel::plan::InferOptions o;
  o.no_split_module_classes = {"LlamaDecoderLayer"};
  o.sizes.dtype = accel::DType::bf16;
  return o;
}

accel::plan::SizeOptions size_options() {
  accel::plan::SizeOptions s;
  s.dtype = accel::DType::bf16;
  return s;
}

void BM_infer_auto_device_map_llama3_70b(benchmark::State& state) {
  const auto mm = budgets();
  const auto o = options();
  for (auto _ : state) benchmark::DoNotOptimize(accel::infer_auto_device_map(model(), mm, o));
}
BENCHMARK(BM_infer_auto_device_map_llama3_70b)->Unit(benchmark::kMicrosecond);

void BM_compute_module_sizes_llama3_70b(benchmark::State& state) {
  const auto s = size_options();
  for (auto _ : state) benchmark::DoNotOptimize(accel::compute_module_sizes(model(), s));
}
BENCHMARK(BM_compute_module_sizes_llama3_70b)->Unit(benchmark::kMicrosecond);

/// Per-call milliseconds: wall time, and the process's CPU time (which leaves out the time other
/// tenants of a shared machine held the cores; both sides are timed both ways).
struct Times {
  std::vector<double> wall, cpu;
};

double process_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

/// Times each of `n` calls of `f` into `out`.
template <class F>
void time_calls(F&& f, int n, Times& out) {
  for (int i = 0; i < n; ++i) {
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    out.cpu.push_back(process_cpu_ms() - c0);
    out.wall.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The Accelerate side: the Python script, started once and asked for timed calls over two pipes.
class Accelerate {
 public:
  Accelerate() = default;
  Accelerate(const Accelerate&) = delete;
  Accelerate& operator=(const Accelerate&) = delete;
  ~Accelerate() { stop(); }

  /// Starts the script; false (with the reason in why()) when it does not report ready.
  bool start(const std::string& python, const std::string& script, const std::string& src) {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) return fail("pipe: " + std::string(std::strerror(errno)));
    ::signal(SIGPIPE, SIG_IGN);  // a script that died must not take this program with it
    pid_ = ::fork();
    if (pid_ < 0) return fail("fork: " + std::string(std::strerror(errno)));
    if (pid_ == 0) {
      ::dup2(to_child[0], 0);
      ::dup2(from_child[1], 1);
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
      const char* args[] = {python.c_str(), script.c_str(), "--serve", "--accelerate-src", src.c_str(), nullptr};
      ::execvp(python.c_str(), const_cast<char* const*>(args));  // a bare name is looked up on PATH
      std::fprintf(stderr, "bench_plan: cannot run %s: %s\n", python.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_ = to_child[1];
    from_ = ::fdopen(from_child[0], "r");
    const std::string first = read_line();
    if (first.rfind("ready ", 0) == 0) {
      const auto v = nlohmann::json::parse(first.substr(6), nullptr, false);
      version_ = v.is_object() && v.contains("accelerate") ? v["accelerate"].get<std::string>() : "?";
      torch_ = v.is_object() && v.contains("torch") ? v["torch"].get<std::string>() : "?";
      return true;
    }
    if (first.rfind("error ", 0) == 0) return fail(python + " " + script + ": " + first.substr(6));
    return fail("cannot run " + python + " " + script);
  }

  /// Sends one request; the reply line without its first word, or nullopt (and stops) on a bad one.
  std::optional<std::string> ask(const std::string& request, const std::string& reply_word) {
    if (pid_ <= 0) return std::nullopt;
    const std::string line = request + "\n";
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      fail("the script stopped reading");
      return std::nullopt;
    }
    const std::string reply = read_line();
    if (reply.rfind(reply_word + " ", 0) != 0) {
      fail("unexpected reply to '" + request + "': " + reply.substr(0, 200));
      return std::nullopt;
    }
    return reply.substr(reply_word.size() + 1);
  }

  /// `n` timed calls of "infer" or "sizes", appended to `out` (the reply: "wall,cpu" per call).
  bool time_calls(const char* what, int n, Times& out) {
    const auto reply = ask(std::string(what) + " " + std::to_string(n), "times");
    if (!reply) return false;
    std::istringstream in(*reply);
    double wall = 0, cpu = 0;
    for (char comma = 0; in >> wall >> comma >> cpu && comma == ',';) {
      out.wall.push_back(wall);
      out.cpu.push_back(cpu);
    }
    return true;
  }

  bool running() const { return pid_ > 0; }
  const std::string& why() const { return why_; }
  const std::string& version() const { return version_; }
  const std::string& torch() const { return torch_; }

 private:
  std::string read_line() {
    std::string s;
    if (!from_) return s;
    for (int c; (c = std::fgetc(from_)) != EOF && c != '\n';) s.push_back(static_cast<char>(c));
    return s;
  }
  bool fail(std::string why) {
    why_ = std::move(why);
    stop();
    return false;
  }
  void stop() {
    if (to_ >= 0) ::close(to_);  // end of input: the script returns
    if (from_) std::fclose(from_);
    to_ = -1;
    from_ = nullptr;
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int to_ = -1;
  std::FILE* from_ = nullptr;
  std::string why_, version_, torch_;
};

/// "--name=value" among the arguments Google Benchmark left, or the fallback.
std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).starts_with(prefix)) return argv[i] + prefix.size();
  }
  return fallback;
}

/// "identical (N entries)", or where the two differ.
std::string compare_maps(const accel::plan::DeviceMap& ours, const std::string& theirs_json) {
  const auto j = nlohmann::ordered_json::parse(theirs_json, nullptr, false);
  if (j.is_discarded()) return "Accelerate's map is not JSON";
  const auto theirs = accel::plan::device_map_from_json(j);
  if (ours == theirs) return "identical (" + std::to_string(ours.size()) + " entries)";
  const auto& a = ours.entries();
  const auto& b = theirs.entries();
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) {
      return "DIFFERENT at entry " + std::to_string(i) + ": accel " + a[i].first + " -> " + a[i].second.str() +
             ", Accelerate " + b[i].first + " -> " + b[i].second.str();
    }
  }
  return "DIFFERENT: accel has " + std::to_string(a.size()) + " entries, Accelerate " + std::to_string(b.size());
}

using accel_bench::JsonStdout;

nlohmann::json times_json(const Times& t) {
  return {{"wall", median(t.wall)}, {"cpu", median(t.cpu)}, {"calls", t.wall.size()}};
}

std::string compare_sizes(const accel::plan::ModuleSizes& ours, const std::string& theirs_json) {
  const auto j = nlohmann::json::parse(theirs_json, nullptr, false);
  if (!j.is_array()) return "Accelerate's table is not a JSON list";
  const auto& a = ours.entries();
  if (a.size() != j.size()) {
    return "DIFFERENT: accel has " + std::to_string(a.size()) + " entries, Accelerate " + std::to_string(j.size());
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto& e = j[i];
    if (!e.is_array() || e.size() != 2 || e[0] != a[i].first || !e[1].is_number_integer() || !a[i].second.is_whole() ||
        e[1].get<std::int64_t>() != a[i].second.floor_bytes()) {
      return "DIFFERENT at entry " + std::to_string(i) + ": accel " + a[i].first + " " + a[i].second.str() +
             ", Accelerate " + e.dump();
    }
  }
  return "identical (" + std::to_string(a.size()) + " entries)";
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  JsonStdout json(std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string_view(a) == "--json"; }));
  const char* env_src = std::getenv("ACCELERATE_SRC");
  const std::string src = flag(argc, argv, "accelerate_src", env_src ? env_src : "");
  const std::string python = flag(argc, argv, "python", "/usr/bin/python3");
  const int rounds = std::max(1, std::atoi(flag(argc, argv, "rounds", "25").c_str()));
  const std::string script = std::string(ACCEL_BENCHMARKS_DIR) + "/accelerate/bench_infer_auto_device_map.py";

  if (!json.on()) benchmark::RunSpecifiedBenchmarks();

  const auto mm = budgets();
  const auto o = options();
  const auto s = size_options();
  const auto dm = accel::infer_auto_device_map(model(), mm, o);

  Accelerate acc;
  if (!src.empty()) acc.start(python, script, src);

  // Alternating rounds; which library goes first alternates too. accel makes more calls per round
  // because each is ~100x shorter.
  constexpr int ours_per_round = 20, theirs_per_round = 3;
  Times ours_infer, ours_sizes, theirs_infer, theirs_sizes;
  for (int r = 0; r < rounds; ++r) {
    auto ours = [&] {
      auto infer = [&] { benchmark::DoNotOptimize(accel::infer_auto_device_map(model(), mm, o)); };
      auto sizes = [&] { benchmark::DoNotOptimize(accel::compute_module_sizes(model(), s)); };
      time_calls(infer, ours_per_round, ours_infer);
      time_calls(sizes, ours_per_round, ours_sizes);
    };
    auto theirs = [&] {
      if (acc.running()) acc.time_calls("infer", theirs_per_round, theirs_infer);
      if (acc.running()) acc.time_calls("sizes", theirs_per_round, theirs_sizes);
    };
    if (r % 2) {
      theirs();
      ours();
    } else {
      ours();
      theirs();
    }
  }
  std::string same_map, same_sizes;
  if (acc.running()) {
    if (auto m = acc.ask("map", "map")) same_map = compare_maps(dm, *m);
    if (auto t = acc.ask("sizes_table", "sizes_table")) {
      same_sizes = compare_sizes(accel::compute_module_sizes(model(), s), *t);
    }
  }

  nlohmann::json j = {{"map_entries", dm.size()}, {"rounds", rounds}, {"infer_auto_device_map_ms", times_json(ours_infer)},
                      {"compute_module_sizes_ms", times_json(ours_sizes)}};
  if (acc.running()) {
    j["accelerate"] = {{"version", acc.version()}, {"torch", acc.torch()},
                       {"infer_auto_device_map_ms", times_json(theirs_infer)},
                       {"compute_module_sizes_ms", times_json(theirs_sizes)}, {"device_map", same_map},
                       {"size_table", same_sizes}};
  } else {
    j["accelerate_not_run"] = src.empty() ? "set ACCELERATE_SRC" : acc.why();
  }
  std::printf("\nLLaMA-3-70B shape, 4 x 40GB + cpu 64GB + disk, bf16, no-split LlamaDecoderLayer (%zu map entries)\n",
              dm.size());
  if (!acc.running()) {
    auto line = [](const char* name, const Times& t) {
      std::printf("  accel %-24s %9.4f ms %9.4f ms\n", name, median(t.wall), median(t.cpu));
    };
    std::printf("medians of %zu calls in %d rounds      wall time     cpu time\n", ours_infer.wall.size(), rounds);
    line("infer_auto_device_map", ours_infer);
    line("compute_module_sizes", ours_sizes);
    if (src.empty()) {
      std::printf("Accelerate: not measured here (set ACCELERATE_SRC=<path to an Accelerate checkout> with "
                  "python3-torch installed)\n");
    } else {
      std::printf("Accelerate: not measured here (%s)\n", acc.why().c_str());
    }
    json.print(j);
    return 0;
  }
  std::printf("medians of %d alternating rounds (a round: %d calls of accel, %d of Accelerate %s on torch %s)\n",
              rounds, ours_per_round, theirs_per_round, acc.version().c_str(), acc.torch().c_str());
  std::printf("  %-24s %12s %14s %18s\n", "", "accel", "Accelerate", "Accelerate/accel");
  auto row = [](const char* name, const Times& a, const Times& b) {
    auto line = [](const char* label, const char* kind, const std::vector<double>& x, const std::vector<double>& y) {
      const double mx = median(x), my = median(y);
      std::printf("  %-24s %9.4f ms %11.3f ms %17.0fx   %s (%zu and %zu calls)\n", label, mx, my,
                  mx > 0 ? my / mx : 0.0, kind, x.size(), y.size());
    };
    line(name, "wall time", a.wall, b.wall);
    line("", "cpu time ", a.cpu, b.cpu);
  };
  row("infer_auto_device_map", ours_infer, theirs_infer);
  row("compute_module_sizes", ours_sizes, theirs_sizes);
  std::printf("  device map:  %s\n", same_map.c_str());
  std::printf("  size table:  %s\n", same_sizes.c_str());
  json.print(j);
  return same_map.rfind("identical", 0) == 0 && same_sizes.rfind("identical", 0) == 0 ? 0 : 1;
}

// Generation speed of a LLaMA-shaped model (random weights made here) next to the memory
// bandwidth that bounds decoding, measured in the same run.
//
//   bench_decode [--dtype bfloat16|float16|float32] [--layers 8] [--embd 2048] [--ff 5632]
//                [--heads 32] [--kv-heads 4] [--vocab 32000] [--prompt 64] [--decode 32] [--reps 5]
//                [--llama-bench PATH --gguf MODEL.gguf [--gguf MODEL2.gguf]] [--folder DIR] [--tier T] [--json]
//
// --tier caps the library's CPU kernels at one tier (scalar, avx2, avx512, avx512_vnni,
// avx512_bf16; ACCEL_CPU_ARCH); the report and the JSON name the tier that ran ("cpu_tier"). A
// llama.cpp to compare a capped tier with is one built for that tier.
// The default shape is the one of llama.cpp's CPU anchor (../shared/anchors: 483M parameters,
// untied head; make_bench_model.py writes it as GGUF). With --llama-bench, llama.cpp's llama-bench
// runs on each --gguf model (pp64 and tg32 at 2 threads, one repetition) between accel's
// repetitions, so both are measured in the same run under the same conditions; without it the
// llama.cpp rows say "not measured here".
// With --folder, the model is also saved there as a Hugging Face folder (config.json +
// model.safetensors) and loaded back twice with load_pretrained_causal_lm, as `accel run` loads
// it: weights left as views of the mapped file (the default) and copied (disable_mmap). Both
// decode in every repetition, beside the model built in memory.
// Decoding reads every weight but the embedding once per token: the achieved weight-read rate is
// those bytes x tokens/s, printed next to a 2-thread read of a 1 GiB buffer (the bound) and a
// 2-thread memcpy of it, both measured between the repetitions, in blocks from the allocator that
// holds the weights. Medians of the repetitions. --json sends the text to stderr and prints the
// medians as one JSON object on stdout (for bench_peers).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/cpu_tier.hpp"
#include "common/json_stdout.hpp"
#include "accel/core/parallel.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/llama.hpp"
#include "common/llama_bench_model.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// GB/s of a read (sum) of `buf` on every thread: a plain reduction the compiler vectorizes.
double read_rate(std::span<const std::uint64_t> buf) {
  const auto t0 = clock_type::now();
  const std::size_t threads = static_cast<std::size_t>(std::max(1, accel::num_threads()));
  std::vector<std::uint64_t> partial(threads, 0);
  accel::parallel_for(buf.size(), buf.size() / threads, [&](std::size_t b, std::size_t e) {
    std::uint64_t s = 0;
    for (std::size_t i = b; i < e; ++i) s += buf[i];
    partial[b * threads / buf.size()] = s;
  });
  std::uint64_t total = 0;
  for (auto v : partial) total += v;
  const double secs = seconds_since(t0);
  [[maybe_unused]] static volatile std::uint64_t sink;
  sink = total;
  return static_cast<double>(buf.size() * sizeof(std::uint64_t)) / secs / 1e9;
}

/// GB/s (copied bytes) of a 2-thread memcpy of `src` into `dst`.
double memcpy_rate(std::span<const std::uint64_t> src, std::span<std::uint64_t> dst) {
  const auto t0 = clock_type::now();
  const std::size_t per_thread = src.size() / static_cast<std::size_t>(std::max(1, accel::num_threads()));
  accel::parallel_for(src.size(), per_thread, [&](std::size_t b, std::size_t e) {
    std::memcpy(dst.data() + b, src.data() + b, (e - b) * sizeof(std::uint64_t));
  });
  return static_cast<double>(src.size() * sizeof(std::uint64_t)) / seconds_since(t0) / 1e9;
}

struct Args {
  accel::DType dtype = accel::DType::bf16;
  std::int64_t layers = 8, embd = 2048, ff = 5632, heads = 32, kv_heads = 4, vocab = 32000, prompt = 64, decode = 32;
  int reps = 5;
  std::string llama_bench;
  std::vector<std::string> ggufs;
  std::string folder;
  std::string tier;
  bool json = false;
};

using accel_bench::JsonStdout;

/// One llama-bench run (pp and tg, one repetition) on `gguf`: {pp tokens/s, tg tokens/s}.
std::optional<std::pair<double, double>> run_llama_bench(const Args& a, const std::string& gguf) {
  const std::string cmd = "'" + a.llama_bench + "' -m '" + gguf + "' -t " + std::to_string(accel::num_threads()) +
                          " -p " + std::to_string(a.prompt) + " -n " + std::to_string(a.decode) +
                          " -r 1 -o jsonl 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  ::pclose(pipe);
  double pp = 0, tg = 0;
  std::size_t at = 0;
  while (at < out.size()) {
    const std::size_t end = out.find('\n', at);
    const std::string line = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? out.size() : end + 1;
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.value("n_gen", 0) > 0) tg = j.value("avg_ts", 0.0);
      else if (j.value("n_prompt", 0) > 0) pp = j.value("avg_ts", 0.0);
    } catch (const nlohmann::json::exception&) {
    }
  }
  if (pp <= 0 || tg <= 0) return std::nullopt;
  return std::make_pair(pp, tg);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--json") {
      a.json = true;
      continue;
    }
    if (i + 1 >= argc) break;
    const std::string v = argv[++i];
    if (k == "--dtype") a.dtype = accel::dtype_from_string(v);
    else if (k == "--layers") a.layers = std::stoll(v);
    else if (k == "--embd") a.embd = std::stoll(v);
    else if (k == "--ff") a.ff = std::stoll(v);
    else if (k == "--heads") a.heads = std::stoll(v);
    else if (k == "--kv-heads") a.kv_heads = std::stoll(v);
    else if (k == "--vocab") a.vocab = std::stoll(v);
    else if (k == "--prompt") a.prompt = std::stoll(v);
    else if (k == "--decode") a.decode = std::stoll(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--llama-bench") a.llama_bench = v;
    else if (k == "--gguf") a.ggufs.push_back(v);
    else if (k == "--folder") a.folder = v;
    else if (k == "--tier") a.tier = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const std::string tier = accel_bench::apply_cpu_tier(a.tier);
  JsonStdout json(a.json);
  const accel_bench::LlamaShape shape{a.layers, a.embd, a.ff, a.heads, a.kv_heads, a.vocab};
  auto lm = accel_bench::random_llama(shape, a.dtype);
  std::int64_t params = 0, streamed_bytes = 0;
  for (auto& [name, cell] : lm->named_parameter_cells()) {
    params += cell->data.numel();
    if (name != "model.embed_tokens.weight") streamed_bytes += static_cast<std::int64_t>(cell->data.nbytes());
  }
  std::printf("model: LLaMA %lld layers, embd %lld, ff %lld, %lld/%lld heads, vocab %lld: %.1fM params in %s, "
              "%.1f MB read per decoded token\n",
              static_cast<long long>(a.layers), static_cast<long long>(a.embd), static_cast<long long>(a.ff),
              static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads), static_cast<long long>(a.vocab),
              static_cast<double>(params) / 1e6, std::string(accel::dtype_name(a.dtype)).c_str(),
              static_cast<double>(streamed_bytes) / 1e6);

  // The same weights as `accel run` would load them: mapped, then copied.
  struct Loaded {
    const char* label;
    std::shared_ptr<accel::models::CausalLM> model;
    double load_seconds;
    std::vector<double> tg;
  };
  std::vector<Loaded> loaded;
  if (!a.folder.empty()) {
    accel_bench::write_llama_folder(*lm, shape, a.dtype, a.folder);
    for (const bool copy : {false, true}) {
      auto p = accel::dispatch::load_pretrained_causal_lm(a.folder, {.show_progress = false, .disable_mmap = copy});
      loaded.push_back({copy ? "loaded, copied (disable_mmap)" : "loaded, mapped (default)", p.model, p.load_seconds, {}});
    }
  }

  std::vector<std::int64_t> prompt(static_cast<std::size_t>(a.prompt));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 7919) % static_cast<std::size_t>(a.vocab));
  const accel::Tensor ids = accel::Tensor::from_vector(prompt, accel::Shape{1, a.prompt});
  // The bound's buffers come from the allocator that holds the weights, so both are read through
  // the same kind of pages (huge pages where the kernel grants them).
  const std::size_t words = (std::size_t{1} << 30) / sizeof(std::uint64_t);
  const accel::Storage src_block = accel::Storage::allocate(accel::Device::cpu(), words * sizeof(std::uint64_t));
  const accel::Storage dst_block = accel::Storage::allocate(accel::Device::cpu(), words * sizeof(std::uint64_t));
  const std::span<std::uint64_t> src(reinterpret_cast<std::uint64_t*>(src_block.data()), words);
  const std::span<std::uint64_t> dst(reinterpret_cast<std::uint64_t*>(dst_block.data()), words);
  std::fill(src.begin(), src.end(), std::uint64_t{1});
  std::fill(dst.begin(), dst.end(), std::uint64_t{0});

  std::vector<double> pp, tg, rd, cp;
  std::vector<std::vector<double>> ref_pp(a.ggufs.size()), ref_tg(a.ggufs.size());
  const bool with_llamacpp = !a.llama_bench.empty() && !a.ggufs.empty();
  accel::models::GenerationConfig g{.max_new_tokens = a.decode + 1, .ignore_eos = true};
  (void)accel::models::generate(*lm, ids, {.max_new_tokens = 2, .ignore_eos = true});  // warm up
  for (auto& l : loaded) (void)accel::models::generate(*l.model, ids, {.max_new_tokens = 2, .ignore_eos = true});
  for (int r = 0; r < a.reps; ++r) {
    rd.push_back(read_rate(src));
    const auto out = accel::models::generate(*lm, ids, g);
    pp.push_back(static_cast<double>(a.prompt) / out.prefill_seconds);
    tg.push_back(out.tokens_per_second());
    cp.push_back(memcpy_rate(src, dst));
    for (auto& l : loaded) l.tg.push_back(accel::models::generate(*l.model, ids, g).tokens_per_second());
    for (std::size_t m = 0; with_llamacpp && m < a.ggufs.size(); ++m) {
      if (const auto r = run_llama_bench(a, a.ggufs[m])) {
        ref_pp[m].push_back(r->first);
        ref_tg[m].push_back(r->second);
      }
    }
  }
  const double tg_m = median(tg), pp_m = median(pp), rd_m = median(rd), cp_m = median(cp);
  const double achieved = static_cast<double>(streamed_bytes) * tg_m / 1e9;
  std::printf("\nmedians of %d repetitions, %d threads, CPU tier %s\n", a.reps, accel::num_threads(), tier.c_str());
  std::printf("prefill (%lld-token prompt) %8.1f tokens/s\n", static_cast<long long>(a.prompt), pp_m);
  std::printf("decode  (%lld tokens)       %8.1f tokens/s = %.1f GB/s of weights\n", static_cast<long long>(a.decode),
              tg_m, achieved);
  std::printf("bound: 2-thread read %.1f GB/s -> %.1f tokens/s; decode at %.0f%% of it\n", rd_m,
              rd_m * 1e9 / static_cast<double>(streamed_bytes), 100.0 * achieved / rd_m);
  std::printf("memcpy 2 threads %.1f GB/s copied (decode reads at %.0f%% of that rate)\n", cp_m, 100.0 * achieved / cp_m);
  for (const auto& l : loaded) {
    const double t = median(l.tg);
    std::printf("decode, %-30s %5.1f tokens/s (%.2fx the model built in memory), load %.2f s", l.label, t, t / tg_m,
                l.load_seconds);
    for (std::size_t m = 0; with_llamacpp && m < a.ggufs.size(); ++m) {
      if (!ref_tg[m].empty()) std::printf(", %.2fx llama.cpp %s", t / median(ref_tg[m]), a.ggufs[m].c_str());
    }
    std::printf("\n");
  }
  if (!with_llamacpp) {
    std::printf("llama.cpp: not measured here (give --llama-bench PATH --gguf MODEL.gguf to run it side by side)\n");
  }
  for (std::size_t m = 0; with_llamacpp && m < a.ggufs.size(); ++m) {
    if (ref_tg[m].empty()) {
      std::printf("llama.cpp %s: llama-bench gave no result\n", a.ggufs[m].c_str());
      continue;
    }
    const double rp = median(ref_pp[m]), rt = median(ref_tg[m]);
    std::printf("llama.cpp %s: pp %.1f tokens/s (accel %.2fx), tg %.1f tokens/s (accel %.2fx)\n", a.ggufs[m].c_str(), rp,
                pp_m / rp, rt, tg_m / rt);
  }
  nlohmann::json j = {{"reps", a.reps}, {"threads", accel::num_threads()}, {"cpu_tier", tier}, {"dtype", std::string(accel::dtype_name(a.dtype))},
                      {"params", params}, {"streamed_bytes", streamed_bytes}, {"prompt", a.prompt}, {"decode", a.decode},
                      {"prefill_tokens_per_s", pp_m}, {"decode_tokens_per_s", tg_m}, {"weights_gbps", achieved},
                      {"read_gbps", rd_m}, {"memcpy_gbps", cp_m}, {"loaded", nlohmann::json::array()}};
  for (const auto& l : loaded) {
    j["loaded"].push_back({{"label", l.label}, {"decode_tokens_per_s", median(l.tg)}, {"load_s", l.load_seconds}});
  }
  if (with_llamacpp) {
    j["llama_cpp"] = nlohmann::json::array();
    for (std::size_t m = 0; m < a.ggufs.size(); ++m) {
      j["llama_cpp"].push_back({{"gguf", a.ggufs[m]},
                                {"prefill_tokens_per_s", ref_pp[m].empty() ? nlohmann::json() : nlohmann::json(median(ref_pp[m]))},
                                {"decode_tokens_per_s", ref_tg[m].empty() ? nlohmann::json() : nlohmann::json(median(ref_tg[m]))}});
    }
  }
  json.print(j);
  return 0;
}

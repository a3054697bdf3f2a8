// Decoding on a GPU a model whose weights live in CPU memory: a LLaMA of 7B's shape (bf16,
// random weights, 13.5 GB) under cpu_offload to cuda:0, every block brought over the link for
// every token, next to the link's own limit and to Accelerate's cpu_offload, in one run.
//
//   bench_gpu_offload [--layers 32 --embd 4096 --ff 11008 --heads 32 --kv-heads 32 --vocab 32000]
//                     [--prompt 8] [--decode 8] [--reps 3] [--accelerate]
//
// Rows (medians of --reps repetitions, each a prefill then --decode one-token steps):
//   pinned H2D           cudaMemcpyAsync of one block's bytes from page-locked memory, back to
//                        back on one stream: what the link carries (the bound)
//   cpu_offload, sync    cpu_offload<sync_offload>: Accelerate's way, each module's weights
//                        copied when it is called, from the model's own (pageable) memory
//   cpu_offload, prefetch<2>  the weights pinned in place, two blocks copied ahead on a copy
//                        stream while one computes (hooks/device_stage.hpp)
//   Accelerate cpu_offload    benchmarks/gpu/bench_cpu_offload.py on the same shape (with
//                        --accelerate: PyTorch, transformers and Accelerate on this machine)
// Offload GB/s is the model's bytes (all of them cross the link each token) x tokens/s. The sync
// row runs first, while the weights are still pageable, as Accelerate's are.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/llama_bench_model.hpp"
#include "accel/backend/cuda/runtime.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/hooks/model_hook.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Args {
  accel_bench::LlamaShape shape{32, 4096, 11008, 32, 32, 32000};
  std::int64_t prompt = 8, decode = 8;
  int reps = 3;
  bool accelerate = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--accelerate") {
      a.accelerate = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_gpu_offload: %s needs a value\n", f.c_str());
      std::exit(2);
    }
    const std::int64_t v = std::stoll(argv[++i]);
    if (f == "--layers") a.shape.layers = v;
    else if (f == "--embd") a.shape.embd = v;
    else if (f == "--ff") a.shape.ff = v;
    else if (f == "--heads") a.shape.heads = v;
    else if (f == "--kv-heads") a.shape.kv_heads = v;
    else if (f == "--vocab") a.shape.vocab = v;
    else if (f == "--prompt") a.prompt = v;
    else if (f == "--decode") a.decode = v;
    else if (f == "--reps") a.reps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "bench_gpu_offload: unknown option %s\n", f.c_str());
      std::exit(2);
    }
  }
  return a;
}

/// GB/s of back-to-back pinned host-to-device copies of `bytes`.
double pinned_h2d(std::size_t bytes, int reps) {
  accel::Storage host = accel::Storage::allocate_pinned(bytes);
  std::memset(host.data(), 1, bytes);
  accel::Storage dev = accel::Storage::allocate(accel::Device::cuda(0), bytes);
  accel::cuda::Stream s(0);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    accel::cuda::Event start(true), stop(true);
    start.record(s);
    constexpr int copies = 8;
    for (int k = 0; k < copies; ++k) {
      accel::cuda::check(cudaMemcpyAsync(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, s.handle()), "cudaMemcpyAsync");
    }
    stop.record(s);
    stop.synchronize();
    rates.push_back(copies * static_cast<double>(bytes) / (start.elapsed_ms(stop) / 1e3) / 1e9);
  }
  return median(rates);
}

std::int64_t argmax_last(const accel::Tensor& logits) {
  const auto v = logits.to(accel::Device::cpu()).to(accel::DType::f32).contiguous().to_vector<float>();
  const std::size_t vocab = static_cast<std::size_t>(logits.size(-1));
  const auto last = v.end() - static_cast<std::ptrdiff_t>(vocab);
  return std::max_element(last, v.end()) - last;
}

/// Decode tokens/s of one repetition (a prefill, then the timed steps) and the tokens.
std::pair<double, std::vector<std::int64_t>> decode_rate(accel::models::CausalLM& lm, const Args& a) {
  std::vector<std::int64_t> prompt(static_cast<std::size_t>(a.prompt));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 7919) % static_cast<std::size_t>(a.shape.vocab));
  accel::models::KVCache cache = lm.make_cache(1, a.prompt + a.decode + 1);
  std::vector<std::int64_t> out{argmax_last(lm.logits(accel::Tensor::from_vector(prompt, accel::Shape{1, a.prompt}), &cache, 1))};
  const auto t0 = clock_type::now();
  for (std::int64_t s = 0; s < a.decode; ++s) {
    out.push_back(argmax_last(lm.logits(accel::Tensor::from_vector(std::vector<std::int64_t>{out.back()}, accel::Shape{1, 1}), &cache, 1)));
  }
  return {static_cast<double>(a.decode) / seconds_since(t0), out};
}

struct Row {
  std::string label;
  double tokens_per_s = 0;
  std::vector<std::int64_t> tokens;
};

template <class Offload>
Row offloaded(accel::models::LlamaForCausalLM<>& lm, const Args& a, const char* label) {
  accel::cpu_offload<Offload>(lm, {.execution_device = accel::Device::cuda(0)});
  Row row;
  row.label = label;
  std::vector<double> rates;
  for (int r = 0; r < a.reps; ++r) {
    auto [rate, tokens] = decode_rate(lm, a);
    rates.push_back(rate);
    row.tokens = tokens;
  }
  row.tokens_per_s = median(rates);
  accel::hooks::remove_hook_from_submodules(lm);
  return row;
}

std::optional<nlohmann::json> run_accelerate(const Args& a) {
  const std::string script = std::string(ACCEL_BENCHMARKS_DIR) + "/gpu/bench_cpu_offload.py";
  const std::string cmd = "python3 '" + script + "' --layers " + std::to_string(a.shape.layers) + " --embd " +
                          std::to_string(a.shape.embd) + " --ff " + std::to_string(a.shape.ff) + " --heads " +
                          std::to_string(a.shape.heads) + " --kv-heads " + std::to_string(a.shape.kv_heads) + " --vocab " +
                          std::to_string(a.shape.vocab) + " --prompt " + std::to_string(a.prompt) + " --decode " +
                          std::to_string(a.decode) + " --reps " + std::to_string(a.reps);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  if (::pclose(p) != 0) {
    std::fprintf(stderr, "bench_gpu_offload: %s failed:\n%s\n", cmd.c_str(), out.c_str());
    return std::nullopt;
  }
  const auto line = out.rfind('{');
  if (line == std::string::npos) return std::nullopt;
  return nlohmann::json::parse(out.substr(line));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (accel::cuda::device_count() == 0) {
    std::printf("bench_gpu_offload: no GPU visible; nothing measured\n");
    return 0;
  }
  const auto t0 = clock_type::now();
  auto lm = accel_bench::random_llama(a.shape, accel::DType::bf16);
  double model_bytes = 0, block_bytes = 0;
  for (const auto& [name, t] : lm->state_dict()) model_bytes += static_cast<double>(t.numel()) * 2;
  for (const auto& [name, t] : lm->get_submodule("model.layers.0").state_dict()) block_bytes += static_cast<double>(t.numel()) * 2;
  std::printf("model: %lld layers, hidden %lld, %.2f GB bf16 (one block %.0f MB), made in %.1f s\n",
              static_cast<long long>(a.shape.layers), static_cast<long long>(a.shape.embd), model_bytes / 1e9,
              block_bytes / 1e6, seconds_since(t0));

  const double link = pinned_h2d(static_cast<std::size_t>(block_bytes), a.reps);
  const Row sync = offloaded<accel::policy::sync_offload>(*lm, a, "cpu_offload, sync (pageable)");
  const Row pre = offloaded<accel::policy::prefetch<2>>(*lm, a, "cpu_offload, prefetch<2> (pinned)");
  std::optional<nlohmann::json> acc;
  if (a.accelerate) acc = run_accelerate(a);

  std::printf("\n%-36s %10s %12s %10s\n", "row", "tokens/s", "offload GB/s", "% of link");
  std::printf("%-36s %10s %12.2f %10s\n", "pinned H2D (cudaMemcpyAsync)", "-", link, "100%");
  for (const Row* r : {&sync, &pre}) {
    const double gbps = r->tokens_per_s * model_bytes / 1e9;
    std::printf("%-36s %10.3f %12.2f %9.0f%%\n", r->label.c_str(), r->tokens_per_s, gbps, 100 * gbps / link);
  }
  if (acc) {
    const double tps = acc->at("tokens_per_s").get<double>();
    std::printf("%-36s %10.3f %12.2f %9.0f%%   (Accelerate %s, torch %s)\n", "Accelerate cpu_offload", tps,
                tps * model_bytes / 1e9, 100 * tps * model_bytes / 1e9 / link,
                acc->value("accelerate", std::string("?")).c_str(), acc->value("torch", std::string("?")).c_str());
    std::printf("\nprefetch<2> / Accelerate: %.2fx tokens/s\n", pre.tokens_per_s / tps);
  } else {
    std::printf("\nAccelerate cpu_offload: not run (pass --accelerate on a machine with PyTorch + Accelerate)\n");
  }
  std::printf("prefetch<2> / sync: %.2fx; tokens %s under both policies\n", pre.tokens_per_s / sync.tokens_per_s,
              pre.tokens == sync.tokens ? "identical" : "DIFFERENT");
  return pre.tokens == sync.tokens ? 0 : 1;
}

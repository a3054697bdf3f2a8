// Generation speed of a LLaMA-shaped model (random weights made here) next to the memory
// bandwidth that bounds decoding, measured in the same run.
//
//   bench_decode [--dtype bfloat16|float16|float32] [--layers 8] [--embd 2048] [--ff 5632]
//                [--heads 32] [--kv-heads 4] [--vocab 32000] [--prompt 64] [--decode 32] [--reps 5]
//
// The default shape is the one of llama.cpp's CPU anchor (../shared/anchors: 483M parameters,
// untied head), so the rows compare with its llama-bench pp64 / tg32 figures, which are printed as
// "not measured here" unless given with --llamacpp-tg / --llamacpp-pp (measure them side by side).
// Decoding reads every weight but the embedding once per token: the achieved weight-read rate is
// those bytes x tokens/s, printed next to a 2-thread read of a 1 GiB buffer (the bound) and a
// 2-thread memcpy of it, both measured between the repetitions. Medians of the repetitions.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/parallel.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/llama.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Random weights, ~N(0, 0.02)-sized, written in the tensor's dtype in parallel.
void fill_random(accel::Tensor& t, std::uint64_t seed) {
  accel::Tensor f = accel::Tensor::empty(t.shape(), accel::DType::f32);
  float* p = f.data_ptr<float>();
  const auto n = static_cast<std::size_t>(f.numel());
  accel::parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) {
    std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + b;
    for (std::size_t i = b; i < e; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) - 0.5f) * 0.07f;
    }
  });
  t.copy_(f);
}

/// GB/s of a 2-thread read (sum) of `buf`.
double read_rate(const std::vector<std::uint64_t>& buf) {
  const auto t0 = clock_type::now();
  std::uint64_t total = 0;
  std::vector<std::uint64_t> partial(64, 0);
  accel::parallel_for(buf.size(), buf.size() / 2 + 1, [&](std::size_t b, std::size_t e) {
    std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    std::size_t i = b;
    for (; i + 4 <= e; i += 4) s0 += buf[i], s1 += buf[i + 1], s2 += buf[i + 2], s3 += buf[i + 3];
    for (; i < e; ++i) s0 += buf[i];
    partial[(b * 2 / buf.size()) % 64] = s0 + s1 + s2 + s3;
  });
  for (auto v : partial) total += v;
  const double s = seconds_since(t0);
  static volatile std::uint64_t sink;
  sink = total;
  return static_cast<double>(buf.size() * sizeof(std::uint64_t)) / s / 1e9;
}

/// GB/s (copied bytes) of a 2-thread memcpy of `src` into `dst`.
double memcpy_rate(const std::vector<std::uint64_t>& src, std::vector<std::uint64_t>& dst) {
  const auto t0 = clock_type::now();
  accel::parallel_for(src.size(), src.size() / 2 + 1, [&](std::size_t b, std::size_t e) {
    std::memcpy(dst.data() + b, src.data() + b, (e - b) * sizeof(std::uint64_t));
  });
  return static_cast<double>(src.size() * sizeof(std::uint64_t)) / seconds_since(t0) / 1e9;
}

struct Args {
  accel::DType dtype = accel::DType::bf16;
  std::int64_t layers = 8, embd = 2048, ff = 5632, heads = 32, kv_heads = 4, vocab = 32000, prompt = 64, decode = 32;
  int reps = 5;
  std::optional<double> llamacpp_tg, llamacpp_pp;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
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
    else if (k == "--llamacpp-tg") a.llamacpp_tg = std::stod(v);
    else if (k == "--llamacpp-pp") a.llamacpp_pp = std::stod(v);
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
  accel::models::LlamaConfig c;
  c.vocab_size = a.vocab, c.hidden_size = a.embd, c.intermediate_size = a.ff, c.num_hidden_layers = a.layers;
  c.num_attention_heads = a.heads, c.num_key_value_heads = a.kv_heads, c.max_position_embeddings = 4096;
  c.eos_token_ids = {};
  auto lm = std::make_shared<accel::models::LlamaForCausalLM<>>(c, a.dtype);
  std::uint64_t seed = 1;
  std::int64_t params = 0, streamed_bytes = 0;
  for (auto& [name, cell] : lm->named_parameter_cells()) {
    fill_random(cell->data, seed++);
    params += cell->data.numel();
    if (name != "model.embed_tokens.weight") streamed_bytes += static_cast<std::int64_t>(cell->data.nbytes());
  }
  std::printf("model: LLaMA %lld layers, embd %lld, ff %lld, %lld/%lld heads, vocab %lld: %.1fM params in %s, "
              "%.1f MB read per decoded token\n",
              static_cast<long long>(a.layers), static_cast<long long>(a.embd), static_cast<long long>(a.ff),
              static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads), static_cast<long long>(a.vocab),
              static_cast<double>(params) / 1e6, std::string(accel::dtype_name(a.dtype)).c_str(),
              static_cast<double>(streamed_bytes) / 1e6);

  std::vector<std::int64_t> prompt(static_cast<std::size_t>(a.prompt));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 7919) % static_cast<std::size_t>(a.vocab));
  const accel::Tensor ids = accel::Tensor::from_vector(prompt, accel::Shape{1, a.prompt});
  const std::vector<std::uint64_t> src((std::size_t{1} << 30) / sizeof(std::uint64_t), 1);
  std::vector<std::uint64_t> dst(src.size(), 0);

  std::vector<double> pp, tg, rd, cp;
  accel::models::GenerationConfig g{.max_new_tokens = a.decode + 1, .ignore_eos = true};
  (void)accel::models::generate(*lm, ids, {.max_new_tokens = 2, .ignore_eos = true});  // warm up
  for (int r = 0; r < a.reps; ++r) {
    rd.push_back(read_rate(src));
    const auto out = accel::models::generate(*lm, ids, g);
    pp.push_back(static_cast<double>(a.prompt) / out.prefill_seconds);
    tg.push_back(out.tokens_per_second());
    cp.push_back(memcpy_rate(src, dst));
  }
  const double tg_m = median(tg), pp_m = median(pp), rd_m = median(rd), cp_m = median(cp);
  const double achieved = static_cast<double>(streamed_bytes) * tg_m / 1e9;
  std::printf("\nmedians of %d repetitions, %d threads\n", a.reps, accel::num_threads());
  std::printf("prefill (%lld-token prompt) %8.1f tokens/s\n", static_cast<long long>(a.prompt), pp_m);
  std::printf("decode  (%lld tokens)       %8.1f tokens/s = %.1f GB/s of weights\n", static_cast<long long>(a.decode),
              tg_m, achieved);
  std::printf("bound: 2-thread read %.1f GB/s -> %.1f tokens/s; decode at %.0f%% of it\n", rd_m,
              rd_m * 1e9 / static_cast<double>(streamed_bytes), 100.0 * achieved / rd_m);
  std::printf("memcpy 2 threads %.1f GB/s copied (decode reads at %.0f%% of that rate)\n", cp_m, 100.0 * achieved / cp_m);
  if (a.llamacpp_tg) {
    std::printf("llama.cpp tg %.1f tokens/s -> accel / llama.cpp %.2fx\n", *a.llamacpp_tg, tg_m / *a.llamacpp_tg);
  } else {
    std::printf("llama.cpp tg: not measured here (give --llamacpp-tg from a side-by-side llama-bench run)\n");
  }
  if (a.llamacpp_pp) {
    std::printf("llama.cpp pp %.1f tokens/s -> accel / llama.cpp %.2fx\n", *a.llamacpp_pp, pp_m / *a.llamacpp_pp);
  } else {
    std::printf("llama.cpp pp: not measured here (give --llamacpp-pp from a side-by-side llama-bench run)\n");
  }
  return 0;
}

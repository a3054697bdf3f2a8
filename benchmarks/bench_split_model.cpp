// A model split across processes against the same model in one process, in one run under mpirun:
//
//   mpirun --bind-to none -np 2 build/benchmarks/bench_split_model [--reps N] [--tokens T]
//
// (--bind-to none: Open MPI pins each process to a core, and on a machine where other work runs a
// pinned process waits for its core instead of moving to the idle one.)
//
// Process 0 writes a LLaMA-shaped checkpoint (hidden 1024, 8 layers, f32, about 180 MB; random
// weights, seeded) that every process reads. Then:
//   split    load_pretrained_split with the "auto" plan over equal budgets of 60% of the weights
//            per process (no process holds the model; together they do), and greedy decoding of T
//            tokens on every process, the hidden states passing point to point;
//   single   process 0 alone loads the whole model in memory and decodes the same T tokens.
// Each row prints the median of N decodes (tokens/s after the prompt), the load time, and for the
// split the bytes that crossed per token. The tokens of both must agree (exit 1 otherwise).
// A pipeline of one sequence has no parallelism to gain: the split is there to fit, and the cost
// it adds (a transfer per boundary, a logits broadcast per token) is what this measures.
// Alone (one process) it says it needs mpirun and exits 0.
#include <accel/accel.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fs = std::filesystem;
using namespace accel;

namespace {

const char* const kConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8192, "hidden_size": 1024,
  "intermediate_size": 2816, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 8,
  "max_position_embeddings": 512, "tie_word_embeddings": false, "torch_dtype": "float32"
})";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::int64_t tokens = 32;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--tokens") == 0) tokens = std::max(1, std::atoi(argv[i + 1]));
  }
  const dist::PartialState<policy::multi_cpu<>> state;
  const int n = state.num_processes();
  if (n < 2) {
    std::printf("%s compares a model split across processes with one process and needs several: mpirun -np 2 %s\n",
                argv[0], argv[0]);
    return 0;
  }
  const bool main_process = state.is_main_process();
  const fs::path folder = fs::temp_directory_path() / "accel_bench_split_model";
  double weights = 0;
  state.main_process_first([&] {
    if (main_process) {
      fs::remove_all(folder);
      fs::create_directories(folder);
      std::ofstream(folder / "config.json") << kConfig;
      auto source = models::model_from_hf_config(nlohmann::json::parse(kConfig), DType::f32);
      io::StateDict sd;
      set_seed(0);
      for (const auto& [name, t] : source->state_dict()) {
        if (!name.ends_with("inv_freq")) sd.insert_or_assign(name, randn(t.shape(), t.dtype()));
      }
      io::save(sd, (folder / "model.safetensors").string(), /*safe_serialization=*/true);
    }
    return 0;
  });
  for (const auto& [name, t] : [] {
         auto scope = nn::init_empty_weights(false);
         return models::causal_lm_from_hf_config(nlohmann::json::parse(kConfig));
       }()->module().state_dict()) {
    if (!name.ends_with("inv_freq")) weights += static_cast<double>(t.nbytes());
  }
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 17, 42, 7, 99, 5, 3, 11}, Shape{1, 8});
  const models::GenerationConfig g{.max_new_tokens = tokens, .ignore_eos = true};

  // Split: every process.
  dist::SplitLoadOptions so;
  so.max_memory = plan::MaxMemory{{Placement::cpu(), ByteSize(static_cast<std::int64_t>(0.6 * weights) + (64 << 20))}};
  auto t0 = std::chrono::steady_clock::now();
  auto m = dist::load_pretrained_split(state, folder, {.reserve = {{Placement::cpu(), ByteSize(64 << 20)}}}, so);
  const double split_load = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> split_rates;
  std::vector<std::int64_t> split_tokens;
  m.stages.reset_stats();
  for (int r = 0; r < reps; ++r) {
    const auto out = models::generate(*m.model.model, ids, g);
    split_rates.push_back(out.tokens_per_second());
    split_tokens = out.new_tokens.front();
  }
  const dist::PipelineStats stats = m.stages.stats();
  std::vector<int> owners;
  for (const auto& [name, p] : m.split_map) owners.push_back(p.rank);
  m = {};
  state.wait_for_everyone();

  int status = 0;
  if (main_process) {
    t0 = std::chrono::steady_clock::now();
    auto whole = dispatch::load_pretrained_causal_lm(folder);
    const double single_load = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> single_rates;
    std::vector<std::int64_t> single_tokens;
    for (int r = 0; r < reps; ++r) {
      const auto out = models::generate(*whole.model, ids, g);
      single_rates.push_back(out.tokens_per_second());
      single_tokens = out.new_tokens.front();
    }
    const double per_token = static_cast<double>(stats.bytes_sent + stats.bytes_received) / (static_cast<double>(reps) * tokens);
    std::printf("LLaMA 8 x 1024, %.0f MB f32, %lld new tokens after 8, median of %d decodes, OMP_NUM_THREADS=%s\n",
                weights / 1e6, static_cast<long long>(tokens), reps, std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset");
    std::printf("  %-44s  %10s  %8s\n", "", "tokens/s", "load s");
    std::printf("  %-44s  %10.1f  %8.3f   (%zu stage transfers, %.1f KB crossed per token on process 0)\n",
                ("split across " + std::to_string(n) + " processes (60% of the weights each)").c_str(),
                median(split_rates), split_load, stats.transfers, per_token / 1e3);
    std::printf("  %-44s  %10.1f  %8.3f\n", "one process, whole model in memory", median(single_rates), single_load);
    std::printf("  split / single: %.2fx\n", median(split_rates) / median(single_rates));
    std::printf("  tokens %s\n", split_tokens == single_tokens ? "identical" : "DIFFER");
    if (split_tokens != single_tokens) status = 1;
    fs::remove_all(folder);
  }
  state.wait_for_everyone();
  return status;
}

// A model too big for one process's budget, split across processes, launched with mpirun:
//
//   mpirun -np 2 ./split_model          (alone: one process, 70% of the weights in memory, the rest
//                                        read from disk)
//
// Process 0 writes a small LLaMA checkpoint (random weights, seeded) into a folder every process
// reads. Each process gives a CPU budget of 70% of the weights: no process can hold the model, two
// can. load_pretrained_split gathers the budgets, plans the split, and each process loads only its
// blocks; generate then runs on every process, the hidden states passing from one to the next.
// Process 0 then loads the whole model alone and checks that the tokens are the same, and every
// process checks that it holds no more than its budget. Exits 1 on any difference.
#include <accel/accel.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace accel;

namespace {

const char* const kConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 128,
  "intermediate_size": 352, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 256, "tie_word_embeddings": false, "torch_dtype": "float32"
})";

/// Bytes of the tensors that hold data in this process (inv_freq is computed, in no checkpoint).
double resident_bytes(nn::Module& model) {
  double b = 0;
  for (const auto& [name, t] : model.state_dict()) {
    if (!t.is_meta() && !name.ends_with("inv_freq")) b += static_cast<double>(t.nbytes());
  }
  return b;
}

}  // namespace

int main() {
  const dist::PartialState<policy::multi_cpu<>> state;
  const int rank = state.process_index(), n = state.num_processes();
  const fs::path folder = fs::temp_directory_path() / "accel_split_model_example";

  // 0. Process 0 writes the checkpoint; the others wait for it.
  double weights = 0;
  state.main_process_first([&] {
    if (state.is_main_process()) {
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
  {
    auto meta = [] {
      auto scope = nn::init_empty_weights(false);
      return models::causal_lm_from_hf_config(nlohmann::json::parse(kConfig));
    }();
    for (const auto& [name, t] : meta->module().state_dict()) {
      if (!name.ends_with("inv_freq")) weights += static_cast<double>(t.nbytes());  // meta tensors know their size
    }
  }

  // 1. Each process's budget: 70% of the weights, with room for what generation needs.
  const ByteSize budget(static_cast<std::int64_t>(0.7 * weights));
  const ByteSize running(4 << 20);
  dist::SplitLoadOptions so;
  so.max_memory = plan::MaxMemory{{Placement::cpu(), budget + running}};
  auto m = dist::load_pretrained_split(state, folder, {.reserve = {{Placement::cpu(), running}}}, so);
  const double held = resident_bytes(m.model.model->module());
  if (rank == 0) {
    std::printf("split across %d process(es):\n", n);
    for (const auto& [name, p] : m.split_map) std::printf("  %-22s %s\n", name.c_str(), p.str().c_str());
  }

  // 2. Generate on every process, with the same prompt.
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 17, 42, 7, 99}, Shape{1, 5});
  const auto gen = models::generate(*m.model.model, ids, {.max_new_tokens = 16, .ignore_eos = true});
  const std::vector<std::int64_t>& tokens = gen.new_tokens.front();
  std::printf("process %d holds %.0f of %.0f weight bytes (budget %.0f); %zu tokens, %.1f tokens/s\n", rank, held,
              weights, budget.bytes(), tokens.size(), gen.tokens_per_second());
  bool ok = held <= budget.bytes();
  if (!ok) std::printf("process %d: FAILED, it holds more than its budget\n", rank);

  // 3. Process 0 checks the tokens against the whole model in one process.
  if (rank == 0) {
    auto whole = dispatch::load_pretrained_causal_lm(folder);
    const auto ref = models::generate(*whole.model, ids, {.max_new_tokens = 16, .ignore_eos = true});
    const bool same = ref.new_tokens.front() == tokens;
    std::printf("tokens %s the single-process run's\n", same ? "are" : "DIFFER from");
    ok = ok && same;
  }
  state.wait_for_everyone();
  if (rank == 0) fs::remove_all(folder);
  return ok ? 0 : 1;
}

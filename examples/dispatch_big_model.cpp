// A model larger than its CPU budget: built on meta, then loaded and dispatched in one call.
//
//   { auto scope = nn::init_empty_weights(); lm = causal_lm_from_hf_config(config); }   no weight bytes
//   load_checkpoint_and_dispatch(lm->module(), folder, {.device_map = "auto", .max_memory = ...})
//
// A small random LLaMA is saved to a temporary folder as sharded safetensors. The CPU may hold
// half of it; the planner also keeps room there for the largest block it brings in, so the first
// blocks stay on the CPU and the rest go to disk, read from the shards at each call and dropped
// after (the offload folder gets only an index pointing into the shards). The weights resident on
// the CPU must fit the budget, and generation must give the logits and tokens of the same
// checkpoint loaded without a budget, bit for bit.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/dispatch/big_modeling.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/sharding.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/utils/random.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

// 4 decoder layers of ~0.7 MB each in f32: big enough for a split, small enough to write in a blink.
const char* const kConfig = R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 128,
  "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 128, "tie_word_embeddings": false, "torch_dtype": "float32"})";

// Random matrices at 0.05 (norms stay at one) keep activations in range, so the tokens vary.
void save_random_checkpoint(const fs::path& folder) {
  auto lm = models::causal_lm_from_hf_config(nlohmann::json::parse(kConfig));
  set_seed(0);
  io::StateDict sd;
  for (const auto& [name, p] : lm->module().state_dict()) {
    sd.insert_or_assign(name, p.dim() == 2 ? ops::mul(randn(p.shape()), Tensor::full({}, 0.05)) : p);
  }
  io::save_sharded(sd, folder.string(), std::string("1MB"));  // shards and model.safetensors.index.json
  std::ofstream(folder / "config.json") << kConfig;            // what load_pretrained_causal_lm reads
}

}  // namespace

int main() try {
  const fs::path dir = fs::temp_directory_path() / ("accel_dispatch_big_model_" + std::to_string(::getpid()));
  struct Cleanup {
    fs::path p;
    ~Cleanup() { std::error_code ec; fs::remove_all(p, ec); }
  } cleanup{dir};
  const fs::path checkpoint = dir / "checkpoint", offload = dir / "offload";
  save_random_checkpoint(checkpoint);

  // The skeleton: shapes and dtypes only. Buffers (RoPE tables) stay real, as in Accelerate.
  std::shared_ptr<models::CausalLM> lm;
  {
    auto scope = nn::init_empty_weights();
    lm = models::causal_lm_from_hf_config(nlohmann::json::parse(kConfig));
  }
  nn::Module& model = lm->module();
  std::int64_t total = 0;
  for (const auto& [name, p] : model.named_parameters()) total += static_cast<std::int64_t>(p.nbytes());

  // Half the weights may live on the CPU; the rest goes to disk. Blocks are never split.
  MaxMemory max_memory;
  max_memory.add(Placement::cpu(), ByteSize(total / 2));
  max_memory.add(Placement::disk(), ByteSize(std::int64_t{1} << 40));
  DeviceMap device_map;
  load_checkpoint_and_dispatch(model, checkpoint.string(),
                               {.device_map = std::string("auto"), .max_memory = max_memory,
                                .no_split_module_classes = model.no_split_modules(),
                                .offload_folder = offload.string(), .show_progress = false},
                               &device_map);
  std::printf("%.2f MiB of weights, %.2f MiB allowed on the cpu; device map:\n", total / 1048576.0, total / 2 / 1048576.0);
  int on_cpu = 0, on_disk = 0;
  for (const auto& [module, placement] : device_map) {
    std::printf("  %-22s %s\n", module.c_str(), placement.str().c_str());
    (placement.is_disk() ? on_disk : on_cpu) += 1;
  }
  // Between calls the disk blocks' parameters are on meta: what is left is what the CPU holds.
  std::int64_t resident = 0;
  for (const auto& [name, p] : model.named_parameters()) resident += p.is_meta() ? 0 : static_cast<std::int64_t>(p.nbytes());
  const bool in_budget = resident <= total / 2;
  std::printf("weights resident on the cpu: %.2f MiB (%s the budget)\n", resident / 1048576.0,
              in_budget ? "within" : "OVER");

  // Greedy decoding; the disk blocks' weights come in per call (read ahead by prefetch<2>).
  const Tensor prompt = Tensor::from_vector(std::vector<std::int64_t>{1, 17, 42, 99, 7}, Shape{1, 5});
  const models::GenerationConfig greedy{.max_new_tokens = 8, .ignore_eos = true};
  const auto logits = lm->logits(prompt).to_vector<float>();
  const auto tokens = models::generate(*lm, prompt, greedy).new_tokens[0];

  // The reference: the same folder loaded plainly, every weight on the CPU.
  auto plain = dispatch::load_pretrained_causal_lm(checkpoint, {.show_progress = false});
  const auto plain_logits = plain.model->logits(prompt).to_vector<float>();
  const auto plain_tokens = models::generate(*plain.model, prompt, greedy).new_tokens[0];

  std::printf("tokens (dispatched):");
  for (auto t : tokens) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\ntokens (plain):     ");
  for (auto t : plain_tokens) std::printf(" %lld", static_cast<long long>(t));
  const bool same = logits == plain_logits && tokens == plain_tokens;
  std::printf("\n%zu logits and %zu tokens %s\n", logits.size(), tokens.size(), same ? "identical" : "DIFFER");
  if (on_cpu == 0 || on_disk == 0) std::printf("expected both cpu and disk placements\n");
  return same && in_budget && on_cpu > 0 && on_disk > 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dispatch_big_model: %s\n", e.what());
  return 1;
}

// Whole-model disk offload: the weights are written once to an offload folder (one .dat file per
// tensor and an index.json, the layout Accelerate writes and reads), then each decoder block reads
// its own for its call and lets them go after.
//
//   disk_offload(model, "offload/", {.execution_device = Device::cpu()});   then call the model
//
// The default policy, prefetch<2>, reads the next two blocks while one computes, into a ring of
// three block-sized buffers allocated once; disk_offload<policy::sync_offload> is Accelerate's
// read-when-called. Either way the model must give the logits and tokens it gave from memory, and
// the memory it holds between calls is the ring, not the weights.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/utils/random.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

const char* const kConfig = R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 128,
  "intermediate_size": 352, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 128, "tie_word_embeddings": false})";

// Random matrices at 0.05 (norms stay at one) keep activations in range, so the tokens vary.
std::shared_ptr<models::CausalLM> random_llama() {
  auto lm = models::causal_lm_from_hf_config(nlohmann::json::parse(kConfig));
  set_seed(0);
  for (const auto& [name, p] : lm->module().named_parameters()) {
    if (p.dim() == 2) Tensor(p).copy_(ops::mul(randn(p.shape()), Tensor::full({}, 0.05)));
  }
  return lm;
}

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main() try {
  const fs::path folder = fs::temp_directory_path() / ("accel_disk_offload_" + std::to_string(::getpid()));
  struct Cleanup {
    fs::path p;
    ~Cleanup() { std::error_code ec; fs::remove_all(p, ec); }
  } cleanup{folder};

  auto lm = random_llama();
  const Tensor prompt = Tensor::from_vector(std::vector<std::int64_t>{3, 141, 59, 26, 53}, Shape{1, 5});
  const models::GenerationConfig greedy{.max_new_tokens = 8, .ignore_eos = true};
  const auto before_logits = lm->logits(prompt).to_vector<float>();
  const auto before_tokens = models::generate(*lm, prompt, greedy).new_tokens[0];
  std::size_t weight_bytes = 0;
  for (const auto& [name, p] : lm->module().named_parameters()) weight_bytes += p.nbytes();
  const std::size_t held_before = memory_stats(Device::cpu()).allocated_bytes;

  disk_offload(lm->module(), folder.string(), {.execution_device = Device::cpu()});
  const std::size_t held_after = memory_stats(Device::cpu()).allocated_bytes;

  // The index: one entry per tensor with its numpy dtype and shape; the bytes are in <name>.dat.
  const auto index = nlohmann::ordered_json::parse(std::ifstream(folder / "index.json"));
  std::size_t dat_files = 0;
  for (const auto& entry : fs::directory_iterator(folder)) dat_files += entry.path().extension() == ".dat";
  std::printf("%s: %zu entries, %zu .dat files; the first three:\n", (folder / "index.json").c_str(), index.size(),
              dat_files);
  int shown = 0;
  for (const auto& [name, entry] : index.items()) {
    if (shown++ == 3) break;
    std::printf("  \"%s\": %s\n", name.c_str(), entry.dump().c_str());
  }

  reset_peak_memory_stats(Device::cpu());
  const auto after_logits = lm->logits(prompt).to_vector<float>();
  const auto after_tokens = models::generate(*lm, prompt, greedy).new_tokens[0];
  std::printf("cpu memory held: %.2f MiB with the weights in memory, %.2f MiB once offloaded "
              "(peak while generating %.2f MiB)\n",
              mib(held_before), mib(held_after), mib(memory_stats(Device::cpu()).peak_allocated_bytes));
  // Offloading is only worth it if the weights' memory is given back (all of it but a rounding).
  const bool released = held_after + weight_bytes * 9 / 10 <= held_before;
  if (!released) std::printf("the %.2f MiB of weights are still held in memory\n", mib(weight_bytes));

  std::printf("tokens before:");
  for (auto t : before_tokens) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\ntokens after: ");
  for (auto t : after_tokens) std::printf(" %lld", static_cast<long long>(t));
  const bool same = before_logits == after_logits && before_tokens == after_tokens;
  std::printf("\nlogits and tokens %s\n", same ? "identical" : "DIFFER");
  const bool files_ok = dat_files == index.size() && index.size() == lm->module().state_dict().size();
  return same && files_ok && released ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "disk_offload: %s\n", e.what());
  return 1;
}

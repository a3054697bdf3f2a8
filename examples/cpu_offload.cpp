// Whole-model CPU offload: the weights live in a CPU state dict, and each module's hook brings its
// own into the execution device for its call and parks them (on meta) after.
//
//   cpu_offload(model, {.execution_device = Device::cuda(0)});   then call the model as usual
//
// On a GPU this is how a model bigger than the card runs: the card only ever holds the module
// being computed. On a CPU-only machine the execution device is the CPU itself; nothing is gained
// in memory there, but the hooks and the call path are the same, which is what this checks: the
// offloaded model gives the logits and tokens it gave before, bit for bit.
#include <cstdio>
#include <vector>

#include "accel/dispatch/big_modeling.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/utils/random.hpp"

using namespace accel;

namespace {

const char* const kConfig = R"({"model_type": "gpt2", "vocab_size": 256, "n_embd": 128, "n_layer": 3,
  "n_head": 4, "n_positions": 64})";

// Random matrices at 0.05 (biases at zero, norms at one): tokens that vary, activations in range.
std::shared_ptr<models::CausalLM> random_gpt2() {
  auto lm = models::causal_lm_from_hf_config(nlohmann::json::parse(kConfig));
  set_seed(0);
  for (const auto& [name, p] : lm->module().named_parameters()) {
    if (p.dim() == 2) Tensor(p).copy_(ops::mul(randn(p.shape()), Tensor::full({}, 0.05)));
  }
  return lm;
}

/// Parameters holding bytes in the module tree (not parked on meta).
std::size_t resident_parameters(const nn::Module& m) {
  std::size_t n = 0;
  for (const auto& [name, t] : m.named_parameters()) n += t.is_meta() ? 0 : 1;
  return n;
}

}  // namespace

int main() try {
  auto lm = random_gpt2();
  nn::Module& model = lm->module();
  const Tensor prompt = Tensor::from_vector(std::vector<std::int64_t>{5, 81, 13, 200, 64, 9}, Shape{1, 6});
  const models::GenerationConfig greedy{.max_new_tokens = 8, .ignore_eos = true};
  const auto before_logits = lm->logits(prompt).to_vector<float>();
  const auto before_tokens = models::generate(*lm, prompt, greedy).new_tokens[0];

  const std::size_t resident = resident_parameters(model);
  cpu_offload(model, {.execution_device = Device::cpu()});
  // The module tree now holds shapes only; the bytes sit in the hooks' state dict.
  const std::size_t parked = resident - resident_parameters(model);
  std::printf("after cpu_offload: %zu of %zu parameters parked on meta between calls\n", parked, resident);

  const auto after_logits = lm->logits(prompt).to_vector<float>();
  const auto after_tokens = models::generate(*lm, prompt, greedy).new_tokens[0];
  std::printf("after a forward and a generate: %zu parameters resident; execution device %s\n",
              resident_parameters(model), model.execution_device().str().c_str());

  std::printf("tokens before:");
  for (auto t : before_tokens) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\ntokens after: ");
  for (auto t : after_tokens) std::printf(" %lld", static_cast<long long>(t));
  const bool same = before_logits == after_logits && before_tokens == after_tokens;
  std::printf("\nlogits and tokens %s\n", same ? "identical" : "DIFFER");
  // Every parameter parked again once the calls are done: none left behind on the device.
  const bool parked_ok = parked == resident && resident_parameters(model) == 0;
  return same && parked_ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cpu_offload: %s\n", e.what());
  return 1;
}

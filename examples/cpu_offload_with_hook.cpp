// A pipeline of three models that never share the execution device: Accelerate's
// cpu_offload_with_hook, as diffusion pipelines use it (text encoder -> unet -> vae).
//
//   auto [a, hook_a] = cpu_offload_with_hook(model_a, device);
//   auto [b, hook_b] = cpu_offload_with_hook(model_b, device, hook_a);   calling b first sends a back
//   auto [c, hook_c] = cpu_offload_with_hook(model_c, device, hook_b);
//   ... a(x), b(y), c(z) ...;  hook_c->offload();                       the last one goes back by hand
//
// Each model moves whole to the execution device when called and stays there for as many calls
// as it gets; the next model's hook sends it back to the CPU. Here the three models are small
// causal LMs chained through their greedy tokens. The execution device is the first GPU when
// there is one: then the checks below see one model at a time on the card, and the card's memory
// counters show one model's bytes (plus the logits kept). On a CPU-only machine the execution device is the CPU itself,
// so every model is always "there": the hooks and the chaining run the same, and the outputs are
// checked against running each model by hand (move in, call, move out).
#include <cstdio>
#include <string>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/ops/argmax.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/utils/random.hpp"

using namespace accel;

namespace {

// Three families and sizes, one vocabulary, so that one model's tokens are the next one's input.
const char* const kConfigs[] = {
    R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 176,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64})",
    R"({"model_type": "gpt2", "vocab_size": 256, "n_embd": 128, "n_layer": 3, "n_head": 4, "n_positions": 64})",
    R"({"model_type": "qwen2", "vocab_size": 256, "hidden_size": 96, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64})"};

std::shared_ptr<models::CausalLM> random_model(const char* config, std::uint64_t seed) {
  auto lm = models::causal_lm_from_hf_config(nlohmann::json::parse(config));
  set_seed(seed);
  for (const auto& [name, p] : lm->module().named_parameters()) {
    if (p.dim() == 2) Tensor(p).copy_(ops::mul(randn(p.shape()), Tensor::full({}, 0.05)));
  }
  return lm;
}

/// True when every parameter of `m` is on `d`.
bool all_on(const nn::Module& m, Device d) {
  for (const auto& [name, p] : m.named_parameters()) {
    if (p.device() != d) return false;
  }
  return true;
}

}  // namespace

int main() try {
  const Device device = hooks::default_execution_device();
  std::vector<std::shared_ptr<models::CausalLM>> ms;
  for (std::uint64_t i = 0; i < 3; ++i) ms.push_back(random_model(kConfigs[i], i));
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{12, 250, 7, 33, 190, 64, 2}, Shape{1, 7});

  // By hand, what the hooks automate: move a model in, call it, move it out. Each model's greedy
  // token at every position is the next model's input.
  Tensor x = ids, expected;
  for (auto& m : ms) {
    m->module().to(device);
    expected = m->logits(x.to(device));
    m->module().to(Device::cpu());
    x = ops::argmax(expected, -1);
  }

  std::vector<std::shared_ptr<hooks::UserCpuOffloadHook>> handles;
  std::shared_ptr<hooks::UserCpuOffloadHook> prev;
  for (auto& m : ms) {
    auto [model, hook] = cpu_offload_with_hook(m->module(), device, prev);
    handles.push_back(hook);
    prev = hook;
  }

  std::printf("execution device: %s%s\n", device.str().c_str(),
              device.is_cpu() ? " (no GPU: the models never leave it, so the placement checks are trivial)" : "");
  // With the hooks: call the models as if each had the device to itself.
  bool one_at_a_time = true;
  const char* names = "ABC";
  Tensor got;
  x = ids;
  for (std::size_t stage = 0; stage < ms.size(); ++stage) {
    got = ms[stage]->logits(x);
    x = ops::argmax(got, -1);
    std::printf("after %c:", names[stage]);
    for (std::size_t j = 0; j < ms.size(); ++j) {
      const Device want = j == stage ? device : Device::cpu();
      const bool ok = all_on(ms[j]->module(), want);
      one_at_a_time &= ok;
      std::printf("  %c on %s%s", names[j], want.str().c_str(), ok ? "" : " (NOT)");
    }
    if (!device.is_cpu()) std::printf("  [%s holds %zu bytes]", device.str().c_str(), memory_stats(device).allocated_bytes);
    std::printf("\n");
  }
  // Nothing follows C to send it back: that is the caller's job.
  handles.back()->offload();
  const bool all_back = all_on(ms[0]->module(), Device::cpu()) && all_on(ms[1]->module(), Device::cpu()) &&
                        all_on(ms[2]->module(), Device::cpu());
  for (auto& h : handles) h->remove();

  const bool same = got.to(Device::cpu()).to_vector<float>() == expected.to(Device::cpu()).to_vector<float>();
  std::printf("after hook_c->offload(): every model on the cpu: %s\n", all_back ? "yes" : "NO");
  std::printf("pipeline output (%s logits) %s the models run by hand\n", got.shape().str().c_str(),
              same ? "identical to" : "DIFFERS from");
  return same && one_at_a_time && all_back ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cpu_offload_with_hook: %s\n", e.what());
  return 1;
}

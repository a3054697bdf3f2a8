// Quantize on load: a float checkpoint loaded into a model built on meta, every Linear turned into
// a quantized layer as its weight streams in: bitsandbytes (NF4 with double quantization, then
// LLM.int8) through Accelerate's load_and_quantize_model, then GGUF Q4_K blocks, TorchAO int4 and
// Quanto float8 through any loader's quantizer option.
//
//   auto guard = nn::init_empty_weights(false);  auto lm = causal_lm_from_hf_config(config);
//   load_and_quantize_model(lm->module(), {.load_in_4bit = true, .bnb_4bit_quant_type = nf4,
//                                          .bnb_4bit_use_double_quant = true}, "model.safetensors");
//   load_pretrained_causal_lm("model/", {.quantizer = quant::TorchAoQuantizer({.quant_type = "int4wo"})});
//
// The CPU never holds the float model: each weight is quantized and dropped before the next one
// arrives, so the peak is the quantized model plus one float tensor. The example writes a random
// LLaMA's checkpoint, loads it under each scheme, and prints the bytes held, the peak while
// loading and how far the logits moved from the float model's; it exits 1 when a peak passes that
// bound or the logits move further than the scheme's documented error (docs/layers/quant.md).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fstream>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"
#include "accel/utils/random.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

const char* const kConfig = R"({"model_type": "llama", "vocab_size": 512, "hidden_size": 256,
  "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 128, "tie_word_embeddings": false})";

double mib(double bytes) { return bytes / (1 << 20); }

// ||got - want|| / ||want||: the logits' relative error.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    d += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    n += want[i] * static_cast<double>(want[i]);
  }
  return std::sqrt(d / n);
}

struct Scheme {
  const char* name;
  quant::BnbQuantizationConfig config;
  double bound;  ///< relative logits error allowed
};

}  // namespace

int main() try {
  const fs::path dir = fs::temp_directory_path() / ("accel_quantize_on_load_" + std::to_string(::getpid()));
  struct Cleanup {
    fs::path p;
    ~Cleanup() { std::error_code ec; fs::remove_all(p, ec); }
  } cleanup{dir};
  fs::create_directories(dir);
  const auto config = nlohmann::json::parse(kConfig);
  const Tensor prompt = Tensor::from_vector(std::vector<std::int64_t>{3, 141, 59, 26, 53, 58, 97}, Shape{1, 7});

  // 1. A float32 checkpoint of a random LLaMA, and its logits as the reference.
  std::vector<float> want;
  double float_bytes = 0, largest = 0;
  {
    auto lm = models::causal_lm_from_hf_config(config);
    set_seed(0);
    io::StateDict sd;
    for (const auto& [name, p] : lm->module().named_parameters()) {
      if (p.dim() == 2) Tensor(p).copy_(ops::mul(randn(p.shape()), Tensor::full({}, 0.05)));
      sd.insert_or_assign(name, p);
      float_bytes += static_cast<double>(p.nbytes());
      largest = std::max(largest, static_cast<double>(p.nbytes()));
    }
    io::save_file(sd, (dir / "model.safetensors").string(), {{"format", "pt"}});
    std::ofstream(dir / "config.json") << config.dump();
    want = lm->logits(prompt).to_vector<float>();
  }
  std::printf("checkpoint: %s, %.2f MiB of float32 weights (largest tensor %.2f MiB); the float layers kept (embedding, "
              "head, norms) stay views of the mapped file, so what is allocated is the quantized layers\n",
              (dir / "model.safetensors").c_str(), mib(float_bytes), mib(largest));

  const Scheme schemes[] = {
      {"nf4 + double quantization",
       {.load_in_4bit = true, .bnb_4bit_quant_type = quant::BnbQuantType::nf4, .bnb_4bit_use_double_quant = true,
        .bnb_4bit_compute_dtype = DType::f32},
       0.41},  // the tests' bound for the tiny LLaMA; 0.32 measured here
      {"int8 (LLM.int8)", {.load_in_8bit = true, .torch_dtype = DType::f32}, 0.06},  // 0.041 measured here
  };
  bool ok = true;
  for (const Scheme& s : schemes) {
    // 2. The model on meta: shapes only. load_and_quantize_model swaps its layers, then loads.
    std::shared_ptr<models::CausalLM> lm;
    {
      auto guard = nn::init_empty_weights(false);
      lm = models::causal_lm_from_hf_config(config);
    }
    const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
    reset_peak_memory_stats(Device::cpu());
    const auto r = quant::load_and_quantize_model(lm->module(), s.config, (dir / "model.safetensors").string(),
                                                  {.show_progress = false});
    const double held = static_cast<double>(memory_stats(Device::cpu()).allocated_bytes - before);
    const double peak = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes - before);
    const double err = relative_error(lm->logits(prompt).to_vector<float>(), want);
    // The promise: the quantized model plus one float tensor (and its converted copy) at a time.
    const bool peak_ok = peak <= held + 2 * largest;
    std::printf("%-26s %zu layers swapped, %.2f MiB allocated, peak while loading %.2f MiB%s, logits relative "
                "error %.4f (bound %.3f)\n",
                s.name, r.swapped, mib(held), mib(peak), peak_ok ? "" : " OVER THE BOUND", err, s.bound);
    ok = ok && peak_ok && err < s.bound && r.load.missing_keys.empty() && r.swapped == 4 * 7;
  }

  // 3. Any backend through the loader's quantizer option: the same promise on the peak.
  struct Other {
    const char* name;
    AnyQuantizer q;
    double bound;
  };
  const Other others[] = {
      // Bounds over what was measured here (0.227, 0.377, 0.105): four random blocks amplify the error.
      // down_proj (704 inputs) is not whole Q4_K blocks of 256 and stays float.
      {"GGUF Q4_K blocks", quant::GgufQuantizer({.compute_dtype = DType::f32, .quant_type = io::GgmlType::q4_k}), 0.30},
      {"TorchAO int4, groups of 128", quant::TorchAoQuantizer({.quant_type = "int4wo"}), 0.45},
      {"Quanto float8", quant::QuantoQuantizer({.weights_dtype = "float8"}), 0.15},
  };
  for (const Other& o : others) {
    const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
    reset_peak_memory_stats(Device::cpu());
    auto p = dispatch::load_pretrained_causal_lm(dir.string(), {.dtype = DType::f32, .show_progress = false, .quantizer = o.q});
    const double held = static_cast<double>(memory_stats(Device::cpu()).allocated_bytes - before);
    const double peak = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes - before);
    const double err = relative_error(p.model->logits(prompt).to_vector<float>(), want);
    const bool peak_ok = peak <= held + 2 * largest;
    std::printf("%-28s %.2f MiB allocated, peak while loading %.2f MiB%s, logits relative error %.4f (bound %.3f)\n",
                o.name, mib(held), mib(peak), peak_ok ? "" : " OVER THE BOUND", err, o.bound);
    ok = ok && peak_ok && err < o.bound && p.load.missing_keys.empty();
  }
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "quantize_on_load: %s\n", e.what());
  return 1;
}

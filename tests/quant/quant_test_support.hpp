// What the quantizers' tests share: the reference model folders, the RMS relative error they bound
// logits with, and a one-block LLaMA checkpoint with random weights whose rows are whole Q4_K
// super-blocks (256; the reference models' rows are 32 to 128 wide).
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../temp_dir.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/utils/random.hpp"

namespace accel_test {

/// tests/data/models/<name>.
inline std::filesystem::path model_dir(const std::string& name) {
  return std::filesystem::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / name;
}

/// RMS of got - want relative to the RMS of want.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

/// Writes config.json and model.safetensors (float32, weights at 0.05 * N(0, 1), seed 0) into
/// dir/name and returns that folder.
inline std::filesystem::path write_random_llama(const TempDir& dir, const std::string& name) {
  using namespace accel;
  const nlohmann::json config = {{"model_type", "llama"}, {"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 64},
                                 {"hidden_size", 256}, {"intermediate_size", 512}, {"num_hidden_layers", 1},
                                 {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                 {"max_position_embeddings", 64}, {"tie_word_embeddings", false}};
  auto lm = models::causal_lm_from_hf_config(config);
  set_seed(0);
  for (const auto& [n, p] : lm->module().named_parameters()) {
    if (p.dim() == 2) Tensor(p).copy_(ops::mul(randn(p.shape()), Tensor::full({}, 0.05)));
  }
  const std::filesystem::path out = dir.file(name);
  std::filesystem::create_directories(out);
  io::save_file(lm->module().state_dict(), (out / "model.safetensors").string());
  std::ofstream(out / "config.json") << config.dump();
  return out;
}

}  // namespace accel_test

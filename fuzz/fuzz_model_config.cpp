// Fuzz target: the JSON files that describe a model rather than hold its weights: a model spec
// (nn::module_from_spec), a transformers config.json (LLaMA family, GPT-2, with rope scaling) and
// the quantization_config objects of bitsandbytes, Quanto and TorchAO.
//
// The first byte picks the reader, the rest is the JSON text. Accepted input must obey what the
// readers promise: a spec builds a meta tree no deeper than limits::max_module_depth whose
// parameter names are unique; a config's counts lie in [1, limit] and its rotary frequencies are
// finite for the head dim it implies. Rejected input must be an accel::Error, never a crash, a
// stack overflow from nesting, or unbounded memory from a count. An accepted quantization config
// passes its own validate() and reads back from its to_json() as the same JSON.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/core/limits.hpp"
#include "accel/models/hf_config.hpp"
#include "accel/models/rope.hpp"
#include "accel/nn/spec.hpp"
#include "accel/quant/config/bnb_config.hpp"
#include "accel/quant/config/quanto_config.hpp"
#include "accel/quant/config/torchao_config.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_spec(const nlohmann::json& j) {
  const auto model = accel::nn::module_from_spec(j, "fuzz-spec.json");
  std::set<std::string> names;
  for (const auto& [name, p] : model->named_parameters()) {
    check(names.insert(name).second);
    check(p.device().is_meta());
  }
  for (const auto& [name, m] : model->named_modules()) {
    std::size_t depth = name.empty() ? 0 : 1;
    for (char c : name) depth += c == '.';
    check(depth <= accel::limits::max_module_depth);
  }
}

// Every family's counts obey the same documented ranges (models/hf_config.hpp).
void check_counts(std::int64_t layers, std::int64_t heads, std::int64_t size) {
  namespace m = accel::models;
  check(layers >= 1 && layers <= m::max_config_layers);
  check(heads >= 1 && heads <= m::max_config_heads);
  check(size >= 1 && size <= m::max_config_size);
}

void check_llama(const nlohmann::json& j) {
  const auto c = accel::models::llama_config_from_json(j, "fuzz-config.json");
  check_counts(c.num_hidden_layers, c.num_attention_heads, c.hidden_size);
  check(c.num_key_value_heads >= 1 && c.num_key_value_heads <= c.num_attention_heads);
  const std::int64_t dim = c.resolved_head_dim();
  check(dim >= 1);
  const auto f = accel::models::rope_frequencies(c.rope_scaling, c.rope_theta, dim, c.max_position_embeddings);
  for (double x : f.inv_freq) check(std::isfinite(x));
}

void check_gpt2(const nlohmann::json& j) {
  const auto c = accel::models::gpt2_config_from_json(j, "fuzz-config.json");
  check_counts(c.n_layer, c.n_head, c.n_embd);
}

template <class Config>
void check_quant_config(const nlohmann::json& j) {
  const Config c = Config::from_json(j);
  c.validate();
  const nlohmann::json once = c.to_json();
  check(Config::from_json(once).to_json() == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  // The readers' own parse (read_json_file's bounds): a document they would refuse never
  // reaches the builders.
  nlohmann::json j;
  try {
    j = accel::parse_json_bounded(text, "fuzz.json", accel::file_json_limits);
  } catch (const accel::FormatError&) {
    return 0;
  }
  try {
    switch (data[0] % 6) {
      case 0: check_spec(j); break;
      case 1: check_llama(j); break;
      case 2: check_gpt2(j); break;
      case 3: check_quant_config<accel::quant::BitsAndBytesConfig>(j); break;
      case 4: check_quant_config<accel::quant::QuantoConfig>(j); break;
      default: check_quant_config<accel::quant::TorchAoConfig>(j); break;
    }
  } catch (const accel::Error&) {
  }
  return 0;
}

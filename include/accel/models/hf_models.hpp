// Models from a transformers config.json, with transformers' module and class names (so
// checkpoints' keys and no-split classes match).
//
//   auto guard = nn::init_empty_weights(true);
//   auto model = model_from_hf_config(json);                       // the causal LM, on meta
//   auto base = model_from_hf_config(json, DType::f32, HFModelKind::base);   // GPT2Model / LlamaModel
//   std::shared_ptr<CausalLM> lm = causal_lm_from_hf_config(json, DType::bf16, "model/config.json");
//                                  // a LlamaForCausalLM<policies<bf16>>: compiled for bf16
//
// model_type gpt2 builds GPT2LMHeadModel; llama, mistral and qwen2 build the LLaMA family
// (MistralForCausalLM, Qwen2ForCausalLM). Other types, and configs whose fields are missing the
// wrong type or out of range, raise an error naming `source` and the key.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/models/causal_lm.hpp"
#include "accel/models/gpt2.hpp"
#include "accel/models/hf_config.hpp"
#include "accel/models/llama.hpp"
#include "accel/nn/module.hpp"
#include "accel/policy/policies.hpp"

namespace accel::models {

/// Which transformers class a config.json is built as: the causal language model that checkpoints
/// are saved from (AutoModelForCausalLM: GPT2LMHeadModel, LlamaForCausalLM), or the bare decoder
/// without the LM head (AutoModel: GPT2Model, LlamaModel), which `accelerate estimate-memory` sizes.
enum class HFModelKind { causal_lm, base };

namespace detail {
inline std::string model_type_of(const nlohmann::json& j, const std::string& source) {
  detail::require_object(j, source);
  if (!j.contains("model_type")) throw FormatError(source + ": the key 'model_type' is missing");
  const std::string type = json_field_or<std::string, FormatError>(j, "model_type", "", source);
  if (type != "gpt2" && type != "llama" && type != "mistral" && type != "qwen2") {
    throw ValueError(source + ": model_type '" + type + "' is not supported (supported: gpt2, llama, mistral, qwen2)");
  }
  return type;
}
}  // namespace detail

/// The model of a config.json as a Module tree, the causal LM (default) or the base model, in the
/// instantiation compiled for `dtype`: policies<bf16> for bfloat16, policies<fp16> for float16,
/// the default bundle for float32 (policy::with_storage_precision). ValueError for another dtype.
inline std::shared_ptr<nn::Module> model_from_hf_config(const nlohmann::json& j, DType dtype = DType::f32,
                                                        HFModelKind kind = HFModelKind::causal_lm,
                                                        const std::string& source = "config.json") {
  const std::string type = detail::model_type_of(j, source);
  return policy::with_storage_precision(
      dtype,
      [&](auto precision) -> std::shared_ptr<nn::Module> {
        using P = precision_policies<decltype(precision)>;
        if (type == "gpt2") {
          const GPT2Config c = gpt2_config_from_json(j, source);
          if (kind == HFModelKind::base) return std::make_shared<GPT2Model<P>>(c, dtype);
          return std::make_shared<GPT2LMHeadModel<P>>(c, dtype);
        }
        const LlamaConfig c = llama_config_from_json(j, source);
        if (kind == HFModelKind::base) return std::make_shared<LlamaModel<P>>(c, dtype);
        return std::make_shared<LlamaForCausalLM<P>>(c, dtype);
      },
      source);
}

/// The causal LM of a config.json, behind the CausalLM interface: model_from_hf_config's causal LM,
/// the instantiation compiled for `dtype` (LlamaForCausalLM<policies<bf16>> for bfloat16,
/// <policies<fp16>> for float16, the default bundle for float32), so its forward computes in the
/// dtype its weights are held in and hands back float32 logits. ValueError for another dtype.
inline std::shared_ptr<CausalLM> causal_lm_from_hf_config(const nlohmann::json& j, DType dtype = DType::f32,
                                                          const std::string& source = "config.json") {
  // Every causal LM class model_from_hf_config builds is a CausalLM (models/causal_lm.hpp).
  return std::dynamic_pointer_cast<CausalLM>(model_from_hf_config(j, dtype, HFModelKind::causal_lm, source));
}

}  // namespace accel::models

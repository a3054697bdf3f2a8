// The bitsandbytes configurations: transformers' BitsAndBytesConfig (the "quantization_config" of a
// bnb checkpoint's config.json) and Accelerate's BnbQuantizationConfig (load_and_quantize_model).
//
//   BitsAndBytesConfig{.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4}
//   c.validate()                     post_init: ValueError listing what is allowed
//   c.to_json() / c.to_diff_json()   to_dict / to_diff_dict (keys sorted, as config.json has them)
//   BitsAndBytesConfig::from_json(j)
//   c.quantization_method()          "llm_int8", "fp4", "nf4" or ""
//   BnbQuantizationConfig{.load_in_8bit = true}, its validate / to_json / from_json,
//   torch_dtype_or_default(), to_bits_and_bytes_config()
//
// Reference: transformers' utils/quantization_config.py (BitsAndBytesConfig) and Accelerate's
// utils/dataclasses.py (BnbQuantizationConfig). Every Python TypeError is a ValueError here (the
// library's hierarchy has none), and each message lists the allowed values.
// Differences from transformers (BitsAndBytesConfig), each where it accepts a file it would drop
// or lets a bad value through to a later failure:
// - from_json reads "load_in_4bit" / "load_in_8bit", else the "_load_in_4bit" / "_load_in_8bit"
//   that to_dict also writes (transformers reads only the public keys and would silently load
//   a config that has only the private ones unquantized); disagreeing pairs are a ValueError.
// - bnb_4bit_quant_type must be "fp4" or "nf4" and bnb_4bit_compute_dtype float32, float16 or
//   bfloat16 (transformers checks only that they are a string and a torch.dtype); the threshold
//   must be finite and >= 0 (bitsandbytes refuses a negative one when it first runs), and an
//   integer JSON value is taken as a number (transformers asks for a Python float).
// - Keys it does not know are ignored, as transformers does (it logs them).
// Differences from Accelerate (BnbQuantizationConfig): from_json accepts "quant_method":
// "bitsandbytes" and the torch dtype names besides "fp32" / "fp16" / "bf16"; to_json writes the
// short names, so the JSON passes back into the dataclass's constructor.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/quant/config/config_json.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"

namespace accel::quant {

namespace detail {

inline void check_threshold(double t, const char* cls) {
  if (!std::isfinite(t) || t < 0.0) {
    throw ValueError(std::string(cls) + ": llm_int8_threshold must be a finite number >= 0 (0 turns the outlier "
                     "decomposition off; 6.0 is the default), got " + std::to_string(t));
  }
}

inline BnbQuantType quant_type_field(const nlohmann::json& j, const char* key, BnbQuantType fallback, const char* cls) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  const auto& v = j.at(key);
  const auto t = v.is_string() ? try_bnb_quant_type(v.get<std::string>()) : std::nullopt;
  if (!t) throw ValueError(std::string(cls) + ": " + key + " must be one of 'fp4', 'nf4', got " + v.dump());
  return *t;
}

/// A float dtype among float32 / float16 / bfloat16, by torch name (and Accelerate's short names
/// when `short_names`).
inline DType compute_dtype_from(const nlohmann::json& v, const char* key, const char* cls, bool short_names) {
  std::optional<DType> d;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (short_names && s == "fp32") d = DType::f32;
    else if (short_names && s == "fp16") d = DType::f16;
    else if (short_names && s == "bf16") d = DType::bf16;
    else d = try_dtype_from_string(s);
  }
  if (!d || (*d != DType::f32 && *d != DType::f16 && *d != DType::bf16)) {
    throw ValueError(std::string(cls) + ": " + key + " must be one of " +
                     (short_names ? "'fp32', 'fp16', 'bf16', " : "") + "'float32', 'float16', 'bfloat16', got " + v.dump());
  }
  return *d;
}

inline std::string short_dtype_name(DType d) {
  return d == DType::f16 ? "fp16" : d == DType::bf16 ? "bf16" : "fp32";
}

}  // namespace detail

/// transformers' BitsAndBytesConfig: how a model is (or was) quantized with bitsandbytes.
struct BitsAndBytesConfig {
  /// LLM.int8() (quant/formats/bnb_int8.hpp).
  bool load_in_8bit = false;
  /// FP4 / NF4 (quant/formats/bnb_4bit.hpp).
  bool load_in_4bit = false;
  /// LLM.int8()'s outlier threshold on activation magnitudes; 0 turns the decomposition off.
  double llm_int8_threshold = 6.0;
  /// Modules kept in floating point (null: the quantizer's default, the output head).
  std::optional<std::vector<std::string>> llm_int8_skip_modules{};
  /// Modules placed on the CPU stay float32 instead of being refused.
  bool llm_int8_enable_fp32_cpu_offload = false;
  /// Keep 16-bit main weights beside the int8 ones (fine-tuning).
  bool llm_int8_has_fp16_weight = false;
  /// The dtype a 4-bit layer computes in (transformers' default: float32).
  DType bnb_4bit_compute_dtype = DType::f32;
  /// fp4 (the default) or nf4.
  BnbQuantType bnb_4bit_quant_type = BnbQuantType::fp4;
  /// Quantize the 4-bit absmax again (8-bit dynamic map, blocks of 256).
  bool bnb_4bit_use_double_quant = false;
  /// The dtype whose storage holds the packed 4-bit bytes (uint8 unless sharded with FSDP).
  DType bnb_4bit_quant_storage = DType::u8;

  /// post_init and the constructor's checks.
  void validate() const {
    if (load_in_8bit && load_in_4bit) {
      throw ValueError("BitsAndBytesConfig: load_in_4bit and load_in_8bit are both true; choose one: load_in_8bit "
                       "(LLM.int8) or load_in_4bit (fp4 / nf4)");
    }
    detail::check_threshold(llm_int8_threshold, "BitsAndBytesConfig");
    if (bnb_4bit_compute_dtype != DType::f32 && bnb_4bit_compute_dtype != DType::f16 && bnb_4bit_compute_dtype != DType::bf16) {
      throw ValueError("BitsAndBytesConfig: bnb_4bit_compute_dtype must be one of 'float32', 'float16', 'bfloat16', got '" +
                       std::string(dtype_name(bnb_4bit_compute_dtype)) + "'");
    }
    switch (bnb_4bit_quant_storage) {
      case DType::f16: case DType::f32: case DType::i8: case DType::u8: case DType::f64: case DType::bf16: break;
      default:
        throw ValueError("BitsAndBytesConfig: bnb_4bit_quant_storage must be one of 'float16', 'float32', 'int8', "
                         "'uint8', 'float64', 'bfloat16', got '" + std::string(dtype_name(bnb_4bit_quant_storage)) + "'");
    }
  }

  bool is_quantizable() const noexcept { return load_in_8bit || load_in_4bit; }

  /// "llm_int8", "fp4", "nf4", or "" when nothing is quantized.
  std::string quantization_method() const {
    if (load_in_8bit) return "llm_int8";
    if (load_in_4bit) return std::string(bnb_quant_type_name(bnb_4bit_quant_type));
    return "";
  }

  /// to_dict: every field, with the private _load_in_* copies transformers writes and
  /// "quant_method": "bitsandbytes"; nlohmann keeps keys sorted, as config.json's sort_keys does.
  nlohmann::json to_json() const {
    return {{"quant_method", "bitsandbytes"},
            {"_load_in_8bit", load_in_8bit},
            {"_load_in_4bit", load_in_4bit},
            {"load_in_8bit", load_in_8bit},
            {"load_in_4bit", load_in_4bit},
            {"llm_int8_threshold", llm_int8_threshold},
            {"llm_int8_skip_modules", detail::modules_json(llm_int8_skip_modules)},
            {"llm_int8_enable_fp32_cpu_offload", llm_int8_enable_fp32_cpu_offload},
            {"llm_int8_has_fp16_weight", llm_int8_has_fp16_weight},
            {"bnb_4bit_quant_type", std::string(bnb_quant_type_name(bnb_4bit_quant_type))},
            {"bnb_4bit_use_double_quant", bnb_4bit_use_double_quant},
            {"bnb_4bit_compute_dtype", std::string(dtype_name(bnb_4bit_compute_dtype))},
            {"bnb_4bit_quant_storage", std::string(dtype_name(bnb_4bit_quant_storage))}};
  }

  /// to_diff_dict: the keys whose value differs from BitsAndBytesConfig{}'s.
  nlohmann::json to_diff_json() const {
    const auto all = to_json(), defaults = BitsAndBytesConfig{}.to_json();
    nlohmann::json diff = nlohmann::json::object();
    for (const auto& [k, v] : all.items()) {
      if (v != defaults.at(k)) diff[k] = v;
    }
    return diff;
  }

  /// Reads to_json's form (or a config.json's "quantization_config"), then validates.
  static BitsAndBytesConfig from_json(const nlohmann::json& j) {
    constexpr const char* cls = "BitsAndBytesConfig";
    if (!j.is_object()) throw ValueError("BitsAndBytesConfig: expected a JSON object, got " + j.dump());
    if (j.contains("quant_method")) {
      const auto& m = j.at("quant_method");
      if (!m.is_string() || !m.get<std::string>().starts_with("bitsandbytes")) {
        throw ValueError("BitsAndBytesConfig: quant_method must be 'bitsandbytes', got " + m.dump());
      }
    }
    BitsAndBytesConfig c;
    auto flag = [&](const char* pub, const char* priv) {
      const bool has_pub = j.contains(pub) && !j.at(pub).is_null(), has_priv = j.contains(priv) && !j.at(priv).is_null();
      const bool p = json_field_or<bool>(j, pub, false, cls), q = json_field_or<bool>(j, priv, false, cls);
      if (has_pub && has_priv && p != q) {
        throw ValueError(std::string("BitsAndBytesConfig: ") + pub + " and " + priv + " disagree");
      }
      return has_pub ? p : q;
    };
    c.load_in_8bit = flag("load_in_8bit", "_load_in_8bit");
    c.load_in_4bit = flag("load_in_4bit", "_load_in_4bit");
    c.llm_int8_threshold = json_field_or<double>(j, "llm_int8_threshold", c.llm_int8_threshold, cls);
    c.llm_int8_skip_modules = detail::modules_field(j, "llm_int8_skip_modules", cls);
    c.llm_int8_enable_fp32_cpu_offload =
        json_field_or<bool>(j, "llm_int8_enable_fp32_cpu_offload", c.llm_int8_enable_fp32_cpu_offload, cls);
    c.llm_int8_has_fp16_weight = json_field_or<bool>(j, "llm_int8_has_fp16_weight", c.llm_int8_has_fp16_weight, cls);
    c.bnb_4bit_quant_type = detail::quant_type_field(j, "bnb_4bit_quant_type", c.bnb_4bit_quant_type, cls);
    c.bnb_4bit_use_double_quant = json_field_or<bool>(j, "bnb_4bit_use_double_quant", c.bnb_4bit_use_double_quant, cls);
    if (j.contains("bnb_4bit_compute_dtype") && !j.at("bnb_4bit_compute_dtype").is_null()) {
      c.bnb_4bit_compute_dtype = detail::compute_dtype_from(j.at("bnb_4bit_compute_dtype"), "bnb_4bit_compute_dtype", cls, false);
    }
    if (j.contains("bnb_4bit_quant_storage") && !j.at("bnb_4bit_quant_storage").is_null()) {
      const auto& v = j.at("bnb_4bit_quant_storage");
      const auto d = v.is_string() ? try_dtype_from_string(v.get<std::string>()) : std::nullopt;
      if (!d) {
        throw ValueError("BitsAndBytesConfig: bnb_4bit_quant_storage must be one of 'float16', 'float32', 'int8', "
                         "'uint8', 'float64', 'bfloat16', got " + v.dump());
      }
      c.bnb_4bit_quant_storage = *d;
    }
    c.validate();
    return c;
  }
};

/// Accelerate's BnbQuantizationConfig: the options of load_and_quantize_model.
struct BnbQuantizationConfig {
  /// LLM.int8().
  bool load_in_8bit = false;
  /// Outlier threshold (8-bit only; Accelerate warns when it is changed for 4-bit).
  double llm_int8_threshold = 6.0;
  /// FP4 / NF4.
  bool load_in_4bit = false;
  BnbQuantType bnb_4bit_quant_type = BnbQuantType::fp4;
  bool bnb_4bit_use_double_quant = false;
  /// Accelerate's default is fp16 (transformers': float32).
  DType bnb_4bit_compute_dtype = DType::f16;
  /// The dtype of the layers left unquantized; nullopt: float16 for 8-bit, the compute dtype for
  /// 4-bit (torch_dtype_or_default).
  std::optional<DType> torch_dtype{};
  /// Modules not quantized, kept in torch_dtype.
  std::optional<std::vector<std::string>> skip_modules{};
  /// Modules not quantized, kept in float32.
  std::optional<std::vector<std::string>> keep_in_fp32_modules{};

  /// __post_init__'s checks.
  void validate() const {
    if (load_in_8bit && load_in_4bit) {
      throw ValueError("BnbQuantizationConfig: load_in_4bit and load_in_8bit can't both be true; choose load_in_8bit "
                       "(LLM.int8) or load_in_4bit (fp4 / nf4)");
    }
    if (!load_in_8bit && !load_in_4bit) {
      throw ValueError("BnbQuantizationConfig: load_in_4bit and load_in_8bit can't both be false; set load_in_8bit "
                       "(LLM.int8) or load_in_4bit (fp4 / nf4)");
    }
    detail::check_threshold(llm_int8_threshold, "BnbQuantizationConfig");
    for (const DType d : {bnb_4bit_compute_dtype, torch_dtype.value_or(DType::f32)}) {
      if (d != DType::f32 && d != DType::f16 && d != DType::bf16) {
        throw ValueError("BnbQuantizationConfig: bnb_4bit_compute_dtype and torch_dtype must be one of 'fp32', "
                         "'fp16', 'bf16', got '" + std::string(dtype_name(d)) + "'");
      }
    }
  }

  /// torch_dtype as __post_init__ resolves it.
  DType torch_dtype_or_default() const { return torch_dtype.value_or(load_in_8bit ? DType::f16 : bnb_4bit_compute_dtype); }

  /// Bits of a quantized weight: Accelerate's target_dtype (torch.int8 or CustomDtype.INT4).
  int target_bits() const noexcept { return load_in_8bit ? 8 : 4; }

  /// The dataclass's fields, dtypes by Accelerate's short names, torch_dtype resolved.
  nlohmann::json to_json() const {
    return {{"load_in_8bit", load_in_8bit},
            {"llm_int8_threshold", llm_int8_threshold},
            {"load_in_4bit", load_in_4bit},
            {"bnb_4bit_quant_type", std::string(bnb_quant_type_name(bnb_4bit_quant_type))},
            {"bnb_4bit_use_double_quant", bnb_4bit_use_double_quant},
            {"bnb_4bit_compute_dtype", detail::short_dtype_name(bnb_4bit_compute_dtype)},
            {"torch_dtype", detail::short_dtype_name(torch_dtype_or_default())},
            {"skip_modules", detail::modules_json(skip_modules)},
            {"keep_in_fp32_modules", detail::modules_json(keep_in_fp32_modules)}};
  }

  /// Reads to_json's form; an unknown key is a ValueError listing the fields (a dataclass's
  /// constructor refuses it too).
  static BnbQuantizationConfig from_json(const nlohmann::json& j) {
    constexpr const char* cls = "BnbQuantizationConfig";
    if (!j.is_object()) throw ValueError("BnbQuantizationConfig: expected a JSON object, got " + j.dump());
    static const std::vector<std::string> fields{"load_in_8bit", "llm_int8_threshold", "load_in_4bit",
                                                 "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
                                                 "bnb_4bit_compute_dtype", "torch_dtype", "skip_modules",
                                                 "keep_in_fp32_modules"};
    for (const auto& [k, v] : j.items()) {
      if (k == "quant_method" && v == "bitsandbytes") continue;
      if (std::find(fields.begin(), fields.end(), k) == fields.end()) {
        throw ValueError("BnbQuantizationConfig: unknown field '" + k + "'; its fields: " + detail::join_quoted(fields));
      }
    }
    BnbQuantizationConfig c;
    c.load_in_8bit = json_field_or<bool>(j, "load_in_8bit", false, cls);
    c.load_in_4bit = json_field_or<bool>(j, "load_in_4bit", false, cls);
    c.llm_int8_threshold = json_field_or<double>(j, "llm_int8_threshold", c.llm_int8_threshold, cls);
    c.bnb_4bit_quant_type = detail::quant_type_field(j, "bnb_4bit_quant_type", c.bnb_4bit_quant_type, cls);
    c.bnb_4bit_use_double_quant = json_field_or<bool>(j, "bnb_4bit_use_double_quant", false, cls);
    if (j.contains("bnb_4bit_compute_dtype") && !j.at("bnb_4bit_compute_dtype").is_null()) {
      c.bnb_4bit_compute_dtype = detail::compute_dtype_from(j.at("bnb_4bit_compute_dtype"), "bnb_4bit_compute_dtype", cls, true);
    }
    if (j.contains("torch_dtype") && !j.at("torch_dtype").is_null()) {
      c.torch_dtype = detail::compute_dtype_from(j.at("torch_dtype"), "torch_dtype", cls, true);
    }
    c.skip_modules = detail::modules_field(j, "skip_modules", cls);
    c.keep_in_fp32_modules = detail::modules_field(j, "keep_in_fp32_modules", cls);
    c.validate();
    return c;
  }

  /// The same choices as transformers' config (what a saved bnb folder's config.json carries).
  BitsAndBytesConfig to_bits_and_bytes_config() const {
    BitsAndBytesConfig b;
    b.load_in_8bit = load_in_8bit;
    b.load_in_4bit = load_in_4bit;
    b.llm_int8_threshold = llm_int8_threshold;
    b.llm_int8_skip_modules = skip_modules;
    b.bnb_4bit_compute_dtype = bnb_4bit_compute_dtype;
    b.bnb_4bit_quant_type = bnb_4bit_quant_type;
    b.bnb_4bit_use_double_quant = bnb_4bit_use_double_quant;
    return b;
  }
};

}  // namespace accel::quant

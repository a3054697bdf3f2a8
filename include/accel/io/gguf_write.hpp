// GGUF writer: metadata and tensors to a version-3 file that GgufFile (and llama.cpp) read back.
//
//   GgufWriter w;
//   w.add("general.architecture", gguf_string("llama"));
//   w.add_tensor("token_embd.weight", tensor);                   // F32 / F16 / BF16 / I8..I64 / F64
//   w.add_tensor_bytes("blk.0.attn_q.weight", GgmlType::q8_0, {4096, 4096}, bytes);  // ne order
//   w.save("model.gguf");                                        // atomic: a temporary, then rename
//
//   save_gguf_model(path, hf_config, named_tensors)   an HF LLaMA / Qwen2 / GPT-2 state dict as a GGUF
//                                                      model (names, Q/K row order, transposes and
//                                                      metadata as io/gguf_model.hpp reads them)
//
// Keys and tensor names must be unique, keys lower_snake_case ASCII segments separated by '.' and
// names at most 64 bytes, as the spec requires (ValueError); "general.alignment" is written when the
// alignment is not the default 32. Tensors follow each other in the order added, each padded to
// the alignment.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/gguf_model.hpp"

namespace accel::io {

/// Collects metadata and tensors, then writes them (see the header comment).
class GgufWriter {
 public:
  explicit GgufWriter(std::uint32_t alignment = 32) : alignment_(alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      throw ValueError("GgufWriter: alignment " + std::to_string(alignment) + " is not a power of two");
    }
  }

  void add(std::string key, GgufValue value) {
    if (const char* why = detail::gguf_key_problem(key)) {
      throw ValueError("GgufWriter: metadata key '" + detail::printable(key) + "' " + why +
                       "; the GGUF spec requires lower_snake_case ASCII segments separated by '.'");
    }
    if (!keys_.insert(key).second) throw ValueError("GgufWriter: metadata key '" + key + "' added twice");
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  /// A plain-typed cpu tensor, stored as is (its shape reversed into ne).
  void add_tensor(std::string name, const Tensor& t) {
    const auto type = ggml_type_of(t.dtype());
    if (!type) throw DTypeError("GgufWriter: tensor '" + name + "' is " + std::string(dtype_name(t.dtype())) +
                                ", which GGUF stores as no plain type");
    std::vector<std::uint64_t> ne;
    for (std::int64_t d = t.dim() - 1; d >= 0; --d) ne.push_back(static_cast<std::uint64_t>(t.size(d)));
    const Tensor c = t.to(Device::cpu()).contiguous();
    add_tensor_bytes(std::move(name), *type, std::move(ne),
                     std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
  }

  /// Stored bytes of any type; `ne` in GGUF order. ShapeError when the bytes do not match.
  void add_tensor_bytes(std::string name, GgmlType type, std::vector<std::uint64_t> ne, std::string bytes) {
    const std::uint64_t want = declare(name, type, ne);
    if (bytes.size() != want) throw size_error(name, type, want, bytes.size());
    names_.insert(name);
    tensors_.push_back({std::move(name), type, std::move(ne), std::move(bytes), {}});
  }

  /// A tensor whose bytes `make` produces while save() writes it (so memory holds one tensor at a
  /// time); the name, type and shape are checked now, the byte count when `make` returns.
  void add_tensor_source(std::string name, GgmlType type, std::vector<std::uint64_t> ne,
                         std::function<std::string()> make) {
    declare(name, type, ne);
    names_.insert(name);
    tensors_.push_back({std::move(name), type, std::move(ne), {}, std::move(make)});
  }

  std::size_t tensor_count() const noexcept { return tensors_.size(); }

  /// Writes the file atomically; a failing tensor source leaves no file behind.
  void save(const std::string& path) const {
    std::string head = "GGUF";
    store_le<std::uint32_t>(head, 3);
    store_le<std::uint64_t>(head, tensors_.size());
    const bool write_alignment = alignment_ != gguf_default_alignment && !keys_.count("general.alignment");
    store_le<std::uint64_t>(head, metadata_.size() + (write_alignment ? 1 : 0));
    for (const auto& [k, v] : metadata_) {
      put_string(head, k);
      store_le<std::uint32_t>(head, static_cast<std::uint32_t>(v.type));
      put_value(head, v);
    }
    if (write_alignment) {
      put_string(head, "general.alignment");
      store_le<std::uint32_t>(head, static_cast<std::uint32_t>(GgufValueType::uint32));
      store_le<std::uint32_t>(head, alignment_);
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      put_string(head, t.name);
      store_le<std::uint32_t>(head, static_cast<std::uint32_t>(t.ne.size()));
      for (const auto e : t.ne) store_le<std::uint64_t>(head, e);
      store_le<std::uint32_t>(head, static_cast<std::uint32_t>(t.type));
      store_le<std::uint64_t>(head, offset);
      offset = padded(offset + nbytes_of(t));
    }
    head.resize(padded(head.size()), '\0');
    AtomicFile f(path);
    f.write(head);
    std::uint64_t at = 0;
    for (const auto& t : tensors_) {
      std::string made;
      if (t.make) {
        made = t.make();
        if (made.size() != nbytes_of(t)) throw size_error(t.name, t.type, nbytes_of(t), made.size());
      }
      const std::string& bytes = t.make ? made : t.bytes;
      f.write(bytes);
      at += bytes.size();
      const std::string pad(padded(at) - at, '\0');
      f.write(pad);
      at += pad.size();
    }
    f.commit();
  }

 private:
  struct Pending {
    std::string name;
    GgmlType type;
    std::vector<std::uint64_t> ne;
    std::string bytes;
    std::function<std::string()> make;  ///< set for add_tensor_source
  };

  /// Checks a new tensor's name and shape; its byte count.
  std::uint64_t declare(const std::string& name, GgmlType type, const std::vector<std::uint64_t>& ne) const {
    if (name.size() > gguf_max_tensor_name) {
      throw ValueError("GgufWriter: tensor name '" + detail::printable(name) + "' is " + std::to_string(name.size()) +
                       " bytes; the GGUF spec allows at most 64");
    }
    if (ne.size() > gguf_max_dims) throw ShapeError("GgufWriter: tensor '" + name + "' has more than 4 dimensions");
    if (names_.count(name)) throw ValueError("GgufWriter: tensor '" + name + "' added twice");
    return tensor_nbytes(type, ne);
  }

  static std::uint64_t tensor_nbytes(GgmlType type, const std::vector<std::uint64_t>& ne) {
    std::uint64_t numel = 1;
    for (const auto e : ne) numel *= e;
    const std::uint64_t ne0 = ne.empty() ? 1 : ne[0];
    return ne0 == 0 ? 0 : ggml_row_nbytes(type, ne0) * (numel / ne0);
  }

  static ShapeError size_error(const std::string& name, GgmlType type, std::uint64_t want, std::size_t got) {
    return ShapeError("GgufWriter: tensor '" + name + "' (" + std::string(ggml_type_name(type)) + ") needs " +
                      std::to_string(want) + " bytes, got " + std::to_string(got));
  }

  static std::uint64_t nbytes_of(const Pending& t) { return tensor_nbytes(t.type, t.ne); }

  std::uint64_t padded(std::uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  static void put_string(std::string& out, const std::string& s) {
    store_le<std::uint64_t>(out, s.size());
    out += s;
  }

  static void put_value(std::string& out, const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::uint8: store_le<std::uint8_t>(out, static_cast<std::uint8_t>(*v.as_uint())); return;
      case GgufValueType::uint16: store_le<std::uint16_t>(out, static_cast<std::uint16_t>(*v.as_uint())); return;
      case GgufValueType::uint32: store_le<std::uint32_t>(out, static_cast<std::uint32_t>(*v.as_uint())); return;
      case GgufValueType::uint64: store_le<std::uint64_t>(out, *v.as_uint()); return;
      case GgufValueType::int8: store_le<std::uint8_t>(out, static_cast<std::uint8_t>(std::get<std::int64_t>(v.data))); return;
      case GgufValueType::int16: store_le<std::uint16_t>(out, static_cast<std::uint16_t>(std::get<std::int64_t>(v.data))); return;
      case GgufValueType::int32: store_le<std::uint32_t>(out, static_cast<std::uint32_t>(std::get<std::int64_t>(v.data))); return;
      case GgufValueType::int64: store_le<std::uint64_t>(out, static_cast<std::uint64_t>(std::get<std::int64_t>(v.data))); return;
      case GgufValueType::float32: {
        const float f = static_cast<float>(std::get<double>(v.data));
        std::uint32_t bits;
        std::memcpy(&bits, &f, 4);
        store_le<std::uint32_t>(out, bits);
        return;
      }
      case GgufValueType::float64: {
        std::uint64_t bits;
        const double d = std::get<double>(v.data);
        std::memcpy(&bits, &d, 8);
        store_le<std::uint64_t>(out, bits);
        return;
      }
      case GgufValueType::boolean: out.push_back(*v.as_bool() ? '\1' : '\0'); return;
      case GgufValueType::string: put_string(out, *v.as_string()); return;
      case GgufValueType::array: {
        const auto& a = *v.as_array();
        store_le<std::uint32_t>(out, static_cast<std::uint32_t>(a.elem_type));
        store_le<std::uint64_t>(out, a.items.size());
        for (const auto& item : a.items) {
          if (item.type != a.elem_type) throw ValueError("GgufWriter: an array item's type differs from the array's");
          put_value(out, item);
        }
        return;
      }
    }
  }

  std::uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::set<std::string> keys_, names_;
  std::vector<Pending> tensors_;
};

/// The architecture llama.cpp's converter writes for config.json's model_type (Mistral as
/// "llama"); ValueError naming `what` and listing the model types written.
inline const GgufArchitecture& gguf_architecture_of(const nlohmann::json& config, const std::string& what) {
  std::string model_type = config.value("model_type", std::string());
  if (model_type == "mistral") model_type = "llama";
  for (const auto& a : gguf_architectures()) {
    if (a.model_type == model_type) return a;
  }
  std::string known;
  for (const auto& a : gguf_architectures()) known += std::string(a.model_type) + ", ";
  throw ValueError(what + ": model_type '" + config.value("model_type", std::string()) + "' has no GGUF architecture (" +
                   known + "mistral)");
}

/// The architecture's metadata for `config` (general.architecture and name, the hyperparameters,
/// config.json's bos / eos ids unless `extra` has them), then `extra` (a tokenizer's,
/// io/gguf_tokenizer.hpp), in the order llama.cpp's converter writes them.
inline std::vector<std::pair<std::string, GgufValue>> gguf_model_metadata(
    const nlohmann::json& config, const std::vector<std::pair<std::string, GgufValue>>& extra = {}) {
  const GgufArchitecture& arch = gguf_architecture_of(config, "gguf_model_metadata");
  const std::string model_type = config.value("model_type", std::string());
  const std::string a(arch.name);
  std::vector<std::pair<std::string, GgufValue>> m;
  const auto put = [&](std::string key, GgufValue v) { m.emplace_back(std::move(key), std::move(v)); };
  const auto u32 = [&](const std::string& key, const char* field) {
    put(a + "." + key, gguf_u32(config.at(field).get<std::uint32_t>()));
  };
  put("general.architecture", gguf_string(a));
  put("general.name", gguf_string(config.value("_name_or_path", std::string("accel model"))));
  if (a == "llama" || a == "qwen2") {
    const auto heads = config.at("num_attention_heads").get<std::uint32_t>();
    const auto hidden = config.at("hidden_size").get<std::uint32_t>();
    u32("context_length", "max_position_embeddings");
    u32("embedding_length", "hidden_size");
    u32("block_count", "num_hidden_layers");
    u32("feed_forward_length", "intermediate_size");
    u32("attention.head_count", "num_attention_heads");
    put(a + ".attention.head_count_kv", gguf_u32(config.value("num_key_value_heads", heads)));
    const auto head_dim = config.contains("head_dim") && !config["head_dim"].is_null()
                              ? config["head_dim"].get<std::uint32_t>() : hidden / heads;
    put(a + ".rope.dimension_count", gguf_u32(head_dim));
    if (head_dim != hidden / heads) {
      put(a + ".attention.key_length", gguf_u32(head_dim));
      put(a + ".attention.value_length", gguf_u32(head_dim));
    }
    put(a + ".attention.layer_norm_rms_epsilon", gguf_f32(config.value("rms_norm_eps", 1e-6f)));
    put(a + ".rope.freq_base", gguf_f32(config.value("rope_theta", 10000.0f)));
    if (config.contains("rope_scaling") && config["rope_scaling"].is_object()) {
      const auto& rs = config["rope_scaling"];
      const std::string type = rs.value("rope_type", rs.value("type", std::string()));
      if (type != "linear" && type != "yarn") {
        throw ValueError("gguf_model_metadata: rope scaling '" + type + "' has no GGUF form here (linear and yarn have)");
      }
      put(a + ".rope.scaling.type", gguf_string(type));
      put(a + ".rope.scaling.factor", gguf_f32(rs.at("factor").get<float>()));
      if (type == "yarn") {
        put(a + ".rope.scaling.original_context_length",
            gguf_u32(rs.at("original_max_position_embeddings").get<std::uint32_t>()));
      }
    }
  } else {
    u32("context_length", "n_positions");
    u32("embedding_length", "n_embd");
    u32("block_count", "n_layer");
    u32("attention.head_count", "n_head");
    put(a + ".feed_forward_length",
        gguf_u32(config.contains("n_inner") && !config["n_inner"].is_null() ? config["n_inner"].get<std::uint32_t>()
                                                                            : 4 * config.at("n_embd").get<std::uint32_t>()));
    put(a + ".attention.layer_norm_epsilon", gguf_f32(config.value("layer_norm_epsilon", 1e-5f)));
  }
  const auto in_extra = [&](std::string_view key) {
    return std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == key; });
  };
  for (const char* which : {"bos", "eos"}) {
    const std::string field = std::string(which) + "_token_id", key = "tokenizer.ggml." + field;
    if (!in_extra(key) && config.contains(field) && config[field].is_number_unsigned()) {
      put(key, gguf_u32(config[field].get<std::uint32_t>()));
    }
  }
  m.insert(m.end(), extra.begin(), extra.end());
  return m;
}

/// Where an HF tensor goes in a GGUF model: its name there and how its layout differs.
struct GgufTensorTarget {
  std::string name;
  GgufLayout layout = GgufLayout::same;
  bool kv_heads = false;  ///< qk_permuted by the key / value head count
};

/// The target of HF tensor `hf`, or nullopt for one the architecture does not store (GPT-2's
/// attn.bias masks, rotary caches, an lm_head tied to the embedding).
inline std::optional<GgufTensorTarget> gguf_tensor_target(const GgufArchitecture& arch, const nlohmann::json& config,
                                                          std::string_view hf) {
  const bool tied = config.value("tie_word_embeddings", arch.name == "gpt2");
  if (tied && hf == "lm_head.weight") return std::nullopt;
  const auto found = detail::find_name_rule(arch, hf, false);
  if (!found) return std::nullopt;
  return GgufTensorTarget{detail::fill_block_pattern(found->first->gguf, found->second), found->first->layout,
                          found->first->kv_heads};
}

/// Whether HF tensor `hf` is also written as output.weight: the embedding of a tied head where
/// the architecture requires the head (GgufArchitecture::tied_output_from: GPT-2).
inline bool gguf_writes_tied_output(const GgufArchitecture& arch, const nlohmann::json& config, std::string_view hf) {
  return !arch.tied_output_from.empty() && hf == arch.tied_output_from &&
         config.value("tie_word_embeddings", arch.name == "gpt2");
}

/// HF tensor `t` (named `hf`, for errors) laid out as `target` stores it, on the CPU.
inline Tensor to_gguf_layout(const GgufTensorTarget& target, const nlohmann::json& config, const Tensor& t,
                             const std::string& hf) {
  Tensor v = t.to(Device::cpu());
  switch (target.layout) {
    case GgufLayout::same: return v;
    case GgufLayout::transposed: return v.transpose(0, 1).contiguous();
    case GgufLayout::qk_permuted: {
      const auto heads = config.at("num_attention_heads").get<std::int64_t>();
      return permute_qk_rows(v, target.kv_heads ? config.value("num_key_value_heads", heads) : heads, hf);
    }
  }
  return v;
}

/// Writes an HF LLaMA, Mistral, Qwen2 or GPT-2 model (its config.json as JSON, its tensors by HF
/// name) as a GGUF model file that GgufCheckpoint reads back as the same model. Floating tensors
/// keep their dtype (f32, f16, bf16); tensors gguf_tensor_target does not place are skipped, and
/// GPT-2's tied head is written as output.weight too (gguf_writes_tied_output).
/// `extra` metadata (a tokenizer's, io/gguf_tokenizer.hpp) is written after the architecture's;
/// its bos / eos ids take the place of config.json's. quant/formats/gguf_export.hpp writes a
/// model folder in a chosen scheme (f16, q4_k_m, ...) as llama.cpp's tools do.
inline void save_gguf_model(const std::string& path, const nlohmann::json& config,
                            const std::vector<std::pair<std::string, Tensor>>& tensors,
                            const std::vector<std::pair<std::string, GgufValue>>& extra = {}) {
  const GgufArchitecture& arch = gguf_architecture_of(config, "save_gguf_model");
  GgufWriter w;
  for (auto& [k, v] : gguf_model_metadata(config, extra)) w.add(std::move(k), std::move(v));
  for (const auto& [hf, t] : tensors) {
    if (const auto target = gguf_tensor_target(arch, config, hf)) w.add_tensor(target->name, to_gguf_layout(*target, config, t, hf));
    if (gguf_writes_tied_output(arch, config, hf)) w.add_tensor("output.weight", t.to(Device::cpu()));
  }
  w.save(path);
}

}  // namespace accel::io

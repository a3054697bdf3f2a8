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
    if (name.size() > gguf_max_tensor_name) {
      throw ValueError("GgufWriter: tensor name '" + detail::printable(name) + "' is " + std::to_string(name.size()) +
                       " bytes; the GGUF spec allows at most 64");
    }
    if (ne.size() > gguf_max_dims) throw ShapeError("GgufWriter: tensor '" + name + "' has more than 4 dimensions");
    std::uint64_t numel = 1;
    for (const auto e : ne) numel *= e;
    const std::uint64_t ne0 = ne.empty() ? 1 : ne[0];
    const std::uint64_t want = ne0 == 0 ? 0 : ggml_row_nbytes(type, ne0) * (numel / ne0);
    if (bytes.size() != want) {
      throw ShapeError("GgufWriter: tensor '" + name + "' (" + std::string(ggml_type_name(type)) + ") needs " +
                       std::to_string(want) + " bytes, got " + std::to_string(bytes.size()));
    }
    if (!names_.insert(name).second) throw ValueError("GgufWriter: tensor '" + name + "' added twice");
    tensors_.push_back({std::move(name), type, std::move(ne), std::move(bytes)});
  }

  /// Writes the file atomically.
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
      offset = padded(offset + t.bytes.size());
    }
    head.resize(padded(head.size()), '\0');
    AtomicFile f(path);
    f.write(head);
    std::uint64_t at = 0;
    for (const auto& t : tensors_) {
      f.write(t.bytes);
      at += t.bytes.size();
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
  };

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

/// Writes an HF LLaMA, Qwen2 or GPT-2 model (its config.json as JSON, its tensors by HF name) as a GGUF
/// model file that GgufCheckpoint reads back as the same model. Floating tensors keep their
/// dtype (f32, f16, bf16); tensors the architecture does not name (GPT-2's attn.bias masks,
/// rotary caches) are skipped; a tied lm_head is not written.
/// `extra` metadata (a tokenizer's, io/gguf_tokenizer.hpp) is written after the architecture's;
/// its bos / eos ids take the place of config.json's.
inline void save_gguf_model(const std::string& path, const nlohmann::json& config,
                            const std::vector<std::pair<std::string, Tensor>>& tensors,
                            const std::vector<std::pair<std::string, GgufValue>>& extra = {}) {
  const std::string model_type = config.value("model_type", std::string());
  const GgufArchitecture* arch = nullptr;
  for (const auto& a : gguf_architectures()) {
    if (a.model_type == model_type) arch = &a;
  }
  if (!arch) {
    std::string known;
    for (const auto& a : gguf_architectures()) known += (known.empty() ? "" : ", ") + std::string(a.model_type);
    throw ValueError("save_gguf_model: model_type '" + model_type + "' has no GGUF architecture (" + known + ")");
  }
  const std::string a(arch->name);
  GgufWriter w;
  const auto u32 = [&](const std::string& key, const char* field) {
    w.add(a + "." + key, gguf_u32(config.at(field).get<std::uint32_t>()));
  };
  w.add("general.architecture", gguf_string(a));
  w.add("general.name", gguf_string(config.value("_name_or_path", std::string("accel model"))));
  const bool tied = config.value("tie_word_embeddings", model_type == "gpt2");
  if (model_type == "llama" || model_type == "qwen2") {
    const auto heads = config.at("num_attention_heads").get<std::uint32_t>();
    const auto hidden = config.at("hidden_size").get<std::uint32_t>();
    u32("context_length", "max_position_embeddings");
    u32("embedding_length", "hidden_size");
    u32("block_count", "num_hidden_layers");
    u32("feed_forward_length", "intermediate_size");
    u32("attention.head_count", "num_attention_heads");
    w.add(a + ".attention.head_count_kv", gguf_u32(config.value("num_key_value_heads", heads)));
    const auto head_dim = config.value("head_dim", hidden / heads);
    w.add(a + ".rope.dimension_count", gguf_u32(head_dim));
    if (head_dim != hidden / heads) {
      w.add(a + ".attention.key_length", gguf_u32(head_dim));
      w.add(a + ".attention.value_length", gguf_u32(head_dim));
    }
    w.add(a + ".attention.layer_norm_rms_epsilon", gguf_f32(config.value("rms_norm_eps", 1e-6f)));
    w.add(a + ".rope.freq_base", gguf_f32(config.value("rope_theta", 10000.0f)));
    if (config.contains("rope_scaling") && config["rope_scaling"].is_object()) {
      const auto& rs = config["rope_scaling"];
      const std::string type = rs.value("rope_type", rs.value("type", std::string()));
      if (type != "linear" && type != "yarn") {
        throw ValueError("save_gguf_model: rope scaling '" + type + "' has no GGUF form here (linear and yarn have)");
      }
      w.add(a + ".rope.scaling.type", gguf_string(type));
      w.add(a + ".rope.scaling.factor", gguf_f32(rs.at("factor").get<float>()));
      if (type == "yarn") {
        w.add(a + ".rope.scaling.original_context_length",
              gguf_u32(rs.at("original_max_position_embeddings").get<std::uint32_t>()));
      }
    }
  } else {
    u32("context_length", "n_positions");
    u32("embedding_length", "n_embd");
    u32("block_count", "n_layer");
    u32("attention.head_count", "n_head");
    w.add(a + ".feed_forward_length",
          gguf_u32(config.contains("n_inner") && !config["n_inner"].is_null() ? config["n_inner"].get<std::uint32_t>()
                                                                              : 4 * config.at("n_embd").get<std::uint32_t>()));
    w.add(a + ".attention.layer_norm_epsilon", gguf_f32(config.value("layer_norm_epsilon", 1e-5f)));
  }
  const auto in_extra = [&](std::string_view key) {
    return std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == key; });
  };
  for (const auto& [k, v] : extra) w.add(k, v);
  if (!in_extra("tokenizer.ggml.bos_token_id") && config.contains("bos_token_id") && config["bos_token_id"].is_number_unsigned()) {
    w.add("tokenizer.ggml.bos_token_id", gguf_u32(config["bos_token_id"].get<std::uint32_t>()));
  }
  if (!in_extra("tokenizer.ggml.eos_token_id") && config.contains("eos_token_id") && config["eos_token_id"].is_number_unsigned()) {
    w.add("tokenizer.ggml.eos_token_id", gguf_u32(config["eos_token_id"].get<std::uint32_t>()));
  }
  for (const auto& [hf, t] : tensors) {
    if (tied && hf == "lm_head.weight") continue;
    const auto found = detail::find_name_rule(*arch, hf, false);
    if (!found) continue;
    Tensor v = t.to(Device::cpu());
    switch (found->first->layout) {
      case GgufLayout::same: break;
      case GgufLayout::transposed: v = v.transpose(0, 1).contiguous(); break;
      case GgufLayout::qk_permuted: {
        const auto heads = config.at("num_attention_heads").get<std::int64_t>();
        v = permute_qk_rows(v, found->first->kv_heads ? config.value("num_key_value_heads", heads) : heads, hf);
        break;
      }
    }
    w.add_tensor(detail::fill_block_pattern(found->first->gguf, found->second), v);
  }
  w.save(path);
}

}  // namespace accel::io

// A GGUF model file seen as a Hugging Face checkpoint: config.json from its metadata, HF tensor
// names, and tensors in HF layout; and the reverse naming for writers.
//
//   auto ck = GgufCheckpoint::open("model.gguf");
//   ck.config()            config.json as transformers writes it (model_type, sizes, eps, rope,
//                          torch_dtype: the first block's weight type, bfloat16 for block types)
//   ck.keys()              "model.layers.0.self_attn.q_proj.weight", ... in file order
//   ck.tensor(name)        the tensor in HF layout (see below)
//   ck.packed(name)        a block-typed tensor's bytes, rows in HF order, for quantized layers
//   gguf_tensor_name(arch, hf_name) / hf_tensor_name(arch, gguf_name)   the name tables
//   permute_qk_rows(t, n_head) / unpermute_qk_rows(t, n_head)           llama.cpp's Q/K row order
//
// Architectures: "llama" (LlamaForCausalLM; llama.cpp's converter writes Mistral models as it
// too), "qwen2" (Qwen2ForCausalLM) and "gpt2" (GPT2LMHeadModel). Another architecture is a
// FormatError that lists these.
//
// Layout differences undone on reading, as llama.cpp's converter made them:
// - LLaMA's q_proj / k_proj rows (not Qwen2's) are interleaved per head (the two rotary halves of
//   each head alternate, row 2i + j of a head holds HF row j * head_dim / 2 + i), for ggml's rope.
// - GPT-2's Conv1D weights ([in, out] in HF) are stored transposed, as [out, in].
// - A model without "output.weight" ties lm_head to the embedding (tie_word_embeddings).
// Plain-typed tensors (F32, F16, BF16) keep their dtype: a zero-copy view of the mapping when no
// layout changes, else one copy. Block-typed tensors are dequantized to float32
// (io/ggml_dequantize.hpp) and then laid out. GGUF's rope_freqs tensor (Llama 3 frequency
// factors) is refused: the rope scaling it stands for is not read from GGUF files.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/gguf.hpp"

namespace accel::io {

/// How a stored tensor differs from its HF layout.
enum class GgufLayout : std::uint8_t {
  same,          ///< stored as HF has it
  qk_permuted,   ///< rows interleaved per head (LLaMA q_proj / k_proj)
  transposed,    ///< [out, in] where HF has [in, out] (GPT-2 Conv1D)
};

/// One entry of an architecture's name table. `gguf` and `hf` hold "{}" where the block index goes.
struct GgufNameRule {
  std::string_view gguf;
  std::string_view hf;
  GgufLayout layout = GgufLayout::same;
  bool kv_heads = false;  ///< for qk_permuted: k_proj, permuted by the key/value head count
};

/// One supported architecture: GGUF's name, transformers' model_type and class, and the names.
struct GgufArchitecture {
  std::string_view name;        ///< general.architecture
  std::string_view model_type;  ///< config.json's model_type
  std::string_view hf_class;    ///< config.json's architectures[0]
  std::vector<GgufNameRule> rules;
  /// llama.cpp requires output.weight even when the head is tied: the writer stores this HF
  /// tensor (the embedding) there too, as llama.cpp's converter does. Empty: a tied head is omitted.
  std::string_view tied_output_from = {};
};

namespace detail {
/// The names of the LLaMA family's tensors; `qk` is how q_proj / k_proj rows are stored (llama.cpp's
/// converter interleaves them for LLaMA's rope, and leaves Qwen2's, whose rope is GPT-NeoX's, as
/// they are).
inline std::vector<GgufNameRule> llama_family_rules(GgufLayout qk) {
  return {{"token_embd.weight", "model.embed_tokens.weight"},
          {"output_norm.weight", "model.norm.weight"},
          {"output.weight", "lm_head.weight"},
          {"blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight"},
          {"blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", qk, false},
          {"blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", qk, true},
          {"blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight"},
          {"blk.{}.attn_output.weight", "model.layers.{}.self_attn.o_proj.weight"},
          {"blk.{}.attn_q.bias", "model.layers.{}.self_attn.q_proj.bias", qk, false},
          {"blk.{}.attn_k.bias", "model.layers.{}.self_attn.k_proj.bias", qk, true},
          {"blk.{}.attn_v.bias", "model.layers.{}.self_attn.v_proj.bias"},
          {"blk.{}.attn_output.bias", "model.layers.{}.self_attn.o_proj.bias"},
          {"blk.{}.ffn_norm.weight", "model.layers.{}.post_attention_layernorm.weight"},
          {"blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight"},
          {"blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight"},
          {"blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight"},
          {"blk.{}.ffn_gate.bias", "model.layers.{}.mlp.gate_proj.bias"},
          {"blk.{}.ffn_up.bias", "model.layers.{}.mlp.up_proj.bias"},
          {"blk.{}.ffn_down.bias", "model.layers.{}.mlp.down_proj.bias"}};
}
}  // namespace detail

/// The architectures read and written; a new one is one entry here plus its config mapping.
inline const std::vector<GgufArchitecture>& gguf_architectures() {
  static const std::vector<GgufArchitecture> table = {
      {"llama", "llama", "LlamaForCausalLM", detail::llama_family_rules(GgufLayout::qk_permuted)},
      {"qwen2", "qwen2", "Qwen2ForCausalLM", detail::llama_family_rules(GgufLayout::same)},
      {"gpt2",
       "gpt2",
       "GPT2LMHeadModel",
       {{"token_embd.weight", "transformer.wte.weight"},
        {"position_embd.weight", "transformer.wpe.weight"},
        {"output_norm.weight", "transformer.ln_f.weight"},
        {"output_norm.bias", "transformer.ln_f.bias"},
        {"output.weight", "lm_head.weight"},
        {"blk.{}.attn_norm.weight", "transformer.h.{}.ln_1.weight"},
        {"blk.{}.attn_norm.bias", "transformer.h.{}.ln_1.bias"},
        {"blk.{}.attn_qkv.weight", "transformer.h.{}.attn.c_attn.weight", GgufLayout::transposed},
        {"blk.{}.attn_qkv.bias", "transformer.h.{}.attn.c_attn.bias"},
        {"blk.{}.attn_output.weight", "transformer.h.{}.attn.c_proj.weight", GgufLayout::transposed},
        {"blk.{}.attn_output.bias", "transformer.h.{}.attn.c_proj.bias"},
        {"blk.{}.ffn_norm.weight", "transformer.h.{}.ln_2.weight"},
        {"blk.{}.ffn_norm.bias", "transformer.h.{}.ln_2.bias"},
        {"blk.{}.ffn_up.weight", "transformer.h.{}.mlp.c_fc.weight", GgufLayout::transposed},
        {"blk.{}.ffn_up.bias", "transformer.h.{}.mlp.c_fc.bias"},
        {"blk.{}.ffn_down.weight", "transformer.h.{}.mlp.c_proj.weight", GgufLayout::transposed},
        {"blk.{}.ffn_down.bias", "transformer.h.{}.mlp.c_proj.bias"}},
       "transformer.wte.weight"},
  };
  return table;
}

/// The architecture named `name`; FormatError listing the supported ones otherwise.
inline const GgufArchitecture& gguf_architecture(std::string_view name, const std::string& where) {
  for (const auto& a : gguf_architectures()) {
    if (a.name == name) return a;
  }
  std::string known;
  for (const auto& a : gguf_architectures()) known += (known.empty() ? "" : ", ") + std::string(a.name);
  throw FormatError(where + ": architecture '" + std::string(name) + "' is not supported (supported: " + known + ")");
}

namespace detail {

/// Matches `name` against a pattern with one "{}" standing for a block index; the index, or
/// nullopt (-1 for patterns without "{}" that match exactly).
inline std::optional<long long> match_block_pattern(std::string_view pattern, std::string_view name) {
  const auto hole = pattern.find("{}");
  if (hole == std::string_view::npos) return pattern == name ? std::optional<long long>(-1) : std::nullopt;
  const auto prefix = pattern.substr(0, hole), suffix = pattern.substr(hole + 2);
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  long long v = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

inline std::string fill_block_pattern(std::string_view pattern, long long index) {
  std::string out(pattern);
  if (const auto hole = out.find("{}"); hole != std::string::npos) out.replace(hole, 2, std::to_string(index));
  return out;
}

/// The rule that maps `name` from one side to the other, and the block index.
inline std::optional<std::pair<const GgufNameRule*, long long>> find_name_rule(const GgufArchitecture& arch,
                                                                               std::string_view name, bool from_gguf) {
  for (const auto& r : arch.rules) {
    if (auto i = match_block_pattern(from_gguf ? r.gguf : r.hf, name)) return std::make_pair(&r, *i);
  }
  return std::nullopt;
}

/// Moves whole rows: out row `dst(r)` = in row r, for the first dimension of a contiguous tensor.
template <class Dest>
Tensor move_rows(const Tensor& in, std::int64_t n_head, const std::string& what, Dest dst) {
  if (in.dim() < 1 || n_head <= 0 || in.size(0) % (2 * n_head) != 0) {
    throw ShapeError(what + ": " + std::to_string(in.dim() ? in.size(0) : 0) +
                     " rows cannot be split into " + std::to_string(n_head) + " heads of an even size");
  }
  const Tensor src = in.contiguous();
  Tensor out = Tensor::empty(src.shape(), src.dtype(), Device::cpu());
  const std::int64_t rows = src.size(0);
  const std::size_t row_bytes = rows ? src.nbytes() / static_cast<std::size_t>(rows) : 0;
  const std::int64_t head_dim = rows / n_head;
  const auto* s = static_cast<const std::byte*>(src.data_ptr());
  auto* d = static_cast<std::byte*>(out.data_ptr());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + static_cast<std::size_t>(dst(r, head_dim)) * row_bytes, s + static_cast<std::size_t>(r) * row_bytes,
                row_bytes);
  }
  return out;
}

}  // namespace detail

/// llama.cpp's order of q_proj / k_proj rows (HF row j * hd/2 + i of a head goes to row 2i + j).
inline Tensor permute_qk_rows(const Tensor& hf, std::int64_t n_head, const std::string& what = "permute_qk_rows") {
  return detail::move_rows(hf, n_head, what, [](std::int64_t r, std::int64_t hd) {
    const std::int64_t h = r / hd, k = r % hd, half = hd / 2;
    return h * hd + (k % half) * 2 + k / half;
  });
}

/// The inverse of permute_qk_rows: HF's row order from llama.cpp's.
inline Tensor unpermute_qk_rows(const Tensor& gguf, std::int64_t n_head, const std::string& what = "unpermute_qk_rows") {
  return detail::move_rows(gguf, n_head, what, [](std::int64_t r, std::int64_t hd) {
    const std::int64_t h = r / hd, k = r % hd, half = hd / 2;
    return h * hd + (k % 2) * half + k / 2;
  });
}

/// The GGUF name of HF tensor `hf_name` under `arch`, or nullopt when the architecture has none.
inline std::optional<std::string> gguf_tensor_name(const GgufArchitecture& arch, std::string_view hf_name) {
  const auto found = detail::find_name_rule(arch, hf_name, false);
  if (!found) return std::nullopt;
  return detail::fill_block_pattern(found->first->gguf, found->second);
}

/// The HF name of GGUF tensor `gguf_name` under `arch`, or nullopt.
inline std::optional<std::string> hf_tensor_name(const GgufArchitecture& arch, std::string_view gguf_name) {
  const auto found = detail::find_name_rule(arch, gguf_name, true);
  if (!found) return std::nullopt;
  return detail::fill_block_pattern(found->first->hf, found->second);
}

/// A GGUF model file presented as an HF checkpoint (see the header comment). Cheap to copy.
class GgufCheckpoint {
 public:
  static GgufCheckpoint open(const std::string& path) {
    GgufCheckpoint ck;
    ck.file_ = GgufFile::open(path);
    ck.where_ = "GGUF file '" + path + "'";
    const auto* arch = ck.file_.find("general.architecture");
    if (!arch || !arch->as_string()) {
      throw FormatError(ck.where_ + ": no STRING 'general.architecture' key, so it describes no model");
    }
    ck.arch_ = &gguf_architecture(*arch->as_string(), ck.where_);
    ck.config_ = ck.make_config();
    for (const auto& t : ck.file_.tensors()) {
      if (t.name == "rope_freqs.weight") {
        throw FormatError(ck.where_ + ": tensor 'rope_freqs.weight' (Llama 3 rope frequency factors) is not supported");
      }
      const auto found = detail::find_name_rule(*ck.arch_, t.name, true);
      if (!found) {
        throw FormatError(ck.where_ + ": tensor '" + t.name + "' has no counterpart in " +
                          std::string(ck.arch_->hf_class));
      }
      ck.entries_.push_back({detail::fill_block_pattern(found->first->hf, found->second), &t, found->first});
    }
    return ck;
  }

  const GgufFile& file() const noexcept { return file_; }
  const std::string& path() const noexcept { return file_.path(); }
  const GgufArchitecture& architecture() const noexcept { return *arch_; }
  /// config.json as transformers would write it for this model.
  const nlohmann::json& config() const noexcept { return config_; }

  /// HF names, in the file's tensor order.
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const auto& e : entries_) k.push_back(e.hf_name);
    return k;
  }
  bool contains(std::string_view hf_name) const { return find(hf_name) != nullptr; }
  /// The GGUF tensor behind `hf_name`; KeyError naming the file when absent.
  const GgufTensorInfo& info(std::string_view hf_name) const { return *entry(hf_name).info; }

  /// Tensor `hf_name` as its stored bytes, for a quantized layer that consumes ggml's blocks: a u8
  /// tensor whose shape is the tensor's with the last extent replaced by a row's bytes, in ggml's
  /// row layout ([out, in]: GPT-2's weights stay untransposed), with LLaMA's Q/K row interleaving
  /// undone (whole rows move; nothing is dequantized).
  Tensor packed(std::string_view hf_name) const {
    const Entry& e = entry(hf_name);
    const auto& t = *e.info;
    Shape shape = t.shape();
    if (shape.size() == 0) shape.push_back(1);
    shape[shape.size() - 1] = static_cast<std::int64_t>(ggml_row_nbytes(t.type, t.ne.empty() ? 1 : t.ne[0]));
    Tensor bytes = Tensor::from_storage(file_.mapped_file()->region(t.file_offset, t.nbytes), DType::u8, shape);
    if (e.rule->layout != GgufLayout::qk_permuted) return bytes;
    const char* key = e.rule->kv_heads ? "num_key_value_heads" : "num_attention_heads";
    return unpermute_qk_rows(bytes, config_.at(key).get<std::int64_t>(), where_ + ", tensor '" + t.name + "'");
  }

  /// Tensor `hf_name` in HF layout (header comment): plain types keep their dtype, block types are
  /// dequantized to float32.
  Tensor tensor(std::string_view hf_name) const {
    const Entry& e = entry(hf_name);
    const std::string what = where_ + ", tensor '" + e.info->name + "' (" + e.hf_name + ")";
    Tensor t = ggml_type_info(e.info->type).plain ? file_.tensor(e.info->name) : dequantize(file_, e.info->name);
    switch (e.rule->layout) {
      case GgufLayout::same: return t;
      case GgufLayout::transposed:
        if (t.dim() != 2) throw ShapeError(what + ": expected a matrix, got shape " + t.shape().str());
        return t.transpose(0, 1).contiguous();
      case GgufLayout::qk_permuted: {
        const char* key = e.rule->kv_heads ? "num_key_value_heads" : "num_attention_heads";
        return unpermute_qk_rows(t, config_.at(key).get<std::int64_t>(), what);
      }
    }
    return t;
  }

 private:
  struct Entry {
    std::string hf_name;
    const GgufTensorInfo* info;
    const GgufNameRule* rule;
  };

  const Entry* find(std::string_view hf_name) const {
    for (const auto& e : entries_) {
      if (e.hf_name == hf_name) return &e;
    }
    return nullptr;
  }
  const Entry& entry(std::string_view hf_name) const {
    if (const auto* e = find(hf_name)) return *e;
    throw KeyError(where_ + " has no tensor for '" + std::string(hf_name) + "'");
  }

  std::uint64_t count(const std::string& key) const {
    const auto v = file_.get_uint(key);
    if (v == 0 || v > (std::uint64_t{1} << 31)) {
      throw FormatError(where_ + ": metadata '" + key + "' is " + std::to_string(v) + "; expected a positive count");
    }
    return v;
  }
  std::optional<std::uint64_t> optional_count(const std::string& key) const {
    if (!file_.find(key)) return std::nullopt;
    return count(key);
  }

  nlohmann::json make_config() const {
    const std::string a(arch_->name);
    nlohmann::json c;
    c["architectures"] = {std::string(arch_->hf_class)};
    c["model_type"] = std::string(arch_->model_type);
    const GgufTensorInfo* embd = file_.header().find_tensor("token_embd.weight");
    if (!embd || embd->ne.size() != 2) throw FormatError(where_ + ": no 2-D 'token_embd.weight' tensor");
    std::uint64_t vocab = embd->ne[1];
    if (const auto* tokens = file_.find("tokenizer.ggml.tokens"); tokens && tokens->as_array()) {
      vocab = std::max<std::uint64_t>(vocab, tokens->as_array()->items.size());
    }
    c["vocab_size"] = optional_count(a + ".vocab_size").value_or(vocab);
    c["tie_word_embeddings"] = file_.header().find_tensor("output.weight") == nullptr;
    // The dtype of the first block's weights: a plain type as stored, block types as bfloat16 (what
    // they dequantize into without doubling the memory of the float32 they are computed as).
    DType stored = DType::bf16;
    for (const auto& t : file_.tensors()) {
      if (t.name.starts_with("blk.0.") && t.ne.size() == 2) {
        stored = ggml_type_info(t.type).plain.value_or(DType::bf16);
        break;
      }
    }
    c["torch_dtype"] = std::string(dtype_name(stored));
    if (const auto* v = file_.find("tokenizer.ggml.bos_token_id"); v && v->as_uint()) c["bos_token_id"] = *v->as_uint();
    if (const auto* v = file_.find("tokenizer.ggml.eos_token_id"); v && v->as_uint()) c["eos_token_id"] = *v->as_uint();
    if (a == "llama" || a == "qwen2") {
      const auto heads = count(a + ".attention.head_count");
      c["hidden_size"] = count(a + ".embedding_length");
      c["intermediate_size"] = count(a + ".feed_forward_length");
      c["num_hidden_layers"] = count(a + ".block_count");
      c["num_attention_heads"] = heads;
      c["num_key_value_heads"] = optional_count(a + ".attention.head_count_kv").value_or(heads);
      c["max_position_embeddings"] = optional_count(a + ".context_length").value_or(2048);
      c["rms_norm_eps"] = file_.get_float(a + ".attention.layer_norm_rms_epsilon");
      if (file_.find(a + ".rope.freq_base")) c["rope_theta"] = file_.get_float(a + ".rope.freq_base");
      if (const auto hd = optional_count(a + ".attention.key_length")) c["head_dim"] = *hd;
      if (const auto* type = file_.find(a + ".rope.scaling.type")) {
        const auto* s = type->as_string();
        if (s && *s == "linear") {
          c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", file_.get_float(a + ".rope.scaling.factor")}};
        } else if (s && *s == "yarn") {
          const auto original = count(a + ".rope.scaling.original_context_length");
          c["rope_scaling"] = {{"rope_type", "yarn"},
                               {"factor", file_.get_float(a + ".rope.scaling.factor")},
                               {"original_max_position_embeddings", original}};
        } else if (!s || *s != "none") {
          throw FormatError(where_ + ": rope scaling '" + (s ? *s : "?") +
                            "' is not supported (linear, yarn and none are)");
        }
      }
      c["hidden_act"] = "silu";
      // Biases are told by their tensors: the format has no key for them.
      c["attention_bias"] = file_.header().find_tensor("blk.0.attn_q.bias") != nullptr;
      c["mlp_bias"] = file_.header().find_tensor("blk.0.ffn_up.bias") != nullptr;
    } else {
      c["n_embd"] = count(a + ".embedding_length");
      c["n_layer"] = count(a + ".block_count");
      c["n_head"] = count(a + ".attention.head_count");
      c["n_positions"] = count(a + ".context_length");
      if (const auto ff = optional_count(a + ".feed_forward_length")) c["n_inner"] = *ff;
      c["layer_norm_epsilon"] = file_.get_float(a + ".attention.layer_norm_epsilon");
      c["activation_function"] = "gelu_new";
    }
    return c;
  }

  GgufFile file_;
  std::string where_;
  const GgufArchitecture* arch_ = nullptr;
  nlohmann::json config_;
  std::vector<Entry> entries_;
};

}  // namespace accel::io

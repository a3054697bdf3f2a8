// The GGUF file schemes of `accel quantize IN OUT.gguf --scheme S`, and llama-quantize's choice of
// each tensor's type under a scheme.
//
//   gguf_schemes()                      the trait table: name, llama_ftype, base type
//   gguf_scheme(name) -> GgufScheme     one row by name ("q4_k_m"); ValueError listing the names
//   GgufTypeRules rules(scheme, shape)  the per-tensor rules for one model:
//     rules.type_of(name, ne) -> GgmlType
//
// A float scheme (f32, f16, bf16) stores every matrix in its type and every vector and norm in
// f32, as llama.cpp's converter does. A quantized scheme stores what llama-quantize quantizes
// (names ending in "weight" with two or more dimensions, not norms, not GPT-2's position
// embedding) in the scheme's base type, raised where llama-quantize raises it without an
// importance matrix:
// - the output head (the token embedding when the head is tied) in Q6_K, or Q8_0 when its rows
//   do not fill 256-blocks (Q8_0 schemes keep Q8_0);
// - attn_v: Q4_K_M / Q5_K_M give Q6_K to the layers use_more_bits picks (the first and last
//   eighth and every third between), Q4_K_S gives Q5_K to the first four; IQ4_NL / IQ4_XS give
//   Q5_K when four or more query heads share a key head; a 70B-class model's Q4_K attn_v is Q5_K;
// - GPT-2's fused attn_qkv: Q5_K under Q4_K_M, Q6_K under Q5_K_M;
// - ffn_down: Q4_K_M / Q5_K_M give Q6_K by use_more_bits, Q4_K_S and IQ4_NL / IQ4_XS give Q5_K
//   to the first eighth;
// then a type whose block does not divide the row falls back as llama-quantize's table says
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL), and to F16 when that does not
// divide it either. Other tensors are F16 (matrices) or F32 (vectors), what the converter's f16
// output that llama-quantize reads holds.
// The layer of attn_v / ffn_down is the block index in the name ("blk.7."): llama-quantize counts
// them in its processing order, which sorts blocks by index, so its i-th is block i.
// Difference from llama-quantize: a row length that even the fallback does not divide is an
// error there and F16 here.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/io/ggml_types.hpp"

namespace accel::quant {

/// One file scheme: its name here, llama.cpp's llama_ftype (general.file_type) and the base type.
struct GgufScheme {
  std::string_view name;
  std::uint32_t file_type;
  io::GgmlType base;
};

/// Every scheme, in llama_ftype order.
inline constexpr std::array<GgufScheme, 15> gguf_scheme_table{{
    {"f32", 0, io::GgmlType::f32},
    {"f16", 1, io::GgmlType::f16},
    {"q4_0", 2, io::GgmlType::q4_0},
    {"q4_1", 3, io::GgmlType::q4_1},
    {"q8_0", 7, io::GgmlType::q8_0},
    {"q5_0", 8, io::GgmlType::q5_0},
    {"q5_1", 9, io::GgmlType::q5_1},
    {"q4_k_s", 14, io::GgmlType::q4_k},
    {"q4_k_m", 15, io::GgmlType::q4_k},
    {"q5_k_s", 16, io::GgmlType::q5_k},
    {"q5_k_m", 17, io::GgmlType::q5_k},
    {"q6_k", 18, io::GgmlType::q6_k},
    {"iq4_nl", 25, io::GgmlType::iq4_nl},
    {"iq4_xs", 30, io::GgmlType::iq4_xs},
    {"bf16", 32, io::GgmlType::bf16},
}};

/// The names of every scheme, comma-separated (for usage text and errors).
inline std::string gguf_scheme_names() {
  std::string s;
  for (const auto& r : gguf_scheme_table) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

/// The scheme called `name`; ValueError listing the names otherwise.
inline const GgufScheme& gguf_scheme(std::string_view name) {
  for (const auto& r : gguf_scheme_table) {
    if (r.name == name) return r;
  }
  throw ValueError("GGUF scheme '" + std::string(name) + "' is not one of " + gguf_scheme_names());
}

/// What the rules need to know of the model (llama-quantize reads it from the hyperparameters).
struct GgufModelShape {
  std::string architecture;   ///< general.architecture
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  bool has_output = true;     ///< an output head of its own (false: tied to the embedding)
};

/// llama-quantize's per-tensor choice for one model under one scheme (see the header comment).
class GgufTypeRules {
 public:
  GgufTypeRules(const GgufScheme& scheme, GgufModelShape shape) : s_(scheme), m_(std::move(shape)) {}

  /// The type of tensor `name` with GGUF dims `ne` (ne[0] the row length).
  io::GgmlType type_of(std::string_view name, const std::vector<std::uint64_t>& ne) const {
    using io::GgmlType;
    const bool matrix = ne.size() >= 2;
    if (io::ggml_type_info(s_.base).plain) {
      return matrix && !name.ends_with("_norm.weight") ? s_.base : GgmlType::f32;
    }
    const bool quantize = name.ends_with("weight") && matrix && name.find("_norm.weight") == std::string_view::npos &&
                          name != "position_embd.weight" && name != "token_types.weight";
    if (!quantize) return matrix ? GgmlType::f16 : GgmlType::f32;
    return fitted(raised(name, ne[0]), ne[0]);
  }

 private:
  static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }
  bool is(std::string_view scheme) const { return s_.name == scheme; }

  /// The block index of "blk.N.…", -1 for a tensor outside the blocks.
  static int block_of(std::string_view name) {
    if (!name.starts_with("blk.")) return -1;
    int i = 0;
    std::size_t p = 4;
    for (; p < name.size() && name[p] >= '0' && name[p] <= '9'; ++p) i = i * 10 + (name[p] - '0');
    return p > 4 ? i : -1;
  }

  io::GgmlType raised(std::string_view name, std::uint64_t nx) const {
    using io::GgmlType;
    GgmlType t = s_.base;
    const bool iq4 = is("iq4_nl") || is("iq4_xs");
    if (name == "output.weight" || (!m_.has_output && name == "token_embd.weight")) {
      if (nx % io::ggml_type_info(t).block_size != 0) return GgmlType::q8_0;
      return t == GgmlType::q8_0 ? t : GgmlType::q6_k;
    }
    if (name == "token_embd.weight") return t;
    if (name.find("attn_v.weight") != std::string_view::npos) {
      const int i = block_of(name);
      if (iq4 && gqa() >= 4) t = GgmlType::q5_k;
      else if ((is("q4_k_m") || is("q5_k_m")) && use_more_bits(i, m_.n_layer)) t = GgmlType::q6_k;
      else if (is("q4_k_s") && i < 4) t = GgmlType::q5_k;
      if (is_70b() && t == GgmlType::q4_k) t = GgmlType::q5_k;
      return t;
    }
    if (name.find("ffn_down") != std::string_view::npos) {
      const int i = block_of(name), n = m_.n_layer;
      if (is("q4_k_m") || is("q5_k_m")) {
        if (use_more_bits(i, n)) t = GgmlType::q6_k;
      } else if ((iq4 || is("q4_k_s")) && i < n / 8) {
        t = GgmlType::q5_k;
      }
      return t;
    }
    if (name.find("attn_qkv.weight") != std::string_view::npos) {
      if (is("q4_k_m")) return GgmlType::q5_k;
      if (is("q5_k_m")) return GgmlType::q6_k;
    }
    return t;
  }

  static io::GgmlType fitted(io::GgmlType t, std::uint64_t nx) {
    using io::GgmlType;
    if (nx % io::ggml_type_info(t).block_size == 0) return t;
    switch (t) {
      case GgmlType::q4_k: t = GgmlType::q5_0; break;
      case GgmlType::q5_k: t = GgmlType::q5_1; break;
      case GgmlType::q6_k: t = GgmlType::q8_0; break;
      case GgmlType::iq4_xs: t = GgmlType::iq4_nl; break;
      default: return GgmlType::f16;
    }
    return nx % io::ggml_type_info(t).block_size == 0 ? t : GgmlType::f16;
  }

  int gqa() const { return m_.n_head_kv > 0 ? m_.n_head / m_.n_head_kv : 1; }
  /// llama.cpp's 70B class: 80 layers of LLaMA with grouped keys, or of Qwen2.
  bool is_70b() const {
    return m_.n_layer == 80 && ((m_.architecture == "llama" && m_.n_head != m_.n_head_kv) || m_.architecture == "qwen2");
  }

  GgufScheme s_;
  GgufModelShape m_;
};

}  // namespace accel::quant

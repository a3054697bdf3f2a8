// Rotary-embedding frequencies of transformers' rope types, from a config's rope_theta and
// rope_scaling.
//
//   RopeScaling::from_json(j["rope_scaling"], source)   "rope_type" (or the older "type") and its fields
//   rope_frequencies(rope, head_dim, max_pos, seq_len)  -> {inv_freq, attention_scaling}
//   DynamicRopeState                                     transformers' growth / reset rule for "dynamic"
//
// Types: default, linear (positions / factor), dynamic (NTK base growth past the context
// length), llama3 (wavelength bands), yarn (ramp between interpolation and extrapolation, cos /
// sin scaled by the attention factor). Frequencies are computed in double and rounded to f32 as
// transformers holds inv_freq in float32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/json_fields.hpp"

namespace accel::models {

/// A config's rope_scaling object (absent: type "default").
struct RopeScaling {
  std::string rope_type = "default";  ///< default, linear, dynamic, llama3, yarn
  double factor = 1.0;
  double low_freq_factor = 1.0;                            ///< llama3
  double high_freq_factor = 4.0;                           ///< llama3
  std::optional<std::int64_t> original_max_position_embeddings;  ///< llama3 (required), yarn
  std::optional<double> attention_factor;                  ///< yarn
  std::optional<double> mscale, mscale_all_dim;            ///< yarn
  double beta_fast = 32.0, beta_slow = 1.0;                ///< yarn
  bool truncate = true;                                    ///< yarn

  /// Parses rope_scaling; FormatError names `source`, the key and what was expected.
  static RopeScaling from_json(const nlohmann::json& j, const std::string& source) {
    RopeScaling r;
    if (j.is_null()) return r;
    if (!j.is_object()) throw FormatError(source + ": 'rope_scaling' must be an object or null, got " + j.dump());
    const std::string where = source + ": rope_scaling";
    auto num = [&](const char* key, double fallback) { return json_field_or<double, FormatError>(j, key, fallback, where); };
    r.rope_type = json_field_or<std::string, FormatError>(j, j.contains("rope_type") ? "rope_type" : "type", r.rope_type, where);
    if (r.rope_type == "su" || r.rope_type == "longrope") {
      throw FormatError(source + ": rope_scaling type '" + r.rope_type +
                        "' is not supported (supported: default, linear, dynamic, llama3, yarn)");
    }
    if (r.rope_type != "default" && r.rope_type != "linear" && r.rope_type != "dynamic" && r.rope_type != "llama3" &&
        r.rope_type != "yarn") {
      throw FormatError(source + ": unknown rope_scaling type '" + r.rope_type +
                        "' (supported: default, linear, dynamic, llama3, yarn)");
    }
    r.factor = num("factor", 1.0);
    if (r.rope_type != "default" && !(r.factor >= 1.0)) {
      throw FormatError(source + ": 'rope_scaling.factor' must be >= 1 for type '" + r.rope_type + "', got " +
                        std::to_string(r.factor));
    }
    r.low_freq_factor = num("low_freq_factor", 1.0);
    r.high_freq_factor = num("high_freq_factor", 4.0);
    r.original_max_position_embeddings = json_field<std::int64_t, FormatError>(j, "original_max_position_embeddings", where);
    if (r.original_max_position_embeddings && *r.original_max_position_embeddings <= 0) {
      throw FormatError(where + ": 'original_max_position_embeddings' must be a positive integer, got " +
                        std::to_string(*r.original_max_position_embeddings));
    }
    if (j.contains("attention_factor") && !j["attention_factor"].is_null()) r.attention_factor = num("attention_factor", 1.0);
    if (j.contains("mscale") && !j["mscale"].is_null()) r.mscale = num("mscale", 1.0);
    if (j.contains("mscale_all_dim") && !j["mscale_all_dim"].is_null()) r.mscale_all_dim = num("mscale_all_dim", 1.0);
    r.beta_fast = num("beta_fast", 32.0);
    r.beta_slow = num("beta_slow", 1.0);
    r.truncate = json_field_or<bool, FormatError>(j, "truncate", r.truncate, where);
    if (r.rope_type == "llama3") {
      if (!r.original_max_position_embeddings) {
        throw FormatError(source + ": rope_scaling type 'llama3' needs 'original_max_position_embeddings'");
      }
      if (!(r.high_freq_factor > r.low_freq_factor)) {
        throw FormatError(source + ": rope_scaling 'high_freq_factor' must exceed 'low_freq_factor'");
      }
    }
    return r;
  }
};

/// Frequencies of one rotary embedding and the factor cos / sin are scaled by.
struct RopeFrequencies {
  std::vector<double> inv_freq;  ///< one per rotated pair (rotary dim / 2), f32 values
  double attention_scaling = 1.0;
};

namespace detail {
inline double to_f32(double v) { return static_cast<double>(static_cast<float>(v)); }
inline std::vector<double> default_inv_freq(double base, std::int64_t dim) {
  std::vector<double> f(static_cast<std::size_t>(dim / 2));
  for (std::size_t i = 0; i < f.size(); ++i) {
    f[i] = to_f32(1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim)));
  }
  return f;
}
inline double yarn_mscale(double scale, double mscale = 1.0) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}
}  // namespace detail

/// The frequencies of `rope` for a rotary dim of `dim` with base `theta`; `max_position_embeddings`
/// is the config's context length; `seq_len` only matters for "dynamic" (the longest sequence
/// seen: the base grows past the context length).
inline RopeFrequencies rope_frequencies(const RopeScaling& rope, double theta, std::int64_t dim,
                                        std::int64_t max_position_embeddings, std::int64_t seq_len = 0) {
  RopeFrequencies out;
  const double pi = std::numbers::pi;
  if (rope.rope_type == "default") {
    out.inv_freq = detail::default_inv_freq(theta, dim);
  } else if (rope.rope_type == "linear") {
    out.inv_freq = detail::default_inv_freq(theta, dim);
    for (double& f : out.inv_freq) f = detail::to_f32(f / rope.factor);
  } else if (rope.rope_type == "dynamic") {
    const auto max_pos = static_cast<double>(max_position_embeddings);
    const double len = std::max(static_cast<double>(seq_len), max_pos);
    const double d = static_cast<double>(dim);
    const double base = theta * std::pow(rope.factor * len / max_pos - (rope.factor - 1.0), d / (d - 2.0));
    out.inv_freq = detail::default_inv_freq(base, dim);
  } else if (rope.rope_type == "llama3") {
    out.inv_freq = detail::default_inv_freq(theta, dim);
    const auto old_ctx = static_cast<double>(*rope.original_max_position_embeddings);
    const double low_wavelen = old_ctx / rope.low_freq_factor, high_wavelen = old_ctx / rope.high_freq_factor;
    for (double& f : out.inv_freq) {
      const double wavelen = 2.0 * pi / f;
      if (wavelen > low_wavelen) {
        f = detail::to_f32(f / rope.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
        f = detail::to_f32((1.0 - smooth) * f / rope.factor + smooth * f);
      }
    }
  } else {  // yarn
    const auto original = static_cast<double>(rope.original_max_position_embeddings.value_or(max_position_embeddings));
    const double factor = rope.factor;
    if (rope.attention_factor) {
      out.attention_scaling = *rope.attention_factor;
    } else if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0.0 && *rope.mscale_all_dim != 0.0) {
      out.attention_scaling = detail::yarn_mscale(factor, *rope.mscale) / detail::yarn_mscale(factor, *rope.mscale_all_dim);
    } else {
      out.attention_scaling = detail::yarn_mscale(factor);
    }
    const double d = static_cast<double>(dim);
    auto correction_dim = [&](double rotations) {
      return d * std::log(original / (rotations * 2.0 * pi)) / (2.0 * std::log(theta));
    };
    double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1.0);
    if (low == high) high += 0.001;  // avoids a division by zero in the ramp
    const std::vector<double> extrapolation = detail::default_inv_freq(theta, dim);
    out.inv_freq.resize(extrapolation.size());
    for (std::size_t i = 0; i < extrapolation.size(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation_factor = 1.0 - ramp;
      const double interpolation = detail::to_f32(extrapolation[i] / factor);
      out.inv_freq[i] = detail::to_f32(interpolation * (1.0 - extrapolation_factor) + extrapolation[i] * extrapolation_factor);
    }
  }
  return out;
}

/// transformers' rule for "dynamic" rope over successive forwards of one model: the frequencies
/// grow with the longest sequence seen and go back to the originals when a sequence shorter than
/// the context length comes after growth. Keys already in a KV cache keep the rotation they were
/// written with, as in transformers, so cached decoding past the context length differs from
/// recomputing the whole sequence.
struct DynamicRopeState {
  std::int64_t max_seq_len_cached = 0;

  /// Updates for a forward whose largest position is `max_position`; true when the frequencies changed.
  bool update(std::int64_t max_position, std::int64_t original_max, const RopeScaling& rope, double theta,
              std::int64_t dim, RopeFrequencies& freqs) {
    if (max_seq_len_cached == 0) max_seq_len_cached = original_max;
    const std::int64_t seq_len = max_position + 1;
    bool changed = false;
    if (seq_len > max_seq_len_cached) {
      freqs = rope_frequencies(rope, theta, dim, original_max, seq_len);
      max_seq_len_cached = seq_len;
      changed = true;
    }
    if (seq_len < original_max && max_seq_len_cached > original_max) {
      freqs = rope_frequencies(rope, theta, dim, original_max, 0);
      max_seq_len_cached = original_max;
      changed = true;
    }
    return changed;
  }
};

}  // namespace accel::models

// Option values that are numbers: counts, byte sizes and DEVICE=SIZE lists.
//
//   parse_integer("--kv-cache", "4096", 1, max)   4096
//   parse_real("--temperature", "0.7", 0, 100)   0.7
//   parse_offload_policy("prefetch:3")            3 (blocks read ahead; sync is 0)
//   parse_float_dtype("--dtype", "bfloat16")      DType::bf16 (float32, float16 or bfloat16)
//
// Byte sizes and DEVICE=SIZE lists are read by the library itself (accel::parse_byte_size,
// plan::parse_max_memory), with the option's name passed in for the messages.
//
// Every error is a ValueError that names the option and the value it rejects (bad input: exit 1),
// so "--max-memory 0=18446744073709551616" says which option overflowed instead of leaking the
// name of a standard-library conversion.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "accel/core/byte_size.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/plan/max_memory.hpp"
#include "cli_options.hpp"

namespace accel::cli {

namespace detail {

/// The values of a repeated list option as one list: "0=1GB" "cpu=2GB" -> "0=1GB,cpu=2GB".
inline std::string join_values(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ",") + v;
  return out;
}


inline ValueError out_of_range(std::string_view option, std::string_view text, std::int64_t lo, std::int64_t hi,
                               std::string_view unit = "") {
  return ValueError(std::string(option) + ": " + std::string(text) + " is out of range (" + std::to_string(lo) +
                    " to " + std::to_string(hi) + (unit.empty() ? "" : " ") + std::string(unit) + ")");
}

inline bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace detail

/// `text` as a decimal integer within [lo, hi]. `option` names the option (and item) in errors.
inline std::int64_t parse_integer(std::string_view option, std::string_view text, std::int64_t lo, std::int64_t hi) {
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  if (!detail::all_digits(digits)) {
    throw ValueError(std::string(option) + ": '" + std::string(text) + "' is not a whole number");
  }
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range || v < lo || v > hi) throw detail::out_of_range(option, text, lo, hi);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw ValueError(std::string(option) + ": '" + std::string(text) + "' is not a whole number");
  }
  return v;
}

/// `text` as a decimal number within [lo, hi]. `option` names the option in errors.
inline double parse_real(std::string_view option, const std::string& text, double lo, double hi) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) throw ValueError(std::string(option) + ": '" + text + "' is not a number");
  if (!(v >= lo && v <= hi)) {
    std::ostringstream os;
    os << option << ": " << text << " is out of range (" << lo << " to " << hi << ")";
    throw ValueError(os.str());
  }
  return v;
}

/// `--offload sync|prefetch|prefetch:N`: the blocks read ahead (0 for sync; prefetch alone is 2;
/// N 1-4, the policies the CLI compiles).
/// A model's floating dtype as --dtype names it: float32, float16 or bfloat16 (torch's names).
inline DType parse_float_dtype(std::string_view option, const std::string& text) {
  const auto d = try_dtype_from_string(text);
  if (!d || (*d != DType::f32 && *d != DType::f16 && *d != DType::bf16)) {
    throw ValueError(std::string(option) + ": '" + text + "' is not one of float32, float16, bfloat16");
  }
  return *d;
}

inline std::size_t parse_offload_policy(const std::string& text) {
  if (text == "sync") return 0;
  if (text == "prefetch") return 2;
  if (!text.starts_with("prefetch:")) throw ValueError("--offload: '" + text + "' is not sync or prefetch:N (N 1-4)");
  return static_cast<std::size_t>(parse_integer("--offload", std::string_view(text).substr(9), 1, 4));
}

}  // namespace accel::cli

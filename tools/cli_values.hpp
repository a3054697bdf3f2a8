// Option values that are numbers: counts, byte sizes and DEVICE=SIZE lists.
//
//   parse_integer("--kv-cache", "4096", 1, max)   4096
//   parse_size("--reserve 0", "2GiB")             ByteSize 2147483648
//   parse_memory_list("--max-memory", "0=20GiB,cpu=64GB")
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

#include "accel/core/byte_size.hpp"
#include "accel/core/errors.hpp"
#include "accel/plan/max_memory.hpp"
#include "cli_options.hpp"

namespace accel::cli {

/// The largest size, in whole bytes, that a ByteSize holds (it counts bits in an int64): about 1 EiB.
inline constexpr std::int64_t max_size_bytes = std::numeric_limits<std::int64_t>::max() / 8;

namespace detail {

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

/// A byte size: digits are bytes, anything else goes through Accelerate's convert_file_size_to_int
/// ("10GB" powers of 10, "10GiB" powers of 2, "10mb" bits). Sizes beyond max_size_bytes are out of
/// range; the error tells an overflowing size from one that is not a size at all.
inline ByteSize parse_size(std::string_view option, std::string_view text) {
  if (detail::all_digits(text)) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || v > max_size_bytes) throw detail::out_of_range(option, text, 0, max_size_bytes, "bytes");
    return ByteSize(v);
  }
  std::int64_t n = -1;
  try {
    n = convert_file_size_to_int(text);
  } catch (const ValueError&) {
  }
  if (n >= 0 && n <= max_size_bytes) return ByteSize(n);
  // convert_file_size_to_int also rejects sizes past int64: "1" with the same unit gives the scale
  // that tells a huge number from a malformed one.
  const auto unit_at = text.find_last_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") + 1;
  double number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + unit_at, number);
  std::int64_t scale = 0;
  try {
    if (unit_at < text.size()) scale = convert_file_size_to_int("1" + std::string(text.substr(unit_at)));
  } catch (const ValueError&) {
  }
  if (scale > 0 && end == text.data() + unit_at &&
      (ec == std::errc::result_out_of_range ||
       (ec == std::errc{} && number > 0 && number * static_cast<double>(scale) > static_cast<double>(max_size_bytes)))) {
    throw detail::out_of_range(option, text, 0, max_size_bytes, "bytes");
  }
  throw ValueError(std::string(option) + ": '" + std::string(text) +
                   "' is not a size (bytes, or a number with a unit: 512MB, 1.5GiB)");
}

/// "0=20GiB,1=20GiB,cpu=64GB": DEVICE=SIZE items (devices 0, 1, ..., cuda:N, cpu, disk; mps is a
/// DeviceError) in Accelerate's device order; a device named twice is an error. Errors name
/// `option` and the item.
inline plan::MaxMemory parse_memory_list(std::string_view option, std::string_view text) {
  // Every item is read before any is inserted, so a malformed item is reported before a repeat.
  std::vector<plan::MaxMemory::Entry> items;
  const std::string opt(option);
  for (const auto& item : split_list(std::string(text))) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw ValueError(opt + ": '" + item + "' is not DEVICE=SIZE");
    Placement key;
    try {
      key = plan::parse_memory_key(item.substr(0, eq));
    } catch (const ValueError& e) {
      throw ValueError(opt + ": " + e.what());
    }
    items.emplace_back(key, parse_size(opt + " " + item.substr(0, eq), std::string_view(item).substr(eq + 1)));
  }
  try {
    plan::MaxMemory mm;
    for (const auto& [k, v] : items) mm.insert(k, v);
    return plan::get_max_memory(std::move(mm));
  } catch (const ValueError& e) {
    throw ValueError(opt + ": " + e.what());
  }
}

}  // namespace accel::cli

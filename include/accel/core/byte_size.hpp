// Byte sizes as Accelerate counts them.
//
//   ByteSize                          exact size in eighths of a byte (bool elements are 1/8 byte)
//   dtype_byte_size(DType | name)     bytes of one element: 8, 4, 2, 1, bool = 1/8
//   convert_file_size_to_int(s)       "10GB" -> 10'000'000'000, "1.5GiB", "10mb" (bits!) -> 1'250'000
//   size_string_counts_bits(s)        true for "10mb": the caller can warn about the bits
//   parse_byte_size(what, s)          digits as bytes, else convert_file_size_to_int, range-checked
//
// ByteSize keeps sums of fractional sizes exact, so size tables and budgets compare exactly
// where Accelerate compares Python floats that are multiples of 1/8.
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>

#include "accel/core/checked.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"

namespace accel {

/// An exact byte count in units of 1/8 byte (one bit). Arithmetic never rounds.
class ByteSize {
 public:
  constexpr ByteSize() = default;
  /// `bytes` whole bytes.
  constexpr ByteSize(std::int64_t bytes) : bits_(checked_mul<std::int64_t>(bytes, 8, "byte size")) {}  // NOLINT: implicit on purpose
  static constexpr ByteSize from_bits(std::int64_t bits) {
    ByteSize b;
    b.bits_ = bits;
    return b;
  }

  constexpr std::int64_t bits() const noexcept { return bits_; }
  /// Whole bytes, rounded down (Python's `//` on a non-negative size).
  constexpr std::int64_t floor_bytes() const noexcept {
    return bits_ >= 0 ? bits_ / 8 : -((-bits_ + 7) / 8);
  }
  /// The size as a double (exact below 2^50 bytes).
  constexpr double bytes() const noexcept { return static_cast<double>(bits_) / 8.0; }
  constexpr bool is_whole() const noexcept { return bits_ % 8 == 0; }

  // Sizes come from files and configs: arithmetic that would wrap throws OverflowError instead.
  constexpr ByteSize& operator+=(ByteSize o) { return *this = *this + o; }
  constexpr ByteSize& operator-=(ByteSize o) { return *this = *this - o; }
  friend constexpr ByteSize operator+(ByteSize a, ByteSize b) {
    return from_bits(checked_add(a.bits_, b.bits_, "byte size sum"));
  }
  friend constexpr ByteSize operator-(ByteSize a, ByteSize b) {
    std::int64_t r{};
    if (__builtin_sub_overflow(a.bits_, b.bits_, &r)) throw OverflowError("byte size difference overflows");
    return from_bits(r);
  }
  friend constexpr ByteSize operator*(ByteSize a, std::int64_t n) {
    return from_bits(checked_mul(a.bits_, n, "byte size product"));
  }
  friend constexpr ByteSize operator*(std::int64_t n, ByteSize a) { return a * n; }
  friend constexpr bool operator==(ByteSize, ByteSize) = default;
  friend constexpr auto operator<=>(ByteSize, ByteSize) = default;

  /// "236", "128.125": the shortest exact decimal form.
  std::string str() const {
    std::string s = std::to_string(floor_bytes());
    const std::int64_t frac = bits_ - floor_bytes() * 8;
    if (frac == 0) return s;
    static constexpr const char* eighths[] = {"", ".125", ".25", ".375", ".5", ".625", ".75", ".875"};
    return s + eighths[frac];
  }
  friend std::ostream& operator<<(std::ostream& os, ByteSize b) { return os << b.str(); }

 private:
  std::int64_t bits_ = 0;
};

/// Size of one element of `d` (bool is 1/8 byte, as Accelerate counts it).
constexpr ByteSize dtype_byte_size(DType d) {
  if (d == DType::boolean) return ByteSize::from_bits(1);
  return ByteSize::from_bits(static_cast<std::int64_t>(itemsize(d)) * 8);
}

/// Size of one element of a dtype named as torch spells it ("float16", "torch.bool", and torch
/// dtypes accel has no tensors for, such as "complex64"). Throws DTypeError for unknown names.
inline ByteSize dtype_byte_size(std::string_view name) {
  if (auto d = try_dtype_from_string(name)) return dtype_byte_size(*d);
  std::string_view s = name;
  if (s.starts_with("torch.")) s.remove_prefix(6);
  struct Extra {
    std::string_view name;
    int bits;
  };
  // torch dtypes without an accel DType; Accelerate reads the trailing bit count of the name.
  static constexpr Extra extras[] = {{"complex32", 32}, {"complex64", 64}, {"complex128", 128},
                                     {"chalf", 32},     {"cfloat", 64},    {"cdouble", 128},
                                     {"qint8", 8},      {"quint8", 8},     {"qint32", 32},
                                     {"uint16", 16},    {"uint32", 32},    {"uint64", 64}};
  for (const auto& e : extras) {
    if (s == e.name) return ByteSize(e.bits / 8);
  }
  throw DTypeError("dtype_byte_size: '" + std::string(name) + "' is not a known torch dtype");
}

namespace detail {

/// Python's float(): surrounding whitespace, sign, digits with single '_' separators, '.',
/// exponent, inf/nan. Returns false when Python would raise ValueError.
inline bool parse_python_float(std::string_view s, double& out) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  if (s.empty()) return false;
  std::string clean;
  std::size_t i = 0;
  if (s[0] == '+' || s[0] == '-') clean += s[i++];
  std::string lower;
  for (std::size_t j = i; j < s.size(); ++j) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(s[j])));
  if (lower == "inf" || lower == "infinity" || lower == "nan") {
    out = lower == "nan" ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    if (clean == "-") out = -out;
    return true;
  }
  auto digits = [&](bool required) {  // digit run with single underscores between digits
    const std::size_t start = clean.size();
    while (i < s.size()) {
      if (std::isdigit(static_cast<unsigned char>(s[i]))) {
        clean += s[i++];
      } else if (s[i] == '_' && clean.size() > start && i + 1 < s.size() &&
                 std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        ++i;
      } else {
        break;
      }
    }
    return !required || clean.size() > start;
  };
  const std::size_t before = clean.size();
  digits(false);
  bool have_digits = clean.size() > before;
  if (i < s.size() && s[i] == '.') {
    clean += s[i++];
    const std::size_t b2 = clean.size();
    digits(false);
    have_digits = have_digits || clean.size() > b2;
  }
  if (!have_digits) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    clean += s[i++];
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) clean += s[i++];
    if (!digits(true)) return false;
  }
  if (i != s.size()) return false;
  out = std::strtod(clean.c_str(), nullptr);
  return true;
}

}  // namespace detail

/// Accelerate's convert_file_size_to_int for an integer: returned as is; negative raises.
inline std::int64_t convert_file_size_to_int(std::int64_t size) {
  if (size < 0) {
    throw ValueError("`size` " + std::to_string(size) +
                     " is not in a valid format. Use an integer for bytes, or a string with an unit (like '5.0GB').");
  }
  return size;
}

/// "5GB"/"5MB"/"5KB" are powers of 10, "5GiB"/"5MiB"/"5KiB" powers of 2 (suffix case-insensitive),
/// but a string ending in lower-case 'b' with a decimal unit counts bits ("10mb" = 1'250'000).
/// Digit-only strings, "", "TB" and negative values throw ValueError, as in Accelerate.
inline std::int64_t convert_file_size_to_int(std::string_view size) {
  const std::string err = "`size` " + std::string(size) +
                          " is not in a valid format. Use an integer for bytes, or a string with an unit (like '5.0GB').";
  std::string upper(size);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  struct Unit {
    std::string_view suffix;
    double scale;
    bool decimal;
  };
  static constexpr Unit units[] = {{"GIB", 1073741824.0, false}, {"MIB", 1048576.0, false},
                                   {"KIB", 1024.0, false},       {"GB", 1e9, true},
                                   {"MB", 1e6, true},            {"KB", 1e3, true}};
  for (const auto& u : units) {
    if (!std::string_view(upper).ends_with(u.suffix)) continue;
    double v = 0;
    if (!detail::parse_python_float(size.substr(0, size.size() - u.suffix.size()), v) || std::isnan(v)) {
      throw ValueError(err);
    }
    const double scaled = v * u.scale;
    // Python's int() of a float truncates toward zero; beyond int64 it is not a usable size.
    if (!(scaled > -9.2e18 && scaled < 9.2e18)) throw ValueError(err);
    std::int64_t n = static_cast<std::int64_t>(scaled);
    if (u.decimal && size.back() == 'b') n = n >= 0 ? n / 8 : -((-n + 7) / 8);
    if (n < 0) throw ValueError(err);
    return n;
  }
  throw ValueError(err);
}

/// Whether convert_file_size_to_int reads `size` as bits: a decimal unit ending in lower-case 'b'
/// ("200mb" is 25'000'000 bytes). Accelerate does so silently; callers that take sizes from
/// people warn, since "mb" is far more often meant as megabytes.
inline bool size_string_counts_bits(std::string_view size) {
  if (size.size() < 2 || size.back() != 'b') return false;
  const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(size[size.size() - 2])));
  return unit == 'K' || unit == 'M' || unit == 'G';
}

/// The largest size, in whole bytes, that a ByteSize holds (it counts bits in an int64): about 1 EiB.
inline constexpr std::int64_t max_size_bytes = std::numeric_limits<std::int64_t>::max() / 8;

/// A byte size typed by a person or read from a file: digits are bytes, anything else goes
/// through convert_file_size_to_int ("10GB" powers of 10, "10GiB" powers of 2, "10mb" bits).
/// ValueError naming `what` and the text: "out of range" for a size past max_size_bytes (so an
/// overflowing size is told from a malformed one), "is not a size" otherwise.
inline ByteSize parse_byte_size(std::string_view what, std::string_view text) {
  const auto out_of_range = [&] {
    return OverflowError(std::string(what) + ": " + std::string(text) + " is out of range (0 to " +
                      std::to_string(max_size_bytes) + " bytes)");
  };
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || v > max_size_bytes) throw out_of_range();
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
    throw out_of_range();
  }
  throw ValueError(std::string(what) + ": '" + std::string(text) +
                   "' is not a size (bytes, or a number with a unit: 512MB, 1.5GiB)");
}

}  // namespace accel

// Version parsing and comparison (Accelerate's compare_versions / is_torch_version).
//
//   Version::parse("2.1.0rc1")                 release numbers, pre (a / b / rc), post, dev; local "+..." ignored
//   compare_versions("1.10", ">=", "1.9")      operations: >  >=  ==  !=  <=  <
//
// Ordering follows PEP 440 for these parts: 1.0.dev1 < 1.0a1 < 1.0 < 1.0.post1; trailing zeros
// do not count (1.0 == 1.0.0).
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <utility>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/errors.hpp"

namespace accel::utils {

/// A parsed version number.
struct Version {
  std::vector<std::int64_t> release;
  int pre_kind = 3;  ///< 0 a, 1 b, 2 rc, 3 none (so a final release sorts after its pre-releases)
  std::int64_t pre_number = 0;
  std::int64_t post = -1;  ///< -1: none
  std::int64_t dev = -1;   ///< -1: none

  /// ValueError naming the text when it is not a version.
  static Version parse(std::string_view text) {
    std::string s;
    for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto fail = [&] { throw ValueError("'" + std::string(text) + "' is not a valid version"); };
    if (auto plus = s.find('+'); plus != std::string::npos) s.resize(plus);
    std::string_view v = s;
    if (v.starts_with('v')) v.remove_prefix(1);
    Version out;
    auto number = [&](std::int64_t& n) {
      const char* b = v.data();
      auto [p, ec] = std::from_chars(b, b + v.size(), n);
      if (ec != std::errc{} || p == b) fail();
      v.remove_prefix(static_cast<std::size_t>(p - b));
    };
    auto skip_sep = [&] {
      if (!v.empty() && (v[0] == '.' || v[0] == '-' || v[0] == '_')) v.remove_prefix(1);
    };
    do {
      if (!out.release.empty()) v.remove_prefix(1);
      std::int64_t n = 0;
      number(n);
      out.release.push_back(n);
    } while (v.size() > 1 && v[0] == '.' && std::isdigit(static_cast<unsigned char>(v[1])));
    skip_sep();
    using Tag = std::pair<const char*, int>;
    for (auto [tag, kind] : {Tag{"rc", 2}, Tag{"c", 2}, Tag{"alpha", 0}, Tag{"beta", 1}, Tag{"a", 0}, Tag{"b", 1}}) {
      if (v.starts_with(tag)) {
        v.remove_prefix(std::string_view(tag).size());
        out.pre_kind = kind;
        if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) number(out.pre_number);
        skip_sep();
        break;
      }
    }
    if (v.starts_with("post")) {
      v.remove_prefix(4);
      out.post = 0;
      if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) number(out.post);
      skip_sep();
    }
    if (v.starts_with("dev")) {
      v.remove_prefix(3);
      out.dev = 0;
      if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) number(out.dev);
    }
    if (!v.empty()) fail();
    while (out.release.size() > 1 && out.release.back() == 0) out.release.pop_back();
    return out;
  }

  friend std::strong_ordering operator<=>(const Version& a, const Version& b) {
    if (auto c = std::lexicographical_compare_three_way(a.release.begin(), a.release.end(), b.release.begin(),
                                                        b.release.end());
        c != 0) {
      return c;
    }
    // A dev release without pre/post sorts before the pre-releases of the same number.
    auto pre_key = [](const Version& v) { return v.dev >= 0 && v.pre_kind == 3 && v.post < 0 ? -1 : v.pre_kind; };
    if (auto c = pre_key(a) <=> pre_key(b); c != 0) return c;
    if (auto c = a.pre_number <=> b.pre_number; c != 0) return c;
    if (auto c = a.post <=> b.post; c != 0) return c;
    // No dev part sorts after any dev part.
    auto dev_key = [](const Version& v) { return v.dev < 0 ? INT64_MAX : v.dev; };
    return dev_key(a) <=> dev_key(b);
  }
  friend bool operator==(const Version& a, const Version& b) { return (a <=> b) == 0; }
};

/// Compares two versions with `operation` (">", ">=", "==", "!=", "<=", "<"); ValueError for
/// another operation or an unparsable version.
inline bool compare_versions(std::string_view a, std::string_view operation, std::string_view b) {
  const Version x = Version::parse(a), y = Version::parse(b);
  if (operation == ">") return x > y;
  if (operation == ">=") return x >= y;
  if (operation == "==") return x == y;
  if (operation == "!=") return x != y;
  if (operation == "<=") return x <= y;
  if (operation == "<") return x < y;
  throw ValueError("compare_versions: `operation` must be one of >, >=, ==, !=, <=, <; got '" +
                   std::string(operation) + "'");
}

}  // namespace accel::utils

namespace accel {
using utils::compare_versions;
}  // namespace accel

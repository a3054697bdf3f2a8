// PolicyKind: what a kind of policy (precision, distributed, offload, ...) tells a bundle.
//
// A bundle (accel::basic_policies<Kinds, Ts...>, policies.hpp) knows nothing about any one kind:
// it asks each kind of its list to recognise its tags, to name the default, to add the member
// users read (`P::precision`) and to spell the compile error that lists its valid choices. So a
// kind lives in one header, and a new one is that header plus one entry in policy::kinds:
//
//   struct quant_kind {
//     static constexpr std::string_view name = "quantization";
//     template <class T> using matches = std::is_base_of<quant_tag, T>;
//     using default_tag = no_quant;
//     template <class Tag> struct member { using quantization = Tag; };
//     template <bool Ok> static constexpr void valid_choices() {
//       static_assert(Ok, "accel::policies<...>: at most one quantization tag per bundle; valid choices: ...");
//     }
//   };
#pragma once

#include <concepts>
#include <string_view>

namespace accel::policy {

/// A kind of policy: `name`, the `matches<T>` detector, the `default_tag` a bundle falls back
/// to, the `member<Tag>` mixin that gives a bundle its named member, and `valid_choices<Ok>()`.
/// `valid_choices` is a function rather than a string because a static_assert message must be
/// a string literal before C++26: the kind writes the literal, the bundle decides when it fires.
template <class K>
concept PolicyKind = requires {
  { K::name } -> std::convertible_to<std::string_view>;
  typename K::default_tag;
  typename K::template member<typename K::default_tag>;
  K::template valid_choices<true>();
  requires K::template matches<typename K::default_tag>::value;
};

}  // namespace accel::policy

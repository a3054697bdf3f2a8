// expect: at most one quantization tag per bundle; valid choices: no_quant, int_weights<Bits>
// A kind declared outside the library reports a repeated tag with its own choices.
#include <string_view>
#include <type_traits>

#include <boost/mp11/list.hpp>

#include "accel/policy/policies.hpp"

struct quant_tag {};
struct no_quant : quant_tag {};
template <int Bits>
struct int_weights : quant_tag {};

struct quant_kind {
  static constexpr std::string_view name = "quantization";
  template <class T>
  using matches = std::is_base_of<quant_tag, T>;
  using default_tag = no_quant;
  template <class Tag>
  struct member {
    using quantization = Tag;
  };
  template <bool Ok>
  static constexpr void valid_choices() {
    static_assert(Ok, "at most one quantization tag per bundle; valid choices: no_quant, int_weights<Bits>");
  }
};

using P = accel::basic_policies<boost::mp11::mp_push_back<accel::policy::kinds, quant_kind>, int_weights<4>,
                                int_weights<8>>;
P::quantization* p = nullptr;

// expect: a leaf of this type fails the leaf test and reject_other_types
// A string leaf in a structure walked with reject_other_types is refused at compile time.
#include <string>
#include <variant>
#include <vector>

#include "accel/nested/nested.hpp"

int main() {
  std::vector<std::variant<accel::Tensor, std::string>> mixed;
  auto out = accel::nested::recursively_apply([](const accel::Tensor& t) { return t.numel(); }, mixed,
                                              accel::nested::reject_other_types);
  return static_cast<int>(out.size());
}

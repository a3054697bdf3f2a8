// A type the object format does not know is refused at compile time, naming what it supports.
// expect: accel::dist::serialize: this type has no binary form
#include "accel/dist/serialize.hpp"

struct Opaque {
  Opaque() = default;
  explicit Opaque(int) {}
  virtual ~Opaque() = default;
};

int main() { return static_cast<int>(accel::dist::serialize(Opaque{}).size()); }

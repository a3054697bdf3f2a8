// expect: unknown policy tag.*per bundle; valid choices: .*per bundle; valid choices: .*per bundle; valid choices:
// An unknown tag is followed by the valid choices of each of the three kinds, in whatever order
// the compiler reports them.
#include "accel/policy/policies.hpp"
struct not_a_policy {};
using P = accel::policies<accel::policy::fp16, not_a_policy>;
P::precision* p = nullptr;

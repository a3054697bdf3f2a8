// expect: unknown policy tag; valid choices: precision
#include "accel/policy/policies.hpp"
struct not_a_policy {};
using P = accel::policies<accel::policy::fp16, not_a_policy>;
P::precision* p = nullptr;

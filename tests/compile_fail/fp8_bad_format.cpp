// expect: F must be a float8 format; valid choices: e4m3, e5m2
#include "accel/policy/policies.hpp"
accel::policy::fp8<accel::policy::bf16> p;

// expect: at most one precision tag per bundle; valid choices: fp32, fp16, bf16, fp8<e4m3>, fp8<e5m2>
#include "accel/policy/policies.hpp"
using P = accel::policies<accel::policy::fp16, accel::policy::bf16>;
P::precision* p = nullptr;

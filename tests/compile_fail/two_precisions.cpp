// expect: more than one precision given; choose one of: fp32, fp16, bf16
#include "accel/policy/policies.hpp"
using P = accel::policies<accel::policy::fp16, accel::policy::bf16>;
P::precision* p = nullptr;

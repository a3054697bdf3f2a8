// expect: at most one offload tag per bundle; valid choices: no_offload, sync_offload, prefetch<N>
#include "accel/policy/policies.hpp"
using P = accel::policies<accel::policy::sync_offload, accel::policy::prefetch<2>>;
P::offload* p = nullptr;

// expect: more than one offload policy given; choose one of: no_offload, sync_offload, prefetch<N>
#include "accel/policy/policies.hpp"
using P = accel::policies<accel::policy::sync_offload, accel::policy::prefetch<2>>;
P::offload* p = nullptr;

// expect: prefetch<N>: N is the number of blocks in flight and must be >= 1
#include "accel/policy/policies.hpp"
accel::policy::prefetch<0> p;

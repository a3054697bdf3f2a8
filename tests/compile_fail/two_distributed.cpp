// expect: at most one distributed tag per bundle; valid choices: no_dist, multi_cpu<mpi>, multi_gpu<nccl>
#include "accel/policy/policies.hpp"
using P = accel::policies<accel::policy::multi_cpu<>, accel::policy::no_dist>;
P::distributed* p = nullptr;

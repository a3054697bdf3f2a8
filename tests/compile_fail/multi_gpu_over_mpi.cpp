// expect: GPU collectives run over NCCL; valid choices: multi_gpu<nccl>
#include "accel/policy/policies.hpp"
accel::policy::multi_gpu<accel::policy::mpi> p;

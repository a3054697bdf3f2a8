// expect: CPU collectives run over MPI; valid choices: multi_cpu<mpi>
#include "accel/policy/policies.hpp"
accel::policy::multi_cpu<accel::policy::nccl> p;

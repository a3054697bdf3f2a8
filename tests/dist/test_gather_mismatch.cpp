// Processes that gather tensors of different sizes outside debug mode: the point-to-point
// all-gather of small groups (dist/mpi.hpp) turns a length that differs from the receiver's into a
// DistributedError on every process, not into bytes read past a buffer or a hang. Hidden from
// ordinary runs: the error breaks the process group (the job then ends through MPI_Abort), so ctest
// runs it alone under mpirun -np 2 and looks for the line each process prints
// (dist_mpi_gather_mismatch in tests.cmake).
#include <catch2/catch.hpp>

#include <chrono>
#include <iostream>
#include <string>

#include "dist_fixture.hpp"

TEST_CASE("processes gathering different sizes fail on every process", "[.dist_gather_mismatch]") {
  namespace dist = accel::dist;
  const accel_dist_test::CpuState s(accel::InitProcessGroupKwargs{.backend = "mpi", .timeout = std::chrono::seconds(10)});
  REQUIRE(s.num_processes() == 2);
  const std::int64_t mine = s.process_index() == 0 ? 4 : 8;
  std::string what;
  try {
    (void)dist::gather(s, accel::Tensor::zeros(accel::Shape{mine}));
  } catch (const accel::DistributedError& e) {
    what = e.what();
  }
  INFO(what);
  // Process 0's receive is too short for the 32 bytes process 1 sent (MPI truncates); process 1
  // receives 16 bytes where it expected 32.
  const bool named = what.rfind("gather: ", 0) == 0;
  const bool reason = s.process_index() == 0 ? what.find("MPI_ERR_TRUNCATE") != std::string::npos ||
                                                   what.find("truncated") != std::string::npos
                                             : what.find("expected 32 bytes from process 0, received 16") !=
                                                   std::string::npos;
  CHECK(named);
  CHECK(reason);
  if (named && reason) {
    std::cout << "dist gather mismatch test: process " << s.process_index() << " reported the mismatch" << std::endl;
  }
}

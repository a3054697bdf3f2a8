// A collective whose peers never arrive ends in a DistributedError after the kwargs' timeout, not
// in a hang. Hidden from ordinary runs: it breaks the process group (the job then ends through
// MPI_Abort), so ctest runs it alone under mpirun -np 2 and looks for the line it prints
// (dist_mpi_timeout in tests.cmake).
#include <catch2/catch.hpp>

#include <chrono>
#include <iostream>
#include <thread>

#include "dist_fixture.hpp"

TEST_CASE("a collective whose peers never arrive fails after the timeout", "[.dist_timeout]") {
  namespace dist = accel::dist;
  const accel_dist_test::CpuState s(accel::InitProcessGroupKwargs{.backend = "mpi", .timeout = std::chrono::seconds(2)});
  if (s.process_index() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(5));  // never calls the gather
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  bool timed_out = false, broken = false;
  try {
    (void)dist::gather(s, accel::Tensor::zeros(accel::Shape{2}));
  } catch (const accel::DistributedError& e) {
    timed_out = std::string(e.what()).find("timed out after 2 s") != std::string::npos;
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(timed_out);
  CHECK(waited >= std::chrono::seconds(2));
  CHECK(waited < std::chrono::seconds(4));
  try {
    s.wait_for_everyone();
  } catch (const accel::DistributedError& e) {
    broken = std::string(e.what()).find("cannot be used any more") != std::string::npos;
  }
  CHECK(broken);
  if (timed_out && broken && waited < std::chrono::seconds(4)) {
    std::cout << "dist timeout test: process 0 reported the timeout" << std::endl;
  }
}

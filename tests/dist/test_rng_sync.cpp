// Random generators across processes (utils/random_sync.hpp): synchronizing gives every process the
// main process's draws, and a device-specific seed offsets by the process index.
#include <catch2/catch.hpp>

#include <vector>

#include "accel/utils/random_sync.hpp"
#include "dist_fixture.hpp"

using namespace accel_dist_test;

TEST_CASE("synchronize_rng_state gives every process the main process's generator", "[dist][mpi]") {
  const int n = world(), r = rank();
  accel::set_seed(state(), 1000, /*device_specific=*/true);
  CHECK(accel::default_generator().initial_seed() == 1000u + static_cast<unsigned>(r));
  // Different seeds: the draws differ between processes (when there are several).
  const Tensor before = accel::dist::gather(state(), accel::rand(Shape{4}));
  if (n > 1) CHECK(values(before.narrow(0, 0, 4)) != values(before.narrow(0, 4, 4)));

  accel::synchronize_rng_state(state(), accel::RNGType::torch);
  CHECK(accel::default_generator().initial_seed() == 1000u);
  const Tensor after = accel::dist::gather(state(), accel::rand(Shape{4}));
  for (int p = 1; p < n; ++p) CHECK(values(after.narrow(0, 4 * p, 4)) == values(after.narrow(0, 0, 4)));

  // A user generator, advanced differently on each process, and the states by name.
  accel::Generator gen;
  gen.manual_seed(5);
  (void)accel::rand(Shape{static_cast<std::int64_t>(r) + 1}, accel::DType::f32, &gen);
  accel::synchronize_rng_states(state(), std::vector<std::string>{"generator", "cuda"}, &gen);
  const Tensor drawn = accel::dist::gather(state(), accel::rand(Shape{3}, accel::DType::f32, &gen));
  for (int p = 1; p < n; ++p) CHECK(values(drawn.narrow(0, 3 * p, 3)) == values(drawn.narrow(0, 0, 3)));

  CHECK_THROWS_AS(accel::synchronize_rng_state(state(), accel::RNGType::xla), accel::ValueError);
  CHECK_THROWS_AS(accel::synchronize_rng_state(state(), accel::RNGType::generator), accel::ValueError);
  accel::set_seed(state(), 1000);
  CHECK(accel::default_generator().initial_seed() == 1000u);
}

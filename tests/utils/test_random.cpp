#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/utils/random.hpp"
#include "accel/utils/environment.hpp"

using accel::DType;
using accel::Tensor;
namespace utils = accel::utils;

TEST_CASE("Philox4x32-10 matches the published known-answer vectors", "[utils]") {
  // Random123's kat_vectors: philox4x32 10 rounds, counter 0 / key 0 and counter all-ones / key all-ones.
  auto zero = utils::detail::philox4x32_10(0, 0, 0);
  CHECK(zero == std::array<std::uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  auto ones = utils::detail::philox4x32_10(~0ull, ~0ull, ~0ull);
  CHECK(ones == std::array<std::uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
}

TEST_CASE("generators are deterministic given a seed and save / restore their state", "[utils]") {
  accel::Generator g(42);
  const auto state = g.get_state();
  CHECK(state.size() == accel::Generator::state_size);
  Tensor a = accel::rand({1000}, DType::f32, &g);
  CHECK(g.offset() == 1000);
  Tensor b = accel::rand({1000}, DType::f32, &g);
  CHECK(a.to_vector<float>() != b.to_vector<float>());
  g.set_state(state);
  CHECK(accel::rand({1000}, DType::f32, &g).to_vector<float>() == a.to_vector<float>());
  CHECK_THROWS_AS(g.set_state(std::vector<std::uint8_t>(3)), accel::ValueError);
  g.manual_seed(42);
  CHECK(g.offset() == 0);
  CHECK(accel::rand({1000}, DType::f32, &g).to_vector<float>() == a.to_vector<float>());
}

TEST_CASE("set_seed seeds the default generator, device_specific adds RANK", "[utils]") {
  accel::set_seed(7);
  const auto x = accel::randn({64}).to_vector<float>();
  accel::set_seed(7);
  CHECK(accel::randn({64}).to_vector<float>() == x);
  CHECK(accel::default_generator().initial_seed() == 7);
  {
    auto env = accel::patch_environment({{"RANK", "3"}});
    accel::set_seed(7, /*device_specific=*/true, /*deterministic=*/true);
    CHECK(accel::default_generator().initial_seed() == 10);
    CHECK(utils::are_deterministic_algorithms_enabled());
    CHECK(accel::randn({64}).to_vector<float>() != x);
  }
  accel::set_seed(7);
  CHECK_FALSE(utils::are_deterministic_algorithms_enabled());
#if defined(ACCEL_WITH_CUDA)
  CHECK(utils::cuda_generator(1).initial_seed() == 7);
  CHECK(utils::cuda_generator(1).device() == accel::Device::cuda(1));
#endif
}

TEST_CASE("rand / randn / randint have the right ranges and moments", "[utils]") {
  accel::Generator g(123);
  const auto u = accel::rand({20000}, DType::f32, &g).to_vector<double>();
  double mean = 0;
  for (double v : u) {
    REQUIRE(v >= 0.0);
    REQUIRE(v < 1.0);
    mean += v;
  }
  CHECK(mean / u.size() == Approx(0.5).margin(0.01));
  for (DType d : {DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f64}) {
    for (double v : accel::rand({2000}, d, &g).to_vector<double>()) REQUIRE((v >= 0.0 && v < 1.0));
  }
  CHECK_THROWS_AS(accel::rand({2}, DType::i32, &g), accel::DTypeError);

  const auto n = accel::randn({20000}, DType::f64, &g).to_vector<double>();
  double m = 0, sq = 0;
  for (double v : n) m += v, sq += v * v;
  m /= n.size();
  CHECK(m == Approx(0.0).margin(0.03));
  CHECK(sq / n.size() - m * m == Approx(1.0).margin(0.05));

  Tensor r = accel::randint(-3, 4, {5000}, DType::i64, &g);
  CHECK(r.dtype() == DType::i64);
  std::vector<int> seen(7, 0);
  for (auto v : r.to_vector<std::int64_t>()) {
    REQUIRE(v >= -3);
    REQUIRE(v < 4);
    ++seen[static_cast<std::size_t>(v + 3)];
  }
  for (int c : seen) CHECK(c > 500);
  CHECK(accel::randint(0, 10, {3, 4}, DType::f32, &g).shape() == accel::Shape{3, 4});
  CHECK_THROWS_AS(accel::randint(5, 5, {2}), accel::ValueError);
}

TEST_CASE("synchronize_rng_state is a checked no-op in one process", "[utils]") {
  accel::set_seed(5);
  const auto before = accel::default_generator().get_state();
  accel::synchronize_rng_states({accel::RNGType::torch, accel::RNGType::cuda});
  CHECK(accel::default_generator().get_state() == before);
  accel::Generator g(1);
  CHECK_NOTHROW(accel::synchronize_rng_state(accel::RNGType::generator, &g));
  CHECK_THROWS_AS(accel::synchronize_rng_state(accel::RNGType::generator), accel::ValueError);
  CHECK_THROWS_AS(accel::synchronize_rng_state(accel::RNGType::xla), accel::ValueError);
}

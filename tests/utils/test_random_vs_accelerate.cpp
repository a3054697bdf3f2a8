#include <catch2/catch.hpp>

#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "accel/core/tensor.hpp"
#include "accel/utils/environment.hpp"
#include "accel/utils/random.hpp"

using accel::DType;
namespace utils = accel::utils;

TEST_CASE("random: a seed fixes the values whatever the thread count, in a 16-byte state", "[utils]") {
  accel::Generator g(2024);
  CHECK(g.get_state().size() == 16);  // seed and offset, not torch's state tensor
  const auto a = accel::randn({100000}, DType::f32, &g).to_vector<float>();
#if defined(_OPENMP)
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  g.manual_seed(2024);
  const auto serial = accel::randn({100000}, DType::f32, &g).to_vector<float>();
  omp_set_num_threads(threads);
  CHECK(serial == a);
#endif
  g.manual_seed(2024);
  CHECK(accel::randn({100000}, DType::f32, &g).to_vector<float>() == a);
}

TEST_CASE("random: set_seed(device_specific) reads the rank the launchers set", "[utils]") {
  auto clean = accel::patch_environment({{"RANK", "x"}, {"PMI_RANK", "x"}, {"OMPI_COMM_WORLD_RANK", "x"},
                                         {"MV2_COMM_WORLD_RANK", "x"}});
  for (const char* k : {"RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"}) ::unsetenv(k);
  accel::set_seed(100, true);
  CHECK(accel::default_generator().initial_seed() == 100);
  {
    auto env = accel::patch_environment({{"OMPI_COMM_WORLD_RANK", 2}});  // mpirun
    accel::set_seed(100, true);
    CHECK(accel::default_generator().initial_seed() == 102);
    auto torchrun = accel::patch_environment({{"RANK", 5}});  // RANK comes first
    accel::set_seed(100, true);
    CHECK(accel::default_generator().initial_seed() == 105);
  }
  {
    auto env = accel::patch_environment({{"RANK", "-1"}, {"PMI_RANK", "4"}});  // -1 reads as unset
    accel::set_seed(100, true);
    CHECK(accel::default_generator().initial_seed() == 104);
  }
  {
    auto env = accel::patch_environment({{"RANK", "one"}});
    CHECK_THROWS_AS(accel::set_seed(100, true), accel::ValueError);
  }
}

TEST_CASE("random: set_seed without deterministic turns deterministic algorithms off again", "[utils]") {
  accel::set_seed(1, false, true);
  CHECK(utils::are_deterministic_algorithms_enabled());
  accel::set_seed(1, false, true);
  CHECK(utils::are_deterministic_algorithms_enabled());
  accel::set_seed(2);  // Accelerate would leave torch's switch on
  CHECK_FALSE(utils::are_deterministic_algorithms_enabled());
}

TEST_CASE("random: synchronize_rng_states takes names too, and refuses types with no C++ backend", "[utils]") {
  accel::set_seed(5);
  const auto before = accel::default_generator().get_state();
  accel::synchronize_rng_states(std::vector<std::string>{"torch", "cuda"});
  CHECK(accel::default_generator().get_state() == before);
  accel::Generator g(1);
  CHECK_NOTHROW(accel::synchronize_rng_states(std::vector<std::string>{"generator"}, &g));
  CHECK_THROWS_AS(accel::synchronize_rng_states(std::vector<std::string>{"generator"}), accel::ValueError);
  CHECK_THROWS_AS(accel::synchronize_rng_states(std::vector<std::string>{"dice"}), accel::ValueError);
  for (auto t : {accel::RNGType::mlu, accel::RNGType::sdaa, accel::RNGType::musa, accel::RNGType::npu,
                 accel::RNGType::xla, accel::RNGType::xpu, accel::RNGType::hpu, accel::RNGType::neuron}) {
    CHECK_THROWS_AS(accel::synchronize_rng_state(t), accel::ValueError);
  }
  // Without a GPU, the CUDA state is left alone rather than raising as torch does.
  CHECK_NOTHROW(accel::synchronize_rng_state(accel::RNGType::cuda));
}

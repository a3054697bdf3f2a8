#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "accel/utils/environment.hpp"
#include "accel/utils/state.hpp"
#include "accel/utils/versions.hpp"

namespace utils = accel::utils;

TEST_CASE("patch_environment sets, upper-cases and restores exactly", "[utils]") {
  ::setenv("ACCEL_TEST_EXISTING", "before", 1);
  ::unsetenv("ACCEL_TEST_NEW");
  {
    auto env = accel::patch_environment({{"accel_test_existing", "during"}, {"ACCEL_TEST_NEW", 3}, {"ACCEL_TEST_FLAG", true}});
    CHECK(utils::get_env("ACCEL_TEST_EXISTING") == "during");
    CHECK(utils::get_env("ACCEL_TEST_NEW") == "3");
    CHECK(utils::get_env("ACCEL_TEST_FLAG") == "True");
    CHECK(utils::parse_flag_from_env("ACCEL_TEST_FLAG"));
    {
      auto inner = accel::patch_environment({{"ACCEL_TEST_NEW", "4"}});
      CHECK(utils::get_env("ACCEL_TEST_NEW") == "4");
    }
    CHECK(utils::get_env("ACCEL_TEST_NEW") == "3");
  }
  CHECK(utils::get_env("ACCEL_TEST_EXISTING") == "before");
  CHECK_FALSE(utils::get_env("ACCEL_TEST_NEW").has_value());  // did not exist: unset again
  CHECK_FALSE(utils::get_env("ACCEL_TEST_FLAG").has_value());
  {
    // A key listed twice ends at its value from before the scope.
    auto env = accel::patch_environment({{"ACCEL_TEST_EXISTING", "a"}, {"ACCEL_TEST_EXISTING", "b"}});
    CHECK(utils::get_env("ACCEL_TEST_EXISTING") == "b");
  }
  CHECK(utils::get_env("ACCEL_TEST_EXISTING") == "before");
  CHECK_THROWS_AS(accel::patch_environment({{"A=B", "x"}}), accel::ValueError);
  ::unsetenv("ACCEL_TEST_EXISTING");
}

TEST_CASE("clear_environment empties and restores the whole environment", "[utils]") {
  ::setenv("ACCEL_TEST_KEEP", "k=v", 1);
  const auto path = utils::get_env("PATH");
  {
    auto none = accel::clear_environment();
    CHECK_FALSE(utils::get_env("ACCEL_TEST_KEEP").has_value());
    CHECK_FALSE(utils::get_env("PATH").has_value());
    ::setenv("ACCEL_TEST_INSIDE", "1", 1);
  }
  CHECK(utils::get_env("ACCEL_TEST_KEEP") == "k=v");  // values containing '=' survive
  CHECK(utils::get_env("PATH") == path);
  CHECK_FALSE(utils::get_env("ACCEL_TEST_INSIDE").has_value());  // set inside: dropped
  ::unsetenv("ACCEL_TEST_KEEP");
}

TEST_CASE("str_to_bool and parse_flag_from_env follow Accelerate", "[utils]") {
  for (const char* t : {"1", "yes", "Y", "true", "On", "T"}) CHECK(utils::str_to_bool(t));
  for (const char* f : {"0", "no", "N", "false", "OFF", "f"}) CHECK_FALSE(utils::str_to_bool(f));
  CHECK_THROWS_AS(utils::str_to_bool("maybe"), accel::ValueError);
  CHECK(utils::parse_flag_from_env("ACCEL_TEST_UNSET_FLAG", true));
}

TEST_CASE("debug mode is read from ACCEL_DEBUG_MODE or ACCELERATE_DEBUG_MODE", "[utils]") {
  {
    auto env = accel::patch_environment({{"ACCELERATE_DEBUG_MODE", "1"}});
    utils::reload_library_state();
    CHECK(accel::is_debug_mode());
    {
      auto env2 = accel::patch_environment({{"ACCEL_DEBUG_MODE", "0"}});  // ours wins
      utils::reload_library_state();
      CHECK_FALSE(accel::is_debug_mode());
    }
  }
  utils::reload_library_state();
  CHECK(accel::is_debug_mode() == utils::parse_flag_from_env("ACCEL_DEBUG_MODE",
                                                             utils::parse_flag_from_env("ACCELERATE_DEBUG_MODE")));
}

TEST_CASE("availability checks reflect the build", "[utils]") {
  CHECK(utils::is_cuda_available() == accel::cuda_is_available());
  CHECK(utils::is_bf16_available());
  CHECK(utils::is_fp8_available());
#if defined(ACCEL_WITH_NCCL)
  STATIC_REQUIRE(utils::is_nccl_available());
#else
  STATIC_REQUIRE_FALSE(utils::is_nccl_available());
#endif
#if defined(ACCEL_WITH_MPI)
  STATIC_REQUIRE(utils::is_mpi_available());
#else
  STATIC_REQUIRE_FALSE(utils::is_mpi_available());
#endif
  STATIC_REQUIRE(utils::is_dnnl_available());
}

TEST_CASE("compare_versions orders versions as PEP 440 does", "[utils]") {
  CHECK(accel::compare_versions("1.10.0", ">", "1.9.2"));
  CHECK(accel::compare_versions("2.0", "==", "2.0.0"));
  CHECK(accel::compare_versions("2.1.0rc1", "<", "2.1.0"));
  CHECK(accel::compare_versions("2.1.0.dev3", "<", "2.1.0a1"));
  CHECK(accel::compare_versions("2.1.0a1", "<", "2.1.0b1"));
  CHECK(accel::compare_versions("2.1.0b2", "<", "2.1.0rc1"));
  CHECK(accel::compare_versions("2.1.0.post1", ">", "2.1.0"));
  CHECK(accel::compare_versions("2.6.0+cu124", "==", "2.6.0"));
  CHECK(accel::compare_versions("v1.2", ">=", "1.2"));
  CHECK(accel::compare_versions("1.2", "!=", "1.3"));
  CHECK(accel::compare_versions("1.2", "<=", "1.2"));
  CHECK_THROWS_AS(accel::compare_versions("1.2", "=>", "1.0"), accel::ValueError);
  CHECK_THROWS_AS(accel::compare_versions("one.two", ">", "1.0"), accel::ValueError);
  CHECK(utils::Version::parse("1.2.3").release == std::vector<std::int64_t>{1, 2, 3});
}

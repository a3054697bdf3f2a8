#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "accel/utils/environment.hpp"

namespace utils = accel::utils;

TEST_CASE("patch_environment spells values as Python's str() does", "[utils]") {
  auto env = accel::patch_environment({{"ACCEL_T_HALF", 0.5},
                                       {"ACCEL_T_SMALL", 1e-5},
                                       {"ACCEL_T_WHOLE", 100.0},
                                       {"ACCEL_T_BIG", 1e16},
                                       {"ACCEL_T_NEG", -2.5e-7},
                                       {"ACCEL_T_F32", 0.1f},
                                       {"ACCEL_T_NONE", nullptr},
                                       {"ACCEL_T_ULL", 18446744073709551615ull},
                                       {"ACCEL_T_FALSE", false}});
  CHECK(utils::get_env("ACCEL_T_HALF") == "0.5");
  CHECK(utils::get_env("ACCEL_T_SMALL") == "1e-05");
  CHECK(utils::get_env("ACCEL_T_WHOLE") == "100.0");
  CHECK(utils::get_env("ACCEL_T_BIG") == "1e+16");
  CHECK(utils::get_env("ACCEL_T_NEG") == "-2.5e-07");
  CHECK(utils::get_env("ACCEL_T_F32") == "0.1");
  CHECK(utils::get_env("ACCEL_T_NONE") == "None");
  CHECK(utils::get_env("ACCEL_T_ULL") == "18446744073709551615");
  CHECK(utils::get_env("ACCEL_T_FALSE") == "False");
  CHECK(utils::detail::python_float_str(0.0001) == "0.0001");
  CHECK(utils::detail::python_float_str(1234567890123456.0) == "1234567890123456.0");
  CHECK(utils::detail::python_float_str(0.1 + 0.2) == "0.30000000000000004");
  CHECK(utils::detail::python_float_str(-0.0) == "-0.0");
  CHECK(utils::detail::python_float_str(1.0 / 0.0) == "inf");
  const char* null_text = nullptr;
  CHECK(utils::EnvValue(null_text).text == "None");
}

TEST_CASE("patch_environment refuses what setenv would cut or reject", "[utils]") {
  ::unsetenv("ACCEL_T_NUL");
  CHECK_THROWS_AS(accel::patch_environment({{"ACCEL_T_NUL", std::string("a\0b", 3)}}), accel::ValueError);
  CHECK_THROWS_AS(accel::patch_environment({{"", "x"}}), accel::ValueError);
  CHECK_FALSE(utils::get_env("ACCEL_T_NUL").has_value());
}

TEST_CASE("patch_environment: a key given in two cases ends at its value from before", "[utils]") {
  ::setenv("ACCEL_T_TWICE", "before", 1);
  {
    // Accelerate would restore "first" here: it records the first patched value as the old one.
    auto env = accel::patch_environment({{"accel_t_twice", "first"}, {"ACCEL_T_TWICE", "second"}});
    CHECK(utils::get_env("ACCEL_T_TWICE") == "second");
  }
  CHECK(utils::get_env("ACCEL_T_TWICE") == "before");
  ::unsetenv("ACCEL_T_TWICE");
}

TEST_CASE("purge_accelerate_environment puts ACCELERATE_* variables back as they were", "[utils]") {
  ::setenv("ACCELERATE_T_KEPT", "old", 1);
  ::setenv("ACCELERATE_T_DELETED", "there", 1);
  ::unsetenv("ACCELERATE_MIXED_PRECISION_T");
  ::setenv("ACCEL_T_OTHER", "1", 1);
  {
    auto purge = accel::purge_accelerate_environment();
    ::setenv("ACCELERATE_T_KEPT", "new", 1);
    ::setenv("ACCELERATE_MIXED_PRECISION_T", "fp16", 1);
    ::unsetenv("ACCELERATE_T_DELETED");  // Accelerate would not bring this one back
    ::setenv("ACCEL_T_OTHER", "2", 1);
  }
  CHECK(utils::get_env("ACCELERATE_T_KEPT") == "old");
  CHECK_FALSE(utils::get_env("ACCELERATE_MIXED_PRECISION_T").has_value());
  CHECK(utils::get_env("ACCELERATE_T_DELETED") == "there");
  CHECK(utils::get_env("ACCEL_T_OTHER") == "2");  // not an ACCELERATE_ variable: untouched
  for (const char* k : {"ACCELERATE_T_KEPT", "ACCELERATE_T_DELETED", "ACCEL_T_OTHER"}) ::unsetenv(k);
}

TEST_CASE("str_to_bool returns a bool, parse_choice_from_env a string", "[utils]") {
  STATIC_REQUIRE(std::is_same_v<decltype(utils::str_to_bool("1")), bool>);
  ::unsetenv("ACCEL_T_CHOICE");
  CHECK(utils::parse_choice_from_env("ACCEL_T_CHOICE") == "no");
  CHECK(utils::parse_choice_from_env("ACCEL_T_CHOICE", "fp16") == "fp16");
  auto env = accel::patch_environment({{"ACCEL_T_CHOICE", "bf16"}});
  CHECK(utils::parse_choice_from_env("ACCEL_T_CHOICE") == "bf16");
}

TEST_CASE("get_int_from_env reads the first value >= 0, as Python's int() parses it", "[utils]") {
  for (const char* k : {"ACCEL_T_A", "ACCEL_T_B"}) ::unsetenv(k);
  CHECK(utils::get_int_from_env({"ACCEL_T_A", "ACCEL_T_B"}, 7) == 7);
  {
    auto env = accel::patch_environment({{"ACCEL_T_A", "-1"}, {"ACCEL_T_B", " +1_000 \n"}});
    CHECK(utils::get_int_from_env({"ACCEL_T_A", "ACCEL_T_B"}, 7) == 1000);
  }
  for (const char* bad : {"", "1.5", "1__0", "_1", "1_", "0x10", "99999999999999999999"}) {
    auto env = accel::patch_environment({{"ACCEL_T_A", bad}});
    CHECK_THROWS_AS(utils::get_int_from_env({"ACCEL_T_A"}, 0), accel::ValueError);
  }
  auto env = accel::patch_environment({{"ACCEL_T_A", "007"}});
  CHECK(utils::get_int_from_env({"ACCEL_T_A"}, 0) == 7);
}

TEST_CASE("get_cpu_distributed_information reads torchrun's and MPI's variables", "[utils]") {
  // Start from none of them set, whatever launched the tests.
  auto clean = accel::patch_environment(
      {{"RANK", "x"}, {"PMI_RANK", "x"}, {"OMPI_COMM_WORLD_RANK", "x"}, {"MV2_COMM_WORLD_RANK", "x"},
       {"WORLD_SIZE", "x"}, {"PMI_SIZE", "x"}, {"OMPI_COMM_WORLD_SIZE", "x"}, {"MV2_COMM_WORLD_SIZE", "x"},
       {"LOCAL_RANK", "x"}, {"MPI_LOCALRANKID", "x"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "x"},
       {"MV2_COMM_WORLD_LOCAL_RANK", "x"}, {"LOCAL_WORLD_SIZE", "x"}, {"MPI_LOCALNRANKS", "x"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "x"}, {"MV2_COMM_WORLD_LOCAL_SIZE", "x"}});
  for (const char* k : {"RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "WORLD_SIZE", "PMI_SIZE",
                        "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "LOCAL_RANK", "MPI_LOCALRANKID",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "LOCAL_WORLD_SIZE",
                        "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"}) {
    ::unsetenv(k);
  }
  CHECK(utils::get_cpu_distributed_information() == utils::CPUInformation{0, 1, 0, 1});
  auto env = accel::patch_environment({{"OMPI_COMM_WORLD_RANK", 5},
                                       {"OMPI_COMM_WORLD_SIZE", 8},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", 1},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", 4},
                                       {"PMI_SIZE", 16}});
  CHECK(utils::get_cpu_distributed_information() == utils::CPUInformation{5, 16, 1, 4});  // PMI_SIZE comes first
}

TEST_CASE("convert_dict_to_env_variables keeps safe entries in order and warns about the rest", "[utils]") {
  std::ostringstream warnings;
  const auto lines = utils::convert_dict_to_env_variables(
      {{"ACCELERATE_DEBUG_MODE", "1"}, {"BAD_ENV_NAME", "<mything"}, {"OTHER_ENV", "2"}, {"EMPTY", ""},
       {"SPACE", "a b"}, {"SEMI", "a;b"}},
      &warnings);
  CHECK(lines == std::vector<std::string>{"ACCELERATE_DEBUG_MODE=1\n", "OTHER_ENV=2\n"});
  CHECK_THAT(warnings.str(), Catch::Contains("WARNING: Skipping BAD_ENV_NAME=<mything as it contains forbidden "
                                             "characters or missing values."));
  CHECK_THAT(warnings.str(), Catch::Contains("Skipping EMPTY="));
  std::map<std::string, std::string> m{{"B", "2"}, {"A", "1"}};
  CHECK(utils::convert_dict_to_env_variables(m) == std::vector<std::string>{"A=1\n", "B=2\n"});
  std::vector<std::pair<std::string, std::string>> newline{{"A", "x\ny"}};
  CHECK(utils::convert_dict_to_env_variables(newline).empty());
}

TEST_CASE("availability checks: bf16 and fp8 mean storage and conversion", "[utils]") {
  CHECK(utils::is_bf16_available());
  CHECK(utils::is_fp8_available());
}

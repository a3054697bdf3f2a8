#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "accel/utils/config.hpp"
#include "accel/utils/state.hpp"

namespace fs = std::filesystem;
namespace utils = accel::utils;

namespace {
fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("accel_test_config_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST_CASE("write_basic_config and read_config round trip", "[utils]") {
  const auto dir = fresh_dir("roundtrip");
  const auto path = dir / "sub" / "default_config.json";
  auto written = accel::write_basic_config("BF16", path);
  REQUIRE(written == path);
  auto cfg = accel::read_config(path);
  REQUIRE(cfg.has_value());
  CHECK(cfg->mixed_precision == accel::PrecisionType::bf16);
  CHECK(cfg->compute_environment == accel::ComputeEnvironment::local_machine);
  const int gpus = accel::cuda_device_count();
  CHECK(cfg->num_processes == (gpus > 0 ? gpus : 1));
  CHECK(cfg->use_cpu == (gpus == 0));
  CHECK(cfg->distributed_type == (gpus > 1 ? accel::DistributedType::multi_gpu : accel::DistributedType::no));

  // The file holds Accelerate's keys and values.
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  CHECK(j.at("mixed_precision") == "bf16");
  CHECK(j.at("compute_environment") == "LOCAL_MACHINE");
  CHECK(j.at("distributed_type").is_string());

  // Never overwritten; no temporary left behind.
  CHECK_FALSE(accel::write_basic_config("fp16", path).has_value());
  CHECK(accel::read_config(path)->mixed_precision == accel::PrecisionType::bf16);
  int files = 0;
  for (const auto& e : fs::directory_iterator(path.parent_path())) files += e.is_regular_file();
  CHECK(files == 1);
  fs::remove_all(dir);
}

TEST_CASE("write_basic_config validates and the default location follows the environment", "[utils]") {
  const auto dir = fresh_dir("defaults");
  CHECK_THROWS_AS(accel::write_basic_config("fp64", dir / "x.json"), accel::ValueError);
  CHECK_FALSE(fs::exists(dir / "x.json"));
  {
    auto env = accel::patch_environment({{"ACCEL_CONFIG_FILE", (dir / "explicit.json").string()}});
    CHECK(utils::default_config_file() == dir / "explicit.json");
    CHECK_FALSE(accel::read_config().has_value());  // no file yet
    CHECK(accel::write_basic_config() == dir / "explicit.json");
    CHECK(accel::read_config()->mixed_precision == accel::PrecisionType::no);
  }
  {
    auto none = accel::clear_environment();
    auto env = accel::patch_environment({{"XDG_CACHE_HOME", dir.string()}});
    CHECK(utils::default_config_file() == dir / "accel" / "default_config.json");
  }
  {
    auto none = accel::clear_environment();
    auto env = accel::patch_environment({{"HOME", "/home/someone"}});
    CHECK(utils::default_config_file() == fs::path("/home/someone/.cache/accel/default_config.json"));
  }
  fs::remove_all(dir);
}

TEST_CASE("read_config rejects malformed files with the file named", "[utils]") {
  const auto dir = fresh_dir("bad");
  const auto p = dir / "c.json";
  std::ofstream(p) << "{ not json";
  CHECK_THROWS_WITH(accel::read_config(p), Catch::Contains(p.string()));
  std::ofstream(p, std::ios::trunc) << R"({"mixed_precision": "fp7"})";
  CHECK_THROWS_AS(accel::read_config(p), accel::FormatError);
  CHECK_THROWS_WITH(accel::read_config(p), Catch::Contains("mixed_precision") && Catch::Contains("bf16"));
  std::ofstream(p, std::ios::trunc) << R"({"num_processes": 0})";
  CHECK_THROWS_AS(accel::read_config(p), accel::FormatError);
  std::ofstream(p, std::ios::trunc) << R"({"distributed_type": "MULTI_CPU", "num_processes": 4})";
  auto c = accel::read_config(p);
  CHECK(c->distributed_type == accel::DistributedType::multi_cpu);
  CHECK(c->num_processes == 4);
  CHECK(c->mixed_precision == accel::PrecisionType::no);  // missing keys keep defaults
  fs::remove_all(dir);
}

TEST_CASE("the library starts with the config file, overridden by the environment", "[utils]") {
  const auto dir = fresh_dir("state");
  const auto path = dir / "default_config.json";
  std::ofstream(path) << R"({"mixed_precision": "bf16", "distributed_type": "MULTI_CPU", "num_processes": 4,
                             "use_cpu": true, "debug": true})";
  {
    auto none = accel::clear_environment();
    auto env = accel::patch_environment({{"ACCEL_CONFIG_FILE", path.string()}});
    utils::reload_library_state();
    const auto& s = accel::library_state();
    CHECK(s.config_file == path);
    CHECK(s.mixed_precision == accel::PrecisionType::bf16);
    CHECK(s.distributed_type == accel::DistributedType::multi_cpu);
    CHECK(s.num_processes == 4);
    CHECK(s.use_cpu);
    CHECK(accel::is_debug_mode());
    {
      // The configured precision drives the default autocast scope.
      auto scope = accel::default_autocast();
      CHECK(accel::autocast_dtype() == accel::DType::bf16);
    }
    CHECK_FALSE(accel::autocast_dtype().has_value());
    {
      // What a launcher exports wins over the file, as with `accelerate launch`.
      auto launch = accel::patch_environment({{"ACCELERATE_MIXED_PRECISION", "fp16"}, {"WORLD_SIZE", "2"},
                                              {"ACCELERATE_DEBUG_MODE", "0"}, {"ACCELERATE_DISTRIBUTED_TYPE", "NO"}});
      utils::reload_library_state();
      CHECK(accel::library_state().mixed_precision == accel::PrecisionType::fp16);
      CHECK(accel::library_state().num_processes == 2);
      CHECK(accel::library_state().distributed_type == accel::DistributedType::no);
      CHECK_FALSE(accel::is_debug_mode());
      auto scope = accel::default_autocast();
      CHECK(accel::autocast_dtype() == accel::DType::f16);
    }
    {
      auto bad = accel::patch_environment({{"WORLD_SIZE", "two"}});
      CHECK_THROWS_WITH(utils::reload_library_state(), Catch::Contains("WORLD_SIZE"));
    }
    {
      auto bad = accel::patch_environment({{"ACCELERATE_MIXED_PRECISION", "fp7"}});
      CHECK_THROWS_WITH(utils::reload_library_state(), Catch::Contains("ACCELERATE_MIXED_PRECISION"));
    }
    // A malformed file is reported with its name; no file at all means the defaults.
    std::ofstream(path, std::ios::trunc) << "{ oops";
    CHECK_THROWS_WITH(utils::reload_library_state(), Catch::Contains(path.string()));
    fs::remove(path);
    utils::reload_library_state();
    CHECK_FALSE(accel::library_state().config_file.has_value());
    CHECK(accel::library_state().mixed_precision == accel::PrecisionType::no);
    CHECK(accel::library_state().num_processes == 1);
  }
  utils::reload_library_state();
  fs::remove_all(dir);
}

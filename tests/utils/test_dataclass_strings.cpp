#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "accel/utils/dataclass_fields.hpp"
#include "accel/utils/dataclasses.hpp"

namespace utils = accel::utils;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

/// One value of every dataclass with each field away from its default.
auto non_default_samples() {
  return std::tuple{
      accel::AutocastKwargs{.enabled = false, .cache_enabled = true},
      accel::DistributedDataParallelKwargs{.dim = 1,
                                           .broadcast_buffers = false,
                                           .bucket_cap_mb = 50,
                                           .find_unused_parameters = true,
                                           .check_reduction = true,
                                           .gradient_as_bucket_view = true,
                                           .static_graph = true,
                                           .comm_hook = utils::DDPCommunicationHookType::power_sgd,
                                           .comm_wrapper = utils::DDPCommunicationHookType::bf16,
                                           .comm_state_option = {{"matrix_approximation_rank", 2}, {"warm", true}}},
      accel::FP8RecipeKwargs{.backend = "MSAMP",
                             .use_autocast_during_eval = true,
                             .margin = 2,
                             .interval = 4,
                             .fp8_format = "E4M3",
                             .amax_history_len = 16,
                             .amax_compute_algo = "max",
                             .override_linear_precision = {true, false, true},
                             .opt_level = "O1"},
      accel::GradScalerKwargs{
          .init_scale = 1024.5, .growth_factor = 1.5, .backoff_factor = 0.25, .growth_interval = 10, .enabled = false},
      accel::InitProcessGroupKwargs{.backend = "mpi", .init_method = "tcp://10.0.0.1:23456", .timeout = 90s},
      accel::GradientAccumulationPlugin{
          .num_steps = 8, .adjust_scheduler = false, .sync_with_dataloader = false, .sync_each_batch = true},
      accel::TorchDynamoPlugin{.backend = accel::DynamoBackend::aot_eager,
                               .mode = "max-autotune",
                               .fullgraph = true,
                               .dynamic = false,
                               .options = json{{"triton.cudagraphs", true}, {"epilogue_fusion", false}},
                               .disable = true,
                               .use_regional_compilation = true},
      accel::ProjectConfiguration{.project_dir = "/runs/a",
                                  .logging_dir = "/logs/a",
                                  .automatic_checkpoint_naming = true,
                                  .total_limit = 3,
                                  .iteration = 7,
                                  .save_on_each_node = true},
  };
}

template <class S>
std::size_t field_count() {
  return std::tuple_size_v<decltype(S::fields().fields)>;
}

template <class S>
void check_round_trip(const S& value) {
  INFO(utils::repr(value));
  const auto j = utils::to_json(value);
  CHECK(j.size() == field_count<S>());
  CHECK(utils::dataclass_from_json<S>(j) == value);
  CHECK(utils::parse_dataclass<S>(j.dump()) == value);
  CHECK(utils::parse_dataclass<S>(j.dump(2)) == value);
  const json plain = value;  // nlohmann's hooks
  CHECK(plain.get<S>() == value);
  CHECK_FALSE(S{} == value);  // every sample really departs from the defaults
}

template <class S>
void check_defaults_round_trip(const S&) {
  INFO(std::string(S::fields().name));
  if constexpr (std::is_same_v<S, accel::GradientAccumulationPlugin>) {
    CHECK_THROWS_AS(utils::dataclass_from_json<S>(utils::to_json(S{})), accel::ValueError);  // num_steps is required
  } else {
    CHECK(utils::dataclass_from_json<S>(utils::to_json(S{})) == S{});
    CHECK(utils::parse_dataclass<S>("{}") == S{});
  }
  if constexpr (utils::KwargsHandler<S>) CHECK(utils::to_kwargs(S{}).empty());
}

template <class S>
std::string repr_via_stream(const S& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

TEST_CASE("every dataclass reads back what it writes", "[utils][dataclasses]") {
  std::apply([](const auto&... s) { (check_round_trip(s), ...); }, non_default_samples());
  std::apply([](const auto&... s) { (check_defaults_round_trip(s), ...); }, non_default_samples());
}

TEST_CASE("to_json spells fields and values as Accelerate does", "[utils][dataclasses]") {
  CHECK(utils::to_json(accel::GradScalerKwargs{}).dump() ==
        R"({"init_scale":65536.0,"growth_factor":2.0,"backoff_factor":0.5,"growth_interval":2000,"enabled":true})");
  CHECK(utils::to_json(accel::AutocastKwargs{}).dump() == R"({"enabled":true,"cache_enabled":null})");
  CHECK(utils::to_json(accel::InitProcessGroupKwargs{.timeout = 800s}).dump() ==
        R"({"backend":"nccl","init_method":null,"timeout":800})");

  const auto ddp = utils::to_json(accel::DistributedDataParallelKwargs{});
  CHECK(ddp["comm_hook"] == "no");
  CHECK(ddp["comm_state_option"] == nlohmann::ordered_json::object());

  // Accelerate's field order, which is not the struct's for FP8RecipeKwargs.
  const auto fp8 = utils::to_json(accel::FP8RecipeKwargs{});
  std::string keys;
  for (const auto& [k, v] : fp8.items()) keys += k + " ";
  CHECK(keys ==
        "backend use_autocast_during_eval opt_level margin interval fp8_format amax_history_len amax_compute_algo "
        "override_linear_precision ");
  CHECK(fp8["override_linear_precision"] == nlohmann::ordered_json::array({false, false, false}));

  // TorchDynamoPlugin.to_dict lower-cases the backend for torch.compile; either case reads back.
  const auto dyn = utils::to_json(accel::TorchDynamoPlugin{.backend = accel::DynamoBackend::inductor});
  CHECK(dyn["backend"] == "inductor");
  CHECK(dyn["options"].is_null());
  CHECK(utils::parse_dataclass<accel::TorchDynamoPlugin>(R"({"backend": "INDUCTOR"})").backend ==
        accel::DynamoBackend::inductor);

  // An ordered_json object reads as well as a plain one.
  nlohmann::ordered_json o = {{"num_steps", 4}};
  CHECK(utils::dataclass_from_json<accel::GradientAccumulationPlugin>(o).num_steps == 4);
}

TEST_CASE("to_kwargs keeps only the fields that differ from the defaults", "[utils][dataclasses]") {
  CHECK(accel::to_kwargs(accel::GradScalerKwargs{.init_scale = 1024, .enabled = false}).dump() ==
        R"({"init_scale":1024.0,"enabled":false})");
  CHECK(accel::to_kwargs(accel::AutocastKwargs{.cache_enabled = false}).dump() == R"({"cache_enabled":false})");
  CHECK(accel::to_kwargs(accel::InitProcessGroupKwargs{.backend = "mpi", .timeout = 30s}).dump() ==
        R"({"backend":"mpi","timeout":30})");
  CHECK(accel::to_kwargs(accel::GradientAccumulationPlugin{.num_steps = 2}).dump() == R"({"num_steps":2})");
  CHECK(accel::to_kwargs(accel::TorchDynamoPlugin{.backend = accel::DynamoBackend::eager}).dump() ==
        R"({"backend":"eager"})");
  CHECK(accel::to_kwargs(accel::FP8RecipeKwargs{.override_linear_precision = {false, true, false}}).dump() ==
        R"({"override_linear_precision":[false,true,false]})");

  // The comm_* fields configure the communication hook, not DDP, so Accelerate leaves them out.
  const accel::DistributedDataParallelKwargs ddp{.find_unused_parameters = true,
                                                 .comm_hook = utils::DDPCommunicationHookType::fp16,
                                                 .comm_state_option = {{"x", 1}}};
  CHECK(accel::to_kwargs(ddp).dump() == R"({"find_unused_parameters":true})");
  CHECK(utils::to_json(ddp)["comm_hook"] == "fp16");

  // ProjectConfiguration is a plain dataclass in Accelerate: no to_kwargs.
  STATIC_REQUIRE_FALSE(utils::KwargsHandler<accel::ProjectConfiguration>);
  STATIC_REQUIRE(utils::Dataclass<accel::ProjectConfiguration>);
  STATIC_REQUIRE(utils::KwargsHandler<accel::TorchDynamoPlugin>);
  STATIC_REQUIRE_FALSE(utils::Dataclass<accel::DynamoBackend>);
}

TEST_CASE("repr reads like Python's dataclass repr", "[utils][dataclasses]") {
  CHECK(utils::repr(accel::GradScalerKwargs{}) ==
        "GradScalerKwargs(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, "
        "enabled=True)");
  CHECK(repr_via_stream(accel::GradScalerKwargs{}) == utils::repr(accel::GradScalerKwargs{}));
  CHECK(repr_via_stream(accel::DistributedDataParallelKwargs{.comm_state_option = {{"rank", 2}, {"name", "a'b"}}}) ==
        "DistributedDataParallelKwargs(dim=0, broadcast_buffers=True, bucket_cap_mb=25, find_unused_parameters=False, "
        "check_reduction=False, gradient_as_bucket_view=False, static_graph=False, comm_hook='no', comm_wrapper='no', "
        "comm_state_option={'name': \"a'b\", 'rank': 2})");
  CHECK(utils::repr(accel::InitProcessGroupKwargs{.backend = "gloo", .timeout = 90000s}) ==
        "InitProcessGroupKwargs(backend='gloo', init_method=None, timeout=datetime.timedelta(days=1, seconds=3600))");
  CHECK(utils::repr(accel::InitProcessGroupKwargs{.timeout = 1800s}) ==
        "InitProcessGroupKwargs(backend='nccl', init_method=None, timeout=datetime.timedelta(seconds=1800))");
  CHECK(utils::repr(accel::TorchDynamoPlugin{.options = json{{"max_autotune", true}, {"lr", 0.001}}}) ==
        "TorchDynamoPlugin(backend='NO', mode='default', fullgraph=False, dynamic=None, "
        "options={'lr': 0.001, 'max_autotune': True}, disable=False, use_regional_compilation=False)");
  CHECK(utils::repr(accel::FP8RecipeKwargs{}) ==
        "FP8RecipeKwargs(backend='TE', use_autocast_during_eval=False, opt_level='O2', margin=0, interval=1, "
        "fp8_format='HYBRID', amax_history_len=1024, amax_compute_algo='most_recent', "
        "override_linear_precision=(False, False, False))");

  // Floats as Python prints them: shortest round trip, exponent outside 1e-4 .. 1e16.
  auto scale = [](double v) {
    const auto r = utils::repr(accel::GradScalerKwargs{.init_scale = v});
    const auto from = r.find('=') + 1;
    return r.substr(from, r.find(',') - from);
  };
  CHECK(scale(1024) == "1024.0");
  CHECK(scale(0.1) == "0.1");
  CHECK(scale(0.0001) == "0.0001");
  CHECK(scale(0.00001) == "1e-05");
  CHECK(scale(123.456) == "123.456");
  CHECK(scale(1e15) == "1000000000000000.0");
  CHECK(scale(1e16) == "1e+16");
  CHECK(scale(2.5e-300) == "2.5e-300");
  CHECK(scale(-3.0) == "-3.0");

  CHECK(utils::repr(accel::ProjectConfiguration{.project_dir = "it's\n"}) ==
        "ProjectConfiguration(project_dir=\"it's\\n\", logging_dir=None, automatic_checkpoint_naming=False, "
        "total_limit=None, iteration=0, save_on_each_node=False)");
}

TEST_CASE("reading ProjectConfiguration runs Accelerate's __post_init__", "[utils][dataclasses]") {
  const auto pc = utils::parse_dataclass<accel::ProjectConfiguration>(R"({"project_dir": "runs"})");
  CHECK(pc.logging_dir == "runs");
  const auto kept =
      utils::parse_dataclass<accel::ProjectConfiguration>(R"({"project_dir": "runs", "logging_dir": "l"})");
  CHECK(kept.logging_dir == "l");
}

TEST_CASE("an unknown key names the dataclass and the key", "[utils][dataclasses]") {
  try {
    (void)utils::parse_dataclass<accel::GradScalerKwargs>(R"({"init_scale": 2, "backoff_filter": 0.25})");
    FAIL("expected UnknownFieldError");
  } catch (const accel::UnknownFieldError& e) {
    CHECK(e.dataclass() == "GradScalerKwargs");
    CHECK(e.key() == "backoff_filter");
    CHECK_THAT(e.what(), Catch::Contains("GradScalerKwargs has no field 'backoff_filter'") &&
                             Catch::Contains("init_scale, growth_factor, backoff_factor, growth_interval, enabled"));
  }
  CHECK_THROWS_AS(utils::parse_dataclass<accel::ProjectConfiguration>(R"({"project_directory": "x"})"),
                  accel::KeyError);
  CHECK_THROWS_AS(utils::parse_dataclass<accel::AutocastKwargs>(R"({"dtype": "bf16"})"), accel::UnknownFieldError);
}

TEST_CASE("a value of the wrong type names the dataclass, the field and the type", "[utils][dataclasses]") {
  auto expect_type_error = [](auto parse, const std::string& dataclass, const std::string& field,
                              const std::string& expected) {
    try {
      parse();
      FAIL("expected FieldTypeError for " << field);
    } catch (const accel::FieldTypeError& e) {
      CHECK(e.dataclass() == dataclass);
      CHECK(e.field() == field);
      CHECK(e.expected() == expected);
      CHECK_THAT(e.what(), Catch::StartsWith(dataclass + "." + field + ": expected " + expected + ", got "));
    }
  };
  expect_type_error([] { utils::parse_dataclass<accel::GradScalerKwargs>(R"({"init_scale": "big"})"); },
                    "GradScalerKwargs", "init_scale", "float");
  expect_type_error([] { utils::parse_dataclass<accel::GradScalerKwargs>(R"({"growth_interval": 1.5})"); },
                    "GradScalerKwargs", "growth_interval", "int");
  expect_type_error([] { utils::parse_dataclass<accel::GradScalerKwargs>(R"({"enabled": null})"); }, "GradScalerKwargs",
                    "enabled", "bool");
  expect_type_error([] { utils::parse_dataclass<accel::AutocastKwargs>(R"({"cache_enabled": 1})"); }, "AutocastKwargs",
                    "cache_enabled", "Optional[bool]");
  expect_type_error([] { utils::parse_dataclass<accel::GradientAccumulationPlugin>(R"({"num_steps": 3000000000})"); },
                    "GradientAccumulationPlugin", "num_steps", "Optional[int]");
  expect_type_error(
      [] { utils::parse_dataclass<accel::FP8RecipeKwargs>(R"({"override_linear_precision": [true, false]})"); },
      "FP8RecipeKwargs", "override_linear_precision", "Tuple[bool, bool, bool]");
  expect_type_error([] { utils::parse_dataclass<accel::FP8RecipeKwargs>(R"({"backend": ["TE"]})"); }, "FP8RecipeKwargs",
                    "backend", "str");
  expect_type_error(
      [] { utils::parse_dataclass<accel::DistributedDataParallelKwargs>(R"({"comm_state_option": []})"); },
      "DistributedDataParallelKwargs", "comm_state_option", "dict");
  expect_type_error([] { utils::parse_dataclass<accel::DistributedDataParallelKwargs>(R"({"comm_hook": 1})"); },
                    "DistributedDataParallelKwargs", "comm_hook", "DDPCommunicationHookType");
  expect_type_error([] { utils::parse_dataclass<accel::InitProcessGroupKwargs>(R"({"timeout": "30m"})"); },
                    "InitProcessGroupKwargs", "timeout", "Optional[timedelta (whole seconds)]");
  expect_type_error([] { utils::parse_dataclass<accel::TorchDynamoPlugin>(R"({"options": "fast"})"); },
                    "TorchDynamoPlugin", "options", "Optional[dict]");
  expect_type_error([] { utils::parse_dataclass<accel::ProjectConfiguration>(R"({"project_dir": 3})"); },
                    "ProjectConfiguration", "project_dir", "Optional[str]");

  // A FieldTypeError is a FormatError, as is input that is not a JSON object at all.
  CHECK_THROWS_AS(utils::parse_dataclass<accel::GradScalerKwargs>(R"({"enabled": "yes"})"), accel::FormatError);
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::GradScalerKwargs>("[1, 2]"),
                    Catch::Contains("GradScalerKwargs: expected a JSON object, got array"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::GradScalerKwargs>("{\"init_scale\": "),
                    Catch::Contains("GradScalerKwargs: not valid JSON"));
}

TEST_CASE("an unknown enum value names the field and the valid values", "[utils][dataclasses]") {
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::TorchDynamoPlugin>(R"({"backend": "turbo"})"),
                    Catch::Contains("TorchDynamoPlugin.backend: 'turbo' is not a valid DynamoBackend") &&
                        Catch::Contains("INDUCTOR"));
  CHECK_THROWS_AS(utils::parse_dataclass<accel::DistributedDataParallelKwargs>(R"({"comm_hook": "gzip"})"),
                  accel::ValueError);
}

TEST_CASE("reading validates, and validate() rejects what Accelerate rejects", "[utils][dataclasses]") {
  // InitProcessGroupKwargs: a timeout must be positive.
  CHECK_THROWS_WITH((accel::InitProcessGroupKwargs{.timeout = -5s}.validate()),
                    Catch::Contains("InitProcessGroupKwargs: timeout must be positive, got -5 s"));
  CHECK_THROWS_AS((accel::InitProcessGroupKwargs{.timeout = 0s}.validate()), accel::ValueError);
  CHECK_NOTHROW(accel::InitProcessGroupKwargs{.timeout = 1s}.validate());
  CHECK_NOTHROW(accel::InitProcessGroupKwargs{}.validate());
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::InitProcessGroupKwargs>(R"({"timeout": -5})"),
                    Catch::Contains("timeout must be positive"));

  // TorchDynamoPlugin: torch.compile's modes only.
  for (const char* mode : {"default", "reduce-overhead", "max-autotune"}) {
    CHECK_NOTHROW(accel::TorchDynamoPlugin{.mode = mode}.validate());
  }
  CHECK_THROWS_WITH((accel::TorchDynamoPlugin{.mode = "fast"}.validate()),
                    Catch::Contains("TorchDynamoPlugin: mode must be one of") && Catch::Contains("'fast'"));
  CHECK_THROWS_AS(utils::parse_dataclass<accel::TorchDynamoPlugin>(R"({"mode": "fast"})"), accel::ValueError);

  CHECK_THROWS_WITH(utils::parse_dataclass<accel::GradScalerKwargs>(R"({"backoff_factor": 2})"),
                    Catch::Contains("backoff_factor must be in (0, 1)"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::DistributedDataParallelKwargs>(R"({"comm_wrapper": "power_sgd"})"),
                    Catch::Contains("comm_wrapper must be one of no, fp16, bf16"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::DistributedDataParallelKwargs>(R"({"bucket_cap_mb": 0})"),
                    Catch::Contains("bucket_cap_mb must be > 0"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::FP8RecipeKwargs>(R"({"amax_compute_algo": "mean"})"),
                    Catch::Contains("amax_compute_algo"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::GradientAccumulationPlugin>("{}"),
                    Catch::Contains("num_steps is required"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::GradientAccumulationPlugin>(R"({"num_steps": 0})"),
                    Catch::Contains("num_steps must be >= 1"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::ProjectConfiguration>(R"({"automatic_checkpoint_naming": true})"),
                    Catch::Contains("automatic_checkpoint_naming needs a project_dir"));
  CHECK_THROWS_WITH(utils::parse_dataclass<accel::ProjectConfiguration>(R"({"total_limit": 0})"),
                    Catch::Contains("total_limit must be >= 1"));

  // AutocastKwargs has nothing to validate in Accelerate: any booleans read.
  CHECK(utils::parse_dataclass<accel::AutocastKwargs>(R"({"enabled": false, "cache_enabled": null})") ==
        accel::AutocastKwargs{.enabled = false});
}

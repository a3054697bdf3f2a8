#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "accel/utils/autocast.hpp"
#include "accel/utils/constants.hpp"
#include "accel/utils/dataclasses.hpp"
#include "accel/utils/enums.hpp"
#include "accel/utils/environment.hpp"
#include "accel/utils/gradient_accumulation.hpp"
#include "accel/utils/precision.hpp"

using accel::DType;
namespace utils = accel::utils;

TEST_CASE("constants keep Accelerate's file names", "[utils]") {
  CHECK(accel::MODEL_NAME == "pytorch_model");
  CHECK(accel::OPTIMIZER_NAME == "optimizer");
  CHECK(accel::RNG_STATE_NAME == "random_states");
  CHECK(accel::SCALER_NAME == "scaler.pt");
  CHECK(accel::SCHEDULER_NAME == "scheduler");
  CHECK(accel::WEIGHTS_NAME == "pytorch_model.bin");
  CHECK(accel::SAFE_WEIGHTS_NAME == "model.safetensors");
  CHECK(accel::WEIGHTS_INDEX_NAME == "pytorch_model.bin.index.json");
  CHECK(accel::SAFE_WEIGHTS_INDEX_NAME == "model.safetensors.index.json");
}

TEST_CASE("enums parse and print Accelerate's values", "[utils]") {
  CHECK(utils::to_string(accel::DistributedType::multi_gpu) == "MULTI_GPU");
  CHECK(utils::to_string(accel::DistributedType::megatron_lm) == "MEGATRON_LM");
  CHECK(accel::enum_from_string<accel::DistributedType>("MULTI_CPU") == accel::DistributedType::multi_cpu);
  // One enum: the policy tags carry the very values utils parses from a config file.
  STATIC_REQUIRE(std::is_same_v<accel::DistributedType, accel::policy::DistributedType>);
  CHECK(accel::enum_from_string<accel::DistributedType>(accel::policy::multi_gpu<>::distributed_type) ==
        accel::policy::multi_gpu<>::id);
  CHECK(accel::enum_from_string<accel::DistributedType>("multi_neuron") == accel::DistributedType::multi_neuron);
  CHECK(accel::enum_from_string<accel::PrecisionType>("BF16") == accel::PrecisionType::bf16);  // case-insensitive fallback
  CHECK(accel::enum_from_string<accel::DynamoBackend>("inductor") == accel::DynamoBackend::inductor);
  CHECK(utils::to_string(accel::LoggerType::comet_ml) == "comet_ml");
  CHECK(utils::to_string(accel::RNGType::generator) == "generator");
  CHECK(utils::to_string(accel::ComputeEnvironment::amazon_sagemaker) == "AMAZON_SAGEMAKER");
  CHECK(utils::to_string(accel::SageMakerDistributedType::data_parallel) == "DATA_PARALLEL");
  try {
    (void)accel::enum_from_string<accel::PrecisionType>("fp64");
    FAIL("expected ValueError");
  } catch (const accel::ValueError& e) {
    CHECK_THAT(e.what(), Catch::Contains("PrecisionType") && Catch::Contains("no, fp8, fp16, bf16"));
  }
  std::ostringstream os;
  os << accel::RNGType::cuda;
  CHECK(os.str() == "cuda");
}

TEST_CASE("PrecisionType maps to dtypes and precision policies", "[utils]") {
  STATIC_REQUIRE(utils::precision_dtype(accel::PrecisionType::no) == DType::f32);
  STATIC_REQUIRE(utils::precision_dtype(accel::PrecisionType::fp16) == DType::f16);
  STATIC_REQUIRE(utils::precision_dtype(accel::PrecisionType::bf16) == DType::bf16);
  STATIC_REQUIRE(utils::precision_dtype(accel::PrecisionType::fp8) == DType::f8_e4m3fn);
  STATIC_REQUIRE(accel::policy::fp32::id == accel::PrecisionType::no);
  const auto storage = utils::with_precision(accel::enum_from_string<accel::PrecisionType>("fp16"),
                                             [](auto tag) { return decltype(tag)::storage_dtype; });
  CHECK(storage == DType::f16);
}

TEST_CASE("dataclasses carry Accelerate's defaults and validate", "[utils]") {
  accel::GradScalerKwargs gs;
  CHECK(gs.init_scale == 65536.0);
  CHECK(gs.growth_factor == 2.0);
  CHECK(gs.backoff_factor == 0.5);
  CHECK(gs.growth_interval == 2000);
  CHECK(gs.enabled);
  CHECK_THROWS_AS((accel::GradScalerKwargs{.backoff_factor = 1.5}.validate()), accel::ValueError);

  accel::DistributedDataParallelKwargs ddp;
  CHECK(ddp.bucket_cap_mb == 25);
  CHECK(ddp.broadcast_buffers);
  CHECK_FALSE(ddp.find_unused_parameters);
  ddp.comm_wrapper = utils::DDPCommunicationHookType::power_sgd;
  CHECK_THROWS_WITH(ddp.validate(), Catch::Contains("comm_wrapper"));

  accel::InitProcessGroupKwargs pg;
  CHECK(pg.backend == "nccl");
  CHECK(pg.resolved_timeout().count() == 600);
  pg.backend = "mpi";
  CHECK(pg.resolved_timeout().count() == 1800);

  accel::FP8RecipeKwargs fp8;
  CHECK(fp8.fp8_format == "HYBRID");
  CHECK(fp8.amax_history_len == 1024);
  CHECK_NOTHROW(fp8.validate());
  fp8.fp8_format = "E3M4";
  CHECK_THROWS_WITH(fp8.validate(), Catch::Contains("HYBRID or E4M3 or E5M2"));

  accel::AutocastKwargs ak;
  CHECK(ak.enabled);
  CHECK_FALSE(ak.cache_enabled.has_value());

  accel::ProjectConfiguration pc;
  CHECK(pc.iteration == 0);
  pc.set_directories("/tmp/proj");
  CHECK(pc.logging_dir == "/tmp/proj");
  pc.set_directories("/tmp/other");
  CHECK(pc.project_dir == "/tmp/other");
  CHECK(pc.logging_dir == "/tmp/proj");  // an explicit logging_dir is kept
  CHECK_THROWS_AS((accel::ProjectConfiguration{.total_limit = 0}.validate()), accel::ValueError);

  accel::TorchDynamoPlugin dyn;
  CHECK(dyn.backend == accel::DynamoBackend::no);
  {
    auto env = accel::patch_environment({{"ACCELERATE_DYNAMO_BACKEND", "inductor"}, {"ACCELERATE_DYNAMO_MODE", "max-autotune"}});
    auto from_env = accel::TorchDynamoPlugin::from_env();
    CHECK(from_env.backend == accel::DynamoBackend::inductor);
    CHECK(from_env.mode == "max-autotune");
  }
  CHECK_THROWS_AS(accel::GradientAccumulationPlugin{}.validate(), accel::ValueError);
}

TEST_CASE("AutocastScope sets the thread's compute dtype and restores it", "[utils]") {
  CHECK_FALSE(accel::autocast_dtype().has_value());
  {
    accel::AutocastScope outer(DType::bf16);
    CHECK(accel::autocast_dtype() == DType::bf16);
    {
      accel::AutocastScope off(DType::f16, accel::AutocastKwargs{.enabled = false});
      CHECK_FALSE(utils::is_autocast_enabled());
    }
    {
      accel::AutocastScope fp8(accel::PrecisionType::fp8);
      CHECK(accel::autocast_dtype() == DType::bf16);  // fp8 computes in bf16
      accel::AutocastScope fp16(accel::PrecisionType::fp16);
      CHECK(accel::autocast_dtype() == DType::f16);
    }
    CHECK(accel::autocast_dtype() == DType::bf16);
  }
  CHECK_FALSE(accel::autocast_dtype().has_value());
  accel::AutocastScope none(accel::PrecisionType::no);
  CHECK_FALSE(utils::is_autocast_enabled());
}

TEST_CASE("GradientAccumulator says when to sync and step", "[utils]") {
  accel::GradientAccumulator acc(accel::GradientAccumulationPlugin{.num_steps = 3});
  std::vector<bool> syncs;
  for (int i = 0; i < 7; ++i) syncs.push_back(acc.accumulate(/*end_of_dataloader=*/i == 6));
  CHECK(syncs == std::vector<bool>{false, false, true, false, false, true, true});
  CHECK(acc.optimizer_steps() == 3);
  CHECK(acc.step() == 0);

  accel::GradientAccumulator each(accel::GradientAccumulationPlugin{.num_steps = 2, .adjust_scheduler = false,
                                                                    .sync_with_dataloader = false, .sync_each_batch = true});
  CHECK_FALSE(each.accumulate(true));  // sync_with_dataloader off: the end does not force a sync
  CHECK(each.should_all_reduce());
  CHECK(each.scheduler_steps() == 0);
  CHECK(each.accumulate());
  CHECK(each.scheduler_steps() == 1);
  CHECK_THROWS_AS(accel::GradientAccumulator(accel::GradientAccumulationPlugin{.num_steps = 0}), accel::ValueError);
}

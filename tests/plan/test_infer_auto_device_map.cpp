#include <catch2/catch.hpp>

#include "../timing.hpp"
#include "conformance_spec.hpp"

#include <chrono>
#include <sstream>
#include <string>
#include <type_traits>

#include "accel/nn/spec.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/policy/policies.hpp"

using namespace accel;
using plan::MaxMemory;

namespace {
using accel_test::spec;
std::string dump(const DeviceMap& dm) { return plan::to_ordered_json(dm).dump(); }
MaxMemory gpus(std::initializer_list<std::int64_t> budgets) {
  MaxMemory mm;
  int i = 0;
  for (auto b : budgets) mm.add(Placement::gpu(i++), ByteSize(b));
  return mm;
}
}  // namespace

TEST_CASE("The main devices keep room for the largest layer not placed yet", "[plan][infer]") {
  auto m = spec("toy_model_for_test");  // linear1 64, batchnorm 72, linear2 100
  CHECK(dump(infer_auto_device_map(*m, gpus({236}))) == R"({"":0})");
  CHECK(dump(infer_auto_device_map(*m, gpus({235}))) == R"({"linear1":0,"batchnorm":"disk","linear2":"disk"})");
  CHECK(dump(infer_auto_device_map(*m, gpus({200, 200}))) == R"({"linear1":0,"batchnorm":1,"linear2":1})");
  // GPU 1 has no reserve: 172 = 72 + 100 exactly.
  CHECK(dump(infer_auto_device_map(*m, gpus({200, 172, 200}))) == R"({"linear1":0,"batchnorm":1,"linear2":1})");
  MaxMemory cpu_only{{Placement::cpu(), ByteSize(235)}};
  CHECK(dump(infer_auto_device_map(*m, cpu_only)) == R"({"linear1":"cpu","batchnorm":"disk","linear2":"disk"})");
  plan::InferOptions no_clean;
  no_clean.clean_result = false;
  CHECK(infer_auto_device_map(*m, gpus({236}), no_clean).size() == 3);
}

TEST_CASE("A tied parameter drags its module along", "[plan][infer]") {
  auto gpt2 = spec("gpt2_tiny");
  plan::InferOptions o;
  o.no_split_module_classes = {"GPT2Block"};
  const auto dm = infer_auto_device_map(*gpt2, gpus({205065, 205065}), o);
  CHECK(dm.entries()[0].first == "transformer.wte");
  CHECK(dm.entries()[1].first == "lm_head");  // placed right after wte, ahead of its turn
  CHECK(dm.find("lm_head") == Placement::gpu(0));
  CHECK(dm.find("transformer.h.3") == Placement::disk());
}

TEST_CASE("verbose explains the decisions; warnings report buffers that fit no GPU", "[plan][infer]") {
  auto m = spec("toy_buffers_check");
  std::ostringstream log, warn;
  plan::InferOptions o;
  o.verbose = true;
  o.log = &log;
  o.warnings = &warn;
  MaxMemory mm = gpus({400});
  mm.add(Placement::cpu(), ByteSize(1'000'000'000));
  CHECK(dump(infer_auto_device_map(*m, mm, o)) == R"({"linear1":0,"batchnorm":"cpu","linear2":"cpu"})");
  CHECK(log.str().find("Treating module batchnorm") != std::string::npos);
  CHECK(log.str().find("Not enough space on 0") != std::string::npos);
  CHECK(warn.str().find("offload_buffers") != std::string::npos);
  std::ostringstream quiet;
  o.verbose = false;
  o.offload_buffers = true;
  o.warnings = &quiet;
  infer_auto_device_map(*m, mm, o);
  CHECK(quiet.str().empty());
}

TEST_CASE("fallback_allocation fills an empty device with a later module", "[plan][infer]") {
  auto m = spec("toy_fallback");
  plan::InferOptions o;
  CHECK(dump(infer_auto_device_map(*m, gpus({256}), o)) == R"({"":"disk"})");
  o.fallback_allocation = true;
  CHECK(dump(infer_auto_device_map(*m, gpus({256}), o)) ==
        R"({"module.linear2":0,"module.linear1":"disk","module.linear3":"disk"})");
}

TEST_CASE("Where Accelerate crashes on tied names, the port returns a valid map", "[plan][infer]") {
  // A module "1" and a parameter "11.weight": Accelerate's substring test matches "1" in "11.weight".
  const auto j = nlohmann::json::parse(R"({"format": "accelerate-oracle-spec/v1",
    "root": {"name": "", "class": "Seq", "children": [
      {"name": "1", "class": "Linear", "params": [{"name": "weight", "shape": [10, 10]}]},
      {"name": "2", "class": "Linear", "params": [{"name": "weight", "shape": [10, 10]}]},
      {"name": "11", "class": "Linear", "params": [{"name": "weight", "shape": [10, 10]}]}]},
    "tied": [["2.weight", "11.weight"]]})");
  auto m = nn::module_from_spec(j);
  MaxMemory mm = gpus({500, 500});
  const auto dm = infer_auto_device_map(*m, mm);
  CHECK_NOTHROW(check_device_map(*m, dm));
  CHECK(dm.lookup("11.weight") == dm.lookup("2.weight"));
  // A module registered twice: its second path weighs nothing and need not be placed.
  const auto k = nlohmann::json::parse(R"({"format": "accelerate-oracle-spec/v1",
    "root": {"name": "", "class": "Seq", "children": [
      {"name": "0", "class": "Linear", "params": [{"name": "weight", "shape": [10, 10]}]},
      {"name": "1", "alias_of": "0"},
      {"name": "2", "class": "Linear", "params": [{"name": "weight", "shape": [10, 10]}]}]}})");
  auto seq = nn::module_from_spec(k);
  const auto dm2 = infer_auto_device_map(*seq, gpus({450, 1000}));
  CHECK_NOTHROW(check_device_map(*seq, dm2));
}

TEST_CASE("The runtime reserve shrinks budgets; without it maps are Accelerate's", "[plan][infer][reserve]") {
  const ByteSize kv = plan::estimate_kv_cache_bytes({80, 8, 128, 8192, 1, DType::bf16});
  CHECK(kv == ByteSize(2LL * 80 * 8 * 128 * 8192 * 2));
  CHECK_THROWS_AS(plan::estimate_kv_cache_bytes({-1, 8, 128, 8192, 1, DType::bf16}), ValueError);
  auto m = spec("toy_model_for_test");
  plan::InferOptions o;
  o.reserve = plan::spread_kv_cache_reserve(ByteSize(2), {0});
  CHECK(o.reserve.size() == 1);
  // 238 - 2 = 236: everything still fits; 237 - 2 = 235 spills like Accelerate's 235.
  CHECK(dump(infer_auto_device_map(*m, gpus({238}), o)) == R"({"":0})");
  CHECK(dump(infer_auto_device_map(*m, gpus({237}), o)) == R"({"linear1":0,"batchnorm":"disk","linear2":"disk"})");
  // mps is an Accelerate device but no accel one: its budget is refused before any planning.
  CHECK_THROWS_AS(infer_auto_device_map(*m, plan::parse_max_memory("mps=100")), DeviceError);
}

TEST_CASE("A policy bundle sizes in its precision and keeps room for prefetched layers", "[plan][infer][policy]") {
  auto m = spec("toy_model_for_test");  // linear1 64, batchnorm 72, linear2 100 bytes in f32
  using Plain = policies<>;
  const auto plain = infer_auto_device_map<Plain>(*m, gpus({236}));
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(plain)>, DeviceMap>);  // the bundle shapes the plan only
  CHECK(dump(plain) == dump(infer_auto_device_map(*m, gpus({236}))));

  // prefetch<2> keeps two more of the largest layer (100 bytes) free on the execution device, each
  // with the slack of an aligned read (plan::read_ahead_reserve).
  using Prefetch2 = policies<policy::prefetch<2>>;
  const std::int64_t slack = 2 * 3 * static_cast<std::int64_t>(io::WeightFileReader::alignment);
  CHECK(offload_policy_reserve<Prefetch2>(*m, gpus({436, 500}), {}) == MaxMemory{{Placement::gpu(0), ByteSize(200 + slack)}});
  CHECK(offload_policy_reserve<Prefetch2>(*m, {{Placement::cpu(), ByteSize(1000)}}, {}) ==
        MaxMemory{{Placement::cpu(), ByteSize(200 + slack)}});
  CHECK(offload_policy_reserve<Prefetch2>(*m, gpus({436}), {}) ==
        MaxMemory{{Placement::gpu(0), plan::read_ahead_reserve(*m, {}, 2).bytes}});  // one reserve function
  CHECK(offload_policy_reserve<policies<policy::sync_offload>>(*m, gpus({436}), {}).empty());
  CHECK(dump(infer_auto_device_map<Prefetch2>(*m, gpus({436 + slack}))) == R"({"":0})");
  CHECK(dump(infer_auto_device_map<Prefetch2>(*m, gpus({435 + slack}))) == R"({"linear1":0,"batchnorm":"disk","linear2":"disk"})");
  // The policy's reserve adds to the caller's.
  plan::InferOptions with_reserve;
  with_reserve.reserve = {{Placement::gpu(0), ByteSize(10)}};
  CHECK(dump(infer_auto_device_map<Prefetch2>(*m, gpus({446 + slack}), with_reserve)) == R"({"":0})");
  CHECK(dump(infer_auto_device_map<Prefetch2>(*m, gpus({445 + slack}), with_reserve)) != R"({"":0})");

  // bf16 sizes floating weights in two bytes: the model needs half of the f32 budget.
  using Bf16 = policies<policy::bf16>;
  plan::InferOptions bf16_sizes;
  bf16_sizes.sizes.dtype = DType::bf16;
  for (std::int64_t budget : {100, 118, 119, 130, 236}) {
    INFO("budget " << budget);
    CHECK(dump(infer_auto_device_map<Bf16>(*m, gpus({budget}))) == dump(infer_auto_device_map(*m, gpus({budget}), bf16_sizes)));
  }
  CHECK(dump(infer_auto_device_map<Bf16>(*m, gpus({130}))) != dump(infer_auto_device_map(*m, gpus({130}))));
  // An explicit dtype in the options wins over the policy's.
  plan::InferOptions f32_sizes;
  f32_sizes.sizes.dtype = DType::f32;
  CHECK(dump(infer_auto_device_map<Bf16>(*m, gpus({130}), f32_sizes)) == dump(infer_auto_device_map(*m, gpus({130}))));
}

TEST_CASE("fallback_allocation ends on weights tied across modules under small budgets", "[plan][infer][fallback]") {
  // a, b and c share one weight (counted under a): b and c weigh their biases only; d is the
  // largest layer, which the first GPU keeps room for.
  const auto j = nlohmann::json::parse(R"({"format": "accelerate-oracle-spec/v1",
    "root": {"name": "", "class": "Seq", "children": [
      {"name": "a", "class": "Linear", "params": [{"name": "weight", "shape": [5]}]},
      {"name": "b", "class": "Linear", "params": [{"name": "weight", "shape": [5]}, {"name": "bias", "shape": [5]}]},
      {"name": "c", "class": "Linear", "params": [{"name": "weight", "shape": [5]}, {"name": "bias", "shape": [5]}]},
      {"name": "d", "class": "Linear", "params": [{"name": "weight", "shape": [20]}]}]},
    "tied": [["a.weight", "b.weight", "c.weight"]]})");
  auto m = nn::module_from_spec(j);
  plan::InferOptions o;
  o.fallback_allocation = true;
  for (std::int64_t budget = 0; budget <= 200; budget += 5) {
    for (std::int64_t cpu : {0, 30, 1000}) {
      INFO("gpu 0 " << budget << ", cpu " << cpu);
      MaxMemory mm = gpus({budget});
      mm.add(Placement::cpu(), ByteSize(cpu));
      const auto dm = infer_auto_device_map(*m, mm, o);
      CHECK_NOTHROW(check_device_map(*m, dm));
      CHECK(dm.lookup("a.weight") == dm.lookup("b.weight"));
      CHECK(dm.lookup("a.weight") == dm.lookup("c.weight"));
    }
  }
}

TEST_CASE("A model of 50,000 tensors under one module is sized and placed in linear time", "[plan][hostile]") {
  // A checkpoint without dotted names becomes one module holding every tensor: the planner's
  // per-module deduplication and its largest-layer bookkeeping must not scan that list per entry.
  constexpr int n = 50'000;
  nn::Module root("Checkpoint");
  for (int i = 0; i < n; ++i) {
    root.register_parameter("t" + std::to_string(i), Tensor::empty({i % 3}, DType::f32, Device::meta()));
  }
  // Quadratic bookkeeping took over 10 s here.
  const double bound = accel_test::seconds_bound(2.0);
  plan::ModuleSizes sizes;
  DeviceMap dm;
  const double seconds = accel_test::fastest_within(bound, [&] {
    return accel_test::seconds_of([&] {
      sizes = plan::compute_module_sizes(root);
      dm = infer_auto_device_map(root, plan::parse_max_memory("0=40000,cpu=1GB"));
    });
  });
  std::int64_t expected = 0;
  for (int i = 0; i < n; ++i) expected += 4 * (i % 3);
  CHECK(sizes[""] == ByteSize(expected));
  CHECK(dm.size() >= 2);
  CHECK(seconds < bound);
}

TEST_CASE("Unset max_memory is the machine's probe, as Accelerate's None; an empty one has only disk", "[plan][infer]") {
  auto m = spec("toy_model_for_test");  // 236 bytes: any machine's CPU holds it
  const MaxMemory probed = plan::get_max_memory();
  CHECK(dump(infer_auto_device_map(*m)) == dump(infer_auto_device_map(*m, probed)));
  plan::InferOptions no_clean;
  no_clean.clean_result = false;
  CHECK(dump(infer_auto_device_map(*m, std::nullopt, no_clean)) == dump(infer_auto_device_map(*m, probed, no_clean)));
  CHECK(plan::get_balanced_memory(*m).size() == probed.size());
  if (!cuda_is_available()) CHECK(dump(infer_auto_device_map(*m)) == R"({"":"cpu"})");
  CHECK(dump(infer_auto_device_map(*m, MaxMemory{})) == R"({"":"disk"})");
  CHECK(dump(infer_auto_device_map<policies<>>(*m)) == dump(infer_auto_device_map(*m, probed)));
}

#include <chrono>
#include <sstream>
#include <string>
#include <catch2/catch.hpp>

#include "../timing.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/spec.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/max_memory.hpp"

using namespace accel;
using plan::DeviceMap;

TEST_CASE("DeviceMap looks tensors up by the longest dotted prefix", "[plan][device_map]") {
  DeviceMap dm;
  dm.set("model", Placement::cpu());
  dm.set("model.layers.1", Placement::gpu(1));
  dm.set("model.layers.10", Placement::disk());
  CHECK(dm.lookup("model.layers.1.mlp.weight") == Placement::gpu(1));
  CHECK(dm.lookup("model.layers.10.mlp.weight") == Placement::disk());
  CHECK(dm.lookup("model.layers.2.mlp.weight") == Placement::cpu());
  CHECK_FALSE(dm.lookup("lm_head.weight").has_value());
  dm.set("model", Placement::gpu(0));  // updated in place
  CHECK(dm.entries().front().second == Placement::gpu(0));
  const auto j = plan::to_ordered_json(dm);
  CHECK(j.dump() == R"({"model":0,"model.layers.1":1,"model.layers.10":"disk"})");
  CHECK(plan::device_map_from_json(j) == dm);
  dm.set("", Placement::cpu());  // the root covers what no other key does
  CHECK(dm.lookup("lm_head.weight") == Placement::cpu());
  CHECK(dm.lookup("model.layers.1") == Placement::gpu(1));
  CHECK(dm.find("model.layers") == std::nullopt);
  CHECK(dm.erase("model.layers.1"));
  CHECK_FALSE(dm.erase("model.layers.1"));
  CHECK(dm.lookup("model.layers.1.mlp.weight") == Placement::gpu(0));
  CHECK(dm.lookup("model.layers.10.mlp.weight") == Placement::disk());  // positions after the erased key moved
  CHECK(plan::to_ordered_json(dm).dump() == R"({"model":0,"model.layers.10":"disk","":"cpu"})");
  CHECK(plan::to_json(dm) == nlohmann::json::parse(R"({"":"cpu","model":0,"model.layers.10":"disk"})"));
}

TEST_CASE("A split mixture-of-experts map is looked up and checked in linear time", "[plan][device_map][hostile]") {
  // 61 layers of 256 experts, each its own key, as the planner leaves a model it had to split:
  // scanning every key per tensor took 1.8 s for the lookups alone.
  constexpr int layers = 61, experts = 256;
  nn::Module root("Moe");
  DeviceMap dm;
  {
    auto scope = nn::init_empty_weights();
    auto model = root.register_module("model", std::make_shared<nn::Module>("Model"));
    auto list = model->register_module("layers", std::make_shared<nn::Module>("Layers"));
    for (int l = 0; l < layers; ++l) {
      auto layer = list->register_module(std::to_string(l), std::make_shared<nn::Module>("Layer"));
      auto ex = layer->register_module("experts", std::make_shared<nn::Module>("Experts"));
      for (int e = 0; e < experts; ++e) {
        auto expert = ex->register_module(std::to_string(e), std::make_shared<nn::Module>("Expert"));
        for (const char* w : {"gate", "up", "down"}) expert->register_parameter(w, Tensor::empty(Shape{1}, DType::f32));
        dm.set("model.layers." + std::to_string(l) + ".experts." + std::to_string(e), Placement::gpu(e % 2));
      }
    }
  }
  const double bound = accel_test::seconds_bound(2.0);
  int placed = 0;
  std::string to_json_text;
  const double seconds = accel_test::fastest_within(bound, [&] {
    return accel_test::seconds_of([&] {
      placed = 0;
      for (const auto& [name, t] : root.named_parameters()) placed += dm.lookup(name).has_value();
      CHECK_NOTHROW(check_device_map(root, dm));
      to_json_text = plan::to_ordered_json(dm).dump();
    });
  });
  CHECK(placed == layers * experts * 3);
  CHECK(dm.lookup("model.layers.60.experts.255.down") == Placement::gpu(1));
  CHECK(to_json_text.size() > 0);
  CHECK(seconds < bound);
}

TEST_CASE("clean_device_map groups children sharing a device", "[plan][device_map]") {
  auto from = [](const char* text) { return plan::device_map_from_json(nlohmann::ordered_json::parse(text)); };
  CHECK(plan::to_ordered_json(clean_device_map(from(R"({"a": 0, "b": 0, "c": 0})"))).dump() == R"({"":0})");
  CHECK(plan::to_ordered_json(clean_device_map(from(R"({"a.x": 0, "a.y": 0, "b.x": 1, "b.y": 1, "c": 1})"))).dump() ==
        R"({"c":1,"a":0,"b":1})");
  CHECK(plan::to_ordered_json(clean_device_map(from(R"({"layer1.a": 0, "layer1.b": 0, "layer10": 1, "layer1": 0})"))).dump() ==
        R"({"layer10":1,"layer1":0})");
}

TEST_CASE("check_device_map requires every tensor exactly once", "[plan][device_map]") {
  auto m = nn::module_from_spec_file(std::string(ACCEL_SHARED_DIR) + "/conformance/accelerate/specs/toy_model_for_test.json");
  DeviceMap dm;
  dm.set("linear1", 0);
  dm.set("batchnorm", Placement::cpu());
  CHECK_THROWS_AS(check_device_map(*m, dm), ValueError);  // linear2 missing
  dm.set("linear2", Placement::disk());
  CHECK_NOTHROW(check_device_map(*m, dm));
  dm.set("linear2.weight", 0);
  CHECK_THROWS_AS(check_device_map(*m, dm), ValueError);  // placed twice
}

TEST_CASE("max_memory keys are ordered and validated as Accelerate does", "[plan][max_memory]") {
  const auto mm = plan::parse_max_memory("cpu=1GB,disk=2GiB,1=10MB,0=5");
  REQUIRE(mm.size() == 4);
  CHECK(mm.entries()[0].first == Placement::gpu(0));
  CHECK(mm.entries()[0].second == ByteSize(5));
  CHECK(mm.entries()[1].second == ByteSize(10'000'000));
  CHECK(mm.entries()[2].first == Placement::cpu());
  CHECK(mm.entries()[3].second == ByteSize(2147483648LL));
  CHECK_THROWS_AS(plan::parse_max_memory("gpu=10"), ValueError);
  CHECK_THROWS_AS(plan::parse_max_memory("0=1GB,0=2GB"), ValueError);
  CHECK_THROWS_AS(plan::parse_max_memory("0"), ValueError);
}

TEST_CASE("parse_max_memory names the option, refuses overflow and warns about bits", "[plan][max_memory]") {
  CHECK_THROWS_WITH(plan::parse_max_memory("0=18446744073709551616", "--max-memory"),
                    Catch::Contains("--max-memory 0: 18446744073709551616 is out of range"));
  CHECK_THROWS_WITH(plan::parse_max_memory("cpu=99999999999GB"), Catch::Contains("max_memory cpu") &&
                                                                     Catch::Contains("out of range"));
  CHECK_THROWS_WITH(plan::parse_max_memory("0=12XB", "--reserve"), Catch::Contains("'12XB' is not a size"));
  CHECK_THROWS_AS(plan::parse_max_memory("mps=1GB"), DeviceError);
  std::ostringstream warnings;
  const auto mm = plan::parse_max_memory("0=200mb,cpu=1MB", "--max-memory", &warnings);
  CHECK(*mm.find(Placement::gpu(0)) == ByteSize(25'000'000));
  CHECK(warnings.str().find("'200mb' counts bits") != std::string::npos);
  CHECK(warnings.str().find("write 200MB") != std::string::npos);
  CHECK(warnings.str().find("cpu") == std::string::npos);
}

TEST_CASE("MaxMemory keeps Accelerate's order, sums additions and floors reserves", "[plan][max_memory]") {
  plan::MaxMemory mm;
  mm.add(Placement::disk(), ByteSize(9));
  mm.add(Placement::cpu(), ByteSize(5));
  mm.add(Placement::gpu(1), ByteSize(3));
  mm.add(Placement::gpu(0), ByteSize(2));
  mm.add(Placement::gpu(1), ByteSize(4));
  REQUIRE(mm.size() == 4);
  CHECK(mm.entries()[0].first == Placement::gpu(0));
  CHECK(mm.entries()[1] == plan::MaxMemory::Entry{Placement::gpu(1), ByteSize(7)});
  CHECK(mm.entries()[3].first == Placement::disk());
  mm.reserve(Placement::cpu(), ByteSize(2));
  mm.reserve(Placement::gpu(0), ByteSize(10));
  mm.reserve(Placement::gpu(5), ByteSize(1));  // no budget: nothing to take from
  CHECK(*mm.find(Placement::cpu()) == ByteSize(3));
  CHECK(*mm.find(Placement::gpu(0)) == ByteSize(0));
  CHECK(mm.find(Placement::gpu(5)) == nullptr);
  CHECK_THROWS_AS(mm.insert(Placement::cpu(), ByteSize(1)), ValueError);
  CHECK_THROWS_AS(mm.add(Placement(Device::meta()), ByteSize(1)), ValueError);
  CHECK(plan::parse_memory_key("cuda:2") == Placement::gpu(2));
  CHECK_THROWS_AS(plan::parse_memory_key("mps"), DeviceError);
}

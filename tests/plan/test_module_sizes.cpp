#include <catch2/catch.hpp>

#include "conformance_spec.hpp"

#include <string>

#include "accel/nn/spec.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"

using namespace accel;

namespace {
using accel_test::spec;
}  // namespace

TEST_CASE("compute_module_sizes keys and sizes match Accelerate on ModelForTest", "[plan][sizes]") {
  auto m = spec("toy_model_for_test");
  const auto sizes = compute_module_sizes(*m);
  std::vector<std::string> keys;
  for (const auto& [k, v] : sizes) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"", "linear1", "linear1.weight", "linear1.bias", "batchnorm",
                                         "batchnorm.weight", "batchnorm.bias", "linear2", "linear2.weight",
                                         "linear2.bias", "batchnorm.running_mean", "batchnorm.running_var",
                                         "batchnorm.num_batches_tracked"});
  CHECK(sizes[""] == ByteSize(236));
  CHECK(sizes["batchnorm"] == ByteSize(72));
  CHECK(sizes["nothing"] == ByteSize(0));
  plan::SizeOptions fp16;
  fp16.dtype = DType::f16;
  CHECK(compute_module_sizes(*m, fp16)["batchnorm.num_batches_tracked"] == ByteSize(8));  // int64 stays
  CHECK(compute_module_sizes(*m, fp16)[""] == ByteSize(122));
  CHECK(compute_module_total_buffer_size(*m) == ByteSize(40));
  const auto buffers = compute_module_sizes(*m, {}, true);
  CHECK(buffers.size() == 5);
  CHECK(buffers["batchnorm"] == ByteSize(40));
}

TEST_CASE("Tied and bool tensors: counted once, bools at 1/8 byte", "[plan][sizes]") {
  auto gpt2 = spec("gpt2_tiny");
  const auto sizes = compute_module_sizes(*gpt2);
  CHECK_FALSE(sizes.contains("lm_head"));
  CHECK_FALSE(sizes.contains("lm_head.weight"));
  CHECK(sizes["transformer.h.0.attn.bias"].bytes() == 512.0);  // 64 x 64 bools
  plan::SizeOptions special;
  special.special_dtypes["lm_head.weight"] = DType::f64;  // not a counted name: no effect
  CHECK(compute_module_sizes(*gpt2, special)[""] == sizes[""]);
  special.special_dtypes = {{"transformer.wte.weight", DType::f64}};
  CHECK(compute_module_sizes(*gpt2, special)["transformer.wte"] == ByteSize(1000 * 32 * 8));
}

TEST_CASE("get_max_layer_size and calculate_maximum_sizes", "[plan][sizes]") {
  auto m = spec("toy_nested");
  auto r = get_max_layer_size(*m);
  CHECK(r.max_size == ByteSize(4224));
  CHECK(r.layer_names == std::vector<std::string>{"encoder.1.proj", "encoder.1.inner.0", "encoder.2.proj", "encoder.2.inner.0"});
  r = get_max_layer_size(*m, std::nullopt, {"Block"});
  CHECK(r.layer_names == std::vector<std::string>{"encoder.1", "encoder.2"});
  CHECK_THROWS_AS(get_max_layer_size(*m, std::vector<std::string>{"missing"}), KeyError);
  const auto all = calculate_maximum_sizes(*m);
  CHECK(all.total_size == ByteSize(30044));
  CHECK(all.largest_layer.max_size == ByteSize(12672));
}

TEST_CASE("Sizes past what a size counts are an OverflowError naming the tensor or module", "[plan][sizes][overflow]") {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const OverflowError& e) {
      return std::string(e.what());
    }
    return std::string("no OverflowError");
  };
  // One parameter of 10^18 float32 elements: 4 * 10^18 bytes, past the 2^60 a ByteSize holds.
  auto one = nn::module_from_spec(nlohmann::json::parse(R"({"format": "accelerate-oracle-spec/v1",
    "root": {"name": "", "class": "M", "children": [
      {"name": "embed", "class": "Embedding", "params": [{"name": "weight", "shape": [1000000000, 1000000000]}]}]}})"));
  const std::string e1 = message([&] { compute_module_sizes(*one); });
  CHECK(e1.find("parameter 'embed.weight'") != std::string::npos);
  CHECK(e1.find("[1000000000, 1000000000]") != std::string::npos);
  CHECK(message([&] { infer_auto_device_map(*one, {{Placement::gpu(0), ByteSize(1000)}}); }) == e1);
  CHECK(message([&] { calculate_maximum_sizes(*one); }) == e1);
  // As int8 it is 10^18 bytes, which fits: sized, not refused.
  plan::SizeOptions int8;
  int8.special_dtypes["embed.weight"] = DType::i8;
  CHECK(compute_module_sizes(*one, int8)[""] == ByteSize(1'000'000'000'000'000'000));

  // Ten layers of 4 * 10^17 bytes each fit one by one; their sum does not.
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < 10; ++i) {
    layers.push_back({{"name", std::to_string(i)}, {"class", "Block"},
                      {"params", {{{"name", "weight"}, {"shape", {100'000'000, 1'000'000'000}}}}}});
  }
  auto many = nn::module_from_spec({{"format", "accelerate-oracle-spec/v1"},
                                    {"root", {{"name", ""}, {"class", "M"},
                                              {"children", {{{"name", "layers"}, {"class", "List"}, {"children", layers}}}}}}});
  const std::string e2 = message([&] { compute_module_sizes(*many); });
  CHECK(e2.find("under module 'layers'") != std::string::npos);
  CHECK(message([&] { get_balanced_memory(*many, {{Placement::gpu(0), ByteSize(1)}, {Placement::gpu(1), ByteSize(1)}}); }) == e2);

  // Budgets and reserves: a size past 2^60 bytes names its entry instead of wrapping.
  CHECK(message([] { plan::parse_max_memory("0=2000000000000000000"); }).find("max_memory 0: 2000000000000000000 is out of range") !=
        std::string::npos);
  CHECK(message([] { plan::parse_max_memory("cpu=99999999999999999999"); })
            .find("max_memory cpu: 99999999999999999999 is out of range") != std::string::npos);
  CHECK(message([] { plan::parse_max_memory("0=5000000000GB"); }).find("max_memory 0: 5000000000GB is out of range") !=
        std::string::npos);
  CHECK(message([] { plan::estimate_kv_cache_bytes({1'000'000, 1'000'000, 1'000'000, 1'000'000, 1, DType::f16}); })
            .find("estimate_kv_cache_bytes") != std::string::npos);
}

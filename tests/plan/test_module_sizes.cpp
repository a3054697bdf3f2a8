#include <catch2/catch.hpp>

#include <string>

#include "accel/nn/spec.hpp"
#include "accel/plan/module_sizes.hpp"

using namespace accel;

namespace {
std::shared_ptr<nn::Module> spec(const char* name) {
  return nn::module_from_spec_file(std::string(ACCEL_SHARED_DIR) + "/conformance/accelerate/specs/" + name + ".json");
}
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

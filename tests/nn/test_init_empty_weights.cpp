#include <catch2/catch.hpp>

#include "../timing.hpp"
#include <chrono>
#include <memory>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"

using namespace accel;

TEST_CASE("1000 Linear(10000, 10000) under init_empty_weights take no memory and < 1 s", "[nn][init]") {
  const auto before = memory_stats(Device::cpu());
  const double bound = accel_test::seconds_bound(1.0);
  std::vector<std::shared_ptr<nn::Linear>> layers;
  const double secs = accel_test::fastest_within(bound, [&] {
    layers.clear();
    return accel_test::seconds_of([&] {
      auto guard = nn::init_empty_weights();
      for (int i = 0; i < 1000; ++i) layers.push_back(std::make_shared<nn::Linear>(10000, 10000));
    });
  });
  const auto after = memory_stats(Device::cpu());
  CHECK(secs < bound);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.peak_allocated_bytes == before.peak_allocated_bytes);  // nothing allocated on cpu first
  CHECK(layers[999]->weight().is_meta());
  CHECK(layers[999]->weight().shape() == Shape{10000, 10000});
  CHECK(layers[0]->bias().is_meta());
}

TEST_CASE("Init scopes nest, restore, and treat buffers per include_buffers", "[nn][init]") {
  CHECK_FALSE(nn::current_init_context().device.has_value());
  {
    auto outer = nn::init_empty_weights(/*include_buffers=*/false);
    nn::Module m("M");
    m.register_parameter("p", Tensor::zeros({2}));
    m.register_buffer("b", Tensor::zeros({2}));
    CHECK(m.get_parameter("p").is_meta());
    CHECK(m.get_buffer("b").is_cpu());
    {
      auto inner = nn::init_on_device(Device::cpu(), true);
      CHECK(nn::new_parameter_tensor({3}).is_cpu());
      CHECK(nn::new_parameter_tensor({3}, DType::f32, 1.0, true).is_cpu());
    }
    CHECK(nn::current_init_context().device == Device::meta());
    auto guard = nn::init_empty_weights(true);
    m.register_buffer("b2", Tensor::zeros({2}));
    CHECK(m.get_buffer("b2").is_meta());
  }
  CHECK_FALSE(nn::current_init_context().device.has_value());
  nn::Linear cpu_linear(3, 2);
  CHECK(cpu_linear.weight().is_cpu());
}

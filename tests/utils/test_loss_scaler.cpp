#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/utils/loss_scaler.hpp"

using accel::DType;
using accel::Tensor;

TEST_CASE("DynamicLossScaler scales, unscales nested gradients and steps", "[utils]") {
  accel::DynamicLossScaler scaler(accel::GradScalerKwargs{.init_scale = 8.0, .growth_interval = 2});
  Tensor loss = Tensor::full({}, 1.5);
  CHECK(scaler.scale(loss).item<float>() == 12.f);
  CHECK(loss.item<float>() == 1.5f);  // the loss itself is untouched

  std::map<std::string, std::vector<Tensor>> grads{{"w", {Tensor::full({3}, 16.0), Tensor::full({2}, 8.0, DType::f16)}},
                                                   {"b", {Tensor::full({2, 2}, 4.0).t()}}};
  int steps = 0;
  CHECK(scaler.step(grads, [&] { ++steps; }));
  CHECK(steps == 1);
  CHECK(grads.at("w")[0].at<float>({2}) == 2.f);
  CHECK(grads.at("w")[1].at<float>({0}) == 1.f);
  CHECK(grads.at("b")[0].at<float>({1, 0}) == 0.5f);  // non-contiguous view written back
  CHECK_THROWS_AS(scaler.unscale_(grads), accel::ValueError);  // twice before update
  scaler.update();
  CHECK(scaler.get_scale() == 8.0);
  CHECK(scaler.growth_tracker() == 1);

  std::vector<Tensor> clean{Tensor::full({2}, 1.0)};
  CHECK_FALSE(scaler.unscale_(clean));
  scaler.update();  // second clean step: grows
  CHECK(scaler.get_scale() == 16.0);
  CHECK(scaler.growth_tracker() == 0);

  std::vector<Tensor> overflow{Tensor::full({2}, 1.0), Tensor::full({1}, std::numeric_limits<double>::infinity())};
  CHECK_FALSE(scaler.step(overflow, [&] { ++steps; }));
  CHECK(steps == 1);
  scaler.update();
  CHECK(scaler.get_scale() == 8.0);  // backed off
  std::vector<Tensor> nan{Tensor::full({1}, std::nan(""), DType::bf16)};
  CHECK(scaler.unscale_(nan));
  scaler.update();
  CHECK(scaler.get_scale() == 4.0);

  auto st = scaler.state_dict();
  accel::DynamicLossScaler other;
  other.load_state_dict(st);
  CHECK(other.get_scale() == 4.0);
  CHECK(other.state_dict().growth_interval == 2);
  st.growth_tracker = 5;
  CHECK_THROWS_AS(other.load_state_dict(st), accel::ValueError);

  std::vector<Tensor> ints{Tensor::ones({2}, DType::i32)};
  CHECK_THROWS_AS(other.unscale_(ints), accel::DTypeError);
}

TEST_CASE("a disabled DynamicLossScaler passes everything through", "[utils]") {
  accel::DynamicLossScaler off(accel::GradScalerKwargs{.enabled = false});
  Tensor loss = Tensor::full({}, 3.0);
  CHECK(off.scale(loss).is_same(loss));
  std::vector<Tensor> g{Tensor::full({1}, std::numeric_limits<double>::infinity())};
  bool ran = false;
  CHECK(off.step(g, [&] { ran = true; }));
  CHECK(ran);
  CHECK(off.get_scale() == 1.0);
  CHECK_THROWS_AS(accel::DynamicLossScaler(accel::GradScalerKwargs{.growth_factor = 0.5}), accel::ValueError);
}

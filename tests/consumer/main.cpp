// A user's program: includes the umbrella header and uses the tensor layer.
#include <accel/accel.hpp>

#include <cstdio>

int main() {
  auto t = accel::Tensor::ones({2, 3}, accel::DType::bf16);
  const float sum = t.to(accel::DType::f32).at<float>({1, 2}) * 6.0f;
  std::printf("consumer ok: %s %.1f\n", t.str().c_str(), sum);
  return sum == 6.0f ? 0 : 1;
}

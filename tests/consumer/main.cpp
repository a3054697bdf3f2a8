// A user's program: includes the umbrella header and uses the tensor layer, and SHA-256 so that
// the link to libcrypto the package exports is exercised.
#include <accel/accel.hpp>

#include <cstdio>
#include <string>

int main() {
  auto t = accel::Tensor::ones({2, 3}, accel::DType::bf16);
  const float sum = t.to(accel::DType::f32).at<float>({1, 2}) * 6.0f;
  const std::string abc = accel::io::sha256_hex("abc");
  std::printf("consumer ok: %s %.1f sha256(abc) %s\n", t.str().c_str(), sum, abc.c_str());
  return sum == 6.0f && abc == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" ? 0 : 1;
}

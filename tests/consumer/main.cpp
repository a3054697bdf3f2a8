// A user's program: includes the umbrella header and uses the tensor layer, and SHA-256 so that
// the link to libcrypto the package exports is exercised. It is built with the compiler's default
// -march, as a user's would be, so it also runs the SIMD kernels from a translation unit that
// knows nothing wider than SSE2: their buffers and blocks must not rely on this unit's alignment.
#include <accel/accel.hpp>
#include <accel/quant/kernels/ggml_repack.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (auto& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = static_cast<float>((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return v;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    den += want[i] * static_cast<double>(want[i]);
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

/// Q8_0 and Q4_0 weights times 12 activation rows (the multi-row kernels and the repacked ones at
/// every tier this CPU runs) and a bf16 linear of 64 rows, each against the f32
/// product of the values they stand for.
int check_kernels() {
  using namespace accel;
  using io::GgmlType;
  const std::int64_t n = 512, m = 48, rows = 12;
  const auto wv = random_floats(static_cast<std::size_t>(m * n), 7);
  const Tensor x = Tensor::from_vector(random_floats(static_cast<std::size_t>(rows * n), 11), Shape{rows, n});
  int failures = 0;
  for (const auto type : {GgmlType::q8_0, GgmlType::q4_0}) {
    const auto row_bytes = static_cast<std::int64_t>(io::ggml_row_nbytes(type, static_cast<std::size_t>(n)));
    Tensor packed = Tensor::empty(Shape{m, row_bytes}, DType::u8);
    quant::quantize_rows(type, wv.data(), static_cast<std::byte*>(packed.data_ptr()), static_cast<std::size_t>(m * n));
    const Tensor w = io::dequantize_ggml(type, io::ByteSpan(static_cast<const std::byte*>(packed.data_ptr()),
                                                            static_cast<std::size_t>(packed.nbytes())),
                                         Shape{m, n});
    const auto want = ops::linear(x, w, Tensor()).to_vector<float>();
    const double err = rel_err(quant::ggml_linear(x, packed, type, n, m).to_vector<float>(), want);
    std::printf("%s x %lld rows: relative error %.4f\n", std::string(io::ggml_type_name(type)).c_str(),
                static_cast<long long>(rows), err);
    failures += err > 0.02;
    const Tensor repacked = quant::repack_ggml(type, packed, n, m);
    std::vector<quant::ActivationRow> acts(static_cast<std::size_t>(rows));
    std::vector<const quant::ActivationRow*> xs;
    for (std::int64_t r = 0; r < rows; ++r) {
      quant::quantize_activation(type, x.data_ptr<float>() + r * n, static_cast<std::size_t>(n), acts[static_cast<std::size_t>(r)]);
      xs.push_back(&acts[static_cast<std::size_t>(r)]);
    }
    quant::quant_ladder::for_each([&](auto arch) {
      using A = decltype(arch);
      if (!A::supported() || !A::available() || !quant::has_repacked_kernels(arch, type)) return;
      std::vector<float> out(static_cast<std::size_t>(rows * m));
      quant::repacked_dot(arch, type, static_cast<std::size_t>(n), static_cast<std::size_t>(m),
                          static_cast<const std::byte*>(repacked.data_ptr()), xs.data(), xs.size(), out.data());
      const double e = rel_err(out, want);  // [activation row][weight row], as the linear's
      std::printf("repacked %s at %s: relative error %.4f\n", std::string(io::ggml_type_name(type)).c_str(), A::name(), e);
      failures += e > 0.02;
    });
  }
  const Tensor xb = Tensor::from_vector(random_floats(64 * static_cast<std::size_t>(n), 13), Shape{64, n});
  const Tensor wb = Tensor::from_vector(wv, Shape{m, n});
  const double e = rel_err(ops::linear(xb.to(DType::bf16), wb.to(DType::bf16), Tensor()).to(DType::f32).to_vector<float>(),
                           ops::linear(xb, wb, Tensor()).to_vector<float>());
  std::printf("bf16 x 64 rows: relative error %.4f\n", e);
  failures += e > 0.02;
  return failures;
}

}  // namespace

int main() {
  auto t = accel::Tensor::ones({2, 3}, accel::DType::bf16);
  const float sum = t.to(accel::DType::f32).at<float>({1, 2}) * 6.0f;
  const std::string abc = accel::io::sha256_hex("abc");
  std::printf("consumer ok: %s %.1f sha256(abc) %s\n", t.str().c_str(), sum, abc.c_str());
  const int failures = check_kernels();
  return sum == 6.0f && abc == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" && failures == 0 ? 0 : 1;
}
